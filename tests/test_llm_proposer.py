"""The llm proposer through the real langchain-openai client, against a scripted
OpenAI-compatible server on 127.0.0.1 (a double for a paid model), and through
the whole loop with an EvaluatorDouble standing in for the GPU."""

from __future__ import annotations

import pytest
from evaluator_double import EvaluatorDouble, knob_score
from openai_server_double import OpenAIServerDouble
from workload_factory import SGEMM, make_sgemm_workload

from warpsmith.agent.evaluate.records import Attempt
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.base import ProposalContext, ProposalError
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.llm import HybridProposer, LlmProposer, ProposerUnavailable
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker

NAIVE = (SGEMM / "naive.cu").read_text()
TILED = (SGEMM / "tiled.cu").read_text()


def answer(source=NAIVE, entry="sgemm_naive", grid=("ceil_div(N, 16)", "ceil_div(M, 16)"), block=("16", "16"),
           rationale="one thread per output"):
    return {"rationale": rationale, "source": source, "entry": entry, "grid": list(grid), "block": list(block),
            "shared": "0", "options": []}


TILED_ANSWER = answer(TILED, "sgemm_tiled", ("ceil_div(N, BN)", "ceil_div(M, BM)"), ("(BM / TM) * (BN / TN)",),
                      "register tiling with knobs")


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")


def ctx(workload, iteration=1, mode="optimise", history=(), last=None):
    return ProposalContext(workload, DeviceFacts(name="H200", arch="sm_90", sm_count=132), iteration, mode,
                           list(history), None, last, {})


def test_structured_answer_becomes_a_candidate(workload):
    """A JSON-schema answer is parsed into a candidate; tokens are counted; the prompt carries the workload."""
    with OpenAIServerDouble([answer()]) as server:
        p = LlmProposer("gpt-5-mini", "medium", server.base_url)
        proposal = p.propose(ctx(workload))
    assert proposal.spec.entry == "sgemm_naive" and proposal.spec.proposer == "llm"
    assert proposal.tokens == 1200 and p.usage.input == 1000 and p.usage.output == 200
    assert proposal.cost_usd == 0.0  # a server that is not OpenAI's costs nothing unless priced
    req = server.requests[0]
    assert req["model"] == "gpt-5-mini" and req["response_format"]["type"] == "json_schema"
    prompt = req["messages"][1]["content"]
    assert "const float* A" in prompt and "odd-97x83x61" in prompt and "TF32 NOT allowed" in prompt
    assert server.headers[0]["authorization"] == "Bearer sk-double-0000-secret"


def test_429_and_500_are_retried(workload):
    """A rate limit and a server error are retried by the client; the third answer is used."""
    with OpenAIServerDouble([429, 500, answer()]) as server:
        proposal = LlmProposer("gpt-5-mini", "medium", server.base_url).propose(ctx(workload))
    assert proposal.spec.entry == "sgemm_naive" and len(server.requests) == 3


def test_garbage_is_a_proposal_error_not_a_crash(workload):
    """An answer that is not the schema's JSON becomes a ProposalError with the reason."""
    with OpenAIServerDouble(["here is a kernel: __global__ void k() {}"]) as server:
        with pytest.raises(ProposalError, match="not a valid candidate"):
            LlmProposer("m", None, server.base_url).propose(ctx(workload))


def test_repair_prompt_carries_the_failure_verbatim(workload):
    """In repair mode the last failure's report goes back to the model word for word."""
    failed = Attempt(iteration=1, name="llm-1", proposer="llm", status="wrong_answer",
                     detail="output C [97, 83]: 40 of 8051 elements outside rtol\npattern: only rows >= 96 wrong")
    with OpenAIServerDouble([answer()]) as server:
        LlmProposer("m", None, server.base_url).propose(ctx(workload, 2, "repair", [failed], failed))
    prompt = server.requests[0]["messages"][1]["content"]
    assert "failed: wrong_answer. Fix it." in prompt and "pattern: only rows >= 96 wrong" in prompt


def test_missing_key_is_one_clear_error(monkeypatch):
    """No OPENAI_API_KEY and no base URL: the proposer refuses to start, saying what to do."""
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ProposerUnavailable, match="needs OPENAI_API_KEY .* use --proposer tune"):
        LlmProposer()


def test_rejected_key_ends_the_session_not_one_attempt(workload):
    """A 401 is not retried forever: it raises ProposerUnavailable."""
    with OpenAIServerDouble([401]) as server:
        with pytest.raises(ProposerUnavailable, match="rejected the API key"):
            LlmProposer("m", None, server.base_url).propose(ctx(workload))


