"""Candidates as programs: several launches over workspace buffers (agent/spec/launch.py),
from the workload file to the request the worker gets. Compilation is real NVRTC; a
scripted worker double stands in for the GPU (tests/test_gpu_programs.py runs them)."""

from __future__ import annotations

import dataclasses

import pytest
from test_evaluator_protocol import DoubleEvaluator, full_run
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.launch import LaunchJob, MemsetStep, Program
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError, array_layouts

SPLIT = {"workspace": [{"name": "partial", "dtype": "float32", "size": "SPLITK * M * N", "init": "poison"}],
         "steps": [{"entry": "sgemm_splitk_partial", "grid": ["ceil_div(N, BN)", "ceil_div(M, BM)", "SPLITK"],
                    "block": ["(BM / TM) * (BN / TN)"],
                    "args": ["A", "B", "partial", "M", "N", "K", "i32:ceil_div(ceil_div(K, SPLITK), BK) * BK"]},
                   {"entry": "sgemm_splitk_reduce", "grid": ["ceil_div(M * N, 256)"], "block": [256],
                    "args": ["partial", "C", "i64:M * N", "i32:SPLITK"]}]}


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w", kernels=("naive", "splitk")))


def test_split_k_program_resolves_per_case(workload):
    """The shipped split-K kernel: two entries, a workspace sized per case, computed scalar arguments."""
    c = Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 4, "BK": 16})
    assert c.program.entries == ("sgemm_splitk_partial", "sgemm_splitk_reduce")
    case = workload.case("odd-97x83x61")
    scalars = {p.name: p.arg(case) for p in workload.params if p.role == "scalar"}
    job = c.program.resolve(c.launch_env(case), scalars, array_layouts(workload, case))
    assert job.workspace[0].count == 4 * 97 * 83 and job.workspace[0].init == "poison"
    partial, reduce = job.steps
    assert partial.launch.grid == (2, 2, 4) and partial.args[-1].value == 16  # ceil(61/4)=16 -> 16
    assert [a.array for a in partial.args[:3]] == ["A", "B", "partial"] and partial.args[3].value == 97
    assert (reduce.args[2].kind, reduce.args[2].value) == ("i64", 97 * 83)


def test_program_round_trips_through_the_candidate_record(workload):
    """CandidateSpec (what sessions, MLflow and the model carry) keeps the whole program."""
    c = Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 8})
    spec = CandidateSpec.from_candidate(c, "tune")
    again = CandidateSpec.model_validate_json(spec.model_dump_json()).to_candidate()
    assert again.program == c.program and again.defines == c.defines
    assert spec.program["steps"][1]["args"] == ["partial", "C", "i64:M * N", "i32:SPLITK"]


def test_both_entries_compile_with_nvrtc(workload):
    """One source, two extern "C" kernels, one CUBIN, for several knob settings."""
    for defines in ({}, {"SPLITK": 1, "BM": 128, "TM": 8}, {"SPLITK": 64, "BK": 32}):
        c = Candidate.from_spec(workload.kernels["splitk"], defines)
        r = compile_kernel(c.source, c.entry, "sm_90", c.compile_options(), filename="splitk.cu")
        assert r.ok, r.log
        assert b"sgemm_splitk_reduce" in r.cubin and b"sgemm_splitk_partial" in r.cubin


