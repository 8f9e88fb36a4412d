"""The `tune` proposer: searches the knobs a kernel declares; no model, no network.

Strategy: a seeded local search with restarts. The first proposal is the
kernel's defaults; afterwards, from the best configuration measured so far,
move one knob to a neighbouring value (an untried one, chosen at random among
them); when every neighbour is tried, restart from a random untried point.
Configurations that cannot launch (more than 1024 threads, fewer than a warp)
or do not compile (a kernel's `#error` guards against illegal or spilling knob
combinations; NVRTC needs no GPU, and the CUBIN it caches is what the compile
node then uses) are skipped without spending the budget. One exception, for speed: a
kernel with a clean record (CLEAN_RECORD compiles, none refused) has its points
proposed while their compiles are under way (the evaluator joins them), so its first
refused point, if it has one, is a compile_failed attempt; from then on its proposals
wait for NVRTC's verdict again (CompilePool.clean). The state of the search is the
session's history, so a resumed session continues where it stopped.

A step may propose a batch (propose_batch): the proposal above, then untried neighbours
of the TOP_K best points taken in turn, compiled in parallel in the compile pool; while
some of those are compiled already, the step takes only those (a smaller step at once, not
a full one that waits on NVRTC). After each step the pool is given the neighbours of the
step's members, of the attempts in flight and of the TOP_K best, up to twice its size, so
it never idles between steps. So with compiling ahead on (`ahead` > 0) which neighbours a
step takes depends on which compiles have finished, as the first proposal's choice does:
the seed fixes the search only with `ahead=0`.

Several tunable kernels shipped with the workload (tiles and split-K): the kernel
being improved (the best's, else the one with the most knobs) gets MAIN_TURNS
proposals in a row (once it has stalled, every other one of them scored on the focus
case below rather than the geomean), then each other shipped kernel with knobs gets one (not while a
model's kernel is the best: the tuner then searches that one only). Those turns are scored on the
focus case, the performance case where the best so far is furthest behind the
baseline (or slowest against its own geomean without one), so a kernel that only
pays on some shapes is searched where it pays; the session's dispatch
(agent/evaluate/dispatch.py) then gives each case its fastest variant. A kernel not
tried yet gets its turn as soon as the main kernel has had MAIN_TURNS of its own (the
turns a former main kernel had do not hold it back), and once the main kernel's space
is used up the others take every turn, the least tried first: the session ends only
when every tunable kernel's space is (otherwise, on an H100, attention_bf16's tuner ended
on flash_mma's six configurations and never tried flash2, the faster kernel).
"""

from __future__ import annotations

import itertools
import math
import os
import random
from typing import Optional, Sequence

from ..evaluate.records import CandidateSpec
from ..spec.applicability import coverage_gap, malformed, serves
from ..spec.candidate import Candidate
from ..spec.expr import ExprError
from ..spec.kernel_source import Knob, parse_knobs
from ..spec.knob_space import KnobSpace
from ..spec.workload_model import KernelSpec, Workload
from .base import Proposal, ProposalContext, ProposalError, SearchExhausted
from .compile_pool import COMPILE_NOW, CompilePool, compile_key, defines_key, source_tag

TOP_K = 3  # a batch branches from the neighbourhoods of this many best points
MAIN_TURNS = 3  # proposals for the kernel being improved before each other tunable kernel gets one
# The kernel being improved, this many attempts in a row without a new best: stalled, and
# from then on the other tunable kernels get every other turn (on the H200 sgemm's tf32x3
# found its best by attempt 13 of 40 and kept 3 turns in 4 to the end, while tf32x3_splitk,
# the variant 128x4096x4096 wanted, got 3 turns and never left its defaults' SPLITK).
STALL = 4
OTHERS_AHEAD = 4  # points compiled ahead for each other tunable kernel's next turn (a step of up to 4)
MAX_SPACE = 20000  # enumerate smaller spaces; sample larger ones
SAMPLES = 2000  # random points drawn from a larger space before giving up for this iteration
FLOOR_DONE = 0.95  # a case this close to its speed-of-light floor gets no focused turns


def _prefix(base: CandidateSpec) -> str:
    """What the names of a tuned kernel's configurations start with: its name and source tag."""
    return f"{base.name}@{source_tag(base.source)}["


