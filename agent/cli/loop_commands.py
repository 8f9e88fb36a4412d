"""`warpsmith run / resume / runs / export / ui`: sessions of the loop."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from ..spec.reference_run import REFERENCE_TIMEOUT_S
from ..spec.workload import load_workload
from .check import add_reference_timeout, preflight
from .errors import CliError


def add_loop_commands(sub) -> None:
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
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--kernel", help="the workload kernel the tuner searches (default: the one with most knobs)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--skip-baseline", action="append", default=[], metavar="KIND",
                   help="leave a baseline out (e.g. torch_compile, whose first call per shape compiles for minutes)")
    b.set_defaults(model="", reasoning_effort="", base_url="", nvidia_research=False, web_search=False,
                   use_nsight=False, headless=True, prices=None)
    _limit_args(b)
    _cases_arg(b)
    _common(b)

    d = sub.add_parser("diff", help="unified diff of two attempts' kernels with their per-case results")
    d.add_argument("session")
    d.add_argument("a", type=int, help="an attempt (iteration number)")
    d.add_argument("b", type=int, nargs="?", help="another attempt (default: the best)")
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


LIMIT_FLAGS = {"time_budget": "time_s", "token_budget": "tokens", "cost_budget": "cost_usd", "patience": "patience"}


def _limit_args(p) -> None:
    p.add_argument("--time-budget", type=float, help="stop after this many seconds of running (0: no limit)")
    p.add_argument("--token-budget", type=int, help="stop once the model has used this many tokens")
    p.add_argument("--cost-budget", type=float, help="stop once the model has cost this many dollars")
    p.add_argument("--patience", type=int, help="stop after this many attempts in a row without a new best")


def _limits(args) -> dict:
    """The limit flags given, as Limits fields."""
    return {field: getattr(args, flag) for flag, field in LIMIT_FLAGS.items() if getattr(args, flag, None) is not None}


def _cases_arg(p) -> None:
    p.add_argument("--cases", type=lambda v: [n.strip() for n in v.split(",") if n.strip()], default=[],
                   metavar="NAME[,NAME]",
                   help="time and score only these performance cases when tuning (the others are still validated)")


def _common(p) -> None:
    p.add_argument("--store", type=Path, default=Path("mlruns"), help="sessions and the MLflow store (default ./mlruns)")
    p.add_argument("--tracking-uri", help="another MLflow tracking URI")
    p.add_argument("--no-tracking", action="store_true")
    p.add_argument("--hot", action="store_true", help="no L2 flush before timed launches")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a kernel may run before it is killed")
    p.add_argument("--device", type=int, default=0)
    add_reference_timeout(p)


def _proposer(info):
    """Raises ProposerUnavailable (no key, ...) before any session is created."""
    from ..proposers.tune import TuneProposer
    tuner = TuneProposer(seed=info.seed, kernel=info.kernel or None)
    if info.proposer == "tune":
        return tuner
    from ..proposers.llm import HybridProposer, LlmProposer
    from ..proposers.pricing import load_prices
    llm = LlmProposer(info.model, info.reasoning_effort or None, info.base_url or None, research=info.research,
                      web_search=info.web_search, prices=load_prices(Path(info.prices) if info.prices else None))
    return HybridProposer(llm, tuner)


def _tracker(args):
    from ..tracking.tracker import NullTracker, Tracker
    return NullTracker() if args.no_tracking else Tracker(args.store, args.tracking_uri)


def _open(info, directory: Path, args, proposer=None, gpu_first: bool = False):
    """gpu_first: start the GPU worker before the tracker or checkpoint exists; without
    a usable GPU nothing is left behind (agent/cli/gpu_first.py)."""
    from ..evaluate.evaluator import Evaluator
    from ..loop.session import Session
    from ..worker.protocol import TimingConfig
    workload = load_workload(info.workload).timing_only(info.cases)
    evaluator = Evaluator(workload, TimingConfig(cold_l2=not args.hot), args.device, args.timeout,
                          worker_log=directory / "worker.log",
                          reference_timeout_s=getattr(args, "reference_timeout", REFERENCE_TIMEOUT_S))
    if gpu_first:
        from .gpu_first import start_worker_first
        start_worker_first(evaluator, directory)
    return Session(info, directory, workload, evaluator, proposer or _proposer(info), _tracker(args))


def _timing_text(t) -> str:
    return (f"warm-up {t.warmup}, {t.repetitions} launches or {t.max_total_ms:.0f} ms per case, "
            f"{'cold' if t.cold_l2 else 'hot'} L2")


def _drive(session, args) -> int:
    """Run in the app (args.front_end) or headless; however it ends, Ctrl-C
    included, the checkpoint is kept, the MLflow run gets its status and the best
    kernel is saved."""
    from ..evaluate.evaluator import EvaluationAborted
    from ..loop.headless import HeadlessProgress
    from ..proposers.llm import ProposerUnavailable
    from ..proposers.model_client import ModelCallAborted
    from ..worker.process import GpuUnavailable
    # With --json (bench) stdout carries only the JSON: progress and reports go to stderr.
    out = sys.stderr if getattr(args, "json", False) else sys.stdout
    progress = HeadlessProgress(session.info.budget, session.workload.baseline.primary or "baseline", out)
    status = "failed"
    front_end = getattr(args, "front_end", None)
    previous = _sigterm_stops(session)
    try:
        if front_end is not None and not getattr(args, "headless", True):
            status = front_end(session, args)
        else:
            status = session.run(progress)
    except (KeyboardInterrupt, EvaluationAborted, ModelCallAborted):
        status = "stopped"
    except GpuUnavailable as e:
        from .gpu_first import no_gpu_line
        print(no_gpu_line(e), file=sys.stderr)
        status = "no_gpu"
    except ProposerUnavailable as e:
        status = "stopped"
        print(f"warpsmith: error: {e}.", file=sys.stderr)
    except Exception as e:  # reference.py raising, a dead worker pipe, ...: one line, nothing lost
        status = "failed"
        print(f"warpsmith: error: {type(e).__name__}: {e}. The checkpoint is kept: "
              f"warpsmith resume {session.info.id}", file=sys.stderr)
    finally:
        finish_session(session, "failed" if status == "no_gpu" else status)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if status == "stopped":
        print(f"\nstopped. Resume with: warpsmith resume {session.info.id}", file=sys.stderr)
    if status == "finished":
        best = (session.dir / "best" / "report.md")
        print(best.read_text() if best.is_file() else "no candidate passed validation", file=out)
        print(f"session {session.info.id}: best kernel in {session.dir / 'best'}", file=out)
    return {"finished": 0, "stopped": 130, "paused": 0, "no_gpu": 3}.get(status, 1)


def _sigterm_stops(session):
    """SIGTERM (a job scheduler, `kill`) is "stop now": the GPU work in flight is killed,
    a model call in flight abandoned (within 0.1 s), and the graph drains at the step
    boundary, so the checkpoint stays resumable (an exception raised from the handler
    could land inside a checkpoint write), the MLflow run is KILLED and the best kernel
    saved. Returns the handler it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop_now(signum, frame):
        session.stop_now()
    return signal.signal(signal.SIGTERM, stop_now)


