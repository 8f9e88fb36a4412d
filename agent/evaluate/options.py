"""How a command's GPU evaluation runs: timing, device and time limits. Built from the
command line by agent/cli/options.py; the evaluator reads nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.reference_run import REFERENCE_TIMEOUT_S
from ..worker.protocol import TimingConfig


@dataclass(frozen=True)
class EvaluationOptions:
    timing: TimingConfig = TimingConfig()  # --hot: cold_l2=False; eval's --warmup / --repetitions
    device: int = 0  # --device
    kernel_timeout_s: float = 10.0  # --timeout: a kernel running longer is killed
    reference_timeout_s: float = REFERENCE_TIMEOUT_S  # --reference-timeout, per case
