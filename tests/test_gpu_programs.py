"""Programs on a real GPU: a split-K sequence of two launches over poisoned workspace,
validated and timed as one unit; workspace read before it is written, or written past
its end, is caught like any output."""

from __future__ import annotations

import copy

import pytest
from test_programs import SPLIT
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.launch import Program
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return load_workload(make_sgemm_workload(tmp_path_factory.mktemp("sgemm"), kernels=("naive", "splitk")))


@pytest.fixture(scope="module")
def evaluator(workload):
    with Evaluator(workload, EvaluationOptions(TimingConfig(warmup=3, repetitions=30), kernel_timeout_s=5.0)) as ev:
        yield ev


def program(workload, change=None, defines=None) -> Candidate:
    data = copy.deepcopy(SPLIT)
    if change:
        change(data)
    base = Candidate.from_spec(workload.kernels["splitk"], defines or {"SPLITK": 4})
    return Candidate(base.source, base.entry, base.launch, base.options, base.defines, "variant",
                     program=Program.from_data(data["steps"], data["workspace"]))


@pytest.mark.parametrize("splits", [1, 4, 64])
def test_split_k_program_passes_and_is_timed(evaluator, workload, splits):
    """Both launches run in order on every case; one sample covers the whole sequence."""
    r = evaluator.evaluate(Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": splits}))
    assert r.status == "ok", r.detail
    assert r.case("square-256").timing.n == 30 and r.score_ms > 0


def test_workspace_read_before_written_is_a_wrong_answer(evaluator, workload):
    """The partial kernel skips the last K slice, the reduce still sums it: poisoned workspace reaches C."""
    r = evaluator.evaluate(program(workload, lambda d: d["steps"][0]["grid"].__setitem__(2, "SPLITK - 1")))
    assert r.status == "wrong_answer", r.detail


@pytest.mark.parametrize("init,status", [("zero", "ok"), ("poison", "wrong_answer")])
def test_workspace_starts_as_declared(evaluator, workload, init, status):
    """One plane more than written, summed by the reduce: harmless when declared zeroed, wrong when poisoned."""
    def extra_plane(d):
        d["workspace"][0].update(size="(SPLITK + 1) * M * N", init=init)
        d["steps"][1]["args"][3] = "i32:SPLITK + 1"
    r = evaluator.evaluate(program(workload, extra_plane))
    assert r.status == status, r.detail


def test_write_past_the_workspace_is_out_of_bounds(evaluator, workload):
    """A workspace one row of C too small: the last plane's last writes land in its guard band."""
    r = evaluator.evaluate(program(workload, lambda d: d["workspace"][0].__setitem__("size", "SPLITK * M * N - N")))
    assert r.status in ("out_of_bounds", "crashed"), r.detail
    if r.status == "out_of_bounds":
        assert "workspace partial (after)" in r.detail


def test_an_attempt_on_a_program_loads_once(evaluator, workload):
    """run_attempt() on a program, as the loop runs it: the same verdict as evaluate()."""
    from warpsmith.agent.evaluate.attempt import AttemptJob
    c = Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 8})
    attempt = evaluator.run_attempt(AttemptJob(c))
    assert attempt.validated.status == "ok", attempt.validated.detail
    r = attempt.timed
    assert r.status == "ok" and r.case("square-256").recheck.status == "ok", r.detail


def test_the_profiled_program_runs_every_step(workload, tmp_path):
    """Under ncu (--use-nsight) a program runs its whole sequence per case, over zeroed workspace."""
    from warpsmith.agent.evaluate.records import CandidateSpec
    from warpsmith.agent.profiling.profile_launch import launch_cases
    spec = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 4}), "tune")
    done = launch_cases(workload.directory, spec, ["square-256"])
    assert done == ["program of 2 steps (sgemm_splitk_partial, sgemm_splitk_reduce) on square-256"]