def open_session(tmp_path, workload, proposer, budget):
    store = tmp_path / "store"
    tracker = Tracker(store)
    info = SessionInfo("llm-session", str(workload.directory), SearchOptions(ProposerChoice("llm", model="gpt-5-mini"), budget))
    info.mlflow_run_id = tracker.start(workload.name, info.id, {"proposer": "llm", "model": "gpt-5-mini"})
    # The naive start is slow; any knobbed kernel is faster, by its knob landscape.
    evaluator = EvaluatorDouble(workload, score=lambda d: knob_score(d) if d else 3.0)
    return Session(info, session_dir(store, info.id), workload, evaluator, proposer, tracker)


def test_loop_with_llm_repairs_garbage_and_hands_knobs_to_the_tuner(tmp_path, workload):
    """Through the graph: garbage -> proposal_invalid -> a repair prompt; the LLM's knobbed kernel
    becomes best and the tuner searches its knobs; no secret reaches the store."""
    with OpenAIServerDouble(["not json at all", TILED_ANSWER, answer()]) as server:
        llm = LlmProposer("gpt-5-mini", "medium", server.base_url)
        s = open_session(tmp_path, workload, HybridProposer(llm, TuneProposer(0), tune_steps=2), 6)
        assert s.end(s.run()) == "finished"
    h = s.state["history"]
    s.close()
    assert [a.status for a in h][:2] == ["proposal_invalid", "ok"]
    assert "not a valid candidate" in h[0].detail
    assert "failed: proposal_invalid. Fix it." in server.requests[1]["messages"][1]["content"]
    assert [a.proposer for a in h] == ["llm", "llm", "tune", "tune", "llm", "tune"]
    assert h[2].name.startswith("llm-2@")  # the tuner searched the LLM's kernel
    assert sum(a.tokens for a in h) == 3 * 1200
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            assert b"sk-double-0000-secret" not in path.read_bytes(), path


def test_research_notes_are_cited_in_the_prompt(workload):
    """With --nvidia-research the prompt carries the knowledge base's GEMM notes with their ids."""
    with OpenAIServerDouble([answer()]) as server:
        LlmProposer("m", None, server.base_url, research=True).propose(ctx(workload))
    prompt = server.requests[0]["messages"][1]["content"]
    assert "# Guidance" in prompt and "[tiling] Shared-memory and register tiling" in prompt


def test_web_search_of_nvidia_docs_is_cited_once(workload):
    """--web-search: one Responses API call limited to NVIDIA domains; its answer and cited pages
    reach every prompt and the proposal's sources, without a second search."""
    web = {"text": "Use 128-bit loads and double buffering.",
           "citations": [("CUDA C++ Best Practices Guide", "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/")]}
    with OpenAIServerDouble([web, answer(), answer()]) as server:
        p = LlmProposer("m", None, server.base_url, research=True, web_search=True)
        first = p.propose(ctx(workload))
        p.propose(ctx(workload, iteration=2))
    assert server.paths == ["/v1/responses", "/v1/chat/completions", "/v1/chat/completions"]
    tool = server.requests[0]["tools"][0]
    assert tool["type"] == "web_search" and tool["filters"]["allowed_domains"] == ["docs.nvidia.com", "developer.nvidia.com"]
    prompt = server.requests[2]["messages"][1]["content"]
    assert "Use 128-bit loads and double buffering." in prompt and "[web1] CUDA C++ Best Practices Guide <https" in prompt
    assert any(s.startswith("[web1] CUDA C++ Best Practices Guide") for s in first.sources)
    assert "1 pages cited" in first.notice


def test_server_without_web_search_is_one_notice(workload):
    """A server that refuses the Responses API: one notice, the proposal still comes from the knowledge base."""
    with OpenAIServerDouble([404, answer()]) as server:
        p = LlmProposer("m", None, server.base_url, research=True, web_search=True, max_retries=0)
        proposal = p.propose(ctx(workload))
    assert "web search unavailable on this server (404)" in proposal.notice
    assert proposal.spec.entry == "sgemm_naive" and "# Guidance" in server.requests[1]["messages"][1]["content"]


