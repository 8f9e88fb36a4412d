"""A variant per shape: the result of a session as a dispatch.

One kernel with one set of knobs rarely wins every shape (a 4096^3 GEMM wants big
tiles, 256 x 256 x 131072 wants split-K). The loop keeps, for each performance case,
the fastest attempt that passed (``CaseWinner``). At the end of a session the
dispatch is built from them and judged honestly against the best single variant:

- every variant is evaluated again by the same evaluator, all of them interleaved
  for ``ROUNDS`` rounds, each evaluation validating every case (correctness cases
  included) before and after timing; a variant that fails is dropped and its cases
  go to the best single variant;
- every variant other than the best must also pass on fresh inputs (FRESH_SEED),
  as a new best must;
- each case's time is the median over the rounds of its variant's median; the
  dispatch's score is their geometric mean, beside the best single variant's score
  from the same rounds. It ``pays`` only below CONFIRM x that score (the noise rule
  of agent.evaluate.selection).

Shapes not in the workload go to the variant of the nearest performance case: the
smallest Euclidean distance between the log2 of the sizes. Every variant passed every
correctness case, so whatever the rule picks has been validated on all of them.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

from pydantic import BaseModel, ConfigDict

from ..spec.workload import Workload
from .backend import EvaluationBackend
from .evaluator import FRESH_SEED
from .records import CandidateSpec
from .selection import CONFIRM
from .stats import geomean

ROUNDS = 2
RULE = "nearest performance case by the Euclidean distance of log2(size), over every size"


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
    variants: list[CandidateSpec]  # variants[0] is the best single variant
    entries: list[DispatchEntry]
    score_ms: float
    single_score_ms: float  # the best single variant, re-timed in the same rounds
    rule: str = RULE
    dropped: list[str] = []  # variants that failed on re-evaluation, with the reason

    @property
    def pays(self) -> bool:
        return self.score_ms < CONFIRM * self.single_score_ms

    def variant_for(self, sizes: dict[str, int]) -> CandidateSpec:
        """The variant for any shape: the nearest performance case's (the stated rule)."""
        def distance(entry: DispatchEntry) -> float:
            names = set(sizes) | set(entry.sizes)
            return math.sqrt(sum((math.log2(max(1, sizes.get(n, 1))) - math.log2(max(1, entry.sizes.get(n, 1)))) ** 2
                                 for n in names))
        return self.variants[min(self.entries, key=distance).variant]

    def lines(self) -> list[str]:
        """What the report shows: one line per case, then the verdict."""
        out = [f"- {e.case}: {self.variants[e.variant].name} {e.median_ms:.4f} ms" for e in self.entries]
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
                   best: CandidateSpec) -> Optional[Dispatch]:
    """The dispatch of `winners`, judged against `best`; None when every case's winner is `best`."""
    variants = [best]
    for w in winners.values():
        if _key(w.spec) not in {_key(v) for v in variants}:
            variants.append(w.spec)
    if len(variants) < 2:
        return None
    perf = [c for c in workload.cases if c.timed]
    times: list[dict[str, list[float]]] = [{c.name: [] for c in perf} for _ in variants]
    dropped: dict[int, str] = {}
    for _ in range(ROUNDS):
        for i, v in enumerate(variants):
            if i in dropped:
                continue
            r = evaluator.evaluate(v.to_candidate())
            if not r.ok:
                if i == 0:
                    return None  # the best itself failed again: no honest comparison this session
                dropped[i] = f"{v.name}: {r.status} on re-evaluation"
                continue
            for result in r.cases:
                if result.timing is not None and result.case in times[i]:
                    times[i][result.case].append(result.timing.median_ms)
    for i, v in enumerate(variants[1:], 1):
        if i not in dropped:
            fresh = evaluator.evaluate(v.to_candidate(), seed=FRESH_SEED, time_cases=False, revalidate=False)
            if not fresh.ok:
                dropped[i] = f"{v.name}: {fresh.status} on fresh inputs (seed {FRESH_SEED})"
    keys = [_key(v) for v in variants]
    entries = []
    for c in perf:
        winner = winners.get(c.name)
        i = keys.index(_key(winner.spec)) if winner is not None else 0
        i = 0 if i in dropped else i
        entries.append(DispatchEntry(case=c.name, sizes=dict(c.sizes), variant=i,
                                     median_ms=statistics.median(times[i][c.name])))
    single = geomean([statistics.median(times[0][c.name]) for c in perf])
    return Dispatch(variants=variants, entries=entries, score_ms=geomean([e.median_ms for e in entries]),
                    single_score_ms=single, dropped=sorted(dropped.values()))
