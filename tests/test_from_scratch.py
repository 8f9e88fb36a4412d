"""A workload with no starting kernel ([start] from_scratch = true): the spec says so, the
llm proposer writes the first kernel (through the loop, against the scripted server, an
EvaluatorDouble standing in for the GPU), and what needs a starting kernel says so in one line."""

from __future__ import annotations

import pytest
from evaluator_double import EvaluatorDouble
from openai_server_double import OpenAIServerDouble
from test_llm_proposer import TILED_ANSWER, answer
from workload_factory import make_from_scratch_workload

from warpsmith.agent.cli.commands import main
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.llm import HybridProposer, LlmProposer
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError
from warpsmith.agent.tracking.tracker import Tracker


@pytest.fixture
def scratch(tmp_path):
    return make_from_scratch_workload(tmp_path / "w")


def test_the_spec_says_from_scratch(scratch):
    """No [kernels.*] and from_scratch = true: loads, with no starting kernel."""
    w = load_workload(scratch)
    assert w.from_scratch and w.start == "" and w.start_kernel is None and w.kernels == {}


@pytest.mark.parametrize("edit,key,problem", [
    (lambda t: t.replace("from_scratch = true\n", ""), "kernels", "or [start] from_scratch = true"),
    (lambda t: t.replace("from_scratch = true\n", "from_scratch = true\nkernel = \"naive\"\n"), "start.kernel",
     "not both"),
    (lambda t: t.replace("from_scratch = true\n", "from_scrach = true\n"), "start.from_scrach", "unknown key"),
])
def test_a_start_that_is_neither_is_refused(scratch, edit, key, problem):
    """No kernel and no from_scratch, both at once, or a typo: one line naming the key."""
    toml = scratch / "workload.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(SpecError) as e:
        load_workload(scratch)
    assert e.value.key == key and problem in e.value.problem


def test_the_llm_writes_the_first_kernel(tmp_path, scratch, monkeypatch):
    """Through the graph: nothing is evaluated at plan, the first prompt asks for a kernel from
    scratch, the model's kernel becomes the best and the tuner then searches its knobs."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")
    workload = load_workload(scratch)
    store = tmp_path / "store"
    tracker = Tracker(store)
    info = SessionInfo("scratch-session", str(workload.directory),
                       SearchOptions(ProposerChoice("llm", model="gpt-5-mini"), 3))
    info.mlflow_run_id = tracker.start(workload.name, info.id, {"proposer": "llm"})
    evaluator = EvaluatorDouble(workload)
    with OpenAIServerDouble([TILED_ANSWER, answer()]) as server:
        proposer = HybridProposer(LlmProposer("gpt-5-mini", "medium", server.base_url), TuneProposer(0), tune_steps=1)
        s = Session(info, session_dir(store, info.id), workload, evaluator, proposer, tracker)
        assert s.end(s.run()) == "finished"
    state = s.state
    s.close()
    assert evaluator.calls[0][0] == "llm-1"  # no starting kernel was evaluated first
    assert state["start"] is None and state["best"] is not None
    assert [a.proposer for a in state["history"]] == ["llm", "tune", "llm"]
    first = server.requests[0]["messages"][1]["content"]
    assert "no starting kernel: write its first kernel from scratch" in first and "Best kernel so far" not in first
    assert "Best kernel so far" in server.requests[1]["messages"][1]["content"]
    report = (s.dir / "best" / "report.md").read_text()
    assert "start - ms" in report


@pytest.mark.parametrize("argv,says", [
    (["run", "{w}", "--proposer", "tune", "--headless"], "run --proposer tune: sgemm has no starting kernel"),
    (["bench", "{w}"], "bench: sgemm has no starting kernel"),
    (["eval", "{w}"], "sgemm has no starting kernel ([start] from_scratch = true): give one with --kernel FILE"),
    (["eval", "{w}", "--kernel", "{w}/workload.toml"], "--kernel FILE needs --entry, --grid and --block"),
])
def test_what_needs_a_starting_kernel_says_so(scratch, tmp_path, capsys, argv, says):
    """run --proposer tune, bench and eval without a kernel file: exit 2, one line, before any GPU work."""
    argv = [a.format(w=scratch) for a in argv] + (["--store", str(tmp_path / "store")] if argv[0] != "eval" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists()


def test_check_says_there_is_nothing_to_compile(scratch, capsys):
    """warpsmith check on a from-scratch workload: spec and references ok, compile skipped with a reason."""
    assert main(["check", str(scratch)]) == 0
    assert "skip  compile    no kernels: the workload starts from scratch" in capsys.readouterr().out
