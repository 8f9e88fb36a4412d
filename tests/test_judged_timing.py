"""The timed launches' checks with a judge process (agent/worker/judged_timing.py), on the CPU:
a double stands in for the judge's end of the pipe (the GPU side: tests/test_gpu_judge.py)."""

from __future__ import annotations

from types import SimpleNamespace

from warpsmith.agent.worker.judged_timing import JudgedTimedChecks, output_key
from warpsmith.agent.worker.status import Status


class JudgeDouble:
    """Stands in for JudgeClient: records what the worker asks, answers with scripted counts."""

    def __init__(self, counts):
        self.counts, self.calls = counts, []

    def start_run(self, keys, launches, timeout_s=60.0):
        self.calls.append(("start", keys, launches))

    def enqueue_checks(self, launch, timeout_s):
        self.calls.append(("enqueue", launch))

    def read_run(self, timeout_s):
        self.calls.append(("read",))
        return self.counts


def _timed(counts, outputs=("C",), launches=4):
    order: list[str] = []
    checks = SimpleNamespace(local_scrub=lambda local_bytes: None, scrub=lambda local_bytes: order.append("scrub"),
                             clear_scratch=lambda: order.append("scratch"))
    bufs = SimpleNamespace(job=SimpleNamespace(case="square", reference="ref.npz"),
                           outputs=lambda: [SimpleNamespace(job=SimpleNamespace(name=n)) for n in outputs],
                           poison=lambda poisons: order.append("poison"))
    judge = JudgeDouble(counts)
    return JudgedTimedChecks(checks, bufs, 7, None, launches, judge), judge, order, bufs


def test_each_launch_is_poisoned_scrubbed_and_then_checked_by_the_judge():
    timed, judge, order, bufs = _timed(((0,), (0,), (0,), (0,)))
    assert judge.calls == [("start", (output_key(bufs, 7, "C"),), 4)]
    timed.before(-1)  # a warm-up launch: poisoned and scrubbed, not checked
    for i in range(3):
        timed.before(i)
        timed.after(i)
    assert order == ["poison", "scrub", "scratch"] * 4
    assert judge.calls[1:] == [("enqueue", 0), ("enqueue", 1), ("enqueue", 2)]
    assert timed.verdict(3) is None
    assert judge.calls[-1] == ("read",)


def test_the_first_wrong_launch_is_the_verdict_counted_over_the_measured_launches_only():
    """The run had room for four launches; three were measured (the time cap): the fourth slot's count is never
    read, and the verdict names the first wrong launch and each output's count."""
    timed, _, _, _ = _timed(((0, 0), (0, 3), (2, 0), (9, 9)), outputs=("C", "D"))
    verdict = timed.verdict(3)
    assert verdict is not None and verdict.status == Status.UNSTABLE and verdict.mismatches == 3
    assert verdict.detail.startswith("2 of 3 timed launches gave wrong outputs, the first launch #2 (D: 3 mismatches)")
