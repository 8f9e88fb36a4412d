"""How long the evaluator waits for the worker's next reply before it calls the kernel
hung: set by the step the worker announced last and by how long that case took to
validate (a timing step is many launches, each with a check behind it).
"""

from __future__ import annotations

from typing import Optional

from ..spec.timing_policy import TimingConfig
from ..worker.protocol import Started, Step

TORCH_COMPILE_S = 300.0  # torch.compile's first call per shape (Inductor, Triton autotuning)
CASE_SETUP_S = 120.0  # first use of a case: inputs drawn, reference loaded, uploads


class Deadlines:
    def __init__(self, timing: TimingConfig, kernel_timeout_s: float):
        self.timing, self.kernel_timeout_s = timing, kernel_timeout_s
        self.validate_s: dict[str, float] = {}  # last validation wall time per case
        self.setup_s = 0.0  # extra allowance while a baseline compiles (torch.compile)

    def validated(self, case: str, elapsed_ms: float) -> None:
        """A case's validation took `elapsed_ms`: its timing step may take that per launch."""
        self.validate_s[case] = elapsed_ms / 1e3

    def after(self, step: Optional[Started]) -> float:
        """Seconds to wait for the worker's next reply, given the step it announced last
        (None: it is setting a case up, drawing inputs and uploading, and no kernel runs;
        LOAD: it loads the module, then sets up the first case without announcing it, and
        no kernel runs either: a case of gigabytes takes longer than a kernel may)."""
        if step is None or step.phase == Step.LOAD:
            return CASE_SETUP_S
        if step.phase == Step.TIME:
            return self.timing.step_deadline_s(self.kernel_timeout_s, self.validate_s.get(step.case, 0.0))
        return self.kernel_timeout_s + self.setup_s
