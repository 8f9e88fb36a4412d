"""What a session gives the user, per performance case, beside what they would pick instead.

The libraries (cuBLAS, PyTorch eager, torch.compile: every baseline the workload has and
the machine can run) are timed once per session, by the same evaluator as the
candidates; per case the fastest of them is "the library". The session's result is its
dispatch where the dispatch pays (a variant per case), else the best single variant; the
best single variant is shown beside it either way. One number sums it up: the geometric
mean over the performance cases of library time / our time.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from .attempt import EventSink, ignore
from .backend import EvaluationBackend
from .dispatch import Dispatch
from .records import Best
from .stats import geomean


class LibraryTime(BaseModel):
    """The fastest library on one performance case."""

    model_config = ConfigDict(frozen=True)  # a record: the checkpoint stores it once

    kind: str  # cublas_sgemm, torch_eager, torch_compile...
    median_ms: float


def fastest_libraries(evaluator: EvaluationBackend, on_event: EventSink = ignore) -> dict[str, LibraryTime]:
    """Every library the workload has and this machine runs, timed once on every
    performance case (their progress streamed to `on_event`); per case the fastest that passed."""
    fastest: dict[str, LibraryTime] = {}
    for kind in evaluator.baseline_kinds():
        r = evaluator.baseline(kind=kind, on_event=on_event)
        if r is None or not r.ok:
            continue
        for c in r.cases:
            if c.role == "performance" and c.timing is not None:
                if c.case not in fastest or c.timing.median_ms < fastest[c.case].median_ms:
                    fastest[c.case] = LibraryTime(kind=kind, median_ms=c.timing.median_ms)
    return fastest


class CaseServed(BaseModel):
    model_config = ConfigDict(frozen=True)

    case: str
    ours_ms: float
    variant: str  # the kernel that serves the case
    single_ms: Optional[float]  # the best single variant's, where there is one
    library: Optional[LibraryTime]
    pct_of_floor: Optional[float] = None

    @property
    def speedup(self) -> Optional[float]:
        return self.library.median_ms / self.ours_ms if self.library else None


class SessionResult(BaseModel):
    """The session's result: `served_by` "dispatch" (a variant per case) or "best"."""

    model_config = ConfigDict(frozen=True)

    served_by: str
    cases: list[CaseServed]

    @property
    def score_ms(self) -> float:
        return geomean([c.ours_ms for c in self.cases])

    @property
    def speedup(self) -> Optional[float]:
        """Geomean over the cases of the fastest library's time over ours (None without libraries)."""
        ratios = [r for c in self.cases if (r := c.speedup) is not None]
        return geomean(ratios) if ratios and len(ratios) == len(self.cases) else None

    def libraries_text(self) -> str:
        """Which libraries were the fastest, and on how many cases: "cublas_sgemm on 5, torch_eager on 1"."""
        kinds = [c.library.kind for c in self.cases if c.library]
        return ", ".join(f"{k} on {kinds.count(k)}" for k in dict.fromkeys(kinds))

    def headline(self) -> str:
        """One line: what the user gets against the fastest library."""
        what = "dispatch (a variant per case)" if self.served_by == "dispatch" else "best single variant"
        vs = f", {self.speedup:.3f}x the fastest library per case ({self.libraries_text()})" if self.speedup else \
            ", no library timed on every case"
        return f"result: {what} {self.score_ms:.4f} ms (geomean){vs}"

    def table(self) -> list[str]:
        """Markdown rows, one per performance case."""
        out = ["| case | ours ms | served by | best single ms | fastest library | library ms | speed-up | % floor |",
               "|---|---|---|---|---|---|---|---|"]
        for c in self.cases:
            out.append(f"| {c.case} | {c.ours_ms:.4f} | {c.variant} | {_ms(c.single_ms)} | "
                       f"{c.library.kind if c.library else '-'} | {_ms(c.library.median_ms if c.library else None)} | "
                       f"{f'{c.speedup:.2f}x' if c.speedup else '-'} | "
                       f"{f'{c.pct_of_floor:.0%}' if c.pct_of_floor else '-'} |")
        return out


def session_result(best: Optional[Best], dispatch: Optional[Dispatch],
                   libraries: dict[str, LibraryTime]) -> Optional[SessionResult]:
    """The dispatch's per-case times where it pays, else the best's; None with neither."""
    single = {c.case: c.median_ms for c in best.cases if c.role == "performance" and c.median_ms} if best else {}
    # each case's floor in ms, read back from the best's % of it at its own median
    floors = {c.case: c.pct_of_floor * c.median_ms for c in best.cases if c.pct_of_floor and c.median_ms} if best else {}
    if dispatch is not None and dispatch.pays:
        if dispatch.single_score_ms is not None and dispatch.times:  # the single variant's, from the same rounds
            single = {e.case: t for e, t in zip(dispatch.entries, dispatch.times[0]) if t}
        cases = [CaseServed(case=e.case, ours_ms=e.median_ms, variant=dispatch.variants[e.variant].name,
                            single_ms=single.get(e.case), library=libraries.get(e.case),
                            pct_of_floor=_of_floor(floors.get(e.case), e.median_ms))
                 for e in dispatch.entries]
        return SessionResult(served_by="dispatch", cases=cases)
    if best is None:
        return None
    return SessionResult(served_by="best", cases=[
        CaseServed(case=case, ours_ms=ms, variant=best.spec.name, single_ms=ms, library=libraries.get(case),
                   pct_of_floor=_of_floor(floors.get(case), ms)) for case, ms in single.items()])


def _ms(v: Optional[float]) -> str:
    return f"{v:.4f}" if v else "-"


def _of_floor(floor_ms: Optional[float], ms: float) -> Optional[float]:
    return floor_ms / ms if floor_ms and ms > 0 else None
