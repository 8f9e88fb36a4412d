"""Tokens by kind and dollars from the price table; the llm proposer's totals match
the scripted server's usage (OpenAIServerDouble stands in for a paid model)."""

from __future__ import annotations

import pytest
from openai_server_double import OpenAIServerDouble
from test_llm_proposer import answer
from workload_factory import make_sgemm_workload

from warpsmith.agent.proposers.base import ProposalContext
from warpsmith.agent.proposers.llm import LlmProposer
from warpsmith.agent.proposers.pricing import DEFAULT_PRICES, FREE, Price, PriceTable, Usage, load_prices, price_for
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload


def test_cost_splits_cached_input_and_counts_reasoning_as_output():
    u = Usage(input=10_000, cached_input=4_000, output=2_000, reasoning=1_500)
    assert Price(1.25, 0.125, 10.0).cost(u) == pytest.approx((6_000 * 1.25 + 4_000 * 0.125 + 2_000 * 10.0) / 1e6)
    assert Usage.from_metadata({"input_tokens": 7, "output_tokens": 3, "input_token_details": {"cache_read": 2},
                                "output_token_details": {"reasoning": 1}}) == Usage(7, 2, 3, 1)


def test_price_file_overrides_and_local_servers_are_free(tmp_path):
    f = tmp_path / "prices.toml"
    f.write_text('[models."gpt-5-mini"]\ninput = 1.0\ncached_input = 0.5\noutput = 4.0\n'
                 '[models."my-local"]\ninput = 0.1\noutput = 0.2\n')
    table = load_prices(f)
    assert price_for("gpt-5-mini", None, table) == Price(1.0, 0.5, 4.0)
    assert price_for("gpt-5", None, table) == DEFAULT_PRICES["gpt-5"]
    assert price_for("gpt-5-mini-2025-08-07", None, PriceTable(DEFAULT_PRICES, {})) == DEFAULT_PRICES["gpt-5-mini"]
    assert price_for("gpt-5", "http://127.0.0.1:8000/v1", table) == FREE
    assert price_for("my-local", "http://127.0.0.1:8000/v1", table) == Price(0.1, 0.1, 0.2)
    assert price_for("mystery", None, table) is None
    assert price_for("gpt-4.1-nano", None, table) is None and price_for("o3-pro", None, table) is None
    assert price_for("gpt-5-latest", None, table) == DEFAULT_PRICES["gpt-5"]
    f.write_text('[models."x"]\ninput = "cheap"\n')
    with pytest.raises(ValueError, match="prices.toml: a price table has"):
        load_prices(f)
    with pytest.raises(ValueError, match="--prices .*nope.toml: no such file"):
        load_prices(tmp_path / "nope.toml")  # a path given but missing is not silently unpriced


def test_llm_totals_match_the_scripted_usage(tmp_path, monkeypatch):
    """Two calls of 1000 input + 200 output tokens at $2 / $8 per million: $0.0072 in all."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    ctx = ProposalContext(w, DeviceFacts(arch="sm_90"), 1, "optimise", [], None, None, {})
    with OpenAIServerDouble([answer(), answer()]) as server:
        p = LlmProposer("m", None, server.base_url, prices=PriceTable({}, {"m": Price(2.0, 1.0, 8.0)}))
        first, second = p.propose(ctx), p.propose(ctx)
    assert first.cost_usd == pytest.approx((1000 * 2.0 + 200 * 8.0) / 1e6) == second.cost_usd
    assert p.usage == Usage(2000, 0, 400, 0) and p.cost_usd == pytest.approx(0.0072)


def test_resume_after_the_price_table_moved_warns_and_goes_on(tmp_path, monkeypatch, capsys):
    """`run --prices FILE` then the file is moved: resume is one warning, not a dead session."""
    from warpsmith.agent.cli.sessions import resume_session
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import SessionInfo, session_dir
    from warpsmith.agent.proposers.choice import ProposerChoice
    from warpsmith.agent.tracking.options import TrackingOptions
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")
    w = make_sgemm_workload(tmp_path / "w")
    store = tmp_path / "store"
    directory = session_dir(store, "s1")
    directory.mkdir(parents=True)
    choice = ProposerChoice("llm", model="gpt-5-mini", base_url="http://127.0.0.1:9/v1", prices=str(tmp_path / "gone.toml"))
    SessionInfo("s1", str(w), SearchOptions(choice, 3)).save(directory)
    session = resume_session("s1", EvaluationOptions(), TrackingOptions(store, enabled=False))
    try:
        assert f"price table {tmp_path / 'gone.toml'} is gone; using the default prices" in capsys.readouterr().err
        assert session.info.search.proposer.prices == ""
    finally:
        session.close()
