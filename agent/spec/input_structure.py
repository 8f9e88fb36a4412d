"""Inputs whose values mean something beyond their range (workload.toml's `structure`, and
bool inputs), drawn with that meaning in every case, for the CPU reference and the GPU
alike (agent/spec/inputs.py calls these on the stored array, bfloat16 and fp8 as their
bits):

- bool, `mask`: False and True (0 and 1), `sign`: -1 and 1, True, 1 or +1 with the odds
  `density` (0.5 unless the workload says), drawn element by element like any other input
  (zeros are their point: the never-zero rule does not apply);
- `symmetric`: the upper triangle of the last two axes as drawn, mirrored below the
  diagonal (the values stay exactly the drawn ones);
- `upper_triangular` / `lower_triangular`: the other triangle set to zero;
- `rows_sum_to_1`: each row (the last axis) of non-negative draws divided by its sum in
  float64, then rounded once to the dtype, as a softmax's output is.

The square structures work row by row in place, so a structured input costs no second
copy of itself; rows_sum_to_1 converts a block of rows at a time.
"""

from __future__ import annotations

import numpy as np

from .half_float import is_narrow, to_float64, to_storage

BLOCK_ELEMENTS = 1 << 22  # rows_sum_to_1: elements converted to float64 at a time (whole rows, at least one)


def value_draw(rng: np.random.Generator, dtype: str, structure: str, size: int, density: float = 0.5) -> np.ndarray:
    """`size` elements of a bool, mask or sign input, flat, as stored: True, 1 or +1 with odds `density`."""
    heads = rng.random(size) < density
    if dtype == "bool":
        return heads
    values = heads.astype(np.float64) if structure == "mask" else np.where(heads, 1.0, -1.0)
    return to_storage(values, dtype) if is_narrow(dtype) else values.astype(dtype)


def shaped(x: np.ndarray, dtype: str, structure: str) -> np.ndarray:
    """`x` (stored, in its final shape) with its square or row structure; value structures
    (mask, sign) are drawn so already."""
    n = x.shape[-1]
    if structure == "symmetric":
        for i in range(n - 1):
            x[..., i + 1:, i] = x[..., i, i + 1:]
    elif structure == "upper_triangular":
        for i in range(1, n):
            x[..., i, :i] = 0  # all-zero bits: +0 in every float format
    elif structure == "lower_triangular":
        for i in range(n - 1):
            x[..., i, i + 1:] = 0
    elif structure == "rows_sum_to_1":
        rows, step = x.reshape(-1, n), max(1, BLOCK_ELEMENTS // n)
        for start in range(0, rows.shape[0], step):
            block = rows[start:start + step]
            values = to_float64(block, dtype) if is_narrow(dtype) else block.astype(np.float64)
            values /= values.sum(axis=1, keepdims=True)
            block[...] = to_storage(values, dtype) if is_narrow(dtype) else values
    return x
