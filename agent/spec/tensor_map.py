"""TMA descriptors in a launch spec: ``tma:NAME:box=ROWSxCOLS[:swizzle=none|32B|64B|128B]``.

NAME is an array parameter, described as 2-D: its last dimension is the contiguous
columns and every dimension before it is flattened into rows (a BH x S x D array is a
(BH * S) x D map, so a box that starts near the end of one head reads the next head's
first rows, and only rows past the whole array are zero-filled: the kernel masks). The
box, in that order (rows, then columns), is two expressions over sizes and knobs
(write ``BM x BK`` with blanks when a dimension ends in a name). For each case the descriptor resolves to a
:class:`TensorMap` (the array's dtype and shape there, the box in numbers), which the
worker hands the runner with the array's address; the runner encodes it with
``cuTensorMapEncodeTiled`` (no interleave, out-of-bounds elements read as zero) and
passes the 128-byte ``CUtensorMap`` by value, so the kernel declares
``const __grid_constant__ CUtensorMap``. :meth:`TensorMap.problems` states the
driver's rules, so a descriptor it would refuse is refused when the spec loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .expr import Expr

TMA_KIND = "tma"
TMA_ITEMSIZE = {"float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4, "float64": 8,
                "int32": 4, "int64": 8}
TMA_SWIZZLES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
TMA_MAX_BOX = 256  # per dimension (cuTensorMapEncodeTiled)


@dataclass(frozen=True)
class TensorMap:
    """A TMA descriptor resolved for one case: the array it reads or writes, as 2-D, and the box one copy moves."""

    dtype: str
    rows: int  # every dimension but the last, flattened
    cols: int  # the contiguous dimension
    box_rows: int
    box_cols: int
    swizzle: int  # bytes: 0, 32, 64 or 128

    def problems(self) -> Optional[str]:
        """Why cuTensorMapEncodeTiled would refuse this descriptor, in its own rules, or None.
        The box need not divide the array: boxes past its edge are zero-filled."""
        if self.dtype not in TMA_ITEMSIZE:  # a bool array
            return f"TMA reads arrays of {', '.join(TMA_ITEMSIZE)}, not {self.dtype}"
        size = TMA_ITEMSIZE[self.dtype]
        box = f"box {self.box_rows}x{self.box_cols}"
        if not (1 <= self.box_rows <= TMA_MAX_BOX and 1 <= self.box_cols <= TMA_MAX_BOX):
            return f"{box}: each box dimension must be 1 to {TMA_MAX_BOX}"
        if self.box_cols * size % 16:
            return f"{box}: the inner box dimension must span a multiple of 16 bytes ({self.box_cols * size} B)"
        if self.swizzle and self.box_cols * size > self.swizzle:
            return f"{box}: with {self.swizzle}B swizzle the inner box dimension spans at most {self.swizzle} B " \
                   f"({self.box_cols * size} B)"
        if self.cols * size % 16:
            return f"a row of the {self.rows}x{self.cols} {self.dtype} array is {self.cols * size} B: " \
                   "TMA needs a row pitch that is a multiple of 16 bytes"
        if self.rows >= 1 << 32 or self.cols >= 1 << 32:
            return f"the {self.rows}x{self.cols} array has a dimension of 2^32 or more"
        return None


@dataclass(frozen=True)
class TmaBox:
    """A descriptor as written: the array's name, the box as expressions, the swizzle."""

    array: str
    box: tuple[Expr, Expr]  # rows, cols
    swizzle: str = "none"  # a key of TMA_SWIZZLES

    @staticmethod
    def parse(text: str) -> "TmaBox":
        """From ``tma:NAME:box=ROWSxCOLS[:swizzle=S]``; raises ValueError naming the text."""
        usage = f"argument {text!r}: expected tma:NAME:box=ROWSxCOLS[:swizzle=none|32B|64B|128B]"
        name, *fields = [f.strip() for f in text.partition(":")[2].split(":")]
        options = dict(f.partition("=")[::2] for f in fields)
        if not name.isidentifier() or len(options) != len(fields) or "box" not in options \
                or set(options) - {"box", "swizzle"}:
            raise ValueError(usage)
        dims = _split_box(options["box"])
        if len(dims) != 2:
            raise ValueError(usage)
        swizzle = options.get("swizzle", "none")
        if swizzle not in TMA_SWIZZLES:
            raise ValueError(f"argument {text!r}: swizzle must be one of {', '.join(TMA_SWIZZLES)}")
        return TmaBox(name, (Expr.parse(dims[0].strip()), Expr.parse(dims[1].strip())), swizzle)

    def text(self) -> str:
        rows = str(self.box[0])
        x = "x" if rows[-1].isdigit() or rows[-1] == ")" else " x "
        swizzle = f":swizzle={self.swizzle}" if self.swizzle != "none" else ""
        return f"{TMA_KIND}:{self.array}:box={rows}{x}{self.box[1]}{swizzle}"

    def resolve(self, env: dict[str, int], arrays: dict[str, tuple[str, tuple[int, ...]]]) -> TensorMap:
        """For one case: `env` holds sizes and knobs, `arrays` each array parameter's (dtype, shape).
        Raises ValueError for an array TMA cannot describe here (an ExprError for the box)."""
        if self.array not in arrays:
            raise ValueError(f"tma:{self.array}: not an array parameter")
        dtype, shape = arrays[self.array]
        if len(shape) < 2 or dtype not in TMA_ITEMSIZE:
            raise ValueError(f"tma:{self.array}: TMA descriptors here are of arrays of two or more dimensions of "
                             f"{', '.join(TMA_ITEMSIZE)}, not {dtype}{list(shape)}")
        return TensorMap(dtype, math.prod(shape[:-1]), shape[-1], self.box[0].evaluate_int(env),
                         self.box[1].evaluate_int(env), TMA_SWIZZLES[self.swizzle])


def _split_box(text: str) -> list[str]:
    """ROWSxCOLS split at its top-level 'x' (after a digit, ')' or a blank), so names holding
    an x (max, BOX) stay whole."""
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "x" and depth == 0 and i > 0 and (text[i - 1].isdigit() or text[i - 1] in ") \t"):
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]
