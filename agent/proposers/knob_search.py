"""The tuner's search over one kernel's knobs: a seeded local search with restarts.

The first proposal is the kernel's defaults, then the settings the workload lists for it;
afterwards, from the best configuration measured so far, move one knob to a neighbouring
value (an untried one, chosen at random among them); when every neighbour is tried, restart
from a random untried point. Configurations that cannot launch or do not compile are
skipped by the caller's `feasible`, without spending the budget.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Callable, Iterator, Optional, Sequence

from ..evaluate.records import Attempt, CandidateSpec
from ..spec.kernel_source import Knob
from ..spec.workload_model import Workload
from .base import ProposalContext
from .compile_pool import DefinesKey, defines_key

TOP_K = 3  # a batch branches from the neighbourhoods of this many best points
MAX_SPACE = 20000  # enumerate smaller spaces; sample larger ones
SAMPLES = 2000  # random points drawn from a larger space before giving up for this iteration
Point = dict[str, int]  # one value per free knob
Scores = dict[DefinesKey, float]  # a scored configuration -> its score


def ranked(scores: Scores) -> list[DefinesKey]:
    """The scored configurations, the best (lowest score) first."""
    return sorted(scores, key=scores.__getitem__)


def next_point(knobs: dict[str, Knob], fixed: dict[str, int], scores: Scores, feasible: Callable[[Point], bool],
               rng: random.Random, ready: Optional[Callable[[Point], bool]] = None,
               prefetch: Optional[Callable[[list[Point]], object]] = None, starts: Sequence[Point] = (),
               written_for: Sequence[Point] = ()) -> Optional[Point]:
    """The next point to try of the knobs not `fixed`: the listed points `written_for` the
    case searched for, then the defaults, then the other listed `starts`, then the untried
    neighbours of the best scored points, else a random one; None when nothing `feasible`
    is left (or, in a large space, none was sampled)."""
    free = {n: k for n, k in knobs.items() if n not in fixed}
    defaults = {n: k.default for n, k in free.items()}
    # A setting written for the case's sizes (a narrow tile for N = 32) is a measured start
    # for it; the defaults, written for other shapes, can wait a turn.
    for point in written_for:
        if feasible(point):
            return point
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
    points = ranked(scores)
    ordered: list[list[dict[str, int]]] = []

    def neighbourhood(rank: int) -> list[dict[str, int]]:
        """The rank-th best point's neighbours, shuffled once, in rank order (the draws an
        eager loop over every point would make, without shuffling those never looked at)."""
        while len(ordered) <= rank:
            neighbours = list(neighbours_of({k: v for k, v in points[len(ordered)] if k in free}, free))
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
    return random_point(free, feasible, rng)


def random_point(free: dict[str, Knob], feasible: Callable[[Point], bool], rng: random.Random) -> Optional[Point]:
    """A random restart: an untried point of an enumerated space, or of SAMPLES drawn from a larger one."""
    if space_size(free) <= MAX_SPACE:
        points = [dict(zip(free, vals)) for vals in itertools.product(*(k.values for k in free.values()))]
        rng.shuffle(points)
        return next((p for p in points if feasible(p)), None)
    for _ in range(SAMPLES):
        p = {n: rng.choice(k.values) for n, k in free.items()}
        if feasible(p):
            return p
    return None


def doomed_values(mine: Sequence[Attempt]) -> set[tuple[str, int]]:
    """(knob, value) pairs every attempt with which was wrong (at least two of them), while
    some attempt without that value passed: a value that breaks the kernel, not bad luck."""
    wrong: dict[tuple[str, int], list[bool]] = {}
    passed: list[dict[str, int]] = []
    for a in mine:
        if a.status == "ok":
            passed.append(a.defines)
        for pair in a.defines.items():
            wrong.setdefault(pair, []).append(a.status == "wrong_answer")
    return {pair for pair, w in wrong.items()
            if len(w) >= 2 and all(w) and any(d.get(pair[0]) != pair[1] for d in passed)}


def space_size(free: dict[str, Knob]) -> int:
    """How many configurations the free knobs span: enumerated up to MAX_SPACE, sampled beyond."""
    return math.prod(len(k.values) for k in free.values())


def neighbours_of(point: Point, knobs: dict[str, Knob]) -> Iterator[Point]:
    """The points one knob away from `point`, each knob moved one value down, then one up."""
    for name, knob in knobs.items():
        values = list(knob.values)
        i = values.index(point[name]) if point.get(name) in values else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                yield {**point, name: values[j]}


def parent_of(choice: Point, scores: Scores, mine: Sequence[Attempt], ctx: ProposalContext) -> Optional[int]:
    """The attempt this choice is a neighbour of (the best-ranked one, as rationale_of names it);
    for the first point of a kernel, the best (its knobs' starting point); None for a restart."""
    if not scores:
        return ctx.best.iteration if ctx.best else None
    at = {defines_key(a.defines): a.iteration for a in mine}
    for point in ranked(scores):
        origin = dict(point)
        if sum(origin.get(k) != v for k, v in choice.items()) == 1:
            return at.get(point)
    return None


def point_scores(mine: Sequence[Attempt], focus: Optional[str]) -> Scores:
    """Each scored point's score; on a turn for the focus case, its median there (a point
    that serves the focus case but not every performance case, so has no score, counts)."""
    if not focus:
        return {defines_key(a.defines): a.score_ms for a in mine if a.score_ms}
    return {defines_key(a.defines): m for a in mine if a.status == "ok"
            for m in [next((c.median_ms for c in a.cases if c.case == focus), None)] if m}


def listed_points(workload: Workload, base: CandidateSpec, free: dict[str, Knob],
                  sizes: Optional[dict[str, int]] = None) -> list[tuple[Point, dict[str, int]]]:
    """The kernel's listed configs (its `[kernels.X] configs`) for a case of `sizes` (those
    written for it first, those written for other sizes left out; with no case, the
    unconditional ones), each as the point it makes of the free knobs (the knobs it leaves
    out at their defaults), beside the config as written."""
    kernel = workload.kernels.get(base.name)
    defaults = {k: kn.default for k, kn in free.items()}
    return [({**defaults, **{k: v for k, v in c.items() if k in free}}, c) for c in (kernel.listed_for(sizes) if kernel else ())]


def rationale_of(choice: Point, scores: Scores, listed: Sequence[tuple[Point, dict[str, int]]] = ()) -> str:
    """Why `choice` was proposed, in the words an attempt's rationale shows."""
    if not scores:
        return "the kernel's declared defaults, as a starting point"
    for point, config in listed:
        if choice == point:
            return "a setting the workload lists for this kernel: " + ",".join(f"{k}={v}" for k, v in config.items())
    for rank, key in enumerate(ranked(scores), 1):
        origin = dict(key)
        moved = [f"{k} {origin.get(k)} -> {v}" for k, v in choice.items() if origin.get(k) != v]
        if len(moved) == 1:
            which = "the best so far" if rank == 1 else f"the #{rank} best so far"
            return f"neighbour of {which}: {moved[0]}"
    return "random restart"
