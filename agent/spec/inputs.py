"""Seeded case data: the inputs a kernel sees and the reference outputs it must match.

Inputs are drawn once per (case, seed) from fixed generators (one per chunk of an
array, drawn in parallel threads), uniformly from the
parameter's range and never zero (zeros hide unwritten outputs and wrong
indexing). A stress case scales its float inputs' range by a power of two
(Case.input_scale: exact in every float format, so 16-bit and fp8 inputs stay exact) and,
with Case.signed_zeros, turns ZERO_FRACTION of their values into +0 and -0. 16-bit and fp8
floats are drawn in float64 and rounded once to their format (agent/spec/half_float.py),
bfloat16 held as its uint16 bits and fp8 as its uint8 bits. An input with `distribution =
"normal"` is drawn from N(0, 1) instead (its stress scale multiplies the deviation), and
bool inputs and structured ones (symmetric, triangular, rows that sum to 1, masks, signs)
keep their meaning in every case (agent/spec/input_structure.py; stress cases leave
masks, signs and normalised rows alone). The reference runs the user's
NumPy function in float64 on these inputs, in its own
process (agent/spec/reference_run.py), cached by agent/spec/references.py.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .half_float import is_narrow, round_to, to_float64, to_storage
from .input_structure import shaped, value_draw
from .workload_model import ARRAY_ITEMSIZE, FLOAT_DTYPES, SQUARE_STRUCTURES, VALUE_STRUCTURES, Case, Workload

# Bump when the way inputs are drawn changes: it invalidates cached references.
# 2: drawn in chunks of CHUNK elements, each from its own generator, in parallel threads.
# 4: a sign input's heads are +1 (the share `density` gives).
GENERATOR_VERSION = 4
# Elements per chunk: each has its own generator (keyed by its index), so the values do not
# depend on how many threads draw them. sgemm's inputs for one seed (about a gigabyte) took
# 7.2 s to draw in one thread on a 2-core machine; the worker draws them while the GPU waits
# (the plan's first evaluation, the fresh seed of the first new best).
CHUNK = 1 << 22
ZERO_FRACTION = 1 / 8  # of a signed_zeros case's float inputs
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
    zeros: bool = False  # a signed_zeros case's float input
    std: float = 0.0  # > 0: drawn from N(0, std^2) instead of uniformly from [low, high]
    structure: str = ""  # one of workload_model.STRUCTURES (agent/spec/input_structure.py)
    density: float = 0.5  # bool, mask and sign: the share of True, of 1 or of +1

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * ARRAY_ITEMSIZE[self.dtype]


def array_jobs(workload: Workload, case: Case) -> list[ArrayJob]:
    jobs = []
    for p in workload.arrays:
        # a mask, a sign or a normalised row is its values: a stress case leaves them alone
        stressed = p.role == "input" and p.dtype in FLOAT_DTYPES and p.structure not in (*VALUE_STRUCTURES,
                                                                                         "rows_sum_to_1")
        factor = case.input_scale if stressed else 1.0
        low, high = workload.bounds(p, case)
        jobs.append(ArrayJob(p.name, p.role, p.dtype, workload.shape(p, case), low * factor, high * factor,
                             stressed and case.signed_zeros, factor if p.distribution == "normal" else 0.0,
                             p.structure if p.role == "input" else "", p.density))
    return jobs


def generate_input(job: ArrayJob, case_name: str, seed: int) -> np.ndarray:
    """Deterministic in (case, parameter, seed, GENERATOR_VERSION), whatever the threads."""
    key = [GENERATOR_VERSION, seed, zlib.crc32(case_name.encode()), zlib.crc32(job.name.encode())]
    n = int(np.prod(job.shape, dtype=np.int64))
    starts = range(0, max(n, 1), CHUNK)

    def draw(k: int) -> np.ndarray:
        return _draw(np.random.default_rng(key + [k]), job, min(CHUNK, n - starts[k]))
    parts = [draw(0)] if len(starts) == 1 else list(_threads().map(draw, range(len(starts))))
    x = (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(job.shape)
    return shaped(x, job.dtype, job.structure) if job.structure in (*SQUARE_STRUCTURES, "rows_sum_to_1") else x


def _draw(rng: np.random.Generator, job: ArrayJob, size: int) -> np.ndarray:
    """`size` elements of the job's input, flat."""
    if job.dtype == "bool" or job.structure in VALUE_STRUCTURES:
        return value_draw(rng, job.dtype, job.structure, size, job.density)
    if job.std:
        return _normal_input(rng, job, size)
    if is_narrow(job.dtype):
        return _half_input(rng, job, size)
    dtype = np.dtype(job.dtype)
    if dtype.kind == "f":
        x = rng.uniform(job.low, job.high, size=size).astype(dtype)
        # Replace exact zeros (after rounding to dtype) by the range's midpoint or high end.
        fallback = (job.low + job.high) / 2 or job.high
        x[x == 0] = fallback
        return _signed_zeros(rng, x) if job.zeros else x
    lo, hi = int(np.ceil(job.low)), int(np.floor(job.high))
    x = rng.integers(lo, hi + 1, size=size, dtype=dtype)
    x[x == 0] = hi if hi != 0 else lo
    return x


def _half_input(rng: np.random.Generator, job: ArrayJob, size: int) -> np.ndarray:
    """Uniform in [low, high] rounded once to the narrow format: the values the GPU reads,
    exactly. Zeros after rounding become the first non-zero of the midpoint, high, low
    (the spec parser made sure one exists)."""
    x = round_to(rng.uniform(job.low, job.high, size=size), job.dtype)
    candidates = round_to(np.array([(job.low + job.high) / 2, job.high, job.low]), job.dtype)
    x[x == 0] = candidates[np.flatnonzero(candidates)[0]]
    return to_storage(_signed_zeros(rng, x) if job.zeros else x, job.dtype)


def _normal_input(rng: np.random.Generator, job: ArrayJob, size: int) -> np.ndarray:
    """N(0, std^2) rounded once to the dtype; a zero after rounding becomes std."""
    x = rng.standard_normal(size) * job.std
    y = round_to(x, job.dtype) if is_narrow(job.dtype) else x.astype(job.dtype)
    y[y == 0] = job.std  # a power of two: exact in every float format
    if job.zeros:
        y = _signed_zeros(rng, y)
    return to_storage(y, job.dtype) if is_narrow(job.dtype) else y


def _signed_zeros(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """ZERO_FRACTION of x's values turned into zeros, half of them -0."""
    at = rng.random(x.size) < ZERO_FRACTION
    x[at] = np.where(rng.random(int(at.sum())) < 0.5, -0.0, 0.0)
    return x


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
