"""The Ray backend on a local Ray cluster with two stand-in GPUs: each GPU actor holds
an EvaluatorDouble (tests/evaluator_double.py) instead of a GPU worker. One cluster
for the module (Ray takes seconds to start); each test makes its own actors."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from pathlib import Path

import pytest
from evaluator_double import EvaluatorDouble, FileGate, double_factory
from mlflow.tracking import MlflowClient
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.attempt import AttemptJob
from warpsmith.agent.evaluate.results import Status
from warpsmith.agent.loop import events
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray(tmp_path_factory):
    """A local cluster: 2 CPUs, 2 GPUs that are only a resource count."""
    ray = pytest.importorskip("ray")
    from warpsmith.agent.evaluate.ray_cluster import init_ray
    # The tests' own modules (the double) for the actors; `warpsmith` is the one this process
    # imported, as for any session on Ray.
    env = {"PYTHONPATH": str(ROOT / "tests"),
           # the test session's cache (conftest's _private_cache), for the actors and compile tasks too
           "WARPSMITH_CACHE": str(tmp_path_factory.getbasetemp() / "cache")}
    init_ray(ray, num_cpus=2, num_gpus=2, runtime_env={"env_vars": env})
    yield ray
    ray.shutdown()


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def tiled(workload, **defines) -> Candidate:
    c = Candidate.from_spec(workload.kernels["tiled"], defines)
    return dataclasses.replace(c, name="tiled-" + "-".join(f"{k}{v}" for k, v in defines.items()))


def ray_backend(workload, gpus: int = 2, **double):
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.evaluate.ray_backend import RayBackend
    return RayBackend(workload, EvaluationOptions(backend="ray", ray_gpus=gpus), factory=double_factory(**double))


def open_session(tmp_path, workload, budget, evaluator, session_id="s1", batch=1):
    store = tmp_path / "store"
    info = SessionInfo(session_id, str(workload.directory), SearchOptions(ProposerChoice(seed=0), budget, batch=batch))
    tracker = Tracker(store)
    directory = session_dir(store, session_id)
    directory.mkdir(parents=True, exist_ok=True)
    info.mlflow_run_id = tracker.start(workload.name, session_id, {"proposer": "tune", "budget": budget})
    info.save(directory)
    # Compiling nothing ahead: the tuner's choices then depend on the history alone, not on which background
    # compiles finished first, so the Ray session and the local one can be compared attempt by attempt.
    return Session(info, directory, workload, evaluator, TuneProposer(0, ahead=0), tracker)


def run_session(tmp_path, workload, budget, evaluator, session_id="s1", on_event=lambda e: None, batch=1):
    s = open_session(tmp_path, workload, budget, evaluator, session_id, batch)
    try:
        status = s.end(s.run(on_event))
        return status, s.state, s
    finally:
        s.close()


def test_a_session_on_ray_finds_what_the_local_double_finds_and_records_the_gpu(ray, tmp_path, workload):
    """Same attempts, statuses, scores and best as on the local double; each attempt names its GPU, in MLflow too."""
    local_status, local, _ = run_session(tmp_path / "local", workload, 6, EvaluatorDouble(workload))
    status, on_ray, s = run_session(tmp_path / "ray", workload, 6, ray_backend(workload))
    assert status == local_status == "finished"
    assert [(a.name, a.status, a.score_ms) for a in on_ray["history"]] == \
        [(a.name, a.status, a.score_ms) for a in local["history"]]
    assert on_ray["best"].spec == local["best"].spec and on_ray["best"].score_ms == local["best"].score_ms
    assert all(a.gpu == "actor 0: EvaluatorDouble (no GPU)" for a in on_ray["history"])  # one call at a time: one GPU
    assert all(a.gpu == "" for a in local["history"])  # the double itself names no GPU
    client = MlflowClient(s.tracker.uri)
    children = client.search_runs([client.get_run(s.info.mlflow_run_id).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{s.info.mlflow_run_id}'")
    assert len(children) == 6
    assert {c.data.tags["warpsmith.gpu"] for c in children} == {"actor 0: EvaluatorDouble (no GPU)"}


def test_evaluate_many_spreads_a_batch_over_the_gpus_in_order(ray, tmp_path, workload):
    """Four candidates on two GPU actors: two run at once (each waits for the other), results in the given order."""
    meet = tmp_path / "meet"
    meet.mkdir()
    batch = [tiled(workload, BM=bm) for bm in (32, 64, 128, 256)]
    with ray_backend(workload, meet=(meet, 2)) as backend:
        results = backend.evaluate_many(batch)
    local = EvaluatorDouble(workload).evaluate_many(batch)
    assert [(r.candidate, r.status, r.score_ms) for r in results] == [(r.candidate, r.status, r.score_ms) for r in local]
    assert {r.gpu.split(":")[0] for r in results} == {"actor 0", "actor 1"}
    assert len(list(meet.iterdir())) == 4 and not meet.with_name("meet.missed").exists()


def children_gpus(s) -> list[str]:
    client = MlflowClient(s.tracker.uri)
    children = client.search_runs([client.get_run(s.info.mlflow_run_id).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{s.info.mlflow_run_id}'")
    return [c.data.tags.get("warpsmith.gpu", "") for c in children]


def test_a_stepped_session_on_two_gpus_runs_its_attempts_side_by_side(ray, tmp_path, workload):
    """--batch 2 on two stand-in GPUs: steps of four (two per GPU), each attempt run whole on one GPU, two at once
    (from the first step of several on, every evaluation waits until a second one has arrived); each attempt names
    its GPU, in MLflow too, both GPUs serve; the best is the best of what was tried, as the same double scores it."""
    meet, steps = tmp_path / "meet", []

    def on_event(e):  # the tuner's first step is the kernel's default alone: the overlap is due from the next
        if isinstance(e, events.Notice) and e.text.startswith("step of"):
            steps.append(e.text)
            meet.mkdir(exist_ok=True)
    status, state, s = run_session(tmp_path, workload, 8, ray_backend(workload, meet=(meet, 2)), batch=2,
                                   on_event=on_event)
    assert status == "finished"
    history = state["history"]
    assert len(history) == 8 and all(a.status in (Status.OK, Status.REJECTED_EARLY) for a in history)
    assert steps and steps[0].startswith("step of 4 candidates"), steps
    assert len(list(meet.iterdir())) >= 2 and not meet.with_name("meet.missed").exists()
    assert {a.gpu.split(":")[0] for a in history} == {"actor 0", "actor 1"}
    assert sorted(children_gpus(s)) == sorted(a.gpu for a in history)
    local = EvaluatorDouble(workload)
    tried = [a for a in history if a.status == Status.OK]
    assert state["best"].score_ms == min([a.score_ms for a in tried] + [state["start"].score_ms])
    assert all(a.score_ms == pytest.approx(local.score(a.defines)) for a in tried)


def test_a_gpu_dying_mid_step_costs_its_attempt_and_the_other_attempts_go_on(ray, tmp_path, workload):
    """Attempts side by side on two GPUs; one actor's process dies in its third evaluation: that attempt is
    crashed and names the GPU, every other attempt of the session runs, and it finishes with a best."""
    flag = tmp_path / "died-once"
    status, state, _ = run_session(tmp_path, workload, 8, ray_backend(workload, die_at=(3, flag)), batch=2)
    assert status == "finished" and flag.exists()
    history = state["history"]
    assert len(history) == 8
    crashed = [a for a in history if a.status == Status.CRASHED]
    assert len(crashed) == 1 and "died" in crashed[0].detail and crashed[0].gpu.startswith("actor ")
    assert all(a.status in (Status.OK, Status.REJECTED_EARLY) for a in history if a is not crashed[0])
    assert state["best"] is not None


def test_a_candidate_that_does_not_compile_never_reaches_a_gpu_actor(ray, tmp_path, workload):
    """compile_failed with NVRTC's log, as locally, and no GPU named: no actor was asked."""
    broken = dataclasses.replace(tiled(workload, BM=64), source="extern \"C\" __global__ void sgemm( {")
    with ray_backend(workload, gpus=1) as backend:
        (result,) = backend.evaluate_many([broken])
        attempts = [backend.run_attempt(AttemptJob(broken, any_gpu=any_gpu)) for any_gpu in (False, True)]
        served = list(backend.dispatch.served)
    assert result.status == Status.COMPILE_FAILED and result.gpu == "" and "error" in result.detail
    local = EvaluatorDouble(workload).evaluate(broken)
    assert local.status == Status.COMPILE_FAILED and local.detail == result.detail
    assert all(a.validated.status == Status.COMPILE_FAILED and a.timed is None for a in attempts)
    assert all(a.validated.detail == local.detail for a in attempts) and served == [0]


