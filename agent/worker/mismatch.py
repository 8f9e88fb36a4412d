"""A mismatch report a proposer can act on: worst errors, how many, where, and a
hint at the pattern ("only rows >= 64 wrong"). Built on the CPU from the
downloaded output, only when the GPU check has already found a mismatch. A
bfloat16 output arrives as its uint16 bits: the poison is matched on those bits,
the errors and the printed values are the numbers they stand for."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec.half_float import is_narrow, to_float64
from ..spec.tolerance import relative_error


@dataclass(frozen=True)
class MismatchReport:
    output: str
    shape: tuple[int, ...]
    rtol: float
    mismatches: int
    unwritten: int  # elements still holding the poison word of the fill before the launch
    max_abs_error: float
    max_rel_error: float  # |out - ref| / (|ref| + rms(ref))
    first: tuple[tuple[tuple[int, ...], float, float], ...]  # (index, got, expected)
    hint: str

    def text(self) -> str:
        lines = [f"output {self.output} {list(self.shape)}: {self.mismatches} of "
                 f"{int(np.prod(self.shape))} elements outside rtol {self.rtol:.3g} "
                 f"(max abs error {self.max_abs_error:.4g}, max rel error {self.max_rel_error:.4g})",
                 f"pattern: {self.hint}"]
        for idx, got, want in self.first:
            lines.append(f"  {self.output}{list(idx)}: got {got:.7g}, expected {want:.7g}")
        return "\n".join(lines)


def still_poison(out: np.ndarray, word: int | None) -> np.ndarray:
    """Elements whose bits are the fill's poison word (repeated across 8-byte elements,
    16 bits for 2-byte elements), whatever the word: NaN-shaped, huge finite or an integer."""
    if word is None:
        return np.zeros(out.shape, dtype=bool)
    width = out.dtype.itemsize
    word_bytes = np.uint16(word).tobytes() if width == 2 else np.uint32(word).tobytes() * (width // 4)
    pattern = np.frombuffer(word_bytes, dtype=f"u{width}")[0]
    same: np.ndarray = np.ascontiguousarray(out).view(f"u{width}") == pattern
    return same


def build_report(name: str, out: np.ndarray, ref: np.ndarray, rtol: float, poison_word: int | None = None,
                 limit: int = 8, dtype: str = "", per_row: bool = False) -> MismatchReport:
    """`out` as downloaded (bfloat16 as uint16 bits), `dtype` the output's spec dtype,
    `per_row` the workload's row scale (agent/spec/tolerance.py)."""
    poisoned = still_poison(out, poison_word)
    if is_narrow(dtype):
        out = to_float64(out, dtype)
    err = relative_error(out, ref, per_row)
    bad = ~(err <= rtol)  # NaN and inf count as bad
    unwritten = int(np.count_nonzero(poisoned & bad))
    finite = err[np.isfinite(err)]
    abs_err = np.abs(out.astype(np.float64) - ref)
    idx = np.argwhere(bad)
    first = tuple((tuple(int(i) for i in ix), float(out[tuple(ix)]), float(ref[tuple(ix)])) for ix in idx[:limit])
    return MismatchReport(
        name, tuple(out.shape), rtol, int(bad.sum()), unwritten,
        float(np.nanmax(abs_err)) if np.isfinite(abs_err).any() else float("nan"),
        float(finite.max()) if finite.size else float("inf"),
        first, pattern_hint(bad, unwritten))


def pattern_hint(bad: np.ndarray, unwritten: int) -> str:
    """Describe where the wrong elements are, in words a kernel author can use."""
    total, count = bad.size, int(bad.sum())
    if count == 0:
        return "no mismatches"
    parts = []
    if unwritten == count:
        parts.append("every wrong element was never written (still the poison)")
    elif unwritten:
        parts.append(f"{unwritten} wrong elements were never written (still the poison)")
    if count == total:
        parts.append("every element is wrong")
        return "; ".join(parts)
    if bad.ndim >= 2:
        rows = np.flatnonzero(bad.any(axis=tuple(range(1, bad.ndim))))
        cols = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=0)) if bad.ndim == 2 else None
        nrows, ncols = bad.shape[0], bad.shape[-1]
        parts.append(_axis_hint("rows", rows, nrows))
        if cols is not None:
            parts.append(_axis_hint("columns", cols, ncols))
        if cols is not None and count == len(rows) * len(cols) and len(rows) < nrows and len(cols) < ncols:
            parts.append("the wrong elements form a full block of those rows and columns")
    else:
        flat = np.flatnonzero(bad)
        parts.append(_axis_hint("indices", flat, bad.size))
    return "; ".join(p for p in parts if p)


def _axis_hint(label: str, hits: np.ndarray, extent: int) -> str:
    lo, hi = int(hits.min()), int(hits.max())
    if len(hits) == extent:
        return f"wrong in every one of the {extent} {label}"
    contiguous = hi - lo + 1 == len(hits)
    if contiguous and hi == extent - 1:
        return f"only {label} >= {lo} wrong (of {extent})"
    if contiguous and lo == 0:
        return f"only {label} < {hi + 1} wrong (of {extent})"
    if contiguous:
        return f"only {label} {lo}..{hi} wrong (of {extent})"
    if len(hits) >= 2:
        step = np.diff(hits)
        if np.all(step == step[0]):
            return f"every {int(step[0])}th of the {label} from {lo} wrong ({len(hits)} of {extent})"
    return f"{len(hits)} of {extent} {label} wrong, between {lo} and {hi}"
