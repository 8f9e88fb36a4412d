"""Checkpoint type names from before agent/ was split into subpackages.

LangGraph's msgpack serializer stores each state object as (module, class name,
fields) and rebuilds it with ``importlib.import_module(module)``, accepting only the
(module, name) pairs in ``allowed_msgpack_modules``. Sessions stored by the flat
layout name ``agent.loop_state.Best``, ``agent.limits.Spent``... For them to load,
the old names are registered here as small stand-in modules in ``sys.modules`` that
hold only the checkpointed classes (so no code can import anything else through
them), and the old pairs join the allowlist. New checkpoints carry the new paths."""

from __future__ import annotations

import sys
import types

from ..evaluate import records
from . import limits

# old module -> (the classes it held that checkpoints name, where they live now)
MOVED: dict[str, tuple[tuple[str, ...], types.ModuleType]] = {
    "agent.loop_state": (("CandidateSpec", "CaseOutcome", "CaseProfile", "Attempt", "Best"), records),
    "agent.limits": (("Limits", "Spent"), limits),
}

LEGACY_TYPES = [(old, name) for old, (names, _) in MOVED.items() for name in names]


def register() -> None:
    """Make the old module names importable (idempotent)."""
    for old, (names, new) in MOVED.items():
        if old in sys.modules:
            continue
        stand_in = types.ModuleType(old, f"checkpoint alias of {new.__name__} (see agent.loop.legacy_names)")
        for name in names:
            setattr(stand_in, name, getattr(new, name))
        sys.modules[old] = stand_in
