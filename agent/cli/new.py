"""`warpsmith new` and `warpsmith review`: drafting a workload with a model and
making its reference earn trust (agent/drafting/drafting.py). A model server that cannot be
reached, or that refuses the call, is one line and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import CliError

Command = Callable[[argparse.Namespace], int]  # a subcommand: its parsed arguments -> the exit code

if TYPE_CHECKING:
    from ..spec.workload_model import Workload
    from .help import Subcommands


def add_new_commands(sub: Subcommands) -> None:
    n = sub.add_parser("new", help="draft a workload from a sentence with a model, then review its reference")
    n.add_argument("description")
    n.add_argument("dir", type=Path)
    n.add_argument("--repairs", type=int, default=3, help="how many times a failing draft goes back to the model")
    _model_args(n)
    r = sub.add_parser("review", help="review a drafted reference: your yes, then an independent second draft")
    r.add_argument("dir", type=Path)
    _model_args(r)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="gpt-5-mini")
    p.add_argument("--reasoning-effort", default="medium")
    p.add_argument("--base-url", default="")
    p.add_argument("--yes", action="store_true", help="consent up front (for scripts): the drafted Python may run")


def _chat(args: argparse.Namespace, who: str = "warpsmith new") -> dict[str, Any]:
    from ..proposers.model_client import client_kwargs
    return client_kwargs(args.model, args.reasoning_effort or None, args.base_url or None, who=who)


def _model_errors_are_one_line(command: Command) -> Command:
    """A failed model call as one line naming the server (never the key), exit code 2."""
    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        import openai

        from ..proposers.model_client import server_url, unreachable_text
        url = server_url(args.base_url or None)
        try:
            return command(args)
        except openai.APITimeoutError:
            line = f"the model server at {url} did not answer in time; try again, or another --model / --base-url"
        except openai.APIConnectionError as e:
            line = unreachable_text(e, args.base_url or None)
        except openai.APIStatusError as e:
            line = (f"the model server at {url} refused the call ({e.status_code} {type(e).__name__}); "
                    "check OPENAI_API_KEY, --model and --base-url")
        raise CliError(str(line))
    return run


def _consent(args: argparse.Namespace) -> Callable[[str, Workload], bool]:
    def ask(question: str, workload: Workload) -> bool:
        if args.yes:
            print(f"{question} yes (--yes)")
            return True
        review_app = getattr(args, "review_front_end", None)
        if review_app is not None and sys.stdin.isatty() and sys.stdout.isatty():
            return bool(review_app(workload, question))
        try:
            return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
        except EOFError:
            return False
    return ask


@_model_errors_are_one_line
def cmd_new(args: argparse.Namespace) -> int:
    from ..drafting.drafting import WorkloadDraft, draft_workload
    from ..proposers.model_client import ModelUnavailable, structured_chat
    if (args.dir / "workload.toml").exists():
        raise CliError(f"{args.dir} already holds a workload.toml; choose a new directory")
    try:
        kwargs = _chat(args)
    except ModelUnavailable as e:
        raise CliError(str(e))
    w = draft_workload(structured_chat(kwargs, WorkloadDraft), args.description, args.dir, args.repairs)
    print(f"drafted {w.name} in {args.dir}: {len(w.cases)} cases, kernels {', '.join(w.kernels)}")
    return _review(args, kwargs)


@_model_errors_are_one_line
def cmd_review(args: argparse.Namespace) -> int:
    from ..proposers.model_client import ModelUnavailable
    try:
        kwargs = _chat(args, who="warpsmith review")
    except ModelUnavailable as e:
        raise CliError(str(e))
    return _review(args, kwargs)


def _review(args: argparse.Namespace, kwargs: dict[str, Any]) -> int:
    from ..drafting.drafting import ReferenceDraft, review
    from ..proposers.model_client import structured_chat
    from ..spec.workload import load_workload
    w = load_workload(args.dir)
    if w.reference_status != "drafted":
        print(f"{args.dir}: the reference is {w.reference_status or 'hand-written'}; nothing to review")
        return 0
    # The user's own sentence when there is one: the second draft must not lean on the first's wording.
    description = getattr(args, "description", None) or w.description
    result = review(args.dir, structured_chat(kwargs, ReferenceDraft), description, _consent(args))
    print(result.message)
    return 0 if result.status == "reviewed" else 1
