"""Memory a run must leave alone, fenced for the length of the run.

The worker keeps every case's buffers resident for the session (uploads are
costly), and a program's workspace lives as long as its kernel stays loaded. A
kernel that finds them by pointer arithmetic could keep its output there between
launches and, in the timed launches, copy it back instead of computing it: each
launch's output is right, and only the speed is a lie. Guard bands and moats hold
a constant sentinel, so such a kernel could even put them back on its last launch.

So before each timed run of a case, every other resident case's output buffers
(guard bands included), its inputs' guard bands and constant inputs (where inputs
could not be made read-only, agent/worker/read_only.py), every other
program's workspace, every moat, the running case's own guard bands (its arrays' and
its workspace's), the slack of every buffer's last page (mapped memory past what was
asked for: buffers are allocated in whole pages so that it is known), and the worker's
own memory a kernel could reach (cuBLAS's workspace, the L2 flush buffer when the run
does not flush; GpuWorker.fence) are
filled with a keyed stream (agent/worker/gpu_checks.py: a PRF of the word's
address under the worker's secret key and a fresh salt); after the run they must
still hold it, or the run is ``out_of_bounds``. No kernel can compute the stream,
and no two regions share it, so what a kernel overwrote cannot be put back. Moats
and the running case's guard bands get their sentinel back afterwards (the sweep
and the overrun check read it); the rest is re-armed by its own case's next prepare.

A validated run is not fenced. A stash only pays in timed launches, and a timed run
raises its fence (over everything a validation could have left a stash in) before
its first launch; a validation's writes elsewhere are still caught where they could
matter: the moats and guard bands by their sentinels, inputs and references by their
checksums in the sweep, other cases' outputs overwritten by their own next poison.
(The worker is the search's bottleneck, and a fence over sgemm's resident memory, about
a gigabyte, costs a PRF pass to raise and one to check, on each of the dozens of
validated runs of a candidate.)
"""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from .case_buffers import GUARD_WORD, CaseBuffers
from .program_run import ProgramRun
from .protocol import CaseCheck
from .read_only import is_read_only
from .status import Status

if TYPE_CHECKING:
    from ..runtime.native import Buffer
    from .gpu_checks import GpuChecks


@dataclass(frozen=True)
class Region:
    what: str  # for the report: "case 'square-4096' output C"
    ptr: int
    nbytes: int
    rearm: Optional[Callable[[], None]] = None  # what the memory holds again after the run (a sentinel)


def _words(ptr: int, nbytes: int) -> tuple[int, int]:
    """The whole 4-byte words of [ptr, ptr + nbytes) (the fence kernels work in words): a
    16-bit array's band after an odd number of elements starts 2 bytes off a word, and
    loses those 2 bytes and the last 2 to the fence (the overrun check still reads them)."""
    start, end = (ptr + 3) // 4 * 4, (ptr + nbytes) // 4 * 4
    return start, max(0, end - start)


def _guards(bufs: CaseBuffers) -> list[Region]:
    """The running case's own guard bands, re-armed with their sentinel afterwards (a
    read-only input's need no fence: a store there faults)."""
    return [Region(f"case '{bufs.job.case}' {a.job.name} ({side})", *_words(a.buffer.ptr + offset, a.guard),
                   partial(bufs.arm_guard, a, offset))
            for a in bufs.arrays.values() if not is_read_only(a.buffer) for side, offset in a.guard_offsets()]


def _workspace_guards(run: ProgramRun) -> list[Region]:
    return [Region(f"case '{run.bufs.job.case}' workspace {w.name} ({side})", w.buffer.ptr + offset, w.guard,
                   partial(w.buffer.fill_u32, GUARD_WORD, offset, w.guard))
            for w in run.workspace.values() for side, offset in (("before", 0), ("after", w.guard + w.nbytes))]


def _moats(bufs: CaseBuffers) -> list[Region]:
    return [Region(f"case '{bufs.job.case}' moat", m.ptr, m.nbytes, partial(m.fill_u32, GUARD_WORD, 0, m.nbytes))
            for m in bufs.moats]


