"""The names stores written before the checkpoint tags give their types.

A checkpoint names each type by its tag (checkpoint_tags). Before the tags it named a type
by its module path, as LangGraph's serializer does: ``agent.evaluate.records.Attempt``
while agent/ was installed as a package of its own, ``agent.loop_state.Best`` in the flat
layout before agent/ was split into subpackages. Those stores still load and resume: each
old (module, class) pair reads as the tag of the type it named. The table is closed: a
type that moves now keeps its tag and needs no line here."""

from __future__ import annotations

# old module -> the classes checkpoints named in it, each now the tag warpsmith/<class>
OLD_MODULES: dict[str, tuple[str, ...]] = {
    # the flat layout
    "agent.loop_state": ("CandidateSpec", "CaseOutcome", "CaseProfile", "Attempt", "Best"),
    "agent.limits": ("Limits", "Spent"),
    # agent/ as the package agent, in subpackages
    "agent.evaluate.records": ("CandidateSpec", "CaseOutcome", "CaseProfile", "Attempt", "Best"),
    "agent.evaluate.dispatch": ("CaseWinner", "Dispatch", "DispatchEntry"),
    "agent.evaluate.session_result": ("LibraryTime", "CaseServed", "SessionResult"),
    "agent.loop.limits": ("Limits", "Spent"),
    "agent.worker.status": ("Status", "Progress"),
    "agent.loop.checkpoint_serde": ("Stored",),
}

LEGACY_TAGS = {(module, name): f"warpsmith/{name}" for module, names in OLD_MODULES.items() for name in names}
