"""--trace: the model's calls, made by the real langchain-openai client against the
scripted server (OpenAIServerDouble stands in for a paid model), become MLflow
traces readable from the store; the key is in none of them."""

from __future__ import annotations

import mlflow
from openai_server_double import OpenAIServerDouble
from test_llm_proposer import answer
from workload_factory import make_sgemm_workload

from warpsmith.agent.proposers.base import ProposalContext
from warpsmith.agent.proposers.llm import LlmProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracing import enable_tracing
from warpsmith.agent.tracking.tracker import Tracker


def test_model_calls_become_traces(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns: nothing may land there
    tracker = Tracker(tmp_path / "store")
    assert enable_tracing(tracker, "sgemm")
    try:
        w = load_workload(make_sgemm_workload(tmp_path / "w"))
        with OpenAIServerDouble([answer()]) as server:
            LlmProposer("m", None, server.base_url).propose(
                ProposalContext(w, DeviceFacts(arch="sm_90"), 1, "optimise", [], None, None, {}))
        mlflow.flush_trace_async_logging() if hasattr(mlflow, "flush_trace_async_logging") else None
        traces = mlflow.search_traces(locations=[mlflow.get_experiment_by_name("sgemm").experiment_id],
                                    return_type="list")
        assert len(traces) == 1
        text = traces[0].to_json()
        assert "sgemm_naive" in text and "sk-double-0000-secret" not in text
        assert not (tmp_path / "mlruns").exists()
    finally:
        mlflow.langchain.autolog(disable=True)


def test_tracing_that_cannot_start_is_a_warning(tmp_path, capsys):
    """The store gone from under the session (its folder replaced by a file): one warning, no traceback."""
    import shutil
    tracker = Tracker(tmp_path / "store")
    shutil.rmtree(tmp_path / "store")
    (tmp_path / "store").write_text("not a folder")
    assert not enable_tracing(tracker, "sgemm")
    assert "warpsmith: warning: --trace is off:" in capsys.readouterr().err
