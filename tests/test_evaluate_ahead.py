"""Evaluation ahead of the loop (agent/evaluate/ahead.py): a step's attempts run on the
GPU stand-in back to back while the graph reflects, logs and proposes. What is proven
here: the same attempts as without it; the overlap itself (by the order of events, never
by the clock); every candidate evaluated once, across a pause too; a job is taken by its
key, never for another candidate; the budget's end and "stop now" leave nothing running.
An EvaluatorDouble stands in for the GPU."""

from __future__ import annotations

import threading
import time

import pytest
from evaluator_double import EvaluatorDouble, Gate
from test_evaluator_protocol import FACTS, naive
from test_loop import open_session, workload  # noqa: F401  (the fixture)

from warpsmith.agent.evaluate import worker_channel
from warpsmith.agent.evaluate.ahead import AttemptScheduler
from warpsmith.agent.evaluate.attempt import AttemptJob
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
from warpsmith.agent.loop import events
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.worker.protocol import WorkerReady

WAIT_S = 120.0  # what a test waits for an event before it fails; never a race on a fast machine


class RecordingDouble(EvaluatorDouble):
    """The double, recording each attempt it runs (whether it came compiled, the candidate, the thread)."""

    def __init__(self, workload, **kwargs):
        super().__init__(workload, **kwargs)
        self.log: list[tuple[str, str, str]] = []
        self.began = threading.Condition()

    def run_attempt(self, job, on_event=lambda e: None):
        with self.began:
            self.log.append(("compiled" if job.compiled else "attempt", job.candidate.name,
                             threading.current_thread().name))
            self.began.notify_all()
        return super().run_attempt(job, on_event)


def attempts(double) -> list[str]:
    """The candidates the double ran attempts of, in order."""
    return [name for _, name, _ in double.log]


def _records(history):
    return [(a.iteration, a.name, a.status, a.score_ms, tuple(sorted(a.defines.items())), a.parent) for a in history]


class StepByStepTuner(TuneProposer):
    """The real tuner, asked for a step only once the last one's results are in, compiling nothing ahead (what
    it picks then depends on the history alone, not on which background compiles have finished)."""
    proposes_ahead = False

    def __init__(self, seed: int):
        super().__init__(seed, ahead=0)


def test_the_same_attempts_with_and_without_overlap(tmp_path, workload):  # noqa: F811
    """--batch 3, every candidate timed in full, steps proposed one after another: the session evaluated ahead
    makes exactly the attempts, statuses and scores of the one that evaluates each candidate as the graph
    reaches it (the evaluation ahead changes when the GPU works, not what it finds)."""
    runs = {}
    for overlap in (True, False):
        s = open_session(tmp_path / str(overlap), workload, 9, session_id=f"s-{overlap}", batch=3,
                         early_reject=False, overlap=overlap)
        s.proposer = StepByStepTuner(0)
        assert s.end(s.run()) == "finished"
        runs[overlap] = _records(s.state["history"])
        s.close()
    assert len(runs[True]) == 9 and runs[True] == runs[False]


def test_the_gpu_runs_the_next_candidate_while_the_graph_reflects(tmp_path, workload):  # noqa: F811
    """The order of events proves the overlap: attempt 1's reflect node waits until the second candidate of its
    step has begun its attempt on the GPU stand-in, from the evaluate-ahead thread, compiled before the GPU was
    taken. Without evaluation ahead that attempt only begins after reflect, and the test fails after WAIT_S
    instead of passing."""
    double = RecordingDouble(workload)
    s = open_session(tmp_path, workload, 6, evaluator=double, batch=3)
    step, names, seen_ahead = [], {}, []

    def on_event(e):
        if isinstance(e, events.Notice) and e.text.startswith("step of 3 candidates") and not step:
            step.append(int(e.text.split("attempts ")[1].split("-")[0]))  # the first step of three
        if isinstance(e, events.CandidateProposed):
            names[e.iteration] = e.name
        if isinstance(e, events.NodeStarted) and e.node == "reflect" and step and e.iteration == step[0]:
            with double.began:
                seen_ahead.append(double.began.wait_for(
                    lambda: any(k == "compiled" and n != names[step[0]] and t == "evaluate-ahead"
                                for k, n, t in double.log), WAIT_S))

    assert s.end(s.run(on_event)) == "finished"
    assert seen_ahead == [True]
    history = s.state["history"]
    assert attempts(double) == [a.name for a in history]  # each once, in order
    s.close()


