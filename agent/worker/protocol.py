"""Messages between the evaluator and its GPU worker process (pickled over a pipe).

Requests go in; the worker answers with a stream of replies ending in ``JobDone``,
or dies. A kernel request names the steps to run (``Step``): an attempt is
validated by one request and timed and revalidated by the next, and the worker
loads the CUBIN once for both (it keeps the last module loaded). Before each step
on each case it announces itself (``Started``), so the parent's deadline follows
what the worker says it is doing, not a copy of its order. A ``Fault`` that is
fatal (the CUDA context is dead) is the worker's last word before it exits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Optional, Union

from ..runtime.device_facts import DeviceFacts
from ..spec.inputs import ArrayJob
from ..spec.launch import Arg, Launch, ProgramJob
from ..spec.speed_of_light import Ceilings
from ..spec.timing_policy import TimingConfig
from .mismatch import MismatchReport
from .status import Status

# The launch records (warpsmith.agent.spec.launch) and the timing recipe
# (warpsmith.agent.spec.timing_policy) travel in requests.
__all__ = ["Arg", "Launch", "ProgramJob", "TimingConfig"]


@dataclass(frozen=True)
class CaseJob:
    case: str
    arrays: tuple[ArrayJob, ...]
    args: tuple[Arg, ...]
    reference: str  # path of the cached reference (.npz)
    rtol: dict[str, float]  # per output
    timed: bool
    launch: Optional[Launch] = None  # kernel jobs only
    scalars: dict[str, Union[int, float]] = field(default_factory=dict)  # by name, for baselines
    program: Optional[ProgramJob] = None  # a program's steps and workspace, instead of `launch` and `args`
    per_row_scale: bool = False  # errors on each row's scale, not the output's (agent/spec/tolerance.py)


class Step(StrEnum):
    """What the worker does with a kernel, in this order; each announced by ``Started``."""

    LOAD = "load"  # the CUBIN into the context (only when it is not the module loaded last)
    VALIDATE = "validate"  # every case once, judged; a failing case ends the request
    TIME = "time"  # the performance cases, every timed launch checked
    REVALIDATE = "revalidate"  # every case again after timing: behaviour that changes


ATTEMPT = (Step.VALIDATE, Step.TIME, Step.REVALIDATE)


@dataclass(frozen=True)
class EvaluateKernel:
    cubin: bytes
    symbol: str
    jobs: tuple[CaseJob, ...]
    seed: int
    timing: TimingConfig
    steps: tuple[Step, ...] = ATTEMPT  # TIME without VALIDATE: the parent validated this kernel already


@dataclass(frozen=True)
class EvaluateBaseline:
    kind: str  # cublas_sgemm | cublas_sgemm_bias_relu | cublas_gemm_bf16 | torch_eager | torch_compile | torch_NAME
    bind: dict[str, str]
    jobs: tuple[CaseJob, ...]
    seed: int
    timing: TimingConfig
    torch_source: str = ""  # the workload's PyTorch baseline file (torch kinds)


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class CaseCheck:
    """Validation of one case after one launch."""

    status: Status  # ok | wrong_answer | out_of_bounds | input_modified | reference_modified | unstable
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    detail: str = ""  # for the proposer: the mismatch report, the guard or input finding
    reports: tuple[MismatchReport, ...] = ()


@dataclass(frozen=True)
class WorkerReady:
    facts: DeviceFacts
    nvrtc: tuple[int, int]
    ceilings: Optional[Ceilings] = None  # measured on this GPU (cached by UUID); None if the probe failed

    # On the pipe the facts stay the plain dict they always were (DeviceFacts.to_dict).
    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "facts": self.facts.to_dict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in {**state, "facts": DeviceFacts.from_dict(state["facts"])}.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Started:
    """The worker is done setting a case up and launches now: from here the
    kernel's own deadline runs, not the setup allowance."""

    case: str  # "" for LOAD
    phase: str  # a Step's value


@dataclass(frozen=True)
class CaseChecked:
    case: str
    phase: str  # validate | time (a timed launch's outputs) | revalidate | integrity (the sweep after a candidate)
    check: CaseCheck
    elapsed_ms: float


@dataclass(frozen=True)
class CaseTimed:
    case: str
    samples_ms: tuple[float, ...]
    warmup_mean_ms: float
    elapsed_ms: float
    clocks_mhz: tuple[int, ...] = ()  # SM, memory before timing; SM, memory after (NVML; empty without it)


@dataclass(frozen=True)
class Fault:
    case: str
    phase: str
    name: str  # CUDA error name, e.g. CUDA_ERROR_ILLEGAL_ADDRESS
    text: str
    fatal: bool  # the worker is exiting: its context is unusable


@dataclass(frozen=True)
class JobDone:
    pass


Request = Union[EvaluateKernel, EvaluateBaseline, Shutdown]
Reply = Union[WorkerReady, Started, CaseChecked, CaseTimed, Fault, JobDone]
Send = Callable[[Reply], None]  # where the worker's replies go: its end of the pipe
