"""Poison for outputs: what every judged or timed launch finds in its outputs.

A kernel must write every element of every output on every launch. To hold it to
that, the output is filled before each launch with a pattern it cannot predict:
a fresh random 32-bit word per fill, NaN-shaped in one fill and a huge finite
value in the next (the mode alternates from a random start), so

- an element left unwritten fails whichever the reference value is (a single
  fixed poison passes where the reference happens to equal it: NaN where the
  reference is NaN, -1 in an integer output whose reference holds -1);
- "compute only where the output is NaN" fails the finite fills;
- a kernel cannot tell a timed launch from a judged one by the poison, and it
  does not need to: every timed launch is checked too (see warpsmith.agent.worker).

16-bit floats get 16-bit words of the same two kinds (a NaN of the format, or a
value near the top of its finite range), filled 2 bytes at a time: a 32-bit float
NaN word split in halves would leave a plausible finite 16-bit value in one half.

The words come from ``secrets``: nothing a kernel can see seeds them.
"""

from __future__ import annotations

import secrets

# float32: exponent field 0xE0..0xFE is |x| in [2^97, 2^128): finite, never a plausible result.
# float64 (the word repeated in both halves): exponent field 0x600..0x7FE is |x| >= 2^513.
# bfloat16 (float32's exponent): 0xE0..0xFE again. float16 has no implausible range: 0x1C..0x1E
# is |x| in [8192, 65504], far from normalised outputs and random in its low bits.
_FINITE_EXPONENT = {"float32": (23, 0xE0, 0xFE), "float64": (20, 0x600, 0x7FE),
                    "bfloat16": (7, 0xE0, 0xFE), "float16": (10, 0x1C, 0x1E)}
# 16-bit NaNs: the all-ones exponent of the format, a non-zero fraction of `bits` bits.
_HALF_NAN = {"bfloat16": (0x7F80, 7), "float16": (0x7C00, 10)}
POISON_WIDTH = {"float16": 2, "bfloat16": 2}  # bytes per poison word; 4 for every other dtype


class Poisons:
    """One source of poison words per worker; ``word(dtype)`` for each fill."""

    def __init__(self) -> None:
        self._nan_next = bool(secrets.randbits(1))
        self._last: dict[str, int] = {}

    def next_fill(self) -> None:
        """Start the next fill: the float mode flips (NaN <-> huge finite)."""
        self._nan_next = not self._nan_next

    def word(self, dtype: str) -> int:
        """The word to fill an output of `dtype` with, for this fill: 16 bits for 16-bit
        floats (POISON_WIDTH), 32 for the others."""
        while True:
            w = self._draw(dtype)
            if w != self._last.get(dtype):  # two fills in a row never share a word
                self._last[dtype] = w
                return w

    def _draw(self, dtype: str) -> int:
        if dtype not in _FINITE_EXPONENT:  # integers: any non-zero word
            return secrets.randbits(32) or 1
        if dtype in _HALF_NAN:
            return self._draw_half(dtype)
        sign = secrets.randbits(1) << 31
        if self._nan_next:
            # Exponent all ones and a non-zero fraction: NaN as float32 and as float64.
            return sign | 0x7FF00000 | (secrets.randbits(20) or 1)
        shift, low, high = _FINITE_EXPONENT[dtype]
        exponent = low + secrets.randbelow(high - low + 1)
        return sign | (exponent << shift) | secrets.randbits(shift)

    def _draw_half(self, dtype: str) -> int:
        sign = secrets.randbits(1) << 15
        if self._nan_next:
            exponent_bits, fraction = _HALF_NAN[dtype]
            return sign | exponent_bits | (secrets.randbits(fraction) or 1)
        shift, low, high = _FINITE_EXPONENT[dtype]
        exponent = low + secrets.randbelow(high - low + 1)
        return sign | (exponent << shift) | secrets.randbits(shift)
