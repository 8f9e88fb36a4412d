"""The evaluator's side of the worker protocol, on the CPU.

This machine has no GPU, so a scripted double stands in for the worker process
and replays what a real worker sends; compilation is real NVRTC. The real worker
is exercised by tests/test_gpu_evaluation.py on a GPU.
"""

from __future__ import annotations

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.attempt import AttemptJob
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.expr import Expr
from warpsmith.agent.spec.launch import LaunchRule
from warpsmith.agent.spec.speed_of_light import Ceilings
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.process import GpuUnavailable, WorkerProcess, WorkerTimeout
from warpsmith.agent.worker.protocol import (
    CaseCheck,
    CaseChecked,
    CaseTimed,
    EvaluateKernel,
    Fault,
    JobDone,
    Started,
    Step,
    WorkerReady,
)

FACTS = DeviceFacts(name="scripted double", arch="sm_90", max_threads_per_block=1024,
                    smem_per_block_optin=232448, sm_count=132, l2_bytes=60 << 20)
OK = CaseCheck("ok", 1e-7, 2e-7)
WRONG = CaseCheck("wrong_answer", 1.0, 1.0, 5, "output C: 5 wrong\npattern: only rows >= 64 wrong")


class ScriptedWorkerDouble:
    """Test double for WorkerProcess: replays scripted replies (or raises scripted errors)."""

    def __init__(self, script, ceilings=None):
        self.script, self.sent, self.alive, self.waits = list(script), [], True, []
        self.ready = WorkerReady(FACTS, (13, 0), ceilings)

    def send(self, message):
        self.sent.append(message)

    def recv(self, timeout_s):
        self.waits.append(timeout_s)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def kill(self):
        self.alive = False

    def close(self):
        self.alive = False


class DoubleEvaluator(Evaluator):
    """An Evaluator whose worker processes are scripted doubles, one script per start."""

    def __init__(self, workload, *scripts, ceilings=None):
        super().__init__(workload)
        self.scripts, self.doubles, self.double_ceilings = list(scripts), [], ceilings

    def worker(self):
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self.restarts += 1
            self._worker = ScriptedWorkerDouble(self.scripts.pop(0) if self.scripts else [], self.double_ceilings)
            self.doubles.append(self._worker)
        return self._worker


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def naive(workload):
    return Candidate.from_spec(workload.kernels["naive"])


def full_run(validate=(OK, OK), samples=(1.0, 1.1, 0.9), recheck=(OK, OK), timed=None, sweep=()):
    """What a real worker sends for the two-case workload, announcements included."""
    return ([Started("odd-97x83x61", "validate"), CaseChecked("odd-97x83x61", "validate", validate[0], 1.0),
             Started("square-256", "validate"), CaseChecked("square-256", "validate", validate[1], 1.0),
             Started("square-256", "time"), CaseTimed("square-256", samples, 1.0, 5.0)]
            + ([CaseChecked("square-256", "time", timed, 5.0)] if timed else [])
            + [Started("odd-97x83x61", "revalidate"), CaseChecked("odd-97x83x61", "revalidate", recheck[0], 1.0),
               Started("square-256", "revalidate"), CaseChecked("square-256", "revalidate", recheck[1], 1.0)]
            + list(sweep) + [JobDone()])


def test_ok_run_scores_the_median(workload):
    """All checks ok plus samples give status ok and score = the performance median."""
    ev = DoubleEvaluator(workload, full_run())
    r = ev.evaluate(naive(workload))
    assert r.status == "ok" and r.score_ms == pytest.approx(1.0)
    req = ev.doubles[0].sent[0]
    assert isinstance(req, EvaluateKernel) and req.symbol == "sgemm_naive"
    assert [j.launch.grid for j in req.jobs] == [(6, 7, 1), (16, 16, 1)]
    assert req.jobs[0].rtol["C"] < 1e-5 and [a.kind for a in req.jobs[0].args][3:] == ["i32"] * 3


