"""A variant per shape: the result of a session as a dispatch.

One kernel with one set of knobs rarely wins every shape (a 4096^3 GEMM wants big
tiles, 256 x 256 x 131072 wants split-K), and some kernels cannot serve every shape at
all (agent/spec/applicability.py). The loop keeps, for each performance case, the
fastest attempt that passed (``CaseWinner``). At the end of a session the dispatch is
built from them and judged honestly against the best single variant:

- every variant is evaluated again by the same evaluator, all of them interleaved
  for ``ROUNDS`` rounds, each evaluation validating every case it applies to
  (correctness cases included) before and after timing; a variant that fails is
  dropped and its cases go to the best single variant (or, where no single variant
  serves every case, to the fastest surviving variant that serves them);
- every variant other than the best must also pass on fresh inputs (FRESH_SEED),
  as a new best must;
- each case's time is the median over the rounds of its variant's median; the
  dispatch's score is their geometric mean, beside the best single variant's score
  from the same rounds. It ``pays`` only below CONFIRM x that score (the noise rule
  of warpsmith.agent.evaluate.selection), or where no single variant serves every case.

Shapes not in the workload: agent/evaluate/shape_rule.py, from every variant's
re-timed medians on the cases around the shape, among the variants that can serve it.
"""

from __future__ import annotations

import statistics
from typing import Optional

from pydantic import BaseModel, ConfigDict

from ..spec.applicability import case_problem
from ..spec.timing_policy import CONFIRM
from ..spec.workload_model import Case, Workload
from .attempt import EventSink, ignore
from .backend import EvaluationBackend
from .evaluator import FRESH_SEED
from .records import CandidateSpec
from .shape_rule import NEAREST, REGIME_OCTAVES, SMALL, UNMEASURED, rank_variants, shape_distance
from .stats import geomean

ROUNDS = 2
RULE = (f"among the variants whose launch is valid for the shape, the one with the lowest measured time "
        f"relative to the fastest on the {NEAREST} nearest performance cases (distance d: log2 of the sizes, "
        f"plus {REGIME_OCTAVES:g} octaves for each size on the other side of {SMALL} or of 0; weighted by 2^-d; "
        f"not timed there: {UNMEASURED:g}x the fastest)")


class CaseWinner(BaseModel):
    """The fastest attempt that passed on one performance case, so far."""

    model_config = ConfigDict(frozen=True)  # a record: the checkpoint stores it once (agent/loop/checkpoint_serde.py)

    iteration: int
    median_ms: float
    spec: CandidateSpec


class DispatchEntry(BaseModel):
    case: str
    sizes: dict[str, int]
    variant: int  # index into Dispatch.variants
    median_ms: float  # re-timed


class Dispatch(BaseModel):
    variants: list[CandidateSpec]  # variants[0] is the best single variant, where there is one
    entries: list[DispatchEntry]
    score_ms: float
    single_score_ms: Optional[float]  # the best single variant, re-timed in the same rounds; None: there is none
    rule: str = RULE
    dropped: list[str] = []  # variants that failed on re-evaluation, with the reason
    # per variant, per entry: its re-timed median there (None: it does not serve that case);
    # empty in dispatches stored before the shape rule read it
    times: list[list[Optional[float]]] = []

    @property
    def pays(self) -> bool:
        return self.single_score_ms is None or self.score_ms < CONFIRM * self.single_score_ms

    def ranked(self, sizes: dict[str, int]) -> list[int]:
        """Variant indices, the shape rule's choice first (agent/evaluate/shape_rule.py)."""
        if self.times:
            return rank_variants(sizes, [e.sizes for e in self.entries], self.times)
        nearest = min(self.entries, key=lambda e: shape_distance(sizes, e.sizes)).variant
        return [nearest] + [i for i in range(len(self.variants)) if i != nearest]

    def variant_for(self, sizes: dict[str, int], workload: Optional[Workload] = None) -> CandidateSpec:
        """The variant for any shape by the stated rule; given the workload, the first one
        that can serve the shape (ValueError, naming why, when none can)."""
        order = self.ranked(sizes)
        if workload is None:
            return self.variants[order[0]]
        shape = Case("shape", "performance", dict(sizes))
        problems = []
        for i in order:
            problem = case_problem(workload, self.variants[i].to_candidate(), shape)
            if problem is None:
                return self.variants[i]
            problems.append(f"{self.variants[i].name}: {problem}")
        raise ValueError(f"no variant of the dispatch serves {sizes}: " + "; ".join(problems))

    def lines(self) -> list[str]:
        """What the report shows: one line per case, then the verdict."""
        out = [f"- {e.case}: {self.variants[e.variant].name} {e.median_ms:.4f} ms" for e in self.entries]
        if self.single_score_ms is None:
            out.append(f"dispatch {self.score_ms:.4f} ms; no single variant serves every case; other shapes: {self.rule}")
        else:
            verdict = "pays" if self.pays else "does not pay (within noise or slower)"
            out.append(f"dispatch {self.score_ms:.4f} ms vs best single variant {self.single_score_ms:.4f} ms "
                       f"({self.single_score_ms / self.score_ms:.3f}x): {verdict}; other shapes: {self.rule}")
        return out + [f"dropped {d}" for d in self.dropped]


