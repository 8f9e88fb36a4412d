"""Checkpoints paused inside an attempt when compile, validate and benchmark were nodes of
the graph of their own.

A pause (or a crash) between two nodes leaves the checkpoint naming the next node.
Sessions stored while an attempt ran as three nodes may name compile, validate or
benchmark there; the graph has none of them now (the evaluate node runs an attempt whole),
so LangGraph finds nothing to run in such a checkpoint, and the session would read as
finished with its attempt never evaluated. Keeping the three as nodes that only lead to
evaluate would leave names in the graph, the app's picture of it and the timeline that
no current session uses; instead, `continue_attempt()` writes such a checkpoint once
more, as if the propose node had just made the attempt, and evaluate takes it from
there. The attempt is evaluated from its compile (the compile cache has its kernel),
which is what a resumed session did with it before as well: its worker was new, so a
validation done before the pause was not continued.

Such a checkpoint is known by its state alone: it has an attempt in flight (a status of
Progress: pending, compiled, validated) and nothing to run. A session the graph of today
stored never does: its attempts in flight always have a next node, and reflect gives
each a verdict before the session ends.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from ..evaluate.results import Progress
from .graph import LoopGraph


def continue_attempt(graph: LoopGraph, config: RunnableConfig) -> bool:
    """Hand a checkpoint paused before compile, validate or benchmark to evaluate (written
    as the propose node's); True if there was one."""
    snapshot = graph.get_state(config)
    attempt = snapshot.values.get("attempt") if snapshot.values else None
    if snapshot.next or attempt is None or not isinstance(attempt.status, Progress):
        return False
    graph.update_state(config, {"attempt": attempt.model_copy(update={"status": Progress.PENDING})},
                       as_node="propose")
    return True
