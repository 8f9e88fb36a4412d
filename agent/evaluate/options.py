"""How a command's GPU evaluation runs: timing, device, time limits and the backend
(local, or Ray with one actor per GPU). Built from the command line by
agent/cli/options.py; the evaluator reads nothing else."""

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
    backend: str = "local"  # --backend: local | ray
    ray_address: str = ""  # --ray-address: a running cluster ("" starts a local one)
    ray_gpus: int = 0  # --ray-gpus: GPU actors (0: one per GPU of the cluster)
    # --separate-judge: outputs compared in a judge process with its own CUDA context
    # (agent/worker/judge_side.py), not in the candidate's (local backend)
    separate_judge: bool = False
