"""argparse stops at agent/cli: the session commands turn their arguments into one
SessionOptions, and session.json keeps its search part in the flat form sessions have
always been stored in (old files load)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.cli.commands import build_parser
from warpsmith.agent.cli.loop_commands import DEFAULT_BATCH
from warpsmith.agent.cli.options import bench_options, resume_options, run_options
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.loop.limits import Limits
from warpsmith.agent.loop.options import SearchOptions, SessionOptions
from warpsmith.agent.loop.session import SessionInfo
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.tracking.options import TrackingOptions
from warpsmith.agent.worker.protocol import TimingConfig

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "session-before-rehouse"


def _argparse_uses(source: str) -> list[str]:
    """What in `source` could carry the command line: argparse imported, a Namespace
    named, or a parameter called args / namespace (kernel arguments are kernel_args)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == "argparse"]
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append("from argparse import")
        elif isinstance(node, (ast.Name, ast.Attribute)) and (getattr(node, "id", None) or node.attr) == "Namespace":
            found.append(f"Namespace at line {node.lineno}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            found += [f"parameter {p.arg} at line {node.lineno}" for p in a.posonlyargs + a.args + a.kwonlyargs
                      if p.arg in ("args", "namespace")]
    return found


def test_nothing_below_the_cli_sees_argparse():
    """No module under agent/ outside agent/cli, nor the app (tui/), imports argparse, names a Namespace or takes `args`."""
    outside = [p for p in sorted((ROOT / "agent").rglob("*.py")) if "cli" not in p.relative_to(ROOT / "agent").parts[:1]]
    outside += sorted((ROOT / "tui").rglob("*.py"))
    assert len(outside) > 50  # the whole of agent/ and tui/, not an empty glob
    uses = {str(p.relative_to(ROOT)): u for p in outside if (u := _argparse_uses(p.read_text()))}
    assert uses == {}


def test_the_argparse_check_sees_what_it_looks_for():
    """The checker is not vacuous: each way a Namespace can travel is found (the app's entry as it was before
    SessionOptions among them); *args and a local list are not."""
    assert _argparse_uses("import argparse") == ["import argparse"]
    assert _argparse_uses("from argparse import Namespace") == ["from argparse import"]
    assert _argparse_uses("x = argparse.Namespace()")[0].startswith("Namespace")
    assert _argparse_uses("def f(session, args):\n    return args.store") == ["parameter args at line 1"]
    assert _argparse_uses("g = lambda namespace: 0") == ["parameter namespace at line 1"]
    assert _argparse_uses("def f(*args, **kwargs):\n    args = []\n    args.append(1)") == []
    before = "def run_app(session, args) -> str:\n    return resume_session(session.info.id, args)"  # tui/cli.py was
    assert _argparse_uses(before) == ["parameter args at line 1"]


def test_run_arguments_become_session_options(tmp_path, monkeypatch):
    """`run` flags land in their parts: proposer choice, budget and limits, evaluation, tracking."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    prices = tmp_path / "prices.toml"
    args = build_parser().parse_args([
        "run", str(tmp_path / "w"), "--budget", "7", "--seed", "3", "--kernel", "tiled", "--patience", "4",
        "--time-budget", "0", "--cases", "a,b", "--use-nsight", "--hot", "--timeout", "5", "--device", "1",
        "--store", str(tmp_path / "store"), "--no-tracking", "--prices", str(prices), "--reference-timeout", "9",
        "--batch", "5", "--no-early-reject"])
    options = run_options(args)
    assert options == SessionOptions(
        SearchOptions(ProposerChoice("tune", 3, "tiled", prices=str(prices.resolve())), 7, Limits(patience=4),
                      nsight=True, cases=("a", "b"), batch=5, early_reject=False),
        EvaluationOptions(TimingConfig(cold_l2=False), 1, 5.0, 9.0),
        TrackingOptions(tmp_path / "store", None, enabled=False))


def test_run_picks_llm_with_a_server_and_keeps_the_model_only_for_llm(tmp_path, monkeypatch):
    """Without --proposer: llm when --base-url (or a key) is given, with its model and effort; tune keeps neither."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    parse = build_parser().parse_args
    llm = run_options(parse(["run", "w", "--base-url", "http://h/v1", "--model", "m", "--trace"])).search.proposer
    assert (llm.kind, llm.model, llm.reasoning_effort, llm.base_url) == ("llm", "m", "medium", "http://h/v1")
    assert run_options(parse(["run", "w", "--base-url", "http://h/v1", "--trace"])).tracking.trace
    tune = run_options(parse(["run", "w", "--proposer", "tune", "--model", "m", "--trace"]))
    assert (tune.search.proposer.model, tune.search.proposer.reasoning_effort, tune.tracking.trace) == ("", "", False)