def test_each_candidate_is_evaluated_once_across_a_pause(tmp_path, workload):  # noqa: F811
    """A pause after the first attempt of a step of three: the jobs not begun are dropped from the GPU's queue and
    stay in the checkpoint's; on resume the one that ran ahead (if any did) is used, not evaluated again. Each
    candidate: one attempt, whatever the GPU had begun when the pause came."""
    double = RecordingDouble(workload)
    s = open_session(tmp_path, workload, 6, evaluator=double, batch=3, early_reject=False)

    step = []

    def pause_after_one(e):
        if isinstance(e, events.Notice) and e.text.startswith("step of 3 candidates") and not step:
            step.append(int(e.text.split("attempts ")[1].split("-")[0]))
        if isinstance(e, events.AttemptFinished) and step and e.iteration == step[0]:
            s.control.request("pause")
    assert s.run(pause_after_one) == "paused"
    assert s.state["iteration"] == step[0] and len(s.state["queued"]) == 2
    assert s.end(s.run()) == "finished"
    history = s.state["history"]
    assert len(history) == 6
    assert sorted(attempts(double)) == sorted(a.name for a in history)
    s.close()


def test_the_budget_end_leaves_no_candidate_evaluated_past_it(tmp_path, workload):  # noqa: F811
    """Budget 4 in steps of 3: the second step has room for one attempt, and only that one goes to the GPU."""
    double = RecordingDouble(workload)
    s = open_session(tmp_path, workload, 4, evaluator=double, batch=3, early_reject=False)
    assert s.end(s.run()) == "finished"
    names = {a.name for a in s.state["history"]}
    assert len(names) == 4
    assert set(attempts(double)) == names and len(attempts(double)) == 4
    s.close()


def test_stop_now_kills_the_attempt_in_flight_and_drops_the_rest(tmp_path, workload):  # noqa: F811
    """"Stop now" while the first candidate of a step of three runs ahead: its GPU work is aborted, its siblings
    never begin, and the checkpoint stays where the step began; the session then goes on to its budget."""
    gate = Gate(free=3)  # the start kernel and attempt 1 (a step of one) pass; attempt 2's validation is held
    double = RecordingDouble(workload, gate=gate)
    s = open_session(tmp_path, workload, 6, evaluator=double, batch=3, early_reject=False)

    def stop():
        gate.held.wait(WAIT_S)
        s.stop_now()
    threading.Thread(target=stop, daemon=True).start()
    try:  # the abort raised where the graph took the attempt, or the step boundary came first
        ended = s.run()
    except EvaluationAborted:
        ended = "stopped"
    assert ended == "stopped"
    begun = attempts(double)
    assert len(begun) == 2 and double.log[-1][1] == begun[1]  # nothing started after the abort
    assert s.state["iteration"] in (0, 1)  # where the step began: before attempt 2, or before 1 if its reflect was cut
    gate.release()
    s.control.clear()  # as a resume starts afresh
    assert s.run() == "finished"  # the aborted attempt is evaluated afresh, not its abort raised again
    assert len(s.state["history"]) == 6
    s.close()


def test_a_failure_ahead_is_raised_where_the_graph_takes_the_result(workload):  # noqa: F811
    """A backend error in the ahead thread (here an abort) reaches the caller that takes the job's result, not a log."""
    gate = Gate(free=0)
    double = EvaluatorDouble(workload, gate=gate)
    ahead = AttemptScheduler(double)
    from warpsmith.agent.spec.candidate import Candidate
    job = AttemptJob(Candidate.from_spec(workload.start_kernel), key=1)
    ahead.submit([job])
    assert gate.held.wait(WAIT_S)
    ahead.abort()
    with pytest.raises(EvaluationAborted):
        ahead.run_attempt(job)
    ahead.close()


def test_a_job_is_taken_by_its_key_and_never_for_another_candidate(workload):  # noqa: F811
    """Attempt 1 asked for with another candidate than the job filed under key 1 (its step proposed again): the
    job run ahead is stale, and the attempt asked for runs afresh; the key's job is gone after it."""
    from warpsmith.agent.spec.candidate import Candidate
    double = RecordingDouble(workload)
    ahead = AttemptScheduler(double)
    tiled = workload.kernels["tiled"]
    first, second = (Candidate.from_spec(tiled, {"BM": bm}) for bm in (64, 128))
    ahead.submit([AttemptJob(first, key=1)])
    with double.began:
        assert double.began.wait_for(lambda: double.log, WAIT_S)
    r = ahead.run_attempt(AttemptJob(second, key=1))
    assert r.validated.candidate == second.name and r.timed.ok
    assert ahead.run_attempt(AttemptJob(first, key=1)).validated.candidate == first.name  # run again: nothing filed
    ahead.close()
    assert attempts(double) == [first.name, second.name, first.name]


