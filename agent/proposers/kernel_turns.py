"""Whose turn it is among the tunable kernels a workload ships (tiles and split-K, say).

The kernel being improved (the best's, else the one with the most knobs) gets MAIN_TURNS
proposals in a row (once it has stalled, every other one of them scored on the focus case
below rather than the geomean), then each other shipped kernel with knobs gets one (not
while a model's kernel is the best: the tuner then searches that one only). Those turns are
scored on the focus case, the performance case where the best so far is furthest behind the
baseline (or slowest against its own geomean without one), so a kernel that only pays on
some shapes is searched where it pays; the session's dispatch (agent/evaluate/dispatch.py)
then gives each case its fastest variant. A kernel not tried yet gets its turn as soon as
the main kernel has had MAIN_TURNS of its own (the turns a former main kernel had do not
hold it back), and once the main kernel's space is used up the others take every turn, the
least tried first: the session ends only when every tunable kernel's space is (otherwise,
on an H100, attention_bf16's tuner ended on flash_mma's six configurations and never tried
flash2, the faster kernel).
"""

from __future__ import annotations

import math
from typing import Optional

from .base import ProposalContext

MAIN_TURNS = 3  # proposals for the kernel being improved before each other tunable kernel gets one
# The kernel being improved, this many attempts in a row without a new best: stalled, and
# from then on the other tunable kernels get every other turn (on the H200 sgemm's tf32x3
# found its best by attempt 13 of 40 and kept 3 turns in 4 to the end, while tf32x3_splitk,
# the variant 128x4096x4096 wanted, got 3 turns and never left its defaults' SPLITK).
STALL = 4
FLOOR_DONE = 0.95  # a case this close to its speed-of-light floor gets no focused turns
# Attempts searched for one case since that case's best last improved, after which the focus
# moves to the next case by gap: on an H100, bf16_gemm's ragged case kept the focus for 182
# of 225 attempts in 90 s (its best found at attempt 35), and both decode cases, 7% and 2%
# behind the libraries, got none, so the decode kernel written for them came up only in the
# unfocused turns. Once every open case has used its patience, the largest gap wins again.
FOCUS_PATIENCE = 20
PROGRESS = 0.99  # a case's best moved: 1% under its median at the last such move (not timing noise)


class KernelTurns:
    """One tuner's turns: counted from the session's history and the attempts in flight,
    with what this tuner learnt of the other kernels on the way."""

    def __init__(self, proposer: str):
        self.proposer = proposer  # the tuner's name, which its attempts carry
        # other kernels whose space is used up: their turns go to the rest (else the same one,
        # least tried, would be picked again every time and the others never get a turn)
        self.exhausted: set[str] = set()
        # other kernels whose first turn found nothing this time (a sampled space): the next
        # untried one goes first, else the same one would be picked every time
        self.no_first_turn: set[str] = set()

    def other_turn(self, ctx: ProposalContext, main: str) -> Optional[tuple[str, str]]:
        """(kernel, focus case) when this proposal is another tunable kernel's turn, `main`
        being the kernel improved.

        Counted from the session's history, not the iteration (a batch advances that by its
        size, and with four per step one kernel got every turn on the H200): another kernel
        gets a turn once the main one has had MAIN_TURNS per turn the others have had, or,
        once the main one has stalled (STALL attempts in a row without a new best), every
        turn that follows one of the main kernel's. Each
        other kernel first gets one for its defaults and one for each listed setting; after
        that the one fastest on the focus case so far gets two turns in three, and the least
        tried the third."""
        if main not in ctx.workload.kernels:  # a model's kernel is the best: the tuner serves it alone (HybridProposer)
            return None
        others = [n for n, k in ctx.workload.kernels.items() if n != main and k.knobs() and n not in self.exhausted]
        mine = [a for a in ctx.history if a.proposer == self.proposer]
        # Turns are counted with the proposals still in flight: with a step proposed ahead, a
        # kernel whose first turn had not finished got a second before any other had one
        # (sgemm on the H200: tiled twice in 20 attempts, the split-K kernels never).
        turns = [a.kernel for a in mine] + \
            [s.kernel for s in ctx.in_flight if s.proposer == self.proposer]
        counts = {n: turns.count(n) for n in others}
        other_turns = sum(counts.values())
        if not others:
            return None
        focus = focus_case(ctx)
        sizes = ctx.workload.case(focus).sizes if focus else None
        # Untried: no turn yet, or fewer turns than its defaults and listed settings need. A
        # listed setting is measured, and for another kernel it comes only with a turn: on an
        # H100 tf32x3_splitk's SPLITK = 4 for 128x4096x4096 and l2pipe's settings
        # never came in 40 attempts, the kernels fastest on the focus case taking the turns.
        untried = [n for n in others if counts[n] < 1 + len(ctx.workload.kernels[n].listed_for(sizes))]
        # A kernel not tried yet (or with listed settings untried) waits only for the main
        # kernel's own MAIN_TURNS: the turns a former main kernel had (counted among the
        # others' now) must not hold it back.
        first_turn = bool(untried) and turns.count(main) >= MAIN_TURNS
        if self.stalled(ctx, main):
            if turns[-1] != main:  # stalled: the main kernel and the others alternate
                return None
        elif len(turns) - other_turns < MAIN_TURNS * (other_turns + 1) and not first_turn:
            return None
        if not focus:
            return None
        if untried:
            # Every kernel's first turn, then the listed settings' turns; a kernel written for
            # the focus case's sizes first (its `suits`, or a config's `when`: the decode kernel
            # for M = 16, a narrow tile for N = 32), then one the workload lists settings for
            # (measured starting points, e.g. split-K for the long-K case), then the fewest
            # turns, then the workload's order.
            return min(untried, key=lambda n: (n in self.no_first_turn,
                                               not ctx.workload.kernels[n].written_for(sizes), counts[n] > 0,
                                               not ctx.workload.kernels[n].configs, counts[n])), focus
        on_focus = {n: min((c.median_ms for a in mine if a.kernel == n and a.status == "ok"
                            for c in a.cases if c.case == focus and c.median_ms), default=math.inf) for n in others}
        if other_turns % 3 == 2 or min(on_focus.values()) == math.inf:
            return min(others, key=lambda n: counts[n]), focus
        return min(others, key=lambda n: on_focus[n]), focus

    def main_focus(self, ctx: ProposalContext, main: str) -> Optional[str]:
        """The case the kernel being improved is searched for on this turn, or None for the
        geomean. Once it has stalled on the geomean, every other one of its turns is scored
        on the focus case instead: knobs that pay on one shape only (a narrow tile for N = 32,
        split-K for a decode step) lose on the geomean and would never be reached, while the
        dispatch gives that case the variant that wins it."""
        if not self.stalled(ctx, main):
            return None
        turns = sum(a.kernel == main for a in ctx.history if a.proposer == self.proposer) + \
            sum(s.kernel == main for s in ctx.in_flight if s.proposer == self.proposer)
        return focus_case(ctx) if turns % 2 else None

    def stalled(self, ctx: ProposalContext, main: str) -> bool:
        """The kernel being improved, `main`, has had STALL attempts in a row without a new best."""
        runs = [a for a in ctx.history if a.proposer == self.proposer and a.kernel == main]
        return len(runs) >= STALL and not any(a.new_best for a in runs[-STALL:])