@pytest.mark.parametrize("change,problem", [
    (lambda d: d["steps"][0]["args"].__setitem__(2, "scratch"), "argument 'scratch' is not a parameter"),
    (lambda d: d["steps"][0]["args"].__setitem__(6, "u8:K"), "must be one of i32, i64, f32, f64"),
    (lambda d: d["steps"].insert(0, {"memset": "A"}), "memset 'A' is neither a workspace buffer nor an output"),
    (lambda d: d["workspace"][0].__setitem__("name", "C"), "workspace 'C' has the name of a parameter"),
    (lambda d: d["workspace"][0].__setitem__("init", "garbage"), "init: expected one of zero, poison"),
    (lambda d: d["workspace"][0].__setitem__("size", "M - 1000"), "workspace 'partial'"),
    (lambda d: d["steps"][1].__setitem__("block", [2048]), "2048 threads"),
    (lambda d: d["steps"][1].__setitem__("grid", ["__import__('os')"]), "steps[1]"),
])
def test_broken_programs_are_refused_in_one_line(tmp_path, change, problem):
    """A program that cannot run is a SpecError naming the kernel, at load time, before any GPU work."""
    import copy
    import json
    data = copy.deepcopy(SPLIT)
    change(data)
    d = make_sgemm_workload(tmp_path / "w", kernels=("naive",))
    text = (d / "workload.toml").read_text()
    (d / "splitk.cu").write_text((make_sgemm_workload(tmp_path / "src", kernels=("splitk",)) / "splitk.cu").read_text())
    steps = "".join(f"[[kernels.splitk.steps]]\n{_toml(s)}\n" for s in data["steps"])
    ws = ", ".join("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in w.items()) + " }" for w in data["workspace"])
    (d / "workload.toml").write_text(text.replace("[[cases]]", "[kernels.splitk]\nsource = \"splitk.cu\"\n"
                                                  f"workspace = [{ws}]\n\n{steps}\n[[cases]]", 1))
    with pytest.raises(SpecError) as e:
        load_workload(d)
    assert "kernels.splitk" in str(e.value) and problem in str(e.value) and "\n" not in str(e.value)


def _toml(table: dict) -> str:
    import json
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())


def test_the_worker_gets_every_case_as_a_program(workload):
    """Each case's job carries the resolved steps and workspace; the single-launch fields stay unused."""
    ev = DoubleEvaluator(workload, full_run())
    r = ev.evaluate(Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 2}))
    assert r.status == "ok"
    req = ev.doubles[0].sent[0]
    assert all(j.program is not None and j.launch is None for j in req.jobs)
    square = next(j for j in req.jobs if j.case == "square-256")
    assert square.program.workspace[0].count == 2 * 256 * 256
    assert [type(s) for s in square.program.steps] == [LaunchJob, LaunchJob]


def test_a_step_over_the_gpu_limits_never_reaches_the_worker(workload):
    """A program step whose block exceeds this GPU is launch_invalid, naming the entry; nothing sent."""
    c = Candidate.from_spec(workload.kernels["splitk"])
    data = c.program.to_data()
    data["steps"][1]["shared"] = "300000"
    bad = Candidate(c.source, c.entry, c.launch, c.options, c.defines, "bad",
                    program=Program.from_data(data["steps"], data["workspace"]))
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(bad)
    assert r.status == "launch_invalid" and "sgemm_splitk_reduce" in r.detail and "300000 B" in r.detail
    assert ev.doubles[0].sent == []


def test_a_memset_step_reads_back(workload):
    """A memset step is kept in order, in the record and in the resolved job."""
    c = Candidate.from_spec(workload.kernels["splitk"])
    data = c.program.to_data()
    data["steps"].insert(0, {"memset": "partial"})
    p = Program.from_data(data["steps"], data["workspace"])
    assert p.steps[0] == MemsetStep("partial") and p.to_data()["steps"][0] == {"memset": "partial"}


