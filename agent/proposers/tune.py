"""The `tune` proposer: searches the knobs a kernel declares; no model, no network.

Each proposal is a point of a seeded local search over one kernel's knobs
(agent/proposers/knob_search.py); which kernel, where a workload ships several with knobs,
is agent/proposers/kernel_turns.py's. Configurations that cannot launch (more than 1024
threads, fewer than a warp) or do not compile (a kernel's `#error` guards against illegal
or spilling knob combinations; NVRTC needs no GPU, and the CUBIN it caches is what the
attempt's compile then uses) are skipped without spending the budget. One exception, for speed:
a kernel with a clean record (CLEAN_RECORD compiles, none refused) has its points proposed
while their compiles are under way (the evaluator joins them), so its first refused point,
if it has one, is a compile_failed attempt; from then on its proposals wait for NVRTC's
verdict again (CompilePool.clean). The state of the search is the session's history, so a
resumed session continues where it stopped.

A step may propose a batch (propose_batch): the proposal above, then untried neighbours
of the TOP_K best points taken in turn, compiled in parallel in the compile pool; while
some of those are compiled already, the step takes only those (a smaller step at once, not
a full one that waits on NVRTC). After each step the pool is given the neighbours of the
step's members, of the attempts in flight and of the TOP_K best, up to twice its size, so
it never idles between steps (agent/proposers/tune_ahead.py). So with compiling ahead on
(`ahead` > 0) which neighbours a step takes depends on which compiles have finished, as the
first proposal's choice does: the seed fixes the search only with `ahead=0`.
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Callable, Optional

from ..evaluate.records import CandidateSpec
from ..spec.kernel_source import Knob
from .base import Proposal, ProposalContext, ProposalError, SearchExhausted
from .compile_pool import COMPILE_NOW, CompilePool, defines_key
from .kernel_turns import KernelTurns, focus_case
from .knob_search import (
    MAX_SPACE,
    SAMPLES,
    TOP_K,
    Point,
    doomed_values,
    listed_points,
    neighbours_of,
    next_point,
    parent_of,
    point_scores,
    ranked,
    rationale_of,
    space_size,
)
from .launch_filter import LaunchFilter
from .tune_ahead import CompileAhead
from .tune_target import attempts_on, config_name, config_prefix, in_flight_keys, tune_base


class TuneProposer:
    name = "tune"
    proposes_ahead = True  # agent/proposers/base.py's proposes_ahead

    def __init__(self, seed: int = 0, kernel: Optional[str] = None, ahead: Optional[int] = None):
        self.seed, self.kernel = seed, kernel
        # Candidates compiled ahead, while the GPU evaluates the one just proposed: the
        # untried neighbours of the best points, in the order the next proposals look at
        # them; one NVRTC process per host core but COMPILE_NOW (agent/runtime/compile_process.py),
        # which the points proposed take (CompilePool.take_now). The compile processes run niced, so
        # the worker driving the GPU and the graph's threads still come first (before they
        # were, NVRTC on every core starved them).
        self.ahead = max(1, (os.cpu_count() or 1) - COMPILE_NOW) if ahead is None else ahead
        self.pool = CompilePool(self.ahead)
        self.launchable = LaunchFilter()
        self.compile_ahead = CompileAhead(self.pool, self.launchable, seed, kernel, self.name)
        self.turns = KernelTurns(self.name)
        # the other kernel the last proposal went to because the main kernel's space was used up
        self._fallback: Optional[str] = None
        # the main kernel (its kernel and tag) whose space is used up: not searched again on every
        # proposal (that cost ~100 ms each in a simulated sgemm session), until the best changes
        self._used_up: Optional[tuple[tuple[str, str], SearchExhausted]] = None

    def base(self, ctx: ProposalContext, kernel: Optional[str] = None) -> tuple[CandidateSpec, dict[str, Knob]]:
        """What to tune (tune_base): `kernel`, else the one this tuner was given, else its choice."""
        return tune_base(ctx, kernel or self.kernel, self.name)

    def prepare(self, ctx: ProposalContext) -> None:
        """While the plan times the baselines and the starting kernel (seconds, the pool idle):
        compile the tuned kernel's defaults, its listed configs and the defaults' neighbours,
        the first step's candidates, so that step does not wait on NVRTC."""
        arch = ctx.facts.arch or None
        if arch is None or not self.ahead or ctx.history:
            return
        base, knobs = self.base(ctx)
        free = {n: k for n, k in knobs.items() if n not in base.defines}
        defaults = {n: k.default for n, k in free.items()}
        first = [defaults] + [point for point, _ in listed_points(ctx.workload, base, free)]
        self.compile_ahead.queue(ctx, base, knobs, [defaults], {}, set(), arch, first=first)

    def propose(self, ctx: ProposalContext) -> Proposal:
        self._fallback = None
        other = self._other_turn(ctx)
        if other is not None:
            try:
                return self._propose(ctx, *other)
            except SearchExhausted:  # that kernel's space is used up: its turns go to the others
                self.turns.exhausted.add(other[0])
            except ProposalError:  # unreachable this time (a sampled space): back to the main one
                self.turns.no_first_turn.add(other[0])
        main = self.base(ctx)[0]
        if self._used_up is not None and self._used_up[0] == (main.kernel, main.tag):
            return self._after_main(ctx, self._used_up[1])
        try:
            return self._propose(ctx, None, self._main_focus(ctx))
        except SearchExhausted as used_up:
            if not in_flight_keys(ctx, main):  # else a point counted as tried may yet be dropped untried
                self._used_up = ((main.kernel, main.tag), used_up)
            return self._after_main(ctx, used_up)
        except ProposalError as none_found:  # a sampled space found nothing this time: another's turn
            return self._after_main(ctx, none_found)

    def _after_main(self, ctx: ProposalContext, used_up: ProposalError) -> Proposal:
        """The main kernel's space is used up (or, sampled, gave nothing this time): the other
        shipped kernels with knobs take the turn, the least tried first, until theirs are used
        up too (a model's kernel being the best, or a kernel named on the command line, ends
        the search here)."""
        main = self.base(ctx)[0].kernel
        if self.kernel or main not in ctx.workload.kernels:
            raise used_up
        mine = [a.kernel for a in ctx.history if a.proposer == self.name]
        others = sorted((n for n, k in ctx.workload.kernels.items() if n != main and k.knobs() and n not in self.turns.exhausted),
                        key=mine.count)
        focus = focus_case(ctx)
        for name in others:
            try:
                proposal = self._propose(ctx, name, focus)
            except SearchExhausted:
                self.turns.exhausted.add(name)
                continue
            except ProposalError:  # a sampled space found nothing this time: the next one
                continue
            self._fallback = name
            return proposal
        if not isinstance(used_up, SearchExhausted):
            raise used_up
        raise SearchExhausted(f"{used_up}; every other tunable kernel's space is used up too") from None

    def propose_batch(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        """Up to `n` proposals for one step, evaluated one after another as separate attempts:
        the first as propose() chooses it, the others the step's kernel's untried listed
        configs, then untried neighbours of its TOP_K best points taken in turn (a tree that
        grows from several nodes, not a line from the best), compiled in parallel in the
        compile pool; fewer when the space runs out. The step's kernel is the main one's,
        or, once that has stalled, the other kernel whose turn the first proposal was."""
        other = self._other_turn(ctx)  # what propose() decides too: it reads the same history
        first = self.propose(ctx)
        if n <= 1:
            self.compile_ahead.others(ctx, {first.spec.kernel}, self.turns.exhausted)
            return [first]
        # Once the main kernel has stalled, another kernel's turn is the whole step's: with one
        # turn per step, a batch of four gave the others a quarter of the attempts whatever
        # the stall. Before that, the step's other members are the main kernel's neighbours.
        # With the main kernel's space used up, the step is the kernel that took its place.
        first_kernel = first.spec.kernel
        if self._fallback is not None and first_kernel == self._fallback:
            kernel, focus = self._fallback, focus_case(ctx)
        elif other is not None and first_kernel == other[0] and self._stalled(ctx):
            kernel, focus = other
        else:  # the main kernel's turn, on the geomean or (stalled) on its focus case
            kernel, focus = None, first.spec.focus
        try:
            batch = [first] + self._propose_more(ctx, n - 1, first.spec.defines, kernel, focus)
        except ProposalError:  # nothing beside the first: a batch of one
            batch = [first]
        self.compile_ahead.refill(ctx, batch, kernel, focus)
        self.compile_ahead.others(ctx, {p.spec.kernel for p in batch}, self.turns.exhausted)
        # After the first (propose()'s choice: another kernel's turn, say, which the budget's
        # last step must not drop), members compiled already first: the GPU takes a step's
        # attempts in its order, and works on those while NVRTC finishes the others.
        arch = ctx.facts.arch or None
        if arch is not None:
            batch[1:] = sorted(batch[1:], key=lambda p: not self.pool.compiled_already(
                p.spec, {}, arch, ctx.workload.tolerance.allow_fast_math))
        return batch

    def _propose_more(self, ctx: ProposalContext, n: int, taken: dict[str, int], kernel: Optional[str] = None,
                      focus: Optional[str] = None) -> list[Proposal]:
        base, knobs = self.base(ctx, kernel)
        prefix = config_prefix(base)
        mine = attempts_on(ctx, base, self.name)
        tried = {defines_key(a.defines) for a in mine} | in_flight_keys(ctx, base) | {defines_key(taken)}
        scores = point_scores(mine, focus)
        free = {k: kn for k, kn in knobs.items() if k not in base.defines}
        rng = random.Random(f"{self.seed}:{ctx.iteration}:{prefix}:batch")
        arch = ctx.facts.arch or None
        allow_fast_math = ctx.workload.tolerance.allow_fast_math
        lists = []
        for point in ranked(scores)[:TOP_K]:
            points = list(neighbours_of({k: v for k, v in point if k in free}, free))
            rng.shuffle(points)
            lists.append(points)
        listed = listed_points(ctx.workload, base, free)
        neighbours = [p for round_ in itertools.zip_longest(*lists) for p in round_ if p is not None]
        # A value only ever wrong (_propose says why): never in a step's extra members but for
        # the listed settings (measured, so never held back); the step's first proposal takes
        # such a point only once nothing else is left.
        doomed = doomed_values(mine)
        neighbours = [p for p in neighbours if not any((k, v) in doomed for k, v in p.items())]
        if arch is not None:
            # Compiled ahead and accepted first (a stable sort: each group keeps its turns), so
            # the step does not wait on NVRTC for a neighbour while compiled ones sit ready
            # (without this, on the H200, propose waited on compiles 295-464 ms per attempt, cold cache).
            neighbours.sort(key=lambda p: not self.pool.compiled_already(base, p, arch, allow_fast_math))
            # And while some are ready, only those: a smaller step at once rather than a full one
            # that waits on NVRTC (the pool keeps compiling; the next step takes what it made).
            ready = [p for p in neighbours if defines_key({**base.defines, **p}) not in tried
                     and self.pool.compiled_already(base, p, arch, allow_fast_math)]
            neighbours = ready or neighbours
        order = itertools.chain((point for point, _ in listed), neighbours)
        chosen: list[dict[str, int]] = []
        while len(chosen) < n:
            window = []  # the next few untried launchable points, compiled together
            for p in order:
                k = defines_key({**base.defines, **p})
                if k in tried or not self.launchable.allows(ctx.workload, base, p, focus):
                    continue
                tried.add(k)
                window.append(p)
                if len(window) >= n - len(chosen):
                    break
            if not window:
                break
            # For a kernel with a clean record (CompilePool.clean) the step's extra members do not wait for
            # NVRTC: one whose compile is under way is taken, and the evaluator joins that
            # compile when it reaches it (one compile per configuration, agent/runtime/
            # compiler.py). Waiting here held the whole step, and the GPU with it, on the
            # slowest compile of the window (on an H100, the graph's propose node waited
            # 171 ms per attempt while the worker idled). Any other kernel waits for verdicts.
            chosen += [p for p in window if arch is None or self.pool.may_compile(base, p, arch, allow_fast_math)]
        out = []
        for choice in chosen:
            label = ",".join(f"{k}={choice[k]}" for k in knobs if k in choice)
            why = rationale_of(choice, scores, listed) + " (batch)" \
                + (f" (searched for case {focus})" if focus else "")
            spec = base.model_copy(update={"name": config_name(base, label), "defines": {**base.defines, **choice},
                                           "proposer": self.name, "rationale": why,
                                           "parent": parent_of(choice, scores, mine, ctx), "focus": focus})
            out.append(Proposal(spec))
        return out

    def _propose(self, ctx: ProposalContext, kernel: Optional[str] = None, focus: Optional[str] = None) -> Proposal:
        base, knobs = self.base(ctx, kernel)
        prefix = config_prefix(base)
        mine = attempts_on(ctx, base, self.name)
        tried = {defines_key(a.defines) for a in mine} | in_flight_keys(ctx, base)
        scores = point_scores(mine, focus)
        rng = random.Random(f"{self.seed}:{ctx.iteration}:{prefix}")
        arch = ctx.facts.arch or None  # unknown: candidates are not compiled ahead
        allow_fast_math = ctx.workload.tolerance.allow_fast_math

        def feasible(d: Point) -> bool:
            return (defines_key({**base.defines, **d}) not in tried
                    and self.launchable.allows(ctx.workload, base, d, focus)
                    and (arch is None or self.pool.may_compile(base, d, arch, allow_fast_math)))

        ready: Optional[Callable[[Point], bool]] = None
        prefetch: Optional[Callable[[list[Point]], object]] = None
        if arch is not None and self.ahead:
            target = arch

            def compiled(d: Point) -> bool:
                """Compiled ahead and accepted: taken before a neighbour that would have to be compiled
                now, so the GPU does not wait on NVRTC (the neighbours' order is a shuffle anyway)."""
                return defines_key({**base.defines, **d}) not in tried and \
                    self.pool.compiled_already(base, d, target, allow_fast_math)

            def compile_now(points: list[Point]) -> None:
                for d in points[:self.ahead]:
                    if defines_key({**base.defines, **d}) not in tried and self.launchable.allows(ctx.workload, base, d):
                        self.pool.submit(base, d, target, allow_fast_math)
            ready, prefetch = compiled, compile_now
        sizes = ctx.workload.case(focus).sizes if focus else None
        listed = listed_points(ctx.workload, base, {n: k for n, k in knobs.items() if n not in base.defines}, sizes)
        shipped = ctx.workload.kernels.get(base.name)
        mine_for_case = shipped.configs_written_for(sizes) if shipped is not None else []
        written = [point for point, config in listed if config in mine_for_case]
        # Points with a knob value that was only ever wrong are taken last (tf32x3's FLUSH=0
        # accumulates in the tensor cores and fails by design at K >= 1024; in a 20-attempt
        # sgemm bench on the H200, 4 attempts were wrong in every screened launch).
        doomed = doomed_values(mine)
        starts = [point for point, _ in listed]  # a listed setting is measured: never held back
        clean: Callable[[Point], bool] = lambda d: d in starts or not any((k, v) in doomed for k, v in d.items())
        clean_ready: Optional[Callable[[Point], bool]] = None
        if ready is not None:
            compiled_ready = ready
            clean_ready = lambda d: clean(d) and compiled_ready(d)
        choice = next_point(knobs, base.defines, scores, lambda d: clean(d) and feasible(d), rng,
                            clean_ready, prefetch, starts=starts, written_for=written) if doomed else None
        choice = choice or next_point(knobs, base.defines, scores, feasible, rng, ready, prefetch,
                                      starts=starts, written_for=written)
        if choice is None:
            size = space_size({n: k for n, k in knobs.items() if n not in base.defines})
            if size > MAX_SPACE:  # sampled, not enumerated: another iteration samples afresh
                raise ProposalError(f"no untried configuration of {base.name}'s {len(knobs)} knobs found in "
                                    f"{SAMPLES} random samples of {size}")
            raise SearchExhausted(f"every configuration of {base.name}'s {len(knobs)} knobs has been tried or "
                                  f"cannot run here: {len(tried)} tried, {size - len(tried)} of {size} serve no "
                                  f"case{' ' + repr(focus) if focus else ''}, or NVRTC rejects them")
        label = ",".join(f"{k}={choice[k]}" for k in knobs if k in choice)
        if arch is not None and self.ahead:
            self.compile_ahead.queue(ctx, base, knobs, [choice], scores, tried | {defines_key({**base.defines, **choice})}, arch)
        why = rationale_of(choice, scores, listed) \
            + (f" (searched for case {focus})" if focus else "")
        spec = base.model_copy(update={"name": config_name(base, label), "defines": {**base.defines, **choice},
                                       "proposer": self.name, "rationale": why,
                                       "parent": parent_of(choice, scores, mine, ctx), "focus": focus})
        return Proposal(spec)

    def _main(self, ctx: ProposalContext) -> Optional[str]:
        """The kernel being improved, or None when there is nothing to tune."""
        try:
            return self.base(ctx)[0].kernel
        except ProposalError:
            return None

    def _other_turn(self, ctx: ProposalContext) -> Optional[tuple[str, str]]:
        """(kernel, focus case) when this proposal is another tunable kernel's turn (never for
        a tuner given one kernel)."""
        main = None if self.kernel else self._main(ctx)
        return None if main is None else self.turns.other_turn(ctx, main)

    def _main_focus(self, ctx: ProposalContext) -> Optional[str]:
        main = self._main(ctx)
        return None if main is None else self.turns.main_focus(ctx, main)

    def _stalled(self, ctx: ProposalContext) -> bool:
        main = self._main(ctx)
        return main is not None and self.turns.stalled(ctx, main)
