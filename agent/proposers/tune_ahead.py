"""What the tuner compiles ahead, while the GPU evaluates what it proposed: the untried
neighbours of the best points, in the order the next proposals look at them, for the step's
kernel and the first points of every other tunable kernel's next turn.
"""

from __future__ import annotations

import itertools
import random
from typing import Optional, Sequence

from ..evaluate.records import CandidateSpec
from ..spec.kernel_source import Knob
from .base import Proposal, ProposalContext, ProposalError
from .compile_pool import CompilePool, compile_key, defines_key, source_tag
from .kernel_turns import focus_case
from .knob_search import TOP_K, Point, Scores, listed_points, neighbours_of, point_scores, ranked
from .launch_filter import LaunchFilter
from .tune_target import attempts_on, config_prefix, in_flight_keys, same_kernel, tune_base

OTHERS_AHEAD = 4  # points compiled ahead for each other tunable kernel's next turn (a step of up to 4)


class CompileAhead:
    """The tuner's queue of guesses in its CompilePool, refilled after every step."""

    def __init__(self, pool: CompilePool, launchable: LaunchFilter, seed: int, kernel: Optional[str], proposer: str):
        self.pool, self.launchable = pool, launchable
        self.seed, self.kernel, self.proposer = seed, kernel, proposer  # the tuner's own (its proposals' rng)
        self.depth = 2 * pool.ahead  # guesses queued or under way: the pool's size, and as many waiting

    def queue(self, ctx: ProposalContext, base: CandidateSpec, knobs: dict[str, Knob],
              choices: list[Point], scores: Scores, tried: set[tuple[tuple[str, int], ...]], arch: str,
              first: Sequence[Point] = (), depth: Optional[int] = None) -> None:
        """Start compiling the points the next proposals look at first: the neighbours of these
        choices (each may be the next best), of the attempts still in flight, and of the best
        scored points, each list in the order the next proposal's seeded shuffle puts it, taken
        in turn, up to `depth`: a queue deeper than the pool, so NVRTC never idles between
        steps (with a shallower one, on the H200, about 1.8 of 16 compile processes were busy on
        average, and the next step waited for the compiles the last one had only just started).
        `first`: points to queue before those (the first step's own candidates). `depth`: how
        many, `self.depth` by default."""
        free = {n: k for n, k in knobs.items() if n not in base.defines}
        seed = f"{self.seed}:{ctx.iteration + 1}:{config_prefix(base)}"  # the next proposal's rng (see propose)
        in_flight = [{k: v for k, v in s.defines.items() if k in free} for s in ctx.in_flight
                     if s.proposer == self.proposer and same_kernel(s, base)]
        best = [{k: v for k, v in point if k in free} for point in ranked(scores)[:TOP_K]]
        orders: list[list[Point]] = []
        for origin in choices + in_flight + best:
            points = list(neighbours_of(origin, free))
            random.Random(seed).shuffle(points)
            orders.append(points)
        wanted: dict[tuple[str, str, tuple[tuple[str, int], ...]], Point] = {}
        for n in itertools.chain(first, (p for round_ in itertools.zip_longest(*orders) for p in round_ if p is not None)):
            if len(wanted) >= (depth or self.depth):
                break
            key = compile_key(base, n, arch)
            if key in wanted or self.pool.known(key) or defines_key({**base.defines, **n}) in tried \
                    or not self.launchable.allows(ctx.workload, base, n):
                continue  # (a known verdict, NVRTC's yes or no, takes no slot; one under way keeps its)
            wanted[key] = n
        # Last round's guesses for this kernel not started and not wanted now are dropped, so
        # the pool works on what the next proposals look at first instead of a queue that
        # grows each step (another kernel's guesses wait for that kernel's next turn).
        self.pool.drop_guesses(source_tag(base.source), set(wanted),
                               {defines_key({**base.defines, **d}) for d in choices + in_flight})
        for n in wanted.values():
            self.pool.submit(base, n, arch, ctx.workload.tolerance.allow_fast_math)

    def refill(self, ctx: ProposalContext, batch: list[Proposal], kernel: Optional[str], focus: Optional[str]) -> None:
        """Compile ahead from every member of the step, not only the first: any of them may be
        the next best, and the next step then finds its neighbours compiled."""
        arch = ctx.facts.arch or None
        if arch is None or not self.pool.ahead:
            return
        try:
            base, knobs = tune_base(ctx, kernel or self.kernel, self.proposer)
        except ProposalError:
            return
        mine = attempts_on(ctx, base, self.proposer)
        ours = [p.spec.defines for p in batch if same_kernel(p.spec, base)]
        if not ours:
            return
        free = {k for k in knobs if k not in base.defines}
        tried = {defines_key(a.defines) for a in mine} | in_flight_keys(ctx, base) | {defines_key(d) for d in ours}
        self.queue(ctx, base, knobs, [{k: v for k, v in d.items() if k in free} for d in ours],
                   point_scores(mine, focus), tried, arch)

    def others(self, ctx: ProposalContext, stepped: set[str], exhausted: set[str]) -> None:
        """Compile ahead the first points of every other tunable kernel's next turn: its
        defaults and listed settings while untried, else the neighbours of its best points on
        the focus case (what _propose looks at first), OTHERS_AHEAD each (a quarter of the
        pool's depth on a small machine). The step's own kernels (`stepped`) keep their
        deeper queue (refill, and the proposals' own). With only the kernel being proposed
        compiled ahead, the first step of another kernel's turn waits on NVRTC: on one H100 (sgemm
        square-4096, batch 4) the GPU sat idle 18.8 s of 61 s while attempts' compiles waited,
        most of it at other kernels' turns (splitk_warptile, tf32x3_splitk, splitk)."""
        arch = ctx.facts.arch or None
        if arch is None or not self.pool.ahead or self.kernel:
            return
        try:
            main = tune_base(ctx, self.kernel, self.proposer)[0].kernel
        except ProposalError:
            return
        if main not in ctx.workload.kernels:  # a model's kernel is the best: the tuner serves it alone
            return
        focus = focus_case(ctx)
        for name, spec in ctx.workload.kernels.items():
            if name in stepped or name == main or name in exhausted or not spec.knobs():
                continue
            try:
                base, knobs = tune_base(ctx, name, self.proposer)
            except ProposalError:
                continue
            mine = attempts_on(ctx, base, self.proposer)
            free = {n: k for n, k in knobs.items() if n not in base.defines}
            first = ([] if mine else [{n: k.default for n, k in free.items()}]) \
                + [point for point, _ in listed_points(ctx.workload, base, free)]
            tried = {defines_key(a.defines) for a in mine} | in_flight_keys(ctx, base)
            # fewer on a small machine: the pool's few processes are the step's kernel's first
            self.queue(ctx, base, knobs, [], point_scores(mine, focus), tried, arch, first=first,
                       depth=min(OTHERS_AHEAD, max(1, self.depth // 4)))