def test_the_model_can_propose_a_split_k_program(workload, monkeypatch):
    """The llm proposer's schema carries a program: a scripted server's split-K answer becomes a
    candidate whose every case reaches the worker as two launches over poisoned workspace."""
    from openai_server_double import OpenAIServerDouble
    from test_llm_proposer import ctx

    from warpsmith.agent.proposers.llm import LlmProposer
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")
    source = workload.kernels["splitk"].source()
    steps = [{**SPLIT["steps"][0]}, {**SPLIT["steps"][1], "block": ["256"]}]  # the schema's strings
    reply = {"rationale": "split K over 4 slices, then reduce", "source": source, "options": ["-DSPLITK=4"],
             "workspace": SPLIT["workspace"], "steps": steps}
    with OpenAIServerDouble([reply]) as server:
        proposal = LlmProposer("m", None, server.base_url).propose(ctx(workload))
    prompt = server.requests[0]["messages"][0]["content"]
    assert "workspace" in prompt and "KIND:EXPR" in prompt
    spec = proposal.spec
    assert spec.entry == "sgemm_splitk_partial" and spec.program["steps"][1]["entry"] == "sgemm_splitk_reduce"
    ev = DoubleEvaluator(workload, full_run())
    r = ev.evaluate(spec.to_candidate())
    assert r.status == "ok" and r.score_ms is not None
    assert all(len(j.program.steps) == 2 for j in ev.doubles[0].sent[0].jobs)


def test_a_program_naming_nothing_is_launch_invalid_with_the_reason(workload):
    """A model's program whose argument names no buffer fails before the GPU, saying which."""
    data = {**SPLIT, "steps": [{**SPLIT["steps"][0], "args": ["A", "B", "tmp", "M", "N", "K", "i32:K"]},
                               SPLIT["steps"][1]]}
    spec = CandidateSpec(name="m", source=workload.kernels["splitk"].source(), entry="sgemm_splitk_partial",
                         grid=["1"], block=["1"], program=data)
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(spec.to_candidate())
    assert r.status == "launch_invalid" and "argument 'tmp'" in r.detail and ev.doubles[0].sent == []


def test_diff_and_prompt_show_the_launch_sequence(workload, tmp_path):
    """`warpsmith diff` puts a program's steps above its source, and the model sees them for the best."""
    from test_llm_proposer import ctx

    from warpsmith.agent.cli.diff import render_diff
    from warpsmith.agent.evaluate.records import Attempt, Best
    from warpsmith.agent.loop.archive import archive_attempt
    from warpsmith.agent.proposers.prompt import user_message
    single = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["naive"]), "tune")
    split = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["splitk"]), "tune")
    a, b = (Attempt(iteration=i, name=s.name, proposer="tune", status="ok") for i, s in ((1, single), (2, split)))
    archive_attempt(tmp_path, a, single)
    archive_attempt(tmp_path, b, split)
    text = render_diff(tmp_path, a, b)
    assert "+// step 2: sgemm_splitk_reduce<<<(ceil_div(M * N, 256), 1, 1), (256, 1, 1)>>>" in text
    assert "+// workspace partial: float32[SPLITK * M * N], starts poisoned" in text
    c = dataclasses.replace(ctx(workload), best=Best(spec=split, score_ms=1.0, cases=[], iteration=2))
    assert "step 1: sgemm_splitk_partial<<<" in user_message(c)


def test_the_app_shows_a_programs_steps_above_its_source(workload):
    """The code panel's text for a program: its workspace and steps as comments, then the source."""
    from warpsmith.agent.loop import events
    from warpsmith.agent.loop.nodes.propose import program_lines
    from warpsmith.tui.run_view import RunView
    spec = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["splitk"]), "tune")
    view = RunView(workload.name, "tune")
    view.apply(events.CandidateProposed(1, spec.name, "tune", "", spec.source, 0, program_lines(spec)))
    lines = view.source.splitlines()
    assert lines[0] == "// workspace partial: float32[SPLITK * M * N], starts poisoned"
    assert lines[2].startswith("// step 2: sgemm_splitk_reduce<<<") and lines[3] == spec.source.splitlines()[0]


