"""A session's attempts/ folder: each attempt's kernel, candidate and record, and its timed
samples beside the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..evaluate.records import Attempt, AttemptSamples, CandidateSpec
from ..evaluate.results import EvaluationResult


def archive_attempt(folder: Path, attempt: Attempt, spec: CandidateSpec) -> None:
    """attempts/NNN/kernel.cu and candidate.json: what `warpsmith diff` compares."""
    d = folder / f"{attempt.iteration:03d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.cu").write_text(spec.source)
    (d / "candidate.json").write_text(spec.model_dump_json(indent=2))
    (d / "attempt.json").write_text(attempt.model_dump_json(indent=2))


def archive_samples(folder: Path, iteration: int, result: EvaluationResult, best_ms: Optional[float],
                    case_best_ms: Optional[dict[str, float]] = None) -> None:
    """attempts/NNN/samples.json: every timed sample per case (the first chunk's, when
    rejected early) and the best score and case winners it was timed against, so that the early-rejection
    rule can be replayed over recorded sessions (benchmarks/early_reject_safety.py).
    Kept beside the checkpoint, not in it: a hundred samples per case per attempt."""
    d = folder / f"{iteration:03d}"
    d.mkdir(parents=True, exist_ok=True)
    record = AttemptSamples(iteration=iteration, status=result.status, best_ms=best_ms, case_best_ms=case_best_ms,
                            cases={c.case: list(c.samples_ms) for c in result.cases if c.samples_ms},
                            screen={case: list(s) for case, s in result.screen_ms.items()})
    (d / "samples.json").write_text(record.model_dump_json())