def test_bench_builds_its_options_without_the_run_flags(tmp_path):
    """`bench`'s parser has no llm or front-end flags faked in; its sessions are tune sessions."""
    args = build_parser().parse_args(["bench", "--budget", "5", "--kernel", "warptile", "--cases", "square-4096",
                                      "--store", str(tmp_path)])
    assert not {"model", "base_url", "use_nsight", "headless", "prices"} & set(vars(args))
    options = bench_options(args)
    assert options.search == SearchOptions(ProposerChoice("tune", 0, "warptile"), 5, cases=("square-4096",),
                                           batch=DEFAULT_BATCH)
    assert options.tracking.store == tmp_path and options.evaluation == EvaluationOptions()


def test_resume_keeps_the_stored_search(tmp_path):
    """`resume` takes the search from session.json and this command's evaluation and tracking."""
    stored = SearchOptions(ProposerChoice("llm", model="m"), 9, Limits(tokens=100))
    args = build_parser().parse_args(["resume", "s1", "--budget", "12", "--hot", "--store", str(tmp_path)])
    options = resume_options(args, stored)
    assert options.search == stored and not options.evaluation.timing.cold_l2 and options.tracking.store == tmp_path


def test_session_stored_before_the_options_records_loads_and_saves_the_same_form(tmp_path):
    """The fixture's session.json (written before SessionOptions) loads, and saving it writes the same keys and values."""
    shutil.copytree(FIXTURE, tmp_path / "s")
    before = json.loads((tmp_path / "s" / "session.json").read_text())
    info = SessionInfo.load(tmp_path / "s")
    assert info.search == SearchOptions(ProposerChoice("tune"), 2) and info.status == "finished"
    info.save(tmp_path / "s")
    assert json.loads((tmp_path / "s" / "session.json").read_text()) == before


def test_every_search_option_survives_session_json(tmp_path):
    """Each field of the search, the proposer's included, reads back as written; older files lacking a key get its default."""
    search = SearchOptions(ProposerChoice("llm", 4, "tiled", "m", "high", "http://h/v1", True, True, "/p.toml"), 11,
                           Limits(time_s=60.0, cost_usd=2.5), nsight=True, cases=("square-256",), batch=3,
                           early_reject=False)
    SessionInfo("s1", str(make_sgemm_workload(tmp_path / "w")), search, "run-id", "paused", 1.0).save(tmp_path)
    assert SessionInfo.load(tmp_path) == SessionInfo("s1", str(tmp_path / "w"), search, "run-id", "paused", 1.0)
    data = json.loads((tmp_path / "session.json").read_text())
    for key in ("cases", "prices", "web_search", "batch", "early_reject"):  # keys older sessions were stored without
        del data[key]
    assert SearchOptions.from_stored(data) == SearchOptions(
        ProposerChoice("llm", 4, "tiled", "m", "high", "http://h/v1", True), 11, Limits(time_s=60.0, cost_usd=2.5), True)


def test_a_base_urls_credentials_never_reach_the_store():
    """session.json keeps the server, not a `user:key@` part of --base-url."""
    stored = SearchOptions(ProposerChoice("llm", base_url="https://user:sk-proxy-SECRET@llm.example:8443/v1"), 5).stored()
    assert stored["base_url"] == "https://llm.example:8443/v1" and "SECRET" not in str(stored)
    assert SearchOptions(ProposerChoice("llm", base_url="http://localhost:8000/v1"), 5).stored()["base_url"] == \
        "http://localhost:8000/v1"
    assert SearchOptions(ProposerChoice("llm", base_url="http://u:k@[::1]:8000/v1"), 5).stored()["base_url"] == \
        "http://[::1]:8000/v1"


def test_a_separate_judge_with_the_ray_backend_is_refused_in_one_line():
    """The judge process starts beside the local backend's worker; with Ray's actors the flag would do nothing."""
    from types import SimpleNamespace

    from warpsmith.agent.cli.errors import CliError
    from warpsmith.agent.cli.options import evaluation_options
    args = SimpleNamespace(hot=False, device=0, timeout=10.0, reference_timeout=60.0, backend="ray",
                           ray_address="", ray_gpus=0, separate_judge=True)
    with pytest.raises(CliError, match=r"^--separate-judge: the judge process runs beside the local backend's"):
        evaluation_options(args)
    local = evaluation_options(SimpleNamespace(**{**vars(args), "backend": "local"}))
    assert local.separate_judge and local.backend == "local"