def test_a_program_whose_workspace_cannot_fit_the_gpu_never_reaches_the_worker(workload):
    """Each buffer is capped (16 GiB) but not their sum, nor the sum over the cases (the worker
    keeps every case's workspace while the kernel stays loaded): eight buffers of 16e9 bytes
    on an 80 GiB GPU reached the worker, to fail there as CUDA_ERROR_OUT_OF_MEMORY after
    filling the GPU (and its memsets of 128 GB before every timed launch). Refused up front,
    in one line that names the bytes."""
    from test_evaluator_protocol import FACTS
    c = Candidate.from_spec(workload.kernels["splitk"])
    data = c.program.to_data()
    data["workspace"] += [{"name": f"pad{i}", "dtype": "float32", "size": "4000000000", "init": "zero"}
                          for i in range(7)]
    bad = Candidate(c.source, c.entry, c.launch, c.options, c.defines, "hoard",
                    program=Program.from_data(data["steps"], data["workspace"]))
    ev = DoubleEvaluator(workload, [])
    ev._facts = dataclasses.replace(FACTS, total_memory=80 << 30)
    r = ev.evaluate(bad)
    assert r.status == "launch_invalid" and "GPU memory" in r.detail and "workspace" in r.detail
    assert ev.doubles == [] or ev.doubles[0].sent == []


@pytest.mark.parametrize("change,problem", [
    (("steps", 1, "grid", ["4294967296"]), "grid"),  # past the runner's unsigned: a TypeError in the worker
    (("steps", 1, "args", ["partial", "C", "i64:M * N", "i32:4294967296"]), "i32"),
    (("steps", 1, "args", ["partial", "C", "i64:9223372036854775807 + 1", "i32:1"]), "i64"),
])
def test_values_the_runner_cannot_pass_are_refused_before_the_worker(workload, change, problem):
    """A grid dimension or a computed scalar outside what the runner converts (unsigned, int32,
    int64) raised in the worker outside any CUDA call, which the worker treats as fatal: it
    exits and every case's buffers are built again. Refused up front, in one line, like a
    block of more than 1024 threads."""
    c = Candidate.from_spec(workload.kernels["splitk"])
    data = c.program.to_data()
    _, index, key, value = change
    data["steps"][index][key] = value
    bad = Candidate(c.source, c.entry, c.launch, c.options, c.defines, "huge",
                    program=Program.from_data(data["steps"], data["workspace"]))
    ev = DoubleEvaluator(workload, [])
    r = ev.evaluate(bad)
    assert r.status == "launch_invalid" and problem in r.detail, r.detail
    assert ev.doubles == [] or ev.doubles[0].sent == []


class _PagesDouble:
    """The GPU's memory as the worker asks for it (alloc in whole pages), recording each fill:
    this machine has no GPU. The program itself is the real native one."""

    def __init__(self):
        self.fills: list[tuple[int, int, int]] = []  # (word, ptr, nbytes)
        self.next = 1 << 30

    def alloc(self, nbytes):
        ptr, self.next = self.next, self.next + nbytes
        fills = self.fills

        class Buffer:
            def fill_u32(self, word, offset, n):
                fills.append((word, ptr + offset, n))
            fill_u32_async = fill_u32
        b = Buffer()
        b.ptr, b.nbytes = ptr, nbytes
        return b


def test_zeroed_workspace_is_zeroed_by_the_program_inside_the_timed_window():
    """A fill before the start event would give a program needing a large zeroed scratch that
    work untimed: every workspace is poisoned outside the events and the program's own first
    steps zero the `init = "zero"` ones (Program.enqueue, between them)."""
    from warpsmith.agent.spec.launch import ProgramJob, WorkspaceJob
    from warpsmith.agent.worker.poison import Poisons
    from warpsmith.agent.worker.program_run import ProgramRun
    device = _PagesDouble()
    job = ProgramJob(workspace=(WorkspaceJob("counters", "int32", 1000, "zero"),
                                WorkspaceJob("partial", "float32", 1000, "poison")),
                     steps=(MemsetStep("partial"),))
    run = ProgramRun(device, bufs=None, job=job, function=lambda entry: None)
    assert len(run.program) == 2  # counters' zeroing, then the memset step
    poisons = Poisons()
    device.fills.clear()
    run.init_workspace(poisons)
    by_ptr = {ptr: word for word, ptr, _ in device.fills}
    assert by_ptr[run.workspace["counters"].ptr] != 0 and by_ptr[run.workspace["partial"].ptr] != 0