def test_fatal_fault_marks_crashed_and_restarts(workload):
    """A fatal CUDA error is 'crashed' with its name; the next evaluation gets a new worker."""
    ev = DoubleEvaluator(workload,
                         [Fault("odd-97x83x61", "validate", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", True)],
                         full_run())
    r = ev.evaluate(naive(workload))
    assert r.status == "crashed" and "CUDA_ERROR_ILLEGAL_ADDRESS" in r.detail
    assert not ev.doubles[0].alive
    assert ev.evaluate(naive(workload)).status == "ok"
    assert ev.restarts == 1


def test_the_gpus_facts_are_read_once_and_outlive_a_restart(workload):
    """The facts come from the first worker's hello; reading them again (per case, per
    candidate) asks no worker, and a restarted worker (same GPU) does not change them."""
    ev = DoubleEvaluator(workload,
                         [Fault("odd-97x83x61", "validate", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", True)],
                         full_run())
    facts = ev.facts
    asked = []
    real_worker = ev.worker
    ev.worker = lambda: asked.append(1) or real_worker()
    assert ev.facts is facts and not asked
    assert ev.evaluate(naive(workload)).status == "crashed"
    assert ev.evaluate(naive(workload)).status == "ok" and ev.restarts == 1
    assert ev.facts is facts


def test_hang_is_timeout(workload):
    """No answer before the deadline is 'timeout' and the worker is killed."""
    ev = DoubleEvaluator(workload, full_run()[:3] + [WorkerTimeout("no answer within 10 s")])
    r = ev.evaluate(naive(workload))
    assert r.status == "timeout" and "square-256" in r.detail and "killed" in r.detail
    assert not ev.doubles[0].alive


def test_announced_launch_gets_the_kernel_timeout_not_the_setup_allowance(workload):
    """Setup waits get the setup allowance; once the worker announces a launch, only the kernel's timeout."""
    ev = DoubleEvaluator(workload, [Started("odd-97x83x61", "validate"), WorkerTimeout("no answer")])
    r = ev.evaluate(naive(workload))
    assert ev.doubles[0].waits == [120.0, ev.deadlines.kernel_timeout_s]
    assert r.status == "timeout" and "odd-97x83x61" in r.detail and "(validate)" in r.detail


def test_wrong_timed_launch_is_unstable(workload):
    """A timed launch whose outputs fail their check makes the candidate unstable, with no score."""
    lazy = CaseCheck("unstable", mismatches=9, detail="99 of 100 timed launches gave wrong outputs")
    r = DoubleEvaluator(workload, full_run(timed=lazy)).evaluate(naive(workload))
    assert r.status == "unstable" and r.score_ms is None and "timed launches" in r.detail


def test_sweep_finding_a_changed_reference_fails_the_candidate(workload):
    """The worker's sweep after a candidate reports a changed reference: reference_modified."""
    sweep = [CaseChecked("odd-97x83x61", "integrity", CaseCheck("reference_modified", detail="the reference of C"), 0.0)]
    r = DoubleEvaluator(workload, full_run(sweep=sweep)).evaluate(naive(workload))
    assert r.status == "reference_modified" and r.score_ms is None


def test_median_below_the_floor_fails_as_below_floor(workload):
    """With cold timing, a median under the speed-of-light floor is below_floor, not a score."""
    slow_gpu = Ceilings(bandwidth_gbs=0.001, fp32_tflops=1e-6, source="measured (test)")
    r = DoubleEvaluator(workload, full_run(), ceilings=slow_gpu).evaluate(naive(workload))
    assert r.status == "below_floor" and r.score_ms is None and "floor" in r.detail
    fast_gpu = Ceilings(bandwidth_gbs=4000.0, fp32_tflops=60.0, source="measured (test)")
    assert DoubleEvaluator(workload, full_run(), ceilings=fast_gpu).evaluate(naive(workload)).status == "ok"


def test_recoverable_fault_is_launch_invalid(workload):
    """CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES is launch_invalid and the worker lives on."""
    ev = DoubleEvaluator(workload, [Fault("odd-97x83x61", "validate", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                                          "too many resources requested", False), JobDone()])
    r = ev.evaluate(naive(workload))
    assert r.status == "launch_invalid" and ev.doubles[0].alive


def test_wrong_answer_skips_timing(workload):
    """A failed validation ends the request: no score, the mismatch report is the detail."""
    ev = DoubleEvaluator(workload, [Started("odd-97x83x61", "validate"),
                                    CaseChecked("odd-97x83x61", "validate", WRONG, 1.0),
                                    Started("square-256", "validate"),
                                    CaseChecked("square-256", "validate", OK, 1.0), JobDone()])
    r = ev.evaluate(naive(workload))
    assert r.status == "wrong_answer" and r.score_ms is None
    assert "only rows >= 64 wrong" in r.detail


def test_wrong_after_timing_is_unstable(workload):
    """Correct first, wrong on revalidation: 'unstable'."""
    ev = DoubleEvaluator(workload, full_run(recheck=(OK, WRONG)))
    r = ev.evaluate(naive(workload))
    assert r.status == "unstable" and "wrong after it" in r.detail


def test_compile_failure_never_reaches_the_worker(workload):
    """NVRTC errors come back verbatim and nothing is sent to the GPU."""
    bad = Candidate("extern \"C\" __global__ void sgemm_naive() { oops; }", "sgemm_naive",
                    workload.kernels["naive"].launch, name="bad")
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(bad)
    assert r.status == "compile_failed" and "bad.cu(1): error" in r.detail
    assert ev.doubles[0].sent == []


def test_impossible_launch_never_reaches_the_worker(workload):
    """A block over the device limit is launch_invalid before any GPU work."""
    rule = LaunchRule(workload.kernels["naive"].launch.grid, (Expr.parse(64), Expr.parse(32), Expr.parse(1)))
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(Candidate(workload.kernels["naive"].source(), "sgemm_naive", rule))
    assert r.status == "launch_invalid" and "2048 threads" in r.detail
    assert ev.doubles[0].sent == []


def test_real_worker_without_gpu_says_so():
    """The real worker process, started on a machine without a GPU, fails with one clear line."""
    try:
        WorkerProcess(0, start_timeout_s=60).close()
    except GpuUnavailable as e:
        assert "NO_DRIVER" in str(e) or "CUDA_ERROR_NO_DEVICE" in str(e)
        assert "\n" not in str(e)
    else:
        pytest.skip("a GPU is present")


def test_json_report_is_complete_and_has_no_cubin(workload):
    """`eval --json` output: per-case timings and checks, the score, GPU facts, no binary blobs."""
    import json

    from warpsmith.agent.tracking.report import to_json
    ev = DoubleEvaluator(workload, full_run())
    r = ev.evaluate(naive(workload))
    doc = json.loads(json.dumps(to_json(workload, r, None, FACTS), default=str))
    assert doc["candidate"]["status"] == "ok" and doc["candidate"]["score_ms"] == pytest.approx(1.0)
    case = doc["candidate"]["cases"][1]
    assert case["case"] == "square-256" and case["timing"]["n"] == 3 and case["check"]["status"] == "ok"
    assert "cubin" not in doc["candidate"]["compiled"] and doc["gpu"]["arch"] == "sm_90"


def test_kernel_with_device_state_is_refused_before_the_gpu(workload):
    """A kernel that keeps a launch counter in a __device__ global is compile_failed, nothing sent."""
    source = workload.kernels["naive"].source().replace(
        'extern "C"', '__device__ int ws_launches;\nextern "C"', 1).replace("{", "{ ws_launches++;", 1)
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(Candidate(source, "sgemm_naive", workload.kernels["naive"].launch, name="counter"))
    assert r.status == "compile_failed" and "ws_launches" in r.detail and "state between launches" in r.detail
    assert ev.doubles[0].sent == []


def _split(run):
    """full_run() as the two requests of an attempt: the validation, then time + revalidate."""
    cut = next(i for i, r in enumerate(run) if isinstance(r, Started) and r.phase == "time")
    return run[:cut] + [JobDone()], run[cut:]


def test_an_attempt_validates_once_then_times_on_the_same_worker(workload):
    """run_attempt(): the kernel compiled once, then two requests to one worker, the second without a validation
    step; the timed result keeps the first request's checks and gets the second's samples; the compile outcome,
    then every reply, streamed to the job's sink in order."""
    first, second = _split(full_run())
    ev = DoubleEvaluator(workload, first + second)
    compiles, real = [], ev.compile
    ev.compile = lambda c: compiles.append(c.name) or real(c)
    seen = []
    r = ev.run_attempt(AttemptJob(naive(workload)), seen.append)
    sent = ev.doubles[0].sent
    assert [req.steps for req in sent] == [(Step.VALIDATE,), (Step.TIME, Step.REVALIDATE)]
    assert r.validated.status == "ok" and r.validated.score_ms is None
    assert r.timed.status == "ok" and r.timed.score_ms == pytest.approx(1.0) and r.verdict is r.timed
    assert r.timed.case("odd-97x83x61").check == OK and r.timed.case("square-256").recheck == OK
    assert len(ev.doubles) == 1 and compiles == ["naive"]
    assert seen[0] is r.compiled and seen[1:] == first + second


def test_a_job_that_comes_compiled_is_not_compiled_again(workload):
    """A job carrying its compiled kernel (the scheduler's, the Ray driver's) is run with it: no second compile or audit."""
    first, second = _split(full_run())
    ev = DoubleEvaluator(workload, first + second)
    compiled = ev.compile(naive(workload))
    ev.compile = lambda c: pytest.fail("compiled again")
    r = ev.run_attempt(AttemptJob(naive(workload), compiled=compiled))
    assert r.timed.ok and r.compiled is compiled


def test_a_failed_validation_ends_the_attempt(workload):
    """A validation that failed is the attempt's verdict: nothing is timed."""
    ev = DoubleEvaluator(workload, [Started("odd-97x83x61", "validate"),
                                    CaseChecked("odd-97x83x61", "validate", WRONG, 1.0), JobDone()])
    r = ev.run_attempt(AttemptJob(naive(workload)))
    assert r.validated.status == "wrong_answer" and r.timed is None and r.verdict is r.validated
    assert len(ev.doubles[0].sent) == 1


def test_time_only_sends_one_timing_step_and_scores_the_performance_cases(workload):
    """The selection's re-timing (validate=False): one TIME step, no validation asked for,
    only the performance cases in the result, scored by their medians."""
    ev = DoubleEvaluator(workload, [Started("square-256", "time"), CaseTimed("square-256", (2.0, 2.2, 1.8), 1.0, 5.0),
                                    JobDone()])
    r = ev.evaluate(naive(workload), revalidate=False, validate=False)
    req = ev.doubles[0].sent[0]
    assert isinstance(req, EvaluateKernel) and req.steps == (Step.TIME,)
    assert r.status == "ok" and r.score_ms == pytest.approx(2.0) and [c.case for c in r.cases] == ["square-256"]
    with pytest.raises(ValueError, match="nothing to do"):
        ev.evaluate(naive(workload), validate=False, time_cases=False)


def test_time_only_still_fails_a_kernel_wrong_in_the_timing_loop(workload):
    """No validation step does not mean no checks: a timed launch's wrong outputs fail it."""
    ev = DoubleEvaluator(workload, [Started("square-256", "time"), CaseTimed("square-256", (2.0, 2.2, 1.8), 1.0, 5.0),
                                    CaseChecked("square-256", "time", WRONG, 5.0), JobDone()])
    r = ev.evaluate(naive(workload), revalidate=False, validate=False)
    assert r.status == "unstable" and r.score_ms is None


def _screen(samples, timed=None):
    """The first chunk of launches on the performance case, as a real worker sends it."""
    return ([Started("square-256", "time"), CaseTimed("square-256", samples, 1.0, 5.0)]
            + ([CaseChecked("square-256", "time", timed, 5.0)] if timed else []) + [JobDone()])


def test_told_the_best_a_clearly_slower_candidate_is_rejected_before_any_validation(workload):
    """An attempt told the best sends the screen first: one TIME step of SCREEN_LAUNCHES launches; clearly
    slower, it is rejected_early with the performance case alone in the result, and no validation is sent."""
    from warpsmith.agent.spec.timing_policy import SCREEN_LAUNCHES
    ev = DoubleEvaluator(workload, _screen((2.0,) * 10))
    attempt = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0))
    r = attempt.validated
    assert attempt.timed is None
    sent = ev.doubles[0].sent
    assert [req.steps for req in sent] == [(Step.TIME,)] and sent[0].timing.repetitions == SCREEN_LAUNCHES
    assert r.status == "rejected_early" and r.score_ms is None and "before validation" in r.detail
    assert [c.case for c in r.cases] == ["square-256"] and r.case("square-256").samples_ms == (2.0,) * 10
    # Its correctness cases never ran: the record must not read as "correct, only slow".
    assert "correctness cases were not run" in r.detail and "not known to be correct" in r.detail


def test_a_candidate_the_screen_keeps_is_validated_then_timed_without_a_second_screen(workload):
    """Near the best: validated on every case, then timed in full straight away."""
    first, second = _split(full_run())
    ev = DoubleEvaluator(workload, _screen((1.0,) * 10) + first + second)
    attempt = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0))
    assert attempt.validated.status == "ok"
    r = attempt.timed
    assert [req.steps for req in ev.doubles[0].sent] == [(Step.TIME,), (Step.VALIDATE,), (Step.TIME, Step.REVALIDATE)]
    assert r.status == "ok" and r.score_ms == pytest.approx(1.0) and r.case("odd-97x83x61").check == OK
    assert r.screen_ms == {"square-256": (1.0,) * 10}  # the screen that kept it, for the safety replay


