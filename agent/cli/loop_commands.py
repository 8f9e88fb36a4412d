"""`warpsmith run / resume / runs / export / ui`: sessions of the loop."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..evaluate.backend_choice import BACKENDS
from ..spec.workload import load_workload
from ..tracking.options import check_readable
from .check import add_reference_timeout, add_separate_judge, preflight
from .errors import CliError
from .options import limit_changes, resume_options, run_options, tracking_options
from .sessions import drive_session, resume_session, start_session

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from ..tracking.past_runs import PastRun
    from .help import Subcommands

# A step's batch: compiled in parallel, one NVRTC process per host core, at most 4 (a
# larger batch commits more attempts before their siblings' results are known).
DEFAULT_BATCH = max(1, min(4, os.cpu_count() or 1))


def add_loop_commands(sub: Subcommands) -> None:
    r = sub.add_parser("run", help="run the loop on a workload (headless with a progress bar)")
    r.add_argument("workload", type=Path)
    r.add_argument("--proposer", choices=("tune", "llm"), help="default: llm when OPENAI_API_KEY or --base-url is set, else tune")
    r.add_argument("--budget", type=int, default=30, help="iterations (repairs count)")
    r.add_argument("--seed", type=int, default=0, help="seed of the tuner's search")
    r.add_argument("--kernel", help="the workload kernel the tuner searches (default: the one with most knobs)")
    r.add_argument("--model", default="gpt-5-mini")
    r.add_argument("--reasoning-effort", default="medium")
    r.add_argument("--base-url", default="")
    r.add_argument("--nvidia-research", action="store_true",
                   help="give the model notes from the built-in CUDA optimisation knowledge base, cited")
    r.add_argument("--web-search", action="store_true",
                   help="with --nvidia-research: the model also searches NVIDIA's documentation once (Responses "
                        "API web search, NVIDIA domains only), cited in the prompt")
    r.add_argument("--trace", action="store_true",
                   help="trace every model call in MLflow (LangChain autologging); a tracing error is a warning")
    r.add_argument("--use-nsight", action="store_true",
                   help="profile each passing candidate with Nsight Compute (ncu, clocks untouched) and "
                        "feed the metrics to the proposer")
    r.add_argument("--headless", action="store_true", help="a progress bar instead of the full-screen app")
    r.add_argument("--prices", type=Path, help="a TOML price table for the model (default: ~/.config/warpsmith/prices.toml)")
    _limit_args(r)
    _cases_arg(r)
    _search_args(r)
    _common(r)

    s = sub.add_parser("resume", help="continue a stopped, paused or crashed session from its last checkpoint")
    s.add_argument("session")
    s.add_argument("--budget", type=int, help="a new iteration budget")
    s.add_argument("--headless", action="store_true")
    _limit_args(s)
    _common(s)

    b = sub.add_parser("bench", help="starting kernel, tuner's best and every baseline per workload, in one table")
    b.add_argument("workloads", nargs="*", type=Path, help="workload directories (default: examples/*)")
    b.add_argument("--budget", type=int, default=40, help="tune iterations per workload (0: no tuning)")
    b.add_argument("--shapes", type=Path, metavar="FILE",
                   help="your own performance cases, per workload ([[NAME]] tables of name and sizes): "
                        "they replace each workload's, and only the workloads the file names are benched")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--kernel", help="the workload kernel the tuner searches (default: the one with most knobs)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--skip-baseline", action="append", default=[], metavar="KIND",
                   help="leave a baseline out (e.g. torch_compile, whose first call per shape compiles for minutes)")
    _limit_args(b)
    _cases_arg(b)
    _search_args(b)
    _common(b)

    d = sub.add_parser("diff", help="unified diff of two attempts' kernels with their per-case results")
    d.add_argument("session")
    d.add_argument("a", type=int, help="an attempt (iteration number)")
    d.add_argument("b", type=int, nargs="?", help="another attempt (default: the best)")
    d.add_argument("--parent", action="store_true", help="compare A with the attempt it was derived from")
    d.add_argument("--store", type=Path, default=Path("mlruns"))

    ls = sub.add_parser("runs", help="list past sessions from MLflow")
    ls.add_argument("workload", nargs="?", help="only this workload's sessions: its name, directory or workload.toml")
    ls.add_argument("--store", type=Path, default=Path("mlruns"))
    ls.add_argument("--tracking-uri")
    ls.add_argument("--attempts", metavar="SESSION", help="list this session's attempts (its child runs) instead")

    e = sub.add_parser("export", help="write a session's best kernel, launch.json, report and kernel.py (launch() for CuPy and torch)")
    e.add_argument("session")
    e.add_argument("dir", type=Path)
    e.add_argument("--store", type=Path, default=Path("mlruns"))

    u = sub.add_parser("ui", help="start the MLflow UI on the store; Ctrl-C stops it")
    u.add_argument("workload", nargs="?", help="open this workload's runs (a name or its directory)")
    u.add_argument("--store", type=Path, default=Path("mlruns"))
    u.add_argument("--port", type=int, default=5000)
    u.add_argument("--host", default="127.0.0.1")


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-budget", type=float, help="stop after this many seconds of running (0: no limit)")
    p.add_argument("--token-budget", type=int, help="stop once the model has used this many tokens")
    p.add_argument("--cost-budget", type=float, help="stop once the model has cost this many dollars")
    p.add_argument("--patience", type=int, help="stop after this many attempts in a row without a new best")


def _cases_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", type=lambda v: [n.strip() for n in v.split(",") if n.strip()], default=[],
                   metavar="NAME[,NAME]",
                   help="time and score only these performance cases when tuning (the others are still validated)")


def _search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, metavar="N",
                   help=f"candidates proposed per step, compiled in parallel, each its own attempt (default {DEFAULT_BATCH}; "
                        "the tuner's on Ray at least two per GPU, run side by side; 1: one attempt at a time)")
    p.add_argument("--no-early-reject", action="store_true",
                   help="time every candidate in full (default: one clearly slower than the best stops after "
                        "its first launches, recorded as rejected_early)")
    p.add_argument("--no-overlap", action="store_true",
                   help="evaluate a step's candidates one at a time as the loop reaches each (default: the GPU "
                        "runs them back to back while the loop logs, checkpoints and proposes)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, default=Path("mlruns"), help="sessions and the MLflow store (default ./mlruns)")
    p.add_argument("--tracking-uri", help="another MLflow tracking URI")
    p.add_argument("--no-tracking", action="store_true")
    p.add_argument("--hot", action="store_true", help="no L2 flush before timed launches")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a kernel may run before it is killed")
    p.add_argument("--device", type=int, default=0)
    add_separate_judge(p)
    add_reference_timeout(p)
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where candidates are evaluated: this machine's GPU (local) or one Ray actor per GPU "
                        "(ray: pip install 'warpsmith[ray]')")
    p.add_argument("--ray-address", default="", help="a running Ray cluster for --backend ray (default: start one here)")
    p.add_argument("--ray-gpus", type=int, default=0, help="GPU actors for --backend ray (default: every GPU of the cluster)")


def cmd_run(args: argparse.Namespace) -> int:
    from ..proposers.llm import ProposerUnavailable
    from ..proposers.model_client import ModelUnavailable
    from ..worker.process import GpuUnavailable
    workload = load_workload(args.workload)  # a broken spec fails here, before any GPU work
    from ..drafting.drafting import refuse_drafted
    if refuse_drafted(workload):
        raise CliError(str(refuse_drafted(workload)))
    options = run_options(args)
    check_readable(options.tracking)
    if options.search.proposer.kind == "tune" and workload.needs_start_kernel("run --proposer tune"):
        raise CliError(str(workload.needs_start_kernel("run --proposer tune")))
    preflight(workload, timeout_s=args.reference_timeout)  # memory and references, before any session folder
    choice = options.search.proposer
    try:
        if choice.kind == "llm" and choice.base_url:  # before minutes of GPU set-up, not at the first model call
            from ..proposers.model_client import check_reachable
            check_reachable(choice.base_url)
        session = start_session(options, workload)
    except (ProposerUnavailable, ModelUnavailable, ValueError) as e:  # no key, no server, a broken price table
        raise CliError(str(e))
    except GpuUnavailable as e:  # before any session folder or MLflow run
        from .gpu_first import NO_GPU_EXIT, no_gpu_line
        print(no_gpu_line(e), file=sys.stderr)
        return NO_GPU_EXIT
    from ..worker.torch_baseline import note_torch_missing
    note_torch_missing([workload])
    return drive_session(session, options, None if args.headless else args.front_end)


def cmd_resume(args: argparse.Namespace) -> int:
    from ..loop.session import stored_info
    from ..proposers.llm import ProposerUnavailable
    from ..proposers.model_client import ModelUnavailable, check_reachable
    try:
        check_readable(tracking_options(args))  # a store this mlflow cannot open: said first
        options = resume_options(args, stored_info(args.store, args.session).search)
        choice = options.search.proposer
        if choice.kind == "llm" and choice.base_url:  # one line now, not an error after minutes of GPU set-up
            check_reachable(choice.base_url)
        session = resume_session(args.session, options.evaluation, options.tracking)
    except (FileNotFoundError, ProposerUnavailable, ModelUnavailable, ValueError) as e:  # ValueError: a broken price table, a spec
        raise CliError(str(e))
    if args.budget is not None:
        session.set_budget(args.budget)
    if limit_changes(args):
        session.set_limits(**limit_changes(args))
    print(f"resuming {session.info.id} at iteration {session.state.get('iteration', 0)} of "
          f"{session.state.get('budget', session.info.search.budget)}")
    return drive_session(session, options, None if args.headless else args.front_end)


def cmd_runs(args: argparse.Namespace) -> int:
    import datetime

    from ..tracking.past_runs import past_runs
    from ..tracking.tracker import Tracker
    if args.tracking_uri is None and not (Path(args.store) / "mlflow.db").is_file():
        # A read-only command creates no store: nothing was tracked here yet.
        where = f"no MLflow store at {args.store} (warpsmith run WORKLOAD writes one; --store names another)"
        if args.attempts:
            raise CliError(f"no MLflow run for session {args.attempts}: {where}")
        print(f"no runs yet: {where}")
        return 0
    client = Tracker(args.store, args.tracking_uri).client
    runs = past_runs(client, _workload_name(args.workload))
    if args.attempts:
        return _print_attempts(client, [r for r in runs if r.session == args.attempts], args.attempts)
    # The result: the dispatch where it paid, else the best; against the fastest library of each case
    print(f"{'date':<17}{'session':<44}{'proposer':<9}{'result ms':>10}{'vs libs':>9}  status")
    for r in runs:
        when = datetime.datetime.fromtimestamp(r.started).strftime("%Y-%m-%d %H:%M")
        best_text = "-" if r.best_ms is None else f"{r.best_ms:.4f}"
        speed_text = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        print(f"{when:<17}{r.session:<44}{r.proposer:<9}{best_text:>10}{speed_text:>9}  {r.status}")
    return 0


def _workload_name(given: str | None) -> str | None:
    """`runs` takes a workload's name, its directory or its workload.toml (read for the name)."""
    if given and Path(given).exists():
        return load_workload(given).name
    return given