def kernel_of(name: str) -> str:
    """The kernel a configuration's name (_prefix's form, or a plain kernel name) belongs to."""
    return name.split("@")[0]


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
        self.depth = 2 * self.ahead  # guesses queued or under way: the pool's size, and as many waiting
        self.pool = CompilePool(self.ahead)
        # (workload digest, source tag, defines) -> launchable: best-first asks again for
        # the neighbours of every scored point on each proposal.
        self._launchables: dict[tuple, bool] = {}
        # source tag -> its knobs' #error restrictions and their defaults
        self._spaces: dict[str, tuple[KnobSpace, dict[str, int]]] = {}
        # other kernels whose space is used up: their turns go to the rest (else the same one,
        # least tried, would be picked again every time and the others never get a turn)
        self._exhausted: set[str] = set()
        # the other kernel the last proposal went to because the main kernel's space was used up
        self._fallback: Optional[str] = None
        # the main kernel (its name prefix) whose space is used up: not searched again on every
        # proposal (that cost ~100 ms each in a simulated sgemm session), until the best changes
        self._used_up: Optional[tuple[str, SearchExhausted]] = None
        # other kernels whose first turn found nothing this time (a sampled space): the next
        # untried one goes first, else the same one would be picked every time
        self._no_first_turn: set[str] = set()

    def base(self, ctx: ProposalContext, kernel: Optional[str] = None) -> tuple[CandidateSpec, dict[str, Knob]]:
        """What to tune: `kernel` if given, else the best kernel if it declares knobs (an
        LLM's kernel included; not the starting kernel while the workload names a `[start]
        tune` kernel: the start is the simple point of comparison, the tune kernel the one its
        author measured fastest, and a slow start's attempts cost the most), else the
        workload's `[start] tune` kernel, else the one with the most knobs. Returned with its
        knob values stripped, so every knob is free."""
        kernel = kernel or self.kernel
        start_only = ctx.best is not None and ctx.best.spec.proposer == "start" and bool(ctx.workload.tune)
        if ctx.best and parse_knobs(ctx.best.spec.source) and not kernel and not start_only:
            spec = ctx.best.spec
        else:
            kernels = ctx.workload.kernels
            if not kernels:
                raise ProposalError(f"{ctx.workload.name} ships no kernel to tune and the best so far (if any) "
                                    "declares no knobs (// knob NAME: values); nothing to tune")
            kernel = kernel or ctx.workload.tune
            start = ctx.workload.start_kernel
            # No best yet (prepare(), during the plan): the kernel the first proposal will take,
            # the starting kernel where it has knobs, so what is compiled ahead is what is wanted.
            chosen: KernelSpec = kernels[kernel] if kernel else start if start is not None and start.knobs() \
                else max(kernels.values(), key=lambda k: len(k.knobs()))
            spec = CandidateSpec.from_candidate(Candidate.from_spec(chosen), self.name)
        knobs = parse_knobs(spec.source)
        if not knobs:
            raise ProposalError(f"no kernel of {ctx.workload.name} declares knobs (// knob NAME: values); nothing to tune")
        fixed = {k: v for k, v in spec.defines.items() if k not in knobs}
        return spec.model_copy(update={"name": kernel_of(spec.name), "defines": fixed}), knobs

    def prepare(self, ctx: ProposalContext) -> None:
        """While the plan times the baselines and the starting kernel (seconds, the pool idle):
        compile the tuned kernel's defaults, its listed configs and the defaults' neighbours,
        the first step's candidates, so that step does not wait on NVRTC."""
        arch = ctx.facts.arch or None
        if arch is None or not self.ahead or ctx.history:
            return
        base, knobs = self.base(ctx)
        prefix = _prefix(base)
        free = {n: k for n, k in knobs.items() if n not in base.defines}
        defaults = {n: k.default for n, k in free.items()}
        first = [defaults] + [point for point, _ in _listed(ctx.workload, base, free)]
        self._compile_ahead(ctx, base, knobs, prefix, [defaults], {}, set(), arch, first=first)

    def propose(self, ctx: ProposalContext) -> Proposal:
        self._fallback = None
        other = self._other_turn(ctx)
        if other is not None:
            try:
                return self._propose(ctx, *other)
            except SearchExhausted:  # that kernel's space is used up: its turns go to the others
                self._exhausted.add(other[0])
            except ProposalError:  # unreachable this time (a sampled space): back to the main one
                self._no_first_turn.add(other[0])
        main = _prefix(self.base(ctx)[0])
        if self._used_up is not None and self._used_up[0] == main:
            return self._after_main(ctx, self._used_up[1])
        try:
            return self._propose(ctx, None, self._main_focus(ctx))
        except SearchExhausted as used_up:
            if not _in_flight(ctx, main):  # else a point counted as tried may yet be dropped untried
                self._used_up = (main, used_up)
            return self._after_main(ctx, used_up)
        except ProposalError as none_found:  # a sampled space found nothing this time: another's turn
            return self._after_main(ctx, none_found)

    def _after_main(self, ctx: ProposalContext, used_up: ProposalError) -> Proposal:
        """The main kernel's space is used up (or, sampled, gave nothing this time): the other
        shipped kernels with knobs take the turn, the least tried first, until theirs are used
        up too (a model's kernel being the best, or a kernel named on the command line, ends
        the search here)."""
        main = kernel_of(self.base(ctx)[0].name)
        if self.kernel or main not in ctx.workload.kernels:
            raise used_up
        mine = [kernel_of(a.name) for a in ctx.history if a.proposer == self.name]
        others = sorted((n for n, k in ctx.workload.kernels.items() if n != main and k.knobs() and n not in self._exhausted),
                        key=mine.count)
        focus = _focus_case(ctx)
        for name in others:
            try:
                proposal = self._propose(ctx, name, focus)
            except SearchExhausted:
                self._exhausted.add(name)
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
            self._compile_others_ahead(ctx, {kernel_of(first.spec.name)})
            return [first]
        # Once the main kernel has stalled, another kernel's turn is the whole step's: with one
        # turn per step, a batch of four gave the others a quarter of the attempts whatever
        # the stall. Before that, the step's other members are the main kernel's neighbours.
        # With the main kernel's space used up, the step is the kernel that took its place.
        first_kernel = kernel_of(first.spec.name)
        if self._fallback is not None and first_kernel == self._fallback:
            kernel, focus = self._fallback, _focus_case(ctx)
        elif other is not None and first_kernel == other[0] and self._stalled(ctx):
            kernel, focus = other
        else:  # the main kernel's turn, on the geomean or (stalled) on its focus case
            kernel, focus = None, first.spec.focus
        try:
            batch = [first] + self._propose_more(ctx, n - 1, first.spec.defines, kernel, focus)
        except ProposalError:  # nothing beside the first: a batch of one
            batch = [first]
        self._refill(ctx, batch, kernel, focus)
        self._compile_others_ahead(ctx, {kernel_of(p.spec.name) for p in batch})
        # After the first (propose()'s choice: another kernel's turn, say, which the budget's
        # last step must not drop), members compiled already first: the GPU takes a step's
        # attempts in its order, and works on those while NVRTC finishes the others.
        arch = ctx.facts.arch or None
        if arch is not None:
            batch[1:] = sorted(batch[1:], key=lambda p: not self.pool.compiled_already(
                p.spec, {}, arch, ctx.workload.tolerance.allow_fast_math))
        return batch

    def _mine(self, ctx: ProposalContext, prefix: str) -> list:
        """This tuner's attempts on one kernel (its name prefix, source tag included)."""
        return [a for a in ctx.history if a.proposer == self.name and a.name.startswith(prefix)]

    def _refill(self, ctx: ProposalContext, batch: list[Proposal], kernel: Optional[str], focus: Optional[str]) -> None:
        """Compile ahead from every member of the step, not only the first: any of them may be
        the next best, and the next step then finds its neighbours compiled."""
        arch = ctx.facts.arch or None
        if arch is None or not self.ahead:
            return
        try:
            base, knobs = self.base(ctx, kernel)
        except ProposalError:
            return
        prefix = _prefix(base)
        mine = self._mine(ctx, prefix)
        ours = [p.spec.defines for p in batch if p.spec.name.startswith(prefix)]
        if not ours:
            return
        free = {k for k in knobs if k not in base.defines}
        tried = {defines_key(a.defines) for a in mine} | _in_flight(ctx, prefix) | {defines_key(d) for d in ours}
        self._compile_ahead(ctx, base, knobs, prefix, [{k: v for k, v in d.items() if k in free} for d in ours],
                            _scores(mine, focus), tried, arch)

    def _compile_others_ahead(self, ctx: ProposalContext, stepped: set[str]) -> None:
        """Compile ahead the first points of every other tunable kernel's next turn: its
        defaults and listed settings while untried, else the neighbours of its best points on
        the focus case (what _propose looks at first), OTHERS_AHEAD each (a quarter of the
        pool's depth on a small machine). The step's own kernels (`stepped`) keep their
        deeper queue (_refill, _propose). With only the kernel being proposed compiled ahead,
        the first step of another kernel's turn waits on NVRTC: on one H100 (sgemm
        square-4096, batch 4) the GPU sat idle 18.8 s of 61 s while the compile node waited,
        most of it at other kernels' turns (splitk_warptile, tf32x3_splitk, splitk)."""
        arch = ctx.facts.arch or None
        if arch is None or not self.ahead or self.kernel:
            return
        try:
            main = kernel_of(self.base(ctx)[0].name)
        except ProposalError:
            return
        if main not in ctx.workload.kernels:  # a model's kernel is the best: the tuner serves it alone
            return
        focus = _focus_case(ctx)
        for name, spec in ctx.workload.kernels.items():
            if name in stepped or name == main or name in self._exhausted or not spec.knobs():
                continue
            try:
                base, knobs = self.base(ctx, name)
            except ProposalError:
                continue
            prefix = _prefix(base)
            mine = self._mine(ctx, prefix)
            free = {n: k for n, k in knobs.items() if n not in base.defines}
            first = ([] if mine else [{n: k.default for n, k in free.items()}]) \
                + [point for point, _ in _listed(ctx.workload, base, free)]
            tried = {defines_key(a.defines) for a in mine} | _in_flight(ctx, prefix)
            # fewer on a small machine: the pool's few processes are the step's kernel's first
            self._compile_ahead(ctx, base, knobs, prefix, [], _scores(mine, focus), tried, arch, first=first,
                                depth=min(OTHERS_AHEAD, max(1, self.depth // 4)))

    def _propose_more(self, ctx: ProposalContext, n: int, taken: dict[str, int], kernel: Optional[str] = None,
                      focus: Optional[str] = None) -> list[Proposal]:
        base, knobs = self.base(ctx, kernel)
        prefix = _prefix(base)
        mine = self._mine(ctx, prefix)
        tried = {defines_key(a.defines) for a in mine} | _in_flight(ctx, prefix) | {defines_key(taken)}
        scores = _scores(mine, focus)
        free = {k: kn for k, kn in knobs.items() if k not in base.defines}
        rng = random.Random(f"{self.seed}:{ctx.iteration}:{prefix}:batch")
        arch = ctx.facts.arch or None
        allow_fast_math = ctx.workload.tolerance.allow_fast_math
        lists = []
        for point in sorted(scores, key=scores.get)[:TOP_K]:
            points = list(_neighbours({k: v for k, v in point if k in free}, free))
            rng.shuffle(points)
            lists.append(points)
        listed = _listed(ctx.workload, base, free)
        neighbours = [p for round_ in itertools.zip_longest(*lists) for p in round_ if p is not None]
        # A value only ever wrong (_propose says why): never in a step's extra members but for
        # the listed settings (measured, so never held back); the step's first proposal takes
        # such a point only once nothing else is left.
        doomed = _doomed(mine)
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
                if k in tried or not self._launchable_cached(ctx.workload, base, p, focus):
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
            why = _why(choice, scores, listed) + " (batch)" \
                + (f" (searched for case {focus})" if focus else "")
            spec = base.model_copy(update={"name": f"{prefix}{label}]", "defines": {**base.defines, **choice},
                                           "proposer": self.name, "rationale": why,
                                           "parent": _parent(choice, scores, mine, ctx), "focus": focus})
            out.append(Proposal(spec))
        return out

    def _other_turn(self, ctx: ProposalContext) -> Optional[tuple[str, str]]:
        """(kernel, focus case) when this proposal is another tunable kernel's turn.

        Counted from the session's history, not the iteration (a batch advances that by its
        size, and with four per step one kernel got every turn on the H200): another kernel
        gets a turn once the main one has had MAIN_TURNS per turn the others have had, or,
        once the main one has stalled (STALL attempts in a row without a new best), every
        turn that follows one of the main kernel's. Each
        other kernel first gets one for its defaults and one for each listed setting; after
        that the one fastest on the focus case so far gets two turns in three, and the least
        tried the third."""
        if self.kernel:
            return None
        try:
            main = kernel_of(self.base(ctx)[0].name)
        except ProposalError:
            return None
        if main not in ctx.workload.kernels:  # a model's kernel is the best: the tuner serves it alone (HybridProposer)
            return None
        others = [n for n, k in ctx.workload.kernels.items() if n != main and k.knobs() and n not in self._exhausted]
        mine = [a for a in ctx.history if a.proposer == self.name]
        # Turns are counted with the proposals still in flight: with a step proposed ahead, a
        # kernel whose first turn had not finished got a second before any other had one
        # (sgemm on the H200: tiled twice in 20 attempts, the split-K kernels never).
        turns = [kernel_of(a.name) for a in mine] + \
            [kernel_of(s.name) for s in ctx.in_flight if s.proposer == self.name]
        counts = {n: turns.count(n) for n in others}
        other_turns = sum(counts.values())
        if not others:
            return None
        # Untried: no turn yet, or fewer turns than its defaults and listed settings need. A
        # listed setting is measured, and for another kernel it comes only with a turn: on an
        # H100 tf32x3_splitk's SPLITK = 4 for 128x4096x4096 and l2pipe's settings
        # never came in 40 attempts, the kernels fastest on the focus case taking the turns.
        untried = [n for n in others if counts[n] < 1 + len(ctx.workload.kernels[n].configs)]
        # A kernel not tried yet (or with listed settings untried) waits only for the main
        # kernel's own MAIN_TURNS: the turns a former main kernel had (counted among the
        # others' now) must not hold it back.
        first_turn = bool(untried) and turns.count(main) >= MAIN_TURNS
        if self._stalled(ctx):
            if turns[-1] != main:  # stalled: the main kernel and the others alternate
                return None
        elif len(turns) - other_turns < MAIN_TURNS * (other_turns + 1) and not first_turn:
            return None
        focus = _focus_case(ctx)
        if not focus:
            return None
        if untried:
            # Every kernel's first turn, then the listed settings' turns; a kernel the workload
            # lists settings for first (measured starting points, e.g. split-K for the long-K
            # case), then the fewest turns, then the workload's order.
            return min(untried, key=lambda n: (n in self._no_first_turn, counts[n] > 0,
                                               not ctx.workload.kernels[n].configs, counts[n])), focus
        on_focus = {n: min((c.median_ms for a in mine if kernel_of(a.name) == n and a.status == "ok"
                            for c in a.cases if c.case == focus and c.median_ms), default=math.inf) for n in others}
        if other_turns % 3 == 2 or min(on_focus.values()) == math.inf:
            return min(others, key=lambda n: counts[n]), focus
        return min(others, key=lambda n: on_focus[n]), focus

    def _main_focus(self, ctx: ProposalContext) -> Optional[str]:
        """The case the kernel being improved is searched for on this turn, or None for the
        geomean. Once it has stalled on the geomean, every other one of its turns is scored
        on the focus case instead: knobs that pay on one shape only (a narrow tile for N = 32,
        split-K for a decode step) lose on the geomean and would never be reached, while the
        dispatch gives that case the variant that wins it."""
        if not self._stalled(ctx):
            return None
        main = kernel_of(self.base(ctx)[0].name)
        turns = sum(kernel_of(a.name) == main for a in ctx.history if a.proposer == self.name) + \
            sum(kernel_of(s.name) == main for s in ctx.in_flight if s.proposer == self.name)
        return _focus_case(ctx) if turns % 2 else None

    def _stalled(self, ctx: ProposalContext) -> bool:
        """The kernel being improved has had STALL attempts in a row without a new best."""
        try:
            main = kernel_of(self.base(ctx)[0].name)
        except ProposalError:
            return False
        runs = [a for a in ctx.history if a.proposer == self.name and kernel_of(a.name) == main]
        return len(runs) >= STALL and not any(a.new_best for a in runs[-STALL:])

    def _propose(self, ctx: ProposalContext, kernel: Optional[str] = None, focus: Optional[str] = None) -> Proposal:
        base, knobs = self.base(ctx, kernel)
        prefix = _prefix(base)
        mine = self._mine(ctx, prefix)
        tried = {defines_key(a.defines) for a in mine} | _in_flight(ctx, prefix)
        scores = _scores(mine, focus)
        rng = random.Random(f"{self.seed}:{ctx.iteration}:{prefix}")
        arch = ctx.facts.arch or None  # unknown: candidates are not compiled ahead
        allow_fast_math = ctx.workload.tolerance.allow_fast_math
        feasible = lambda d: (defines_key({**base.defines, **d}) not in tried
                              and self._launchable_cached(ctx.workload, base, d, focus)
                              and (arch is None or self.pool.may_compile(base, d, arch, allow_fast_math)))
        # Compiled ahead and accepted: taken before a neighbour that would have to be compiled
        # now, so the GPU does not wait on NVRTC (the neighbours' order is a shuffle anyway).
        ready = None if arch is None or not self.ahead else \
            (lambda d: defines_key({**base.defines, **d}) not in tried and self.pool.compiled_already(base, d, arch, allow_fast_math))
        prefetch = None if arch is None or not self.ahead else \
            (lambda points: [self.pool.submit(base, d, arch, allow_fast_math) for d in points[:self.ahead]
                             if defines_key({**base.defines, **d}) not in tried and self._launchable_cached(ctx.workload, base, d)])
        listed = _listed(ctx.workload, base, {n: k for n, k in knobs.items() if n not in base.defines})
        # Points with a knob value that was only ever wrong are taken last (tf32x3's FLUSH=0
        # accumulates in the tensor cores and fails by design at K >= 1024; in a 20-attempt
        # sgemm bench on the H200, 4 attempts were wrong in every screened launch).
        doomed = _doomed(mine)
        starts = [point for point, _ in listed]  # a listed setting is measured: never held back
        clean = lambda d: d in starts or not any((k, v) in doomed for k, v in d.items())
        choice = self._next(knobs, base.defines, scores, lambda d: clean(d) and feasible(d), rng,
                            ready and (lambda d: clean(d) and ready(d)), prefetch,
                            starts=starts) if doomed else None
        choice = choice or self._next(knobs, base.defines, scores, feasible, rng, ready, prefetch,
                                      starts=starts)
        if choice is None:
            size = _space_size({n: k for n, k in knobs.items() if n not in base.defines})
            if size > MAX_SPACE:  # sampled, not enumerated: another iteration samples afresh
                raise ProposalError(f"no untried configuration of {base.name}'s {len(knobs)} knobs found in "
                                    f"{SAMPLES} random samples of {size}")
            raise SearchExhausted(f"every configuration of {base.name}'s {len(knobs)} knobs has been tried or "
                                  f"cannot run here: {len(tried)} tried, {size - len(tried)} of {size} serve no "
                                  f"case{' ' + repr(focus) if focus else ''}, or NVRTC rejects them")
        label = ",".join(f"{k}={choice[k]}" for k in knobs if k in choice)
        if arch is not None and self.ahead:
            self._compile_ahead(ctx, base, knobs, prefix, [choice], scores, tried | {defines_key({**base.defines, **choice})}, arch)
        why = _why(choice, scores, listed) \
            + (f" (searched for case {focus})" if focus else "")
        spec = base.model_copy(update={"name": f"{prefix}{label}]", "defines": {**base.defines, **choice},
                                       "proposer": self.name, "rationale": why,
                                       "parent": _parent(choice, scores, mine, ctx), "focus": focus})
        return Proposal(spec)

    def _next(self, knobs, fixed, scores, feasible, rng, ready=None, prefetch=None,
              starts=()) -> Optional[dict[str, int]]:
        free = {n: k for n, k in knobs.items() if n not in fixed}
        defaults = {n: k.default for n, k in free.items()}
        if not scores and feasible(defaults):
            return defaults
        # The workload's listed settings for this kernel (`configs`, as points), untried ones
        # in order, before any neighbour: measured starting points for the shapes the defaults
        # do not serve (tf32x3_splitk's SPLITK = 32 suits long K, 4 suits M = 128).
        for point in starts:
            if feasible(point):
                return point
        # Best-first: the untried neighbours of the best point, then of the runner-up,
        # and so on; a random restart only when every scored point's neighbourhood is
        # used up. Greedy moves alone strand the search: on the H200 the sgemm tuner
        # left the defaults for a slightly better neighbour whose own neighbours were
        # all worse, and never came back for the defaults' other neighbour, the best
        # tile for 4096^3.
        #
        # The GPU should not wait on NVRTC: a neighbour of any of the TOP_K best points whose
        # compile has finished is taken before one of the best's that would have to compile
        # now (a tree that branches from the frontier, not a line from the best). On the H200
        # the propose node waited 662 ms per attempt on compiles of the best's neighbours
        # while compiled neighbours of the runner-up sat ready.
        points = sorted(scores, key=scores.get)
        ordered: list[list[dict[str, int]]] = []

        def neighbourhood(rank: int) -> list[dict[str, int]]:
            """The rank-th best point's neighbours, shuffled once, in rank order (the draws an
            eager loop over every point would make, without shuffling those never looked at)."""
            while len(ordered) <= rank:
                neighbours = list(_neighbours({k: v for k, v in points[len(ordered)] if k in free}, free))
                rng.shuffle(neighbours)
                ordered.append(neighbours)
            return ordered[rank]

        if ready:
            for rank in range(min(TOP_K, len(points))):
                found = next((n for n in neighbourhood(rank) if ready(n)), None)
                if found is not None:
                    return found
        for rank in range(len(points)):
            neighbours = neighbourhood(rank)
            if prefetch:  # compile the neighbours in parallel rather than one after another
                prefetch(neighbours)
            found = next((n for n in neighbours if feasible(n)), None)
            if found is not None:
                return found
        return self._random_point(free, feasible, rng)

    def _random_point(self, free, feasible, rng) -> Optional[dict[str, int]]:
        if _space_size(free) <= MAX_SPACE:
            points = [dict(zip(free, vals)) for vals in itertools.product(*(k.values for k in free.values()))]
            rng.shuffle(points)
            return next((p for p in points if feasible(p)), None)
        for _ in range(SAMPLES):
            p = {n: rng.choice(k.values) for n, k in free.items()}
            if feasible(p):
                return p
        return None

    def _compile_ahead(self, ctx: ProposalContext, base: CandidateSpec, knobs: dict[str, Knob], prefix: str,
                       choices: list[dict[str, int]], scores: dict, tried: set, arch: str,
                       first: Sequence[dict[str, int]] = (), depth: Optional[int] = None) -> None:
        """Start compiling the points the next proposals look at first: the neighbours of these
        choices (each may be the next best), of the attempts still in flight, and of the best
        scored points, each list in the order the next proposal's seeded shuffle puts it, taken
        in turn, up to `depth`: a queue deeper than the pool, so NVRTC never idles between
        steps (with a shallower one, on the H200, about 1.8 of 16 compile processes were busy on
        average, and the next step waited for the compiles the last one had only just started).
        `first`: points to queue before those (the first step's own candidates). `depth`: how
        many, `self.depth` by default."""
        free = {n: k for n, k in knobs.items() if n not in base.defines}
        seed = f"{self.seed}:{ctx.iteration + 1}:{prefix}"  # the next proposal's rng (see propose)
        in_flight = [{k: v for k, v in s.defines.items() if k in free} for s in ctx.in_flight
                     if s.proposer == self.name and s.name.startswith(prefix)]
        best = [{k: v for k, v in point if k in free} for point in sorted(scores, key=scores.get)[:TOP_K]]
        orders = []
        for origin in choices + in_flight + best:
            points = list(_neighbours(origin, free))
            random.Random(seed).shuffle(points)
            orders.append(points)
        wanted: dict[tuple, dict[str, int]] = {}
        for n in itertools.chain(first, (p for round_ in itertools.zip_longest(*orders) for p in round_ if p is not None)):
            if len(wanted) >= (depth or self.depth):
                break
            key = compile_key(base, n, arch)
            if key in wanted or self.pool.known(key) or defines_key({**base.defines, **n}) in tried \
                    or not self._launchable_cached(ctx.workload, base, n):
                continue  # (a known verdict, NVRTC's yes or no, takes no slot; one under way keeps its)
            wanted[key] = n
        # Last round's guesses for this kernel not started and not wanted now are dropped, so
        # the pool works on what the next proposals look at first instead of a queue that
        # grows each step (another kernel's guesses wait for that kernel's next turn).
        self.pool.drop_guesses(source_tag(base.source), set(wanted),
                               {defines_key({**base.defines, **d}) for d in choices + in_flight})
        for n in wanted.values():
            self.pool.submit(base, n, arch, ctx.workload.tolerance.allow_fast_math)

    def _launchable_cached(self, workload: Workload, base: CandidateSpec, defines: dict[str, int],
                           case: Optional[str] = None) -> bool:
        """Launchable (see _served), and where `case` is given, applicable to that case: on
        another kernel's turn for a focus case, a point that cannot serve it is skipped."""
        key = (workload.digest, source_tag(base.source), defines_key({**base.defines, **defines}))
        if key not in self._launchables:
            self._launchables[key] = self._served(workload, base, defines) if self._allowed(base, defines) else frozenset()
        served = self._launchables[key]
        return bool(served) and (case is None or case in served)
    def _allowed(self, base: CandidateSpec, defines: dict[str, int]) -> bool:
        """Not refused by one of the source's `#if ... #error` pairs (agent/spec/knob_space.py):
        such a point is skipped without a compile. One the reader cannot judge is allowed,
        and NVRTC decides as before."""
        tag = source_tag(base.source)
        try:
            if tag not in self._spaces:
                self._spaces[tag] = (KnobSpace.from_source(base.source, lenient=True),
                                     {k: kn.default for k, kn in parse_knobs(base.source).items()})
            space, defaults = self._spaces[tag]
            return space.allows({**defaults, **base.defines, **defines})
        except Exception:  # noqa: BLE001 - a model's source this reader cannot judge: NVRTC decides
            return True

    @staticmethod
    def _served(workload: Workload, base: CandidateSpec, defines: dict[str, int]) -> frozenset[str]:
        """The cases a configuration serves (agent/spec/applicability.py: every launch at least a
        warp, within CUDA's limits, its workspace in range), or none at all where it would not
        be judged: it must serve a correctness case and a performance case."""
        try:
            cand = base.model_copy(update={"defines": {**base.defines, **defines}}).to_candidate()
        except (ExprError, ValueError):
            return frozenset()
        if malformed(workload, cand):
            return frozenset()
        served = [c for c in workload.cases if serves(workload, cand, c)]
        return frozenset() if coverage_gap(c.role for c in served) else frozenset(c.name for c in served)


def _doomed(mine: Sequence) -> set[tuple[str, int]]:
    """(knob, value) pairs every attempt with which was wrong (at least two of them), while
    some attempt without that value passed: a value that breaks the kernel, not bad luck."""
    wrong, passed = {}, []
    for a in mine:
        if a.status == "ok":
            passed.append(a.defines)
        for pair in a.defines.items():
            wrong.setdefault(pair, []).append(a.status == "wrong_answer")
    return {pair for pair, w in wrong.items()
            if len(w) >= 2 and all(w) and any(d.get(pair[0]) != pair[1] for d in passed)}


def _focus_case(ctx: ProposalContext) -> Optional[str]:
    """The performance case with the largest gap: each case's fastest validated median over
    every attempt (what the dispatch would give it), against the fastest library there where
    one was timed, else against the best's own geomean. A case at FLOOR_DONE of its
    speed-of-light floor or closer has no gap left to close and is never the focus (None when
    every case is there). Not the single best's medians: once another kernel wins a case, the
    next-worst case becomes the focus."""
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
    return max(open_cases, key=lambda case: medians[case] / ref[case])


def _space_size(free: dict[str, Knob]) -> int:
    """How many configurations the free knobs span: enumerated up to MAX_SPACE, sampled beyond."""
    return math.prod(len(k.values) for k in free.values())


def _in_flight(ctx: ProposalContext, prefix: str) -> set[tuple]:
    """The configurations proposed already whose attempts have not finished (tried, for choosing)."""
    return {defines_key(s.defines) for s in ctx.in_flight if s.proposer == "tune" and s.name.startswith(prefix)}


def _neighbours(point: dict[str, int], knobs: dict[str, Knob]):
    for name, knob in knobs.items():
        values = list(knob.values)
        i = values.index(point[name]) if point.get(name) in values else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                yield {**point, name: values[j]}


def _parent(choice: dict[str, int], scores: dict, mine: list, ctx: ProposalContext) -> Optional[int]:
    """The attempt this choice is a neighbour of (the best-ranked one, as _why names it);
    for the first point of a kernel, the best (its knobs' starting point); None for a restart."""
    if not scores:
        return ctx.best.iteration if ctx.best else None
    at = {defines_key(a.defines): a.iteration for a in mine}
    for point in sorted(scores, key=scores.get):
        origin = dict(point)
        if sum(origin.get(k) != v for k, v in choice.items()) == 1:
            return at.get(point)
    return None


def _scores(mine: list, focus: Optional[str]) -> dict:
    """Each scored point's score; on a turn for the focus case, its median there (a point
    that serves the focus case but not every performance case, so has no score, counts)."""
    if not focus:
        return {defines_key(a.defines): a.score_ms for a in mine if a.score_ms}
    return {defines_key(a.defines): m for a in mine if a.status == "ok"
            for m in [next((c.median_ms for c in a.cases if c.case == focus), None)] if m}


def _listed(workload: Workload, base: CandidateSpec, free: dict[str, Knob]) -> list[tuple[dict[str, int], dict[str, int]]]:
    """The kernel's listed configs (its `[kernels.X] configs`), each as the point it makes of the
    free knobs (the knobs it leaves out at their defaults), beside the config as written."""
    kernel = workload.kernels.get(base.name)
    defaults = {k: kn.default for k, kn in free.items()}
    return [({**defaults, **{k: v for k, v in c.items() if k in free}}, c) for c in (kernel.configs if kernel else ())]


def _why(choice: dict[str, int], scores: dict, listed: Sequence[tuple[dict[str, int], dict[str, int]]] = ()) -> str:
    if not scores:
        return "the kernel's declared defaults, as a starting point"
    for point, config in listed:
        if choice == point:
            return "a setting the workload lists for this kernel: " + ",".join(f"{k}={v}" for k, v in config.items())
    for rank, point in enumerate(sorted(scores, key=scores.get), 1):
        origin = dict(point)
        moved = [f"{k} {origin.get(k)} -> {v}" for k, v in choice.items() if origin.get(k) != v]
        if len(moved) == 1:
            which = "the best so far" if rank == 1 else f"the #{rank} best so far"
            return f"neighbour of {which}: {moved[0]}"
    return "random restart"