def test_a_compiled_kernel_of_the_step_goes_before_one_still_compiling(workload):  # noqa: F811
    """The step's first candidate has no CUBIN yet, the second has one: the GPU takes the
    second while the first compiles, and the graph still gets both results in the step's
    order (by the calls' order, never the clock)."""
    import dataclasses

    from warpsmith.agent.spec.candidate import Candidate
    double = RecordingDouble(workload)
    ahead = AttemptScheduler(double)
    assert ahead.facts.arch  # what the plan reads first: the arch the cache is keyed on
    tiled = workload.kernels["tiled"]
    fresh = dataclasses.replace(Candidate.from_spec(tiled, {"BM": 64}), name="fresh",
                                source=Candidate.from_spec(tiled).source + "\n// not compiled yet\n")
    compiled = dataclasses.replace(Candidate.from_spec(tiled, {"BM": 128}), name="compiled")
    assert double.compile(compiled).ok
    jobs = [AttemptJob(fresh, key=1), AttemptJob(compiled, key=2)]
    ahead.submit(jobs)
    with double.began:  # the ahead thread's first pick (the graph asking first would run it itself)
        assert double.began.wait_for(lambda: double.log, WAIT_S)
    assert ahead.run_attempt(jobs[0]).timed.ok and ahead.run_attempt(jobs[1]).timed.ok
    ahead.close()
    assert attempts(double) == ["compiled", "fresh"]


def test_the_next_step_is_proposed_while_this_one_runs(tmp_path, workload):  # noqa: F811
    """Batch 4: the tuner's next step is proposed in the background once less than a step is left to run, and
    handed to the GPU behind it: a step of four is announced ahead; no configuration twice; the budget is met exactly; with
    overlap off, no step is proposed ahead."""
    double = RecordingDouble(workload)
    s = open_session(tmp_path, workload, 12, evaluator=double, batch=4, early_reject=False)
    threads = []

    class ThreadRecordingTuner(TuneProposer):  # the real tuner, noting where each step is proposed
        def propose_batch(self, ctx, n):
            threads.append(threading.current_thread().name)
            return super().propose_batch(ctx, n)
    s.proposer = ThreadRecordingTuner(0, ahead=0)
    seen = []
    assert s.end(s.run(seen.append)) == "finished"
    assert any(t.startswith("propose-ahead") for t in threads), threads  # off the graph's thread
    history = s.state["history"]
    ahead = [e.text for e in seen if isinstance(e, events.Notice) and "proposed ahead" in e.text]
    assert ahead and all(t.startswith("next step of ") for t in ahead)
    assert len(history) == 12 and len({tuple(sorted(a.defines.items())) for a in history}) == 12
    assert attempts(double) == [a.name for a in history]
    s.close()
    off = open_session(tmp_path / "off", workload, 12, session_id="off", batch=4, early_reject=False, overlap=False)
    seen = []
    assert off.end(off.run(seen.append)) == "finished"
    assert not [e for e in seen if isinstance(e, events.Notice) and "proposed ahead" in e.text]
    off.close()


class SlowStartingWorkerDouble:
    """Stands in for WorkerProcess (no GPU here): starting one takes a while (spawn, CUDA
    context, probe), long enough for a second thread to ask for a worker meanwhile."""

    started: list["SlowStartingWorkerDouble"] = []

    def __init__(self, ordinal=0, log_path=None, separate_judge=False):
        time.sleep(0.3)
        self.alive, self.closed = True, False
        self.ready = WorkerReady(FACTS, (13, 0), None)
        SlowStartingWorkerDouble.started.append(self)

    def kill(self):
        self.alive = False

    kill_process = kill

    def close(self):
        self.alive, self.closed = False, True


def test_a_dead_worker_is_restarted_once_when_the_graph_and_the_ahead_thread_both_need_it(workload, monkeypatch):
    """compile() runs outside the scheduler's lock (host work) but reads facts, so worker(): after a
    crash, the ahead thread's next job and the graph's own compile both find the worker
    dead. One worker must start, not two with one orphaned (a CUDA context and every case's
    buffers held until the session ends)."""
    monkeypatch.setattr(worker_channel, "WorkerProcess", SlowStartingWorkerDouble)
    ev = Evaluator(workload)
    dead = SlowStartingWorkerDouble()
    dead.alive = False
    ev._worker = dead
    SlowStartingWorkerDouble.started = []
    ahead = AttemptScheduler(ev)
    go = threading.Barrier(2)

    def ahead_thread():
        go.wait()
        with ahead._calls:
            ev.worker()

    def graph_thread():
        go.wait()
        ahead.compile(naive(workload))

    threads = [threading.Thread(target=ahead_thread), threading.Thread(target=graph_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ev.close()
    assert len(SlowStartingWorkerDouble.started) == 1
    assert all(w.closed or not w.alive for w in SlowStartingWorkerDouble.started)
