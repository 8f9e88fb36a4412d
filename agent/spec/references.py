"""The reference outputs of a case: computed by the user's reference.py in its own
process with a time limit (agent/spec/reference_run.py), in float64 on the seeded
inputs (agent/spec/inputs.py), and cached on disk under the workload's digest, so a
4096^3 product is computed once."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from ..runtime.cache_dir import cache_root
from . import inputs
from .reference_run import REFERENCE_TIMEOUT_S, run_reference
from .workload_model import Case, Workload, name_problem


def compute_reference(workload: Workload, case: Case, seed: int,
                      timeout_s: float = REFERENCE_TIMEOUT_S) -> dict[str, np.ndarray]:
    """Run the user's reference on float64 copies of the inputs, in its own process
    with a time limit (agent/spec/reference_run.py); raises ReferenceFailed (one line)."""
    with tempfile.TemporaryDirectory(prefix="warpsmith-reference-") as tmp:
        out = Path(tmp) / "reference.npz"
        run_reference(workload, case, seed, out, timeout_s)
        return load_reference(out)


def reference_path(workload: Workload, case: Case, seed: int) -> Path:
    for name in (workload.name, case.name):  # checked by the spec parser; a path is built from them here
        if name_problem(name):
            raise ValueError(f"reference cache: {name_problem(name)}")
    # CHUNK is part of how inputs are drawn: in the key, so changing it cannot reuse references
    return cache_root() / "references" / f"{workload.name}-{workload.digest}-g{inputs.GENERATOR_VERSION}c{inputs.CHUNK}" \
        / f"{case.name}-seed{seed}.npz"


_computing: dict[Path, threading.Lock] = {}  # reference file -> held while a thread computes it
_computing_guard = threading.Lock()


def ensure_reference(workload: Workload, case: Case, seed: int, timeout_s: float = REFERENCE_TIMEOUT_S) -> Path:
    """Compute and cache the reference outputs unless already on disk; returns the file.
    Threads asking for the same file wait for the one computing it (a session computes
    the fresh seed's references in the background: prefetch_references)."""
    path = reference_path(workload, case, seed)
    if path.is_file():
        return path
    with _computing_guard:
        lock = _computing.setdefault(path, threading.Lock())
    with lock:
        if path.is_file():  # computed by the thread this one waited for
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.npz")
        try:
            run_reference(workload, case, seed, tmp, timeout_s)
            os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
        finally:
            tmp.unlink(missing_ok=True)
    return path


def prefetch_references(workload: Workload, seed: int, timeout_s: float = REFERENCE_TIMEOUT_S) -> threading.Thread:
    """Compute every case's references for `seed` in a background thread, so that the
    first evaluation on that seed (the selection's fresh-seed check of a new best) finds
    them on disk instead of waiting for a float64 reference of the largest case. A
    failure here is left for that evaluation to meet and report."""
    def run() -> None:
        for case in workload.cases:
            try:
                ensure_reference(workload, case, seed, timeout_s)
            except Exception:  # noqa: BLE001 - the foreground evaluation reports it, with the case named
                return
    thread = threading.Thread(target=run, name=f"references-seed-{seed}", daemon=True)
    thread.start()
    return thread


def load_reference(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}