def _time_then_revalidate(run):
    """The second half of _split(run) as two requests: the timing, then the revalidation."""
    _, second = _split(run)
    cut = next(i for i, r in enumerate(second) if isinstance(r, Started) and r.phase == "revalidate")
    return second[:cut] + [JobDone()], second[cut:]


@pytest.mark.parametrize("median, case_best, revalidated", [
    (0.9, 1.0, True),    # faster than the best: a contender
    (1.05, 1.0, False),  # slower than the best and than the case's fastest: could never be chosen
    (1.05, None, True),  # the case never won yet: a dispatch could take it there
])
def test_only_a_contender_is_revalidated_after_its_timing(workload, median, case_best, revalidated):
    """Given both bests, an attempt times first and revalidates only a candidate that could be chosen; another
    stays ok, its detail saying it was not revalidated."""
    first, _ = _split(full_run())
    timing, recheck = _time_then_revalidate(full_run(samples=(median,) * 3))
    ev = DoubleEvaluator(workload, _screen((1.0,) * 10) + first + timing + recheck)
    attempt = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0,
                                        case_best_ms={"square-256": case_best} if case_best else {}))
    assert attempt.validated.status == "ok"
    r = attempt.timed
    steps = [req.steps for req in ev.doubles[0].sent]
    assert steps == [(Step.TIME,), (Step.VALIDATE,), (Step.TIME,)] + ([(Step.REVALIDATE,)] if revalidated else [])
    assert r.status == "ok" and r.score_ms == pytest.approx(median)
    assert (r.case("square-256").recheck == OK) is revalidated and ("not revalidated" in r.detail) is not revalidated