def update_winners(winners: dict[str, CaseWinner], iteration: int, spec: CandidateSpec,
                   medians: dict[str, float]) -> dict[str, CaseWinner]:
    """`winners` with this passing attempt's per-case medians taken where they are faster."""
    out = dict(winners)
    for case, ms in medians.items():
        if case not in out or ms < out[case].median_ms:
            out[case] = CaseWinner(iteration=iteration, median_ms=ms, spec=spec)
    return out


def _key(spec: CandidateSpec) -> str:
    """What makes two variants the same: code, knobs and how it runs, not the name."""
    return spec.model_dump_json(include={"source", "entry", "grid", "block", "shared", "options", "defines", "program"})


def build_dispatch(evaluator: EvaluationBackend, workload: Workload, winners: dict[str, CaseWinner],
                   best: Optional[CandidateSpec], on_event: EventSink = ignore) -> Optional[Dispatch]:
    """The dispatch of `winners`, judged against `best` (None: no single variant serves every
    performance case); None when every case's winner is `best`, or when some case is left
    with no variant that passed. The evaluations stream their progress to `on_event`."""
    variants = [best] if best is not None else []
    for w in winners.values():
        if _key(w.spec) not in {_key(v) for v in variants}:
            variants.append(w.spec)
    if len(variants) < 2 and best is not None:
        return None
    perf = [c for c in workload.cases if c.timed]
    times: list[dict[str, list[float]]] = [{c.name: [] for c in perf} for _ in variants]
    dropped: dict[int, str] = {}
    for _ in range(ROUNDS):
        for i, v in enumerate(variants):
            if i in dropped:
                continue
            r = evaluator.evaluate(v.to_candidate(), on_event=on_event)
            if not r.ok:
                if i == 0 and best is not None:
                    return None  # the best itself failed again: no honest comparison this session
                dropped[i] = f"{v.name}: {r.status} on re-evaluation"
                continue
            for result in r.cases:
                if result.timing is not None and result.case in times[i]:
                    times[i][result.case].append(result.timing.median_ms)
    for i, v in enumerate(variants):
        if i not in dropped and not (i == 0 and best is not None):
            fresh = evaluator.evaluate(v.to_candidate(), seed=FRESH_SEED, time_cases=False, revalidate=False,
                                       on_event=on_event)
            if not fresh.ok:
                dropped[i] = f"{v.name}: {fresh.status} on fresh inputs (seed {FRESH_SEED})"
    medians = [{c: statistics.median(t) for c, t in per.items() if t and i not in dropped}
               for i, per in enumerate(times)]
    keys = [_key(v) for v in variants]
    entries = []
    for c in perf:
        winner = winners.get(c.name)
        won = keys.index(_key(winner.spec)) if winner is not None else None
        if won is not None and c.name in medians[won]:
            i = won
        else:  # its winner dropped: the best, else the fastest left
            serving = [j for j in range(len(variants)) if c.name in medians[j]]
            if not serving:
                return None
            i = 0 if 0 in serving and best is not None else min(serving, key=lambda j: medians[j][c.name])
        entries.append(DispatchEntry(case=c.name, sizes=dict(c.sizes), variant=i, median_ms=medians[i][c.name]))
    single = geomean([medians[0][c.name] for c in perf]) if best is not None else None
    return Dispatch(variants=variants, entries=entries, score_ms=geomean([e.median_ms for e in entries]),
                    single_score_ms=single, dropped=sorted(dropped.values()),
                    times=[[m.get(e.case) for e in entries] for m in medians])