def test_an_attempts_kernel_is_compiled_here_before_its_actor_is_called(ray, workload, monkeypatch):
    """An attempt and evaluate compile in this process first (joining a compile ahead still in
    flight), so the actor never runs NVRTC itself while its GPU waits; the whole attempt is one call,
    its compile outcome streamed first, then the actor's replies; a job that comes compiled is not
    compiled again."""
    from warpsmith.agent.runtime.compiler import CompiledKernel
    with ray_backend(workload, gpus=1) as backend:
        order: list[str] = []
        compile_, call = backend.compile, backend._call
        monkeypatch.setattr(backend, "compile", lambda c: order.append("compile") or compile_(c))
        monkeypatch.setattr(backend, "_call", lambda *a, **k: order.append("call") or call(*a, **k))
        seen: list[object] = []
        attempt = backend.run_attempt(AttemptJob(tiled(workload, BM=64)), seen.append)
        assert attempt.timed.ok and order == ["compile", "call"]
        assert isinstance(seen[0], CompiledKernel) and seen[1:] and not any(isinstance(e, CompiledKernel) for e in seen[1:])
        order.clear()
        compiled = compile_(tiled(workload, BM=128))
        assert backend.run_attempt(AttemptJob(tiled(workload, BM=128), compiled=compiled)).timed.ok
        assert order == ["call"]


