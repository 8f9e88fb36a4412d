"""Seeded case data: the inputs a kernel sees and the reference outputs it must match.

Inputs are drawn once per (case, seed) from fixed generators (one per chunk of an
array, drawn in parallel threads), uniformly from the
parameter's range and never zero (zeros hide unwritten outputs and wrong
indexing). 16-bit floats are drawn in float64 and rounded once to their format
(agent/spec/half_float.py), bfloat16 held as its uint16 bits. The reference runs the user's NumPy function in float64, in its own process with
a time limit (agent/spec/reference_run.py), and is cached on disk under the workload's
digest, so a 4096^3 product is computed once.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..runtime.cache_dir import cache_root
from .exact_probe import exact_input
from .half_float import is_half, round_to, to_float64, to_storage
from .reference_run import REFERENCE_TIMEOUT_S, run_reference
from .workload import ARRAY_ITEMSIZE, FLOAT_DTYPES, Case, Workload, name_problem

# Bump when the way inputs are drawn changes: it invalidates cached references.
# 2: drawn in chunks of CHUNK elements, each from its own generator, in parallel threads.
GENERATOR_VERSION = 2
# Elements per chunk: each has its own generator (keyed by its index), so the values do not
# depend on how many threads draw them. sgemm's inputs for one seed (about a gigabyte) took
# 7.2 s to draw in one thread on a 2-core machine; the worker draws them while the GPU waits
# (the plan's first evaluation, the fresh seed of the first new best).
CHUNK = 1 << 22
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, the pool)
_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    """This process's drawing threads (numpy's generators release the GIL for bulk draws).
    A pool inherited through fork has no threads: a forked worker makes its own."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=min(8, cores), thread_name_prefix="draw-inputs"))
        return _pool[1]


class ReferenceFailed(ValueError):
    """The workload's reference.py raised, hung, or returned something unusable."""


@dataclass(frozen=True)
class ArrayJob:
    """One array parameter of one case, resolved: what the GPU side needs."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    low: float
    high: float
    constant: bool = False  # the accumulation probe's inputs (agent/spec/accumulation_probe.py)
    exact: str = ""  # an exact probe's input (agent/spec/exact_probe.py): "wide" integers or "sign" (+-1, 0)
    reduction: float = 1.0  # the case's reduction length, for an exact probe's density of non-zeros

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * ARRAY_ITEMSIZE[self.dtype]


def array_jobs(workload: Workload, case: Case) -> list[ArrayJob]:
    first_input = next((p.name for p in workload.inputs), None)
    reduction = workload.tolerance.reduction
    length = float(reduction.evaluate(case.sizes)) if case.exact and reduction is not None else 1.0
    return [ArrayJob(p.name, p.role, p.dtype, workload.shape(p, case), p.low, p.high, case.probe,
                     ("wide" if p.name == first_input else "sign") if case.exact and p.role == "input" else "",
                     length)
            for p in workload.arrays]


def generate_input(job: ArrayJob, case_name: str, seed: int) -> np.ndarray:
    """Deterministic in (case, parameter, seed, GENERATOR_VERSION), whatever the threads."""
    if job.constant:
        return _constant_input(job)
    key = [GENERATOR_VERSION, seed, zlib.crc32(case_name.encode()), zlib.crc32(job.name.encode())]
    n = int(np.prod(job.shape, dtype=np.int64))
    starts = range(0, max(n, 1), CHUNK)

    def draw(k: int) -> np.ndarray:
        return _draw(np.random.default_rng(key + [k]), job, min(CHUNK, n - starts[k]))
    parts = [draw(0)] if len(starts) == 1 else list(_threads().map(draw, range(len(starts))))
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(job.shape)


def _draw(rng: np.random.Generator, job: ArrayJob, size: int) -> np.ndarray:
    """`size` elements of the job's input, flat."""
    if job.exact:
        return exact_input(rng, (size,), job.exact == "wide", job.reduction)
    if is_half(job.dtype):
        return _half_input(rng, job, size)
    dtype = np.dtype(job.dtype)
    if dtype.kind == "f":
        x = rng.uniform(job.low, job.high, size=size).astype(dtype)
        # Replace exact zeros (after rounding to dtype) by the range's midpoint or high end.
        fallback = (job.low + job.high) / 2 or job.high
        x[x == 0] = fallback
        return x
    lo, hi = int(np.ceil(job.low)), int(np.floor(job.high))
    x = rng.integers(lo, hi + 1, size=size, dtype=dtype)
    x[x == 0] = hi if hi != 0 else lo
    return x


def _half_input(rng: np.random.Generator, job: ArrayJob, size: int) -> np.ndarray:
    """Uniform in [low, high] rounded once to the 16-bit format: the values the GPU reads,
    exactly. Zeros after rounding become the first non-zero of the midpoint, high, low
    (the spec parser made sure one exists)."""
    x = round_to(rng.uniform(job.low, job.high, size=size), job.dtype)
    candidates = round_to(np.array([(job.low + job.high) / 2, job.high, job.low]), job.dtype)
    x[x == 0] = candidates[np.flatnonzero(candidates)[0]]
    return to_storage(x, job.dtype)


def _constant_input(job: ArrayJob) -> np.ndarray:
    """Every element the value of the range nearest 1 (or -1), else the first non-zero of its
    midpoint, high end, low end, in the job's dtype (exactly representable, so the reference
    sees the same value). Near 1, squares and products of it stay near 1 too."""
    candidates = np.array([min(max(1.0, job.low), job.high), min(max(-1.0, job.low), job.high),
                           (job.low + job.high) / 2, job.high, job.low])
    if is_half(job.dtype):
        candidates = round_to(candidates, job.dtype)
    elif np.dtype(job.dtype).kind == "f":
        candidates = candidates.astype(job.dtype).astype(np.float64)
    else:
        candidates = np.trunc(candidates)
    value = candidates[np.flatnonzero(candidates)[0]]
    full = np.full(job.shape, value)
    return to_storage(full, job.dtype) if is_half(job.dtype) else full.astype(job.dtype)


def as_float64(array: np.ndarray, dtype: str) -> np.ndarray:
    """The exact values of a generated input of `dtype` in float64 (the reference's view)."""
    return to_float64(array, dtype) if dtype in FLOAT_DTYPES else array


def generate_inputs(workload: Workload, case: Case, seed: int) -> dict[str, np.ndarray]:
    return {j.name: generate_input(j, case.name, seed) for j in array_jobs(workload, case) if j.role == "input"}


def load_reference_function(path: Path) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(f"warpsmith_reference_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:  # a name Python does not load as source
        raise ReferenceFailed(f"{path.name}: not loadable as a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "reference", None)
    if not callable(fn):
        raise ReferenceFailed(f"{path.name}: defines no function `reference(...)`")
    reference: Callable[..., Any] = fn
    return reference


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
    return cache_root() / "references" / f"{workload.name}-{workload.digest}-g{GENERATOR_VERSION}c{CHUNK}" \
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
