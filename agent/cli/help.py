"""`--help` shows every option's default: one pass over the built parser."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # what each command module adds its subcommands to (subscriptable for the type checker only)
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append '(default: X)' to each option of every subcommand whose default means
    something (not None, False, an empty list, or already named in its help)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                show_defaults(sub)
            continue
        default = action.default
        if (not action.option_strings or default is None or isinstance(default, bool)
                or default in ("", [], argparse.SUPPRESS) or action.help == argparse.SUPPRESS
                or "default" in (action.help or "")):
            continue
        action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