def test_a_dying_gpu_actor_costs_one_attempt_and_the_session_goes_on(ray, tmp_path, workload):
    """The actor's process dies benchmarking attempt 1: that attempt is crashed, the other GPU takes over, all 5 run."""
    flag = tmp_path / "died-once"
    status, state, _ = run_session(tmp_path, workload, 5, ray_backend(workload, die_at=(3, flag)))
    assert status == "finished" and flag.exists()
    history = state["history"]
    assert len(history) == 5
    assert [a.status for a in history].count(Status.CRASHED) == 1
    crashed = history[0]
    assert crashed.status == Status.CRASHED and "actor 0" in crashed.detail and "died" in crashed.detail
    # The others ran on the other GPU and passed (a slower one may be cut by early rejection).
    assert all(a.status in (Status.OK, Status.REJECTED_EARLY) and a.gpu.startswith("actor 1:") for a in history[1:]), \
        [(a.status, a.gpu) for a in history]
    assert state["best"] is not None


def test_stop_now_while_a_dead_actor_restarts_stops_the_next_call(ray, tmp_path, workload):
    """The dead actor is held out of the pool until its restart answers; it runs nothing, so a
    "stop now" then is for the session's next call, which never starts (not one that waits
    for the restart and runs after the stop)."""
    from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
    flag = tmp_path / "died-once"
    with ray_backend(workload, gpus=1, die_at=(1, flag)) as backend:
        crashed = backend.evaluate(tiled(workload, BM=64))
        assert crashed.status == Status.CRASHED and flag.exists()
        backend.abort()
        with pytest.raises(EvaluationAborted):
            backend.evaluate(tiled(workload, BM=128))
        again = backend.evaluate(tiled(workload, BM=128))  # the restarted actor serves once it answers
        assert again.status == Status.OK and again.gpu.startswith("actor 0:")


def test_compiles_run_as_ray_tasks_through_the_same_cache_and_policy(ray, workload):
    """NVRTC on a CPU worker; the second compile is the cache's; a refused option never reaches NVRTC."""
    candidate = tiled(workload, BM=96)
    with ray_backend(workload, gpus=1) as backend:
        first, again = backend.compile(candidate), backend.compile(candidate)
        refused = backend.compile(dataclasses.replace(candidate, options=("-Xptxas", "-O0")))
    assert first.ok and not first.cached and first.cubin
    assert again.cached and again.cubin == first.cubin
    assert not refused.ok and refused.error == "OPTION_REFUSED"


def test_pause_and_stop_after_step_on_ray(ray, tmp_path, workload):
    """A pause stops at the step boundary and the session goes on from there; stop-after-step stops it."""
    s = open_session(tmp_path, workload, 4, ray_backend(workload))
    try:
        def pause_after_two(e):
            if isinstance(e, events.AttemptFinished) and e.iteration == 2:
                s.pause()
        assert s.run(pause_after_two) == "paused" and s.state["iteration"] == 2

        def stop_after_three(e):
            if isinstance(e, events.AttemptFinished) and e.iteration == 3:
                s.stop_after_step()
        assert s.run(stop_after_three) == "stopped" and s.state["iteration"] == 3
        assert s.run() == "finished" and s.state["iteration"] == 4
    finally:
        s.close()