def _print_attempts(client: MlflowClient, parents: list[PastRun], session: str) -> int:
    """One line per child run: what MLflow's compare view puts side by side."""
    from ..tracking.past_runs import past_attempts
    if not parents:
        raise CliError(f"no MLflow run for session {session} in this store (warpsmith runs lists them)")
    parent = parents[0]
    attempts = past_attempts(client, parent)
    print(f"session {session}: parent run {parent.run_id} ({parent.status}), {len(attempts)} child runs")
    print(f"{'#':>4}  {'child run':<34}{'status':<10}{'score ms':>10}  knobs")
    for a in attempts:
        score = "-" if a.score_ms is None else f"{a.score_ms:.4f}"
        knobs = " ".join(f"{k}={v}" for k, v in a.knobs)
        print(f"{'?' if a.iteration is None else a.iteration:>4}  {a.run_id:<34}{a.status:<10}{score:>10}  {knobs or '-'}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..loop.session import stored_session
    from ..runtime.device_facts import DeviceFacts
    from ..tracking.best_kernel import write_best
    try:
        info, state = stored_session(args.store, args.session)
    except FileNotFoundError as e:
        raise CliError(str(e))
    best = state.get("best")
    if not best:
        raise CliError("this session has no kernel that passed validation", 1)
    workload = load_workload(info.workload, info.shapes)  # a spec broken since: SpecError, exit 2
    try:
        write_best(args.dir, workload, best, state.get("start"), state.get("baseline", {}),
                   state.get("baseline_score_ms"), DeviceFacts.from_dict(state.get("facts", {})), module=True,
                   dispatch=state.get("dispatch"), result=state.get("result"))
    except ValueError as e:  # options or includes NVRTC would refuse (a tampered session), an ExprError
        raise CliError(str(e), 1)
    print(f"wrote {', '.join(sorted(p.name for p in args.dir.iterdir()))} to {args.dir}")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from ..tracking.mlflow_ui import UiFailed, serve
    try:
        return serve(args.store, args.host, args.port, args.workload)
    except UiFailed as e:
        raise CliError(str(e)) from None