def finish_session(session, status: str) -> None:
    """Record how a session ended: session.json, the MLflow run's status, the best
    kernel; then release the GPU worker and the checkpoint."""
    session.info.status = status
    session.info.save(session.dir)
    session.save_best()
    session.tracker.end_session(status)
    session.evaluator.close()
    session.close()


def cmd_run(args) -> int:
    from ..proposers.llm import ProposerUnavailable
    from ..proposers.model_client import ModelUnavailable
    from ..worker.process import GpuUnavailable
    workload = load_workload(args.workload)  # a broken spec fails here, before any GPU work
    from ..drafting.drafting import refuse_drafted
    if refuse_drafted(workload):
        raise CliError(str(refuse_drafted(workload)))
    proposer = args.proposer or ("llm" if os.environ.get("OPENAI_API_KEY") or args.base_url else "tune")
    if proposer == "tune" and workload.needs_start_kernel("run --proposer tune"):
        raise CliError(workload.needs_start_kernel("run --proposer tune"))
    preflight(workload, timeout_s=args.reference_timeout)  # memory and references, before any session folder
    try:
        if proposer == "llm" and args.base_url:  # before minutes of GPU set-up, not at the first model call
            from ..proposers.model_client import check_reachable
            check_reachable(args.base_url)
        session = start_session(args, workload, proposer)
    except (ProposerUnavailable, ModelUnavailable, ValueError) as e:  # no key, no server, a broken price table
        raise CliError(str(e))
    except GpuUnavailable as e:  # before any session folder or MLflow run
        from .gpu_first import NO_GPU_EXIT, no_gpu_line
        print(no_gpu_line(e), file=sys.stderr)
        return NO_GPU_EXIT
    from ..worker.torch_baseline import note_torch_missing
    note_torch_missing([workload])
    return _drive(session, args)


