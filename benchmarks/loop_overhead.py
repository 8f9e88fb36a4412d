"""The loop's own cost per iteration, without the model and without GPU work
(a benchmark, not a test). Target: <= 100 ms per iteration.

Runs a real session (LangGraph graph, SQLite checkpointer, MLflow tracking,
tune proposer) whose evaluator answers at once with a fixed result, so what is
left is the graph, checkpointing, proposing and logging. From 100 iterations on it
also compares the first 40 iterations with the last 40 and gives the checkpoint
file's size: a loop whose cost grows with the history shows there.

    python3 benchmarks/loop_overhead.py [ITERATIONS]
    python3 benchmarks/loop_overhead.py 300      # the growth over a long session
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from warpsmith.agent.evaluate.attempt import AttemptResult  # noqa: E402
from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult  # noqa: E402
from warpsmith.agent.evaluate.stats import TimingStats  # noqa: E402
from warpsmith.agent.loop import events  # noqa: E402
from warpsmith.agent.loop.options import SearchOptions  # noqa: E402
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir  # noqa: E402
from warpsmith.agent.proposers.tune import TuneProposer  # noqa: E402
from warpsmith.agent.runtime.compiler import CompiledKernel  # noqa: E402
from warpsmith.agent.runtime.device_facts import DeviceFacts  # noqa: E402
from warpsmith.agent.spec.workload import load_workload  # noqa: E402
from warpsmith.agent.tracking.tracker import Tracker  # noqa: E402
from warpsmith.agent.worker.protocol import CaseCheck, TimingConfig  # noqa: E402
from warpsmith.agent.worker.status import Status  # noqa: E402


class InstantEvaluator:
    """Stands in for the GPU evaluator: answers at once, so only loop overhead is timed."""

    facts = DeviceFacts(name="instant", arch="sm_90")
    ceilings = None
    timing = TimingConfig()

    def __init__(self, workload):
        self.workload, self.seconds = workload, 0.0

    def compile(self, candidate):
        return CompiledKernel(True, "sm_90", candidate.entry, candidate.entry, "", "", 0.0, True)

    def evaluate(self, candidate, seed=1, revalidate=True, time_cases=True, validate=True, on_event=None):
        t0 = time.perf_counter()
        d = candidate.knob_values()
        score = 1.0 + sum(d.values()) / 1000  # distinct per configuration
        cases = [CaseResult(c.name, c.role, Status.OK, check=CaseCheck(Status.OK),
                            timing=TimingStats.of([score] * 10) if c.timed and time_cases else None)
                 for c in self.workload.cases]
        r = EvaluationResult(candidate.name, Status.OK, self.compile(candidate), cases,
                             score_ms=score if time_cases else None)
        self.seconds += time.perf_counter() - t0
        return r

    def run_attempt(self, job, on_event=None):
        return AttemptResult(self.evaluate(job.candidate, job.seed, time_cases=False),
                             self.evaluate(job.candidate, job.seed))

    def evaluate_many(self, candidates, seed=1):
        return [self.evaluate(c, seed) for c in candidates]

    def baseline_kinds(self):
        return []

    def baseline(self, seed=1, kind=None, on_event=None):
        return None

    def abort(self):
        pass

    def close(self):
        pass


def main() -> int:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    workload = load_workload(ROOT / "examples" / "sgemm")
    store = Path(tempfile.mkdtemp()) / "store"
    tracker = Tracker(store)
    info = SessionInfo("overhead", str(workload.directory), SearchOptions(budget=iterations))
    info.mlflow_run_id = tracker.start(workload.name, info.id, {"proposer": "tune"})
    ev = InstantEvaluator(workload)
    session = Session(info, session_dir(store, info.id), workload, ev, TuneProposer(0), tracker)
    stamps = []
    t0 = time.perf_counter()
    session.run(lambda e: stamps.append(time.perf_counter()) if isinstance(e, events.AttemptFinished) else None)
    total = time.perf_counter() - t0
    session.close()
    tracker.end("FINISHED")
    per = [b - a for a, b in zip(stamps, stamps[1:])]
    print(f"{iterations} iterations in {total:.2f} s (evaluator stand-in: {ev.seconds * 1e3:.0f} ms in all)")
    print(f"per iteration: median {statistics.median(per) * 1e3:.1f} ms, max {max(per) * 1e3:.1f} ms "
          f"(graph + checkpoint + tune proposer + MLflow logging; target 100 ms)")
    if len(per) >= 99:
        size = (session_dir(store, info.id) / "checkpoint.sqlite").stat().st_size
        print(f"growth: first 40 iterations median {statistics.median(per[:40]) * 1e3:.1f} ms, last 40 "
              f"{statistics.median(per[-40:]) * 1e3:.1f} ms; checkpoint file {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
