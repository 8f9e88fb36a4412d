"""16-bit floats on the host: rounding to float16 / bfloat16, and bfloat16's storage.

NumPy has float16 but no bfloat16 (ml_dtypes would add one; warpsmith takes no
dependency for it). A bfloat16 array is held as ``uint16``: the bit pattern the
GPU reads, the top half of the float32 of the same value. Every conversion here
is exact or a single round-to-nearest-even, the rounding ``__float2bfloat16`` and
``__float2half`` do on the GPU, so an input drawn here is exactly the value the
kernel sees and the float64 reference computes from exactly that value.

``round_to`` rounds float64 values straight to the format's 8 (bfloat16) or 11
(float16) significant bits, subnormals and overflow to infinity included; going
through float32 first would round twice, and a value halfway after the first
rounding would break the tie the wrong way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HalfFormat:
    digits: int  # significant bits, the implicit one included
    min_exponent: int  # frexp's exponent of the smallest normal (2^-14 = 0.5 * 2^-13 for float16)
    overflow: float  # the first power of two that is not finite in this format
    max_finite: float

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.digits


HALF_FORMATS = {
    "float16": HalfFormat(11, -13, 2.0**16, 65504.0),
    "bfloat16": HalfFormat(8, -125, 2.0**128, (2 - 2.0**-7) * 2.0**127),
}
STORAGE = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}  # how the host holds each


def is_half(dtype: str) -> bool:
    return dtype in HALF_FORMATS


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to the nearest `dtype` value (ties to even), as float64."""
    f = HALF_FORMATS[dtype]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # NaN and inf pass through unchanged
        _, exponent = np.frexp(x)
        quantum = np.ldexp(1.0, np.maximum(exponent, f.min_exponent) - f.digits)
        y = np.round(x / quantum) * quantum  # np.round breaks ties to even; scaling by 2^k is exact
        rounded: np.ndarray = np.where(np.abs(y) >= f.overflow, np.copysign(np.inf, x), y)
        return rounded


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` and laid out as the GPU reads it (uint16 bits for bfloat16)."""
    y = round_to(x, dtype)
    if dtype == "float16":
        return y.astype(np.float16)  # exact: y is already a float16 value
    bits = y.astype(np.float32).view(np.uint32)  # exact too: bfloat16 values are float32 values
    return (bits >> 16).astype(np.uint16)


def to_float64(stored: np.ndarray, dtype: str) -> np.ndarray:
    """The exact values of an array held as `to_storage` lays it out."""
    if dtype == "bfloat16":
        with np.errstate(invalid="ignore"):  # a signalling NaN (a poison word) widens quietly
            return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return stored.astype(np.float64)
