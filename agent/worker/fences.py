"""Memory a run must leave alone, fenced for the length of the run.

The worker keeps every case's buffers resident for the session (uploads are
costly), and a program's workspace lives as long as its kernel stays loaded. A
kernel that finds them by pointer arithmetic could keep its output there between
launches and, in the timed launches, copy it back instead of computing it: each
launch's output is right, and only the speed is a lie. Guard bands and moats hold
a constant sentinel, so such a kernel could even put them back on its last launch.

So before each validated or timed run of a case, every other resident case's
output buffers (guard bands included), every other program's workspace and every
moat (this case's too) are filled with a keystream of the worker's secret key and
a fresh salt; after the run they must still hold it, or the run is
``out_of_bounds``. The keystream cannot be recomputed by a kernel, so what it
overwrote cannot be restored. Moats get their sentinel back afterwards (the sweep
checks it); the rest is re-armed by its own case's next prepare.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Iterable, Optional

from .case_buffers import GUARD_WORD, CaseBuffers
from .program_run import ProgramRun
from .protocol import CaseCheck
from .status import Status


@dataclass(frozen=True)
class Region:
    what: str  # for the report: "case 'square-4096' output C"
    buffer: object  # _runner.Buffer
    nbytes: int
    moat: bool = False


def regions(running: CaseBuffers, run: Optional[ProgramRun], cases: Iterable[CaseBuffers],
            programs: Iterable[ProgramRun]) -> list[Region]:
    """What the run of `running` (and its program `run`, if any) must not touch."""
    out = [Region(f"case '{running.job.case}' moat", m, m.nbytes, moat=True) for m in running.moats]
    for bufs in cases:
        if bufs is running:
            continue
        out += [Region(f"case '{bufs.job.case}' moat", m, m.nbytes, moat=True) for m in bufs.moats]
        out += [Region(f"case '{bufs.job.case}' output {a.job.name}", a.buffer, a.nbytes + 2 * a.guard)
                for a in bufs.outputs()]
    for program in programs:
        if program is not run:
            out += [Region(f"case '{program.bufs.job.case}' workspace {w.name}", w.buffer, w.nbytes + 2 * w.guard)
                    for w in program.workspace.values()]
    return out


class Fence:
    """Fenced before a run (`raise_`), verified after it (`breached`)."""

    def __init__(self, checks, regions: list[Region]):
        self.checks, self.regions = checks, regions
        self.salt = secrets.randbits(64)

    def raise_(self) -> None:
        for r in self.regions:
            self.checks.fence(r.buffer.ptr, r.nbytes, self.salt)

    def breached(self) -> Optional[CaseCheck]:
        """The regions written since raise_ (the device synchronised by the caller); moats re-armed."""
        hits = [r.what for r in self.regions if self.checks.fence_broken(r.buffer.ptr, r.nbytes, self.salt)]
        for r in self.regions:
            if r.moat:
                r.buffer.fill_u32(GUARD_WORD, 0, r.nbytes)
        if not hits:
            return None
        return CaseCheck(Status.OUT_OF_BOUNDS, detail="writes into memory it was not given: " + ", ".join(hits[:6])
                         + (f" and {len(hits) - 6} more" if len(hits) > 6 else "")
                         + " (a wrong pointer, or data kept between launches)")