def start_session(args, workload, proposer: str):
    """A new session on `workload` from run's arguments (also used by bench), its MLflow
    run started. Raises ProposerUnavailable (no key, ...) before anything is created."""
    from ..loop.session import SessionInfo, new_session_id, session_dir
    workload.timing_only(args.cases)  # an unknown case name fails here, before anything is created
    llm = proposer == "llm"
    info = SessionInfo(new_session_id(workload.name), str(workload.directory.resolve()), proposer, args.budget,
                       seed=args.seed, kernel=args.kernel or "", model=args.model if llm else "",
                       reasoning_effort=args.reasoning_effort if llm else "", base_url=args.base_url,
                       research=args.nvidia_research, web_search=args.web_search, nsight=args.use_nsight,
                       limits=_limits(args), prices=str(args.prices.resolve()) if args.prices else "",
                       cases=list(args.cases))
    chosen = _proposer(info)
    llm_part = getattr(chosen, "llm", None)
    if info.limits.get("cost_usd") and llm_part is not None and not (llm_part.price and llm_part.price.output):
        print(f"warpsmith: warning: --cost-budget cannot stop this session: model '{info.model}' has no price here "
              "(a local server, or not in the price table); add it to prices.toml or use --token-budget", file=sys.stderr)
    directory = session_dir(args.store, info.id)
    session = _open(info, directory, args, chosen, gpu_first=True)  # raises GpuUnavailable, leaving nothing
    run_id = session.tracker.start(workload.name, info.id, {
        "workload": workload.name, "workload_digest": workload.digest, "proposer": proposer, "model": info.model,
        "reasoning_effort": info.reasoning_effort, "budget": info.budget, "seed": info.seed,
        **{f"limit_{k}": v for k, v in info.limits.items()},
        "nvidia_research": info.research, "use_nsight": info.nsight, "timed_cases": ",".join(info.cases) or "all",
        "timing": _timing_text(session.evaluator.timing)})
    info.mlflow_run_id = run_id or ""
    info.save(directory)
    if getattr(args, "trace", False) and proposer == "llm" and run_id:
        from ..tracking.tracing import enable_tracing
        enable_tracing(session.tracker.uri, workload.name)
    print(f"session {info.id} ({proposer}, budget {info.budget})", file=sys.stderr if getattr(args, "json", False) else sys.stdout)
    return session


def resume_session(session_id: str, args):
    """Open a stored session for resuming; raises FileNotFoundError or ProposerUnavailable."""
    from ..loop.session import SessionInfo, session_dir
    directory = session_dir(args.store, session_id)
    if not (directory / "session.json").is_file():
        raise FileNotFoundError(f"no session '{session_id}' under {args.store}/sessions")
    info = SessionInfo.load(directory)
    # the workload may have changed since: checked again before the GPU is asked for
    preflight(load_workload(info.workload).timing_only(info.cases),
              timeout_s=getattr(args, "reference_timeout", REFERENCE_TIMEOUT_S))
    if info.prices and not Path(info.prices).is_file():  # moved since the session started: go on unpriced by it
        print(f"warpsmith: warning: the session's price table {info.prices} is gone; using the default prices",
              file=sys.stderr)
        info.prices = ""
    session = _open(info, directory, args)
    if info.mlflow_run_id:
        session.tracker.reopen(info.mlflow_run_id)
    return session