def focus_case(ctx: ProposalContext) -> Optional[str]:
    """The performance case with the largest gap: each case's fastest validated median over
    every attempt (what the dispatch would give it), against the fastest library there where
    one was timed, else against the best's own geomean. A case at FLOOR_DONE of its
    speed-of-light floor or closer has no gap left to close and is never the focus (None when
    every case is there). Not the single best's medians: once another kernel wins a case, the
    next-worst case becomes the focus. A case searched FOCUS_PATIENCE times since its best
    last moved waits while another open case has patience left."""
    if ctx.best is None:
        return None
    medians = {c.case: c.median_ms for c in ctx.best.cases if c.role == "performance" and c.median_ms}
    floors = {c.case: c.pct_of_floor or 0.0 for c in ctx.best.cases if c.role == "performance"}
    if not medians:
        return None
    for a in ctx.history:
        if a.status == "ok":
            for c in a.cases:
                if c.case in medians and c.median_ms and c.median_ms < medians[c.case]:
                    medians[c.case], floors[c.case] = c.median_ms, c.pct_of_floor or 0.0
    open_cases = [case for case in medians if floors.get(case, 0.0) < FLOOR_DONE]
    if not open_cases:
        return None
    ref = {case: ctx.baseline.get(case) or ctx.best.score_ms for case in medians}
    stale = focused_since_progress(ctx, open_cases)
    patient = [case for case in open_cases if stale[case] < FOCUS_PATIENCE] or open_cases
    return max(patient, key=lambda case: medians[case] / ref[case])


def focused_since_progress(ctx: ProposalContext, cases: list[str]) -> dict[str, int]:
    """Per case, the attempts searched for it (finished, then in flight) since an attempt,
    focused or not, last brought its validated median PROGRESS under the median of the
    previous such attempt (the anchor: small steps that add up to 1% count too)."""
    anchor = {case: math.inf for case in cases}
    stale = dict.fromkeys(cases, 0)
    for a in ctx.history:
        if a.focus in stale:
            stale[a.focus] += 1
        if a.status == "ok":
            for c in a.cases:
                if c.case in anchor and c.median_ms and c.median_ms < anchor[c.case] * PROGRESS:
                    anchor[c.case], stale[c.case] = c.median_ms, 0
    for spec in ctx.in_flight:
        if spec.focus in stale:
            stale[spec.focus] += 1
    return stale