def _inputs_of_another(bufs: CaseBuffers) -> list[Region]:
    """Another case's input guard bands (up to a MiB each: nothing else reads them until that
    case's own prepare re-arms them) and its constant inputs. A constant input (the
    accumulation probe's) passes its checksum again once a kernel writes the constant back,
    so it is fenced, then filled with its value again (`restore_constant`). The data of the
    other inputs is left to the checksums: a kernel could not put it back without keeping
    it somewhere first."""
    out = []
    for a in bufs.inputs():
        if is_read_only(a.buffer):  # a store there faults (agent/worker/read_only.py)
            continue
        out += [Region(f"case '{bufs.job.case}' input {a.job.name} ({side})", *_words(a.buffer.ptr + offset, a.guard))
                for side, offset in a.guard_offsets()]
        if a.constant is not None:
            out.append(Region(f"case '{bufs.job.case}' input {a.job.name} (constant)", a.ptr, a.nbytes,
                              partial(bufs.restore_constant, a)))
    return out


def _slack(what: str, buffer: Buffer, used: int) -> list[Region]:
    """The rest of a buffer's last page past the `used` bytes (agent/worker/pages.py):
    mapped, read by nothing, so fenced for every run."""
    start, nbytes = _words(buffer.ptr + used, buffer.nbytes - used)
    return [Region(f"{what} (slack)", start, nbytes)] if nbytes > 0 else []


def _case_slack(bufs: CaseBuffers, outputs: bool = True) -> list[Region]:
    """Past each array's last guard band (an output's too, unless `outputs` is False: another
    case's outputs are fenced whole, slack included) and past each reference."""
    out = []
    for a in bufs.arrays.values():
        if (outputs or a.job.role != "output") and not is_read_only(a.buffer):
            out += _slack(f"case '{bufs.job.case}' {a.job.name}", a.buffer, a.nbytes + 2 * a.guard)
        if a.job.role == "output" and a.ref is not None and a.ref_device is not None:
            if not is_read_only(a.ref):
                out += _slack(f"case '{bufs.job.case}' reference {a.job.name}", a.ref, a.ref_device.nbytes)
    return out


def regions(running: CaseBuffers, run: Optional[ProgramRun], cases: Iterable[CaseBuffers],
            programs: Iterable[ProgramRun]) -> list[Region]:
    """What the run of `running` (and its program `run`, if any) must not touch. Another
    case's outputs and another program's workspace are fenced whole: guard bands, data and
    the slack of their last page in one region."""
    out = _moats(running) + _guards(running) + (_workspace_guards(run) if run else []) + _case_slack(running)
    for bufs in cases:
        if bufs is running:
            continue
        out += _moats(bufs)
        out += [Region(f"case '{bufs.job.case}' output {a.job.name}", *_words(a.buffer.ptr, a.buffer.nbytes))
                for a in bufs.outputs()]
        out += _inputs_of_another(bufs)
        out += _case_slack(bufs, outputs=False)
    for program in programs:
        for w in program.workspace.values():
            what = f"case '{program.bufs.job.case}' workspace {w.name}"
            out += [Region(what, *_words(w.buffer.ptr, w.buffer.nbytes))] if program is not run \
                else _slack(what, w.buffer, w.nbytes + 2 * w.guard)
    return out


class Fence:
    """Raised before a run (`raise_`), verified after it (`breached`), or taken down
    unverified (`lower`) when the run ended in an error."""

    def __init__(self, checks: GpuChecks, regions: list[Region]):
        self.checks, self.regions = checks, regions
        self.salt = secrets.randbits(64)

    def raise_(self) -> None:
        for r in self.regions:
            self.checks.fence(r.ptr, r.nbytes, self.salt)

    def lower(self) -> None:
        """Sentinels back where the memory held one (the moats, the running case's guard bands)."""
        for r in self.regions:
            if r.rearm is not None:
                r.rearm()

    @contextmanager
    def lowered_on_error(self) -> Iterator[None]:
        """Around the launches: a launch the runner refuses (the worker lives on) must not
        leave moats or guard bands fenced, where the next run would read a breach."""
        try:
            yield
        except BaseException:
            try:
                self.lower()
            except Exception:  # a dead context: the worker restarts, the buffers go with it
                pass
            raise

    def breached(self) -> Optional[CaseCheck]:
        """The regions written since raise_ (fences_broken waits for the run first), then lowered."""
        broken = self.checks.fences_broken([(r.ptr, r.nbytes) for r in self.regions], self.salt)
        hits = [r.what for r, n in zip(self.regions, broken) if n]
        self.lower()
        if not hits:
            return None
        return CaseCheck(Status.OUT_OF_BOUNDS, detail="writes into memory it was not given: " + ", ".join(hits[:6])
                         + (f" and {len(hits) - 6} more" if len(hits) > 6 else "")
                         + " (a wrong pointer, the bounds of the last partial tile, or data kept between launches)")
