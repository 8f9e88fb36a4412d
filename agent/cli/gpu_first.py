"""A new session asks for the GPU before anything of it is kept: no usable GPU
leaves no session folder, no MLflow run, nothing in the store."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..evaluate.backend import EvaluationBackend

NO_GPU_EXIT = 3  # eval, run, bench, resume: the same code for "no usable GPU"


def no_gpu_line(error: BaseException) -> str:
    return f"warpsmith: error: no usable GPU: {error}. `warpsmith doctor` says what is missing."


def start_worker_first(evaluator: EvaluationBackend, directory: Path) -> None:
    """Start `evaluator`'s GPU side by asking for its facts (the worker's log goes in
    `directory`); if it raises (GpuUnavailable, ...), remove every folder this call
    created, then re-raise."""
    created = None if directory.exists() else directory  # the topmost folder made here
    while created is not None and not created.parent.exists():
        created = created.parent
    directory.mkdir(parents=True, exist_ok=True)
    try:
        evaluator.facts  # noqa: B018 (the worker, or the Ray actors' workers, start here)
    except BaseException:
        evaluator.close()
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
