"""Floats narrower than float32 on the host: rounding to float16, bfloat16 and the two
fp8 formats, and the storage of those NumPy lacks.

NumPy has float16 but no bfloat16 or fp8 (ml_dtypes would add them; warpsmith takes no
dependency for it). A bfloat16 array is held as ``uint16``: the bit pattern the GPU
reads, the top half of the float32 of the same value. An fp8 array is held as ``uint8``,
its bits as ``__nv_fp8_e4m3`` / ``__nv_fp8_e5m2`` (and torch's ``float8_e4m3fn`` /
``float8_e5m2``) read them: e4m3fn has 4 significant bits, exponents down to 2^-6
(subnormals to 2^-9), 448 at most and no infinity (S.1111.111 is its NaN); e5m2 has 3
significant bits, float16's exponent range (57344 at most, subnormals to 2^-16) and
infinities. Every conversion here is exact or a single round-to-nearest-even, the
rounding ``__float2bfloat16``, ``__float2half`` and ``__nv_cvt_float_to_fp8`` do on the
GPU, so an input drawn here is exactly the value the kernel sees and the float64
reference computes from exactly that value.

``round_to`` rounds float64 values straight to the format's significant bits,
subnormals and overflow included (to infinity, or to NaN in e4m3fn, as a conversion
that does not saturate gives); going through float32 first would round twice, and a
value halfway after the first rounding would break the tie the wrong way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HalfFormat:
    digits: int  # significant bits, the implicit one included
    min_exponent: int  # frexp's exponent of the smallest normal (2^-14 = 0.5 * 2^-13 for float16)
    overflow: float  # the smallest rounded magnitude that is no finite value of the format
    max_finite: float
    infinity: bool = True  # whether the format has infinities (e4m3fn has NaN only)

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.digits


HALF_FORMATS = {
    "float16": HalfFormat(11, -13, 2.0**16, 65504.0),
    "bfloat16": HalfFormat(8, -125, 2.0**128, (2 - 2.0**-7) * 2.0**127),
}
FP8_FORMATS = {
    # 480 would be 1.875 * 2^8, the bits e4m3fn keeps for NaN
    "float8_e4m3fn": HalfFormat(4, -5, 480.0, 448.0, infinity=False),
    "float8_e5m2": HalfFormat(3, -13, 2.0**16, 57344.0),
}
NARROW_FORMATS = {**HALF_FORMATS, **FP8_FORMATS}
# How the host holds each (the GPU's bits for the formats NumPy lacks)
STORAGE: dict[str, np.dtype[Any]] = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16),
           "float8_e4m3fn": np.dtype(np.uint8), "float8_e5m2": np.dtype(np.uint8)}


def is_narrow(dtype: str) -> bool:
    """A float narrower than float32: float16, bfloat16 or fp8."""
    return dtype in NARROW_FORMATS


def is_fp8(dtype: str) -> bool:
    return dtype in FP8_FORMATS


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to the nearest `dtype` value (ties to even), as float64."""
    f = NARROW_FORMATS[dtype]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # NaN and inf pass through unchanged
        _, exponent = np.frexp(x)
        quantum = np.ldexp(1.0, np.maximum(exponent, f.min_exponent) - f.digits)
        y = np.round(x / quantum) * quantum  # np.round breaks ties to even; scaling by 2^k is exact
        rounded: np.ndarray = np.where(np.abs(y) >= f.overflow, np.copysign(np.inf if f.infinity else np.nan, x), y)
        return rounded


def _fp8_values(dtype: str) -> np.ndarray:
    """The value of each of the 256 codes of an fp8 format (NaN codes NaN), exactly."""
    mantissa_bits = NARROW_FORMATS[dtype].digits - 1
    exponent_bits = 7 - mantissa_bits
    bias = (1 << (exponent_bits - 1)) - 1
    codes = np.arange(256)
    exponent, mantissa = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1), codes & ((1 << mantissa_bits) - 1)
    scale = 2.0 ** mantissa_bits
    values = np.where(exponent == 0, mantissa / scale * 2.0 ** (1 - bias),
                      (1 + mantissa / scale) * 2.0 ** (exponent - bias))
    top = exponent == (1 << exponent_bits) - 1
    if dtype == "float8_e4m3fn":
        values = np.where(top & (mantissa == (1 << mantissa_bits) - 1), np.nan, values)
    else:
        values = np.where(top, np.where(mantissa == 0, np.inf, np.nan), values)
    signed: np.ndarray = np.where(codes & 0x80, -values, values)
    return signed


_FP8_VALUES = {dtype: _fp8_values(dtype) for dtype in FP8_FORMATS}
_FP8_NAN = {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7F}
_FP8_INF = {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7C}  # e4m3fn has none: NaN, as the GPU's unsaturated conversion


def _fp8_bits(y: np.ndarray, dtype: str) -> np.ndarray:
    """The codes of values that are `dtype` values already (round_to's results)."""
    positive = _FP8_VALUES[dtype][:0x80]
    finite = np.flatnonzero(np.isfinite(positive))  # codes of the non-negative finite values, ascending
    magnitude = np.abs(y)
    with np.errstate(invalid="ignore"):
        at = np.minimum(np.searchsorted(positive[finite], np.where(np.isfinite(magnitude), magnitude, 0.0)),
                        len(finite) - 1)
    code = finite[at]
    code = np.where(np.isinf(magnitude), _FP8_INF[dtype], code)
    code = np.where(np.isnan(magnitude), _FP8_NAN[dtype], code)
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` and laid out as the GPU reads it (uint16 bits for bfloat16,
    uint8 bits for fp8)."""
    y = round_to(x, dtype)
    if dtype == "float16":
        return y.astype(np.float16)  # exact: y is already a float16 value
    if dtype in FP8_FORMATS:
        return _fp8_bits(y, dtype)
    bits = y.astype(np.float32).view(np.uint32)  # exact too: bfloat16 values are float32 values
    return (bits >> 16).astype(np.uint16)


def to_float64(stored: np.ndarray, dtype: str) -> np.ndarray:
    """The exact values of an array held as `to_storage` lays it out."""
    if dtype == "bfloat16":
        with np.errstate(invalid="ignore"):  # a signalling NaN (a poison word) widens quietly
            return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in FP8_FORMATS:
        values: np.ndarray = _FP8_VALUES[dtype][np.asarray(stored, dtype=np.uint8)]
        return values
    return stored.astype(np.float64)