def test_stop_now_kills_the_evaluation_in_flight_on_its_actor(ray, tmp_path, workload):
    """Stop now while an actor holds attempt 1's evaluation: the session stops, the checkpoint is before that step."""
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    gate = FileGate(gate_dir, free=1)  # the starting kernel passes, attempt 1's validation is held
    s = open_session(tmp_path, workload, 4, ray_backend(workload, gate=gate))
    ended = []
    runner = threading.Thread(target=lambda: ended.append(s.run_to_end()))
    try:
        runner.start()
        while not gate.held.is_set() and runner.is_alive():
            threading.Event().wait(0.05)
        assert gate.held.is_set()
        s.stop_now()
        runner.join(timeout=120)
        assert not runner.is_alive() and ended[0].status == "stopped"
        assert s.state["iteration"] == 0 and not s.state["history"]
    finally:
        gate.release()
        runner.join(timeout=120)
        s.close()


def test_the_ray_backend_implements_the_backend(ray, workload):
    """RayBackend has every EvaluationBackend member with the same parameters (tests/test_seams.py's check)."""
    from test_seams import mismatches

    from warpsmith.agent.evaluate.backend import EvaluationBackend, ParallelBackend, parallel
    from warpsmith.agent.evaluate.ray_backend import RayBackend
    with ray_backend(workload, gpus=1) as backend:
        assert EvaluationBackend in RayBackend.__mro__ and ParallelBackend in RayBackend.__mro__
        assert mismatches(EvaluationBackend, RayBackend, backend) == []
        assert mismatches(ParallelBackend, RayBackend, backend) == []
        assert backend.lanes == 1 and parallel(backend) is None  # one GPU: attempts one at a time, as locally


def test_the_gpu_actors_of_a_cluster_started_here_run_at_this_processs_priority(ray, workload):
    """Ray starts its workers at niceness 15, below the compile processes (10): a cluster
    init_ray starts gets 0 (RAY_worker_niceness), set only while Ray starts."""
    import os

    from warpsmith.agent.evaluate.ray_cluster import NICENESS_VARIABLE
    with ray_backend(workload, gpus=2) as backend:
        assert [ray.get(a.niceness.remote()) for a in backend._actors] == [os.nice(0)] * 2
    assert NICENESS_VARIABLE not in os.environ


