"""Every timed launch is judged: poisoned outputs before it, a check after it.

A kernel that computes only when it finds poison, only on some launches, or only
while it is not timed would otherwise be timed doing nothing. The runner's timing
loop calls ``before(i)`` ahead of every launch and ``after(i)`` behind every
measured one, both outside the launch's event pair (so neither enters a sample).
``before`` fills the outputs (and a program's workspace) with the next poison word,
overwrites every SM's shared memory and the kernel's local memory (where a launch
could leave its outputs for the next) and zeroes the slots not sealed yet; ``after`` enqueues the output
check into launch i's own slot of a stats buffer, and its seal (a tag of the count under a secret key: a later launch of
the kernel could otherwise zero an earlier launch's count; the slot's other words get
the fence's keystream, so a sealed slot holds no data between launches either).
Nothing waits inside the loop: the slots are read once it is over, and a slot whose tag
is not its count's, or whose other words lost their keystream, is ``out_of_bounds``.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from .case_buffers import CaseBuffers
from .gpu_checks import GpuChecks
from .pages import alloc_pages
from .poison import Poisons
from .program_run import ProgramRun
from .protocol import CaseCheck
from .status import Status

if TYPE_CHECKING:
    from ..runtime.native import Device


class TimedChecks:
    def __init__(self, device: Device, checks: GpuChecks, bufs: CaseBuffers, poisons: Poisons, repetitions: int,
                 local_bytes: int = 0, run: Optional[ProgramRun] = None):
        self.checks, self.bufs, self.poisons = checks, bufs, poisons
        self.run = run  # a program's launches: its workspace is poisoned with the outputs
        self.local_bytes = local_bytes  # the timed kernel's local frame: the scrub covers at least that
        checks.local_scrub(local_bytes)  # compiled now, not inside the timing loop
        self.outputs = bufs.outputs()
        self.slot_words = checks.slot_words
        self.slot_bytes = self.slot_words * 8
        self.count = max(1, repetitions) * len(self.outputs)
        self.slots = alloc_pages(device, self.count * self.slot_bytes)
        self.slots.fill_u32(0, 0, self.slots.nbytes)
        self.salt = secrets.randbits(64)  # this run's seals only

    def before(self, index: int) -> None:
        fresh_start(self.checks, self.bufs, self.poisons, self.local_bytes, self.run)
        # The slots not sealed yet, and the page's slack past the last, zero again: the checks
        # count into zeros, and nothing a launch wrote ahead of its own check (where it could
        # keep data) reaches the next.
        first = max(0, index) * len(self.outputs)
        self.slots.fill_u32_async(0, first * self.slot_bytes, self.slots.nbytes - first * self.slot_bytes)

    def after(self, index: int) -> None:
        with self.checks.keys.on():
            for j, a in enumerate(self.outputs):
                assert a.ref is not None  # set for every output
                slot = self.slots.ptr + (index * len(self.outputs) + j) * self.slot_bytes
                self.checks.enqueue_output_check(a.job.dtype, a.ptr, a.ref.ptr, a.nbytes, a.scale_row,
                                                 self.bufs.job.rtol[a.job.name], slot)
                self.checks.enqueue_seal(slot, self.salt)

    def verdict(self, measured: int) -> Optional[CaseCheck]:
        """None when every measured launch's outputs passed; else the first failure."""
        stats = np.empty(self.count * self.slot_words, dtype=np.uint64).reshape(self.count, self.slot_words)
        self.slots.download(stats)
        used = measured * len(self.outputs)
        forged = [k for k in range(used) if not self.checks.sealed(self.slots.ptr + k * self.slot_bytes, self.salt,
                                                                   int(stats[k, 6]), int(stats[k, 7]))]
        rest = [self.checks.sealed_rest(self.slots.ptr + k * self.slot_bytes) for k in range(used)]
        broken = self.checks.fences_broken([r for pair in rest for r in pair], self.salt)
        forged += [k for k in range(used) if broken[2 * k] or broken[2 * k + 1]]
        if forged:
            forged = sorted(set(forged))
            launch = forged[0] // len(self.outputs) + 1
            return CaseCheck(Status.OUT_OF_BOUNDS, detail=f"the record of timed launch #{launch}'s output check "
                             f"(and {len(forged) - 1} more) was rewritten after the check: the kernel writes into "
                             "memory it was not given")
        mismatches = stats[:used, 6].reshape(measured, len(self.outputs))
        return wrong_launches([a.job.name for a in self.outputs], [[int(n) for n in row] for row in mismatches])


def fresh_start(checks: GpuChecks, bufs: CaseBuffers, poisons: Poisons, local_bytes: int,
                run: Optional[ProgramRun]) -> None:
    """Ahead of a judged launch (enqueued): the outputs (and a program's workspace) poisoned
    with the next word, the on-chip memory and the local windows scrubbed, the checks' own
    scratch zeroed."""
    bufs.poison(poisons)
    if run:
        run.init_workspace(poisons)
    checks.scrub(local_bytes)
    checks.clear_scratch()


def wrong_launches(names: Sequence[str], counts: Sequence[Sequence[int]]) -> Optional[CaseCheck]:
    """None when no measured launch had a mismatch (`counts`: per launch, per output);
    else the verdict on the first that did."""
    bad = [k for k, row in enumerate(counts) if sum(row)]
    if not bad:
        return None
    first = counts[bad[0]]
    found = ", ".join(f"{name}: {n} mismatches" for name, n in zip(names, first) if n)
    return CaseCheck(Status.UNSTABLE, mismatches=sum(first),
                     detail=f"{len(bad)} of {len(counts)} timed launches gave wrong outputs, the first "
                            f"launch #{bad[0] + 1} ({found}); every timed launch starts from poisoned outputs "
                            "and is checked: the kernel must compute every element on every launch")