def cmd_resume(args) -> int:
    from ..proposers.llm import ProposerUnavailable
    from ..proposers.model_client import ModelUnavailable
    try:
        _check_server(args)
        session = resume_session(args.session, args)
    except (FileNotFoundError, ProposerUnavailable, ModelUnavailable, ValueError) as e:  # ValueError: a broken price table, a spec
        raise CliError(str(e))
    if args.budget is not None:
        session.set_budget(args.budget)
    if _limits(args):
        session.set_limits(**_limits(args))
    print(f"resuming {session.info.id} at iteration {session.state.get('iteration', 0)} of "
          f"{session.state.get('budget', session.info.budget)}")
    return _drive(session, args)


def _check_server(args) -> None:
    """A stored llm session's --base-url server, checked before anything is opened
    (ModelUnreachable: one line, not an error after minutes of GPU set-up)."""
    from ..loop.session import SessionInfo, session_dir
    from ..proposers.model_client import check_reachable
    directory = session_dir(args.store, args.session)
    if (directory / "session.json").is_file():
        info = SessionInfo.load(directory)
        if info.proposer == "llm" and info.base_url:
            check_reachable(info.base_url)


def cmd_runs(args) -> int:
    import datetime

    from ..tracking.tracker import Tracker, session_runs
    client = Tracker(args.store, args.tracking_uri).client
    runs = session_runs(client, _workload_name(args.workload))
    if args.attempts:
        return _print_attempts(client, [r for r in runs if r.info.run_name == args.attempts], args.attempts)
    print(f"{'date':<17}{'session':<44}{'proposer':<9}{'best ms':>10}{'vs base':>9}  status")
    for r in runs:
        when = datetime.datetime.fromtimestamp(r.info.start_time / 1000).strftime("%Y-%m-%d %H:%M")
        best = r.data.metrics.get("best_score_ms")
        speed = r.data.metrics.get("best_speedup_vs_baseline")
        best_text = "-" if best is None else f"{best:.4f}"
        speed_text = "-" if speed is None else f"{speed:.2f}x"
        print(f"{when:<17}{r.info.run_name:<44}{r.data.params.get('proposer', '?'):<9}"
              f"{best_text:>10}{speed_text:>9}  {r.info.status}")
    return 0


def _workload_name(given: str | None) -> str | None:
    """`runs` takes a workload's name, its directory or its workload.toml (read for the name)."""
    if given and Path(given).exists():
        return load_workload(given).name
    return given


def _print_attempts(client, parents: list, session: str) -> int:
    """One line per child run: what MLflow's compare view puts side by side."""
    from ..tracking.tracker import attempt_runs
    if not parents:
        raise CliError(f"no MLflow run for session {session} in this store (warpsmith runs lists them)")
    parent = parents[0]
    children = attempt_runs(client, parent.info.run_id)
    print(f"session {session}: parent run {parent.info.run_id} ({parent.info.status}), {len(children)} child runs")
    print(f"{'#':>4}  {'child run':<34}{'status':<10}{'score ms':>10}  knobs")
    for c in children:
        score = c.data.metrics.get("score_ms")
        knobs = " ".join(f"{k[5:]}={v}" for k, v in sorted(c.data.params.items()) if k.startswith("knob."))
        print(f"{c.data.tags.get('warpsmith.iteration', '?'):>4}  {c.info.run_id:<34}{c.info.status:<10}"
              f"{'-' if score is None else f'{score:.4f}':>10}  {knobs or '-'}")
    return 0


def cmd_export(args) -> int:
    from ..loop.session import stored_session
    from ..tracking.best_kernel import write_best
    try:
        info, state = stored_session(args.store, args.session)
    except FileNotFoundError as e:
        raise CliError(str(e))
    if not state.get("best"):
        raise CliError("this session has no kernel that passed validation", 1)
    workload = load_workload(info.workload)  # a spec broken since: SpecError, exit 2
    try:
        write_best(args.dir, workload, state["best"], state.get("start"), state.get("baseline", {}),
                   state.get("baseline_score_ms"), state.get("facts", {}), module=True)
    except ValueError as e:  # options or includes NVRTC would refuse (a tampered session), an ExprError
        raise CliError(str(e), 1)
    print(f"wrote {', '.join(sorted(p.name for p in args.dir.iterdir()))} to {args.dir}")
    return 0


def cmd_ui(args) -> int:
    from ..tracking.mlflow_ui import UiFailed, serve
    try:
        return serve(args.store, args.host, args.port, args.workload)
    except UiFailed as e:
        raise CliError(str(e)) from None