def test_stop_now_abandons_the_model_call_in_flight(tmp_path, workload):
    """SessionControl's stop-now while the server holds the request: run() raises ModelCallAborted
    within a second or so, records no attempt, and the session resumes from before the call."""
    import threading
    import time

    from warpsmith.agent.proposers.model_client import ModelCallAborted
    with OpenAIServerDouble([OpenAIServerDouble.STALL]) as server:
        s = open_session(tmp_path, workload, LlmProposer("gpt-5-mini", None, server.base_url), 3)
        raised = []
        loop = threading.Thread(target=lambda: raised.append(_raises(s.run)), daemon=True)
        loop.start()
        assert server.stalled.wait(60), "the session never asked the model"
        asked = time.monotonic()
        s.stop_now()
        loop.join(60)
        took = time.monotonic() - asked
    print(f"stop-now to run() returning, model call in flight: {took:.2f} s")
    assert isinstance(raised[0], ModelCallAborted) and took < 10
    assert s.state["iteration"] == 0 and s.state["history"] == [] and s.proposer.calls == 0
    s.end("stopped")
    s.close()

    info = SessionInfo.load(session_dir(tmp_path / "store", "llm-session"))
    with OpenAIServerDouble([answer()]) as server:
        resumed = Session(info, session_dir(tmp_path / "store", info.id), workload, EvaluatorDouble(workload),
                          LlmProposer("gpt-5-mini", None, server.base_url), Tracker(tmp_path / "store"))
        resumed.control.set_budget(1)
        assert resumed.run() == "finished"
    assert [a.tokens for a in resumed.state["history"]] == [1200]  # the abandoned call counts nothing
    resumed.close()


def _raises(call):
    try:
        call()
    except Exception as e:
        return e
    return None


def test_unreachable_server_ends_the_session_naming_the_url(workload):
    """A refused connection after the client's retries is ProposerUnavailable (the session stops,
    resumable), one line naming the URL, never the key."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(ProposerUnavailable) as e:
        LlmProposer("m", None, url, max_retries=0).propose(ctx(workload))
    assert str(e.value) == f"cannot reach the model server at {url} (connection refused); " \
                           "check --base-url or start the server"


def closed_port() -> int:
    """A port nothing listens on: bound, then closed."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_prompt_states_the_16_bit_dtype_policy(workload):
    """A bf16 workload's prompt names its 16-bit arrays, their C type and the accumulation
    policy; an fp32 workload's prompt has no such line."""
    from workload_factory import ROOT

    from warpsmith.agent.proposers.prompt import user_message
    bf16 = load_workload(ROOT / "examples" / "attention_bf16")
    text = user_message(ctx(bf16))
    assert "Narrow data: q bfloat16, k bfloat16, v bfloat16, o bfloat16" in text
    assert "__nv_bfloat16 (<cuda_bf16.h>)" in text and "accumulate in float32" in text
    assert "Narrow data" not in user_message(ctx(workload))


def test_a_batch_is_parallel_calls_each_with_another_idea(workload):
    """propose_batch(3): three calls to the server, each prompt with a different idea from HINTS, named for the
    attempts they become, each with the best as its parent."""
    from warpsmith.agent.evaluate.records import Best, CandidateSpec
    from warpsmith.agent.proposers.llm import HINTS
    best = Best(spec=CandidateSpec(name="naive", source=NAIVE, entry="sgemm_naive", grid=["1"], block=["1"]),
                score_ms=2.0, cases=[], iteration=4)
    c = ProposalContext(workload, DeviceFacts(name="H200", arch="sm_90"), 5, "optimise", [], best, None, {})
    with OpenAIServerDouble([answer(rationale="a"), answer(rationale="b"), answer(rationale="c")]) as server:
        batch = LlmProposer("m", None, server.base_url).propose_batch(c, 3)
    assert [p.spec.name for p in batch] == ["llm-5", "llm-6", "llm-7"] and {p.spec.parent for p in batch} == {4}
    prompts = [r["messages"][1]["content"] for r in server.requests]
    tried = {h for h in HINTS for p in prompts if h in p}
    assert len(server.requests) == 3 and len(tried) == 3
    assert all(sum(h in p for h in HINTS) == 1 for p in prompts)  # one idea per call


def test_a_batch_keeps_the_calls_that_answered(workload):
    """One call of three answers garbage: two proposals, the failed call's tokens charged to the batch; all three
    failing is the step's ProposalError."""
    c = ctx(workload, 3)
    with OpenAIServerDouble([answer(), "garbage", answer()]) as server:
        batch = LlmProposer("m", None, server.base_url).propose_batch(c, 3)
    assert len(batch) == 2 and [p.spec.name for p in batch] == ["llm-3", "llm-4"]
    assert sum(p.tokens for p in batch) == 3 * 1200
    with OpenAIServerDouble(["x", "y"]) as server:
        with pytest.raises(ProposalError, match="not a valid candidate"):
            LlmProposer("m", None, server.base_url).propose_batch(c, 2)


def test_a_repair_is_one_call_even_in_a_batch(workload):
    """In repair mode a batch is the single repair of the last failure."""
    failed = Attempt(iteration=1, name="llm-1", proposer="llm", status="wrong_answer", detail="wrong")
    with OpenAIServerDouble([answer(), answer()]) as server:
        batch = LlmProposer("m", None, server.base_url).propose_batch(ctx(workload, 2, "repair", [failed], failed), 3)
    assert len(batch) == 1 and len(server.requests) == 1
