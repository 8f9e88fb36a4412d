"""The evaluation backend a session's options ask for (`--backend local|ray`)."""

from __future__ import annotations

from pathlib import Path

from ..spec.workload_model import Workload
from .backend import EvaluationBackend
from .options import EvaluationOptions

BACKENDS = ("local", "ray")


def open_backend(workload: Workload, options: EvaluationOptions, log_dir: Path) -> EvaluationBackend:
    """The local evaluator (its worker's log in `log_dir`), or one Ray actor per GPU.
    Starts nothing on the GPU yet; raises ImportError (one line) without Ray installed."""
    if options.backend == "ray":
        from .ray_backend import RayBackend
        return RayBackend(workload, options, log_dir=log_dir)
    from .evaluator import Evaluator
    return Evaluator(workload, options, worker_log=log_dir / "worker.log")