def test_a_contender_wrong_on_revalidation_is_unstable(workload):
    """The revalidation, sent on its own, still turns a contender that is wrong after its timing into unstable."""
    first, _ = _split(full_run())
    timing, recheck = _time_then_revalidate(full_run(samples=(0.9,) * 3, recheck=(WRONG, OK)))
    ev = DoubleEvaluator(workload, _screen((1.0,) * 10) + first + timing + recheck)
    r = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0, case_best_ms={"square-256": 1.0})).verdict
    assert r.status == "unstable" and "wrong after it" in r.detail and r.score_ms is None


def test_a_wrong_timed_launch_in_the_screen_is_a_wrong_answer_not_a_rejection(workload):
    """The screen checks every timed launch: wrong outputs there are the attempt's verdict, even when slower."""
    ev = DoubleEvaluator(workload, _screen((2.0,) * 10, timed=WRONG))
    r = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0)).verdict
    assert r.status == "wrong_answer" and "5 wrong" in r.detail and r.score_ms is None
    assert len(ev.doubles[0].sent) == 1


def test_a_crash_in_the_screen_is_crashed(workload):
    """A kernel that faults in its first timed launches: crashed, the worker restarted for the next call."""
    fault = Fault("square-256", "time", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", fatal=True)
    ev = DoubleEvaluator(workload, [Started("square-256", "time"), fault])
    r = ev.run_attempt(AttemptJob(naive(workload), best_ms=1.0)).verdict
    assert r.status == "crashed" and "CUDA_ERROR_ILLEGAL_ADDRESS" in r.detail


def test_a_contender_is_faster_than_the_best_or_than_some_cases_fastest():
    """contender(): the geomean of the performance medians against the best score, each case's median against
    that case's fastest so far; a case without a timing (not all timed) counts as a contender."""
    from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult, Progress
    from warpsmith.agent.evaluate.stats import TimingStats
    from warpsmith.agent.evaluate.verdict import contender

    def timed(**medians):
        r = EvaluationResult("k", Progress.PENDING, None)
        r.cases = [CaseResult("small", "correctness")] + [
            CaseResult(case, "performance", timing=TimingStats.of((ms,)) if ms else None) for case, ms in medians.items()]
        return r
    best = {"a": 1.0, "b": 4.0}  # the best's geomean: 2.0
    assert not contender(timed(a=1.1, b=4.0), 2.0, best)
    assert contender(timed(a=0.9, b=8.0), 2.0, best)  # slower overall, the fastest on case a: a dispatch takes it
    assert contender(timed(a=1.0, b=3.9), 2.0, best)  # faster overall
    assert not contender(timed(a=1.0, b=4.0), 2.0, best)  # a tie is not a win (selection and winners agree)
    assert contender(timed(a=1.1, b=4.1), 2.0, {"a": 1.0})  # case b never won yet
    assert contender(timed(a=1.1, b=None), 2.0, best)  # b not timed: nothing to compare