def test_a_cluster_started_here_has_no_secrets_for_the_code_its_actors_run(tmp_path_factory):
    """Ray starts its processes with a copy of os.environ; the actors' evaluators start reference children
    (written code) that could read their parent's /proc/<pid>/environ. A cluster
    init_ray starts gets no secrets; this process keeps them. (Its own cluster: the module's is running.)"""
    import os
    import subprocess
    import sys
    script = tmp_path_factory.mktemp("ray-secrets") / "probe.py"
    script.write_text(
        "import os, ray\nfrom warpsmith.agent.evaluate.ray_cluster import init_ray\n"
        "init_ray(ray, num_cpus=1)\n"
        "@ray.remote\ndef environ():\n    return open('/proc/self/environ', 'rb').read()\n"
        "print(b'sk-ray-canary' in ray.get(environ.remote()), os.environ['OPENAI_API_KEY'])\nray.shutdown()\n")
    from warpsmith.agent.runtime.parent_watch import PACKAGE_ROOT  # the warpsmith this process imported
    env = {**os.environ, "OPENAI_API_KEY": "sk-ray-canary", "PYTHONPATH": str(PACKAGE_ROOT)}
    out = subprocess.run([sys.executable, "-P", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("False sk-ray-canary"), out.stderr[-2000:]


def test_actors_below_this_processs_priority_get_a_warning_that_says_how_to_start_the_cluster():
    from warpsmith.agent.evaluate.ray_cluster import priority_warning
    assert priority_warning([0, 0], 0) is None and priority_warning([], 0) is None
    assert priority_warning([5, 9], 0) is None  # below this process, above the compiles (10): they give way
    text = priority_warning([0, 15], 0)
    assert text is not None and "niceness 15" in text and "run at 10" in text and "RAY_worker_niceness=0 ray start" in text
    assert "run at 19" in (priority_warning([19], 12) or "")
    assert "\n" not in text


def test_session_flags_choose_the_backend():
    """run's --backend, --ray-address and --ray-gpus reach EvaluationOptions; local stays the default."""
    from warpsmith.agent.cli.commands import build_parser
    from warpsmith.agent.cli.options import run_options
    parser = build_parser()
    local = run_options(parser.parse_args(["run", "examples/sgemm"])).evaluation
    assert (local.backend, local.ray_address, local.ray_gpus) == ("local", "", 0)
    if importlib.util.find_spec("ray") is None:
        return
    chosen = run_options(parser.parse_args(["run", "examples/sgemm", "--backend", "ray", "--ray-address", "auto",
                                            "--ray-gpus", "2"])).evaluation
    assert (chosen.backend, chosen.ray_address, chosen.ray_gpus) == ("ray", "auto", 2)


def test_backend_ray_without_ray_says_how_to_install_it(monkeypatch):
    """No Ray installed: --backend ray fails in one line naming the extra; so does building the backend."""
    from types import SimpleNamespace

    from warpsmith.agent.cli.errors import CliError
    from warpsmith.agent.cli.options import evaluation_options
    from warpsmith.agent.evaluate.ray_cluster import ray_module
    args = SimpleNamespace(hot=False, device=0, timeout=10.0, reference_timeout=60.0, backend="ray",
                           ray_address="", ray_gpus=0)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(CliError, match=r"^--backend ray: the ray backend needs Ray: pip install 'warpsmith\[ray\]'$"):
        evaluation_options(args)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'warpsmith\[ray\]'"):
        ray_module()


class _FakeRef:
    def __init__(self):
        self.done, self.value, self.error = threading.Event(), None, None


class _FakeActor:
    """An actor whose call runs until aborted or released: what RayBackend's dispatch sees of one."""

    class _Remote:
        def __init__(self, fn):
            self.remote = fn

    def __init__(self, started: list):
        self.started, self.current = started, None
        self.call, self.abort = self._Remote(self._call), self._Remote(self._abort)

    def _call(self, method, arguments):
        self.current = _FakeRef()
        self.started.append(method)
        return self.current

    def _abort(self):
        from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
        ref = self.current
        if ref is not None and not ref.done.is_set():
            ref.error = _FakeRay.exceptions.RayTaskError(EvaluationAborted("stopped"))
            ref.done.set()


class _FakeRay:
    class exceptions:  # noqa: N801  (ray.exceptions' shape)
        class RayTaskError(Exception):
            def __init__(self, cause):
                self.cause = cause

        class RayActorError(Exception):
            pass

    def get(self, ref):
        ref.done.wait(60)
        if ref.error is not None:
            raise ref.error
        return ref.value


def _until(condition):
    for _ in range(6000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("condition never met")


def test_stop_now_starts_nothing_that_waited_for_a_gpu():
    """Two GPUs busy with attempts ahead, a third attempt and a call of the session's waiting for one: stop now
    aborts the two, and neither waiting call starts (RayBackend's dispatch with stand-in actors, no Ray)."""
    from warpsmith.agent.evaluate.actor_dispatch import ActorDispatch
    from warpsmith.agent.evaluate.ray_backend import RayBackend
    from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
    started: list[str] = []
    b = RayBackend.__new__(RayBackend)  # the dispatch alone: no cluster, two stand-in actors
    b._ray, b._actors, b._labels = _FakeRay(), [_FakeActor(started), _FakeActor(started)], ["actor 0", "actor 1"]
    b.dispatch = ActorDispatch(2)
    outcomes: list[str] = []

    def call(method, anywhere):
        try:
            b._call("c", method, (None, 1), anywhere=anywhere)
            outcomes.append(f"{method} ran")
        except EvaluationAborted:
            outcomes.append(f"{method} aborted")
    threads = [threading.Thread(target=call, args=("run_attempt", True)) for _ in range(2)]
    for t in threads:
        t.start()
    _until(lambda: len(b.dispatch.busy) == 2)
    threads += [threading.Thread(target=call, args=("run_attempt", True)),
                threading.Thread(target=call, args=("evaluate", False))]
    for t in threads[2:]:
        t.start()
    _until(lambda: b.dispatch.acquiring == 2)
    b.abort()
    for t in threads:
        t.join(60)
    assert started == ["run_attempt", "run_attempt"]
    assert sorted(outcomes) == ["evaluate aborted"] + ["run_attempt aborted"] * 3
    assert not b.dispatch.aborted  # calls were there to take the stop: the next one after it runs


def test_stop_now_during_the_sessions_compile_starts_no_actor_call():
    """One GPU busy with an attempt, a second attempt still compiling in this process (NVRTC
    in flight) when stop now comes: the compile finishes, and the attempt never reaches the
    free actor (RayBackend's dispatch with stand-in actors, no Ray)."""
    from warpsmith.agent.evaluate.actor_dispatch import ActorDispatch
    from warpsmith.agent.evaluate.ray_backend import RayBackend
    from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
    from warpsmith.agent.runtime.compiler import CompiledKernel
    started: list[str] = []
    b = RayBackend.__new__(RayBackend)
    b._ray, b._actors, b._labels = _FakeRay(), [_FakeActor(started), _FakeActor(started)], ["actor 0", "actor 1"]
    b.dispatch = ActorDispatch(2)
    compiling, compiled = threading.Event(), threading.Event()

    def compile_(candidate):  # NVRTC in flight until the test lets it end
        compiling.set()
        compiled.wait(60)
        return CompiledKernel(True, "sm_90", "k", "k", "", "", 1.0, False, cubin=b"\x7fELF")
    b.compile = compile_
    outcomes: list[str] = []

    def attempt(run):
        try:
            run()
            outcomes.append("ran")
        except EvaluationAborted:
            outcomes.append("aborted")
    first = threading.Thread(target=attempt, args=(lambda: b._call("c", "run_attempt", (None,), anywhere=True),))
    first.start()
    _until(lambda: len(b.dispatch.busy) == 1)
    candidate = Candidate("extern \"C\" __global__ void k() {}", "k", None, name="c")  # type: ignore[arg-type]
    second = threading.Thread(target=attempt, args=(lambda: b.run_attempt(AttemptJob(candidate, any_gpu=True)),))
    second.start()
    assert compiling.wait(60)
    b.abort()
    compiled.set()
    for t in (first, second):
        t.join(60)
    assert started == ["run_attempt"] and sorted(outcomes) == ["aborted", "aborted"]


def test_the_tuners_steps_on_several_gpus_are_two_per_gpu_and_the_models_stay_as_asked():
    """step_size: --batch 4 on 3 GPUs is 6 for the tuner; the model's (each proposal a paid call), --batch 1,
    --no-overlap and one GPU keep --batch."""
    from warpsmith.agent.loop.session import step_size

    class ThreeGpus:  # a ParallelBackend's shape, no Ray
        lanes = 3

    class Model:  # a proposer that does not propose ahead, as the llm proposer
        proposes_ahead = False
    tuner = TuneProposer(0, ahead=0)
    assert step_size(SearchOptions(batch=4), ThreeGpus(), tuner) == 6
    assert step_size(SearchOptions(batch=8), ThreeGpus(), tuner) == 8
    assert step_size(SearchOptions(batch=4), ThreeGpus(), Model()) == 4
    assert step_size(SearchOptions(batch=1), ThreeGpus(), tuner) == 1
    assert step_size(SearchOptions(batch=4, overlap=False), ThreeGpus(), tuner) == 4
    assert step_size(SearchOptions(batch=4), EvaluatorDouble.__new__(EvaluatorDouble), tuner) == 4


def test_the_app_and_the_headless_progress_say_which_gpu_ran_an_attempt():
    """On Ray an attempt's line names its GPU actor; a local one's is as before."""
    import io

    from warpsmith.agent.loop.headless import HeadlessProgress
    from warpsmith.tui.run_view import RunView
    on_ray = events.AttemptFinished(3, "tiled-x", "ok", 1.25, "", "actor 1: NVIDIA H200 GPU-1234")
    local = events.AttemptFinished(4, "tiled-y", "ok", 1.5, "")
    view = RunView("sgemm", "tune")
    view.apply(on_ray)
    view.apply(local)
    assert view.log[-2:] == ["#3 ok 1.2500 ms on actor 1", "#4 ok 1.5000 ms"]
    out = io.StringIO()
    progress = HeadlessProgress(8, "cuBLAS", out)
    progress(on_ray)
    progress(local)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("[actor 1]") and not lines[1].endswith("]")
