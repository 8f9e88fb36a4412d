"""argparse stops here: each session command's arguments become one SessionOptions
(agent/loop/options.py), and nothing below the CLI sees a Namespace. A new flag is
added to its parser and read once here, into the record it belongs to."""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Optional

from ..evaluate.options import EvaluationOptions
from ..loop.limits import Limits
from ..loop.options import SearchOptions, SessionOptions
from ..proposers.choice import ProposerChoice
from ..tracking.options import TrackingOptions
from ..worker.protocol import TimingConfig
from .errors import CliError

LIMIT_FLAGS = {"time_budget": "time_s", "token_budget": "tokens", "cost_budget": "cost_usd", "patience": "patience"}


def limit_changes(args: argparse.Namespace) -> dict[str, Optional[float]]:
    """The limit flags given, by Limits field (0 removes a limit)."""
    return {field: getattr(args, flag) for flag, field in LIMIT_FLAGS.items() if getattr(args, flag) is not None}


def evaluation_options(args: argparse.Namespace, timing: Optional[TimingConfig] = None) -> EvaluationOptions:
    """--hot, --device, --timeout, --reference-timeout, the backend (session commands);
    eval gives its own timing."""
    backend = getattr(args, "backend", "local")
    if backend == "ray" and getattr(args, "separate_judge", False):
        raise CliError("--separate-judge: the judge process runs beside the local backend's worker only; "
                       "leave out --backend ray or --separate-judge")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        from ..evaluate.ray_cluster import RAY_MISSING
        raise CliError(f"--backend ray: {RAY_MISSING}")
    return EvaluationOptions(timing or TimingConfig(cold_l2=not args.hot), args.device, args.timeout,
                             args.reference_timeout, backend, getattr(args, "ray_address", ""),
                             getattr(args, "ray_gpus", 0), getattr(args, "separate_judge", False))


def tracking_options(args: argparse.Namespace, trace: bool = False) -> TrackingOptions:
    return TrackingOptions(args.store, args.tracking_uri, not args.no_tracking, trace)


def _batch(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise CliError(f"--batch {args.batch}: give at least 1 candidate per step")
    return int(args.batch)


def run_options(args: argparse.Namespace) -> SessionOptions:
    """`run`: without --proposer, llm when OPENAI_API_KEY or --base-url is set, else tune."""
    kind = args.proposer or ("llm" if os.environ.get("OPENAI_API_KEY") or args.base_url else "tune")
    llm = kind == "llm"
    choice = ProposerChoice(kind, args.seed, args.kernel or "", args.model if llm else "",
                            args.reasoning_effort if llm else "", args.base_url, args.nvidia_research,
                            args.web_search, str(args.prices.resolve()) if args.prices else "")
    search = SearchOptions(choice, args.budget, Limits().merged(limit_changes(args)), args.use_nsight, tuple(args.cases),
                           batch=_batch(args), early_reject=not args.no_early_reject, overlap=not args.no_overlap)
    return SessionOptions(search, evaluation_options(args), tracking_options(args, trace=args.trace and llm))


def bench_options(args: argparse.Namespace) -> SessionOptions:
    """`bench`: a tune session per workload (the same search for each)."""
    search = SearchOptions(ProposerChoice("tune", args.seed, args.kernel or ""), args.budget,
                           Limits().merged(limit_changes(args)), cases=tuple(args.cases), batch=_batch(args),
                           early_reject=not args.no_early_reject, overlap=not args.no_overlap)
    return SessionOptions(search, evaluation_options(args), tracking_options(args))


def resume_options(args: argparse.Namespace, stored: SearchOptions) -> SessionOptions:
    """`resume`: the session's stored search (--budget and the limit flags change its
    checkpoint, not what it started with), this command's evaluation and tracking."""
    return SessionOptions(stored, evaluation_options(args), tracking_options(args))
