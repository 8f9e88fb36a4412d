"""A checkpoint names each type by its tag, warpsmith/NAME (agent/loop/checkpoint_tags.py),
never by a module path: a type may move and a package be renamed without the stores that
hold it going unreadable. Older stores, which name module paths, are
tests/test_legacy_checkpoints.py's."""

from __future__ import annotations

import dataclasses
import enum
import sqlite3
import typing
from pathlib import Path

import ormsgpack
import pytest
from pydantic import BaseModel
from test_loop import open_session
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.records import Attempt, AttemptSamples, Best, CandidateSpec
from warpsmith.agent.evaluate.results import Status
from warpsmith.agent.loop.checkpoint_serde import CheckpointSerde
from warpsmith.agent.loop.checkpoint_tags import TYPED_EXTS, Tags
from warpsmith.agent.loop.limits import Spent
from warpsmith.agent.loop.state import STATE_TAGS, LoopState
from warpsmith.agent.spec.workload import load_workload


def type_names(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) pairs msgpack `data` names its objects' types by."""
    names: set[tuple[str, str]] = set()

    def hook(code: int, raw: bytes) -> object:
        value = ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code in TYPED_EXTS:
            names.add((value[0], value[1]))
        return value

    ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    return names


def stored_type_names(checkpoint: Path, latest: bool = False) -> set[tuple[str, str]]:
    """The type names in a store's checkpoints, writes and record rows (`latest`: its last checkpoint only)."""
    with sqlite3.connect(checkpoint) as conn:
        if latest:
            blobs = conn.execute("SELECT checkpoint FROM checkpoints ORDER BY rowid DESC LIMIT 1").fetchall()
        else:
            blobs = conn.execute("SELECT checkpoint FROM checkpoints WHERE type = 'msgpack' UNION ALL "
                                 "SELECT value FROM writes WHERE type = 'msgpack' UNION ALL "
                                 "SELECT value FROM attempt_records WHERE type = 'msgpack'").fetchall()
    return {name for (blob,) in blobs for name in type_names(blob)}


def test_a_session_names_every_type_by_its_tag(tmp_path):
    """A session's store (checkpoints, writes, record rows) names its attempts, bests, limits, statuses and
    references as warpsmith/NAME, and no module."""
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    s = open_session(tmp_path, workload, 3)
    assert s.end(s.run()) == "finished"
    s.close()
    names = stored_type_names(s.dir / "checkpoint.sqlite")
    assert {module for module, _ in names} == {"warpsmith"}, names
    assert {"Attempt", "Best", "CandidateSpec", "Limits", "Spent", "Status", "Stored"} <= {n for _, n in names}


def test_every_type_the_state_can_hold_has_a_tag():
    """The models, enums and dataclasses LoopState can hold (in its fields, and in their fields) are exactly
    STATE_TAGS's classes: a new one needs a tag, and no tag names a type the state has dropped."""
    found: set[type] = set()

    def reach(hint: object) -> None:
        for arg in typing.get_args(hint):
            reach(arg)
        if isinstance(hint, type) and hint not in found and (
                issubclass(hint, (BaseModel, enum.Enum)) or dataclasses.is_dataclass(hint)):
            found.add(hint)
            for field in hint.model_fields.values() if issubclass(hint, BaseModel) else ():
                reach(field.annotation)

    for hint in typing.get_type_hints(LoopState).values():
        reach(hint)
    assert found == set(STATE_TAGS.values())
    assert all(tag == f"warpsmith/{cls.__name__}" for tag, cls in STATE_TAGS.items())


def test_the_tags_round_trip_and_untagged_types_of_ours_are_refused(tmp_path):
    """A record, an enum and a limit read back equal from their tagged bytes; an object of warpsmith's own
    without a tag is an error (it would be named by its module), a tag outside warpsmith/ too."""
    serde = CheckpointSerde(sqlite3.connect(tmp_path / "c.sqlite"), STATE_TAGS)
    spec = CandidateSpec(source="extern \"C\" __global__ void k() {}", entry="k", name="k", grid=["1"], block=["32"])
    values = {"best": Best(spec=spec, score_ms=1.0, cases=[], iteration=1), "status": Status.OK,
              "spent": Spent(elapsed_s=2.0), "queue": (spec,), "n": 3}
    data = serde.dumps_typed(values)
    assert type_names(data[1]) == {("warpsmith", n) for n in ("Best", "CandidateSpec", "Status", "Spent")}
    assert serde.loads_typed(data) == {**values, "queue": [spec]}  # (msgpack has no tuples)
    with pytest.raises(TypeError, match="AttemptSamples has no tag"):
        serde.dumps_typed({"samples": AttemptSamples(iteration=1, status=Status.OK)})
    with pytest.raises(ValueError, match="warpsmith/NAME"):
        Tags({"warpsmith.agent.evaluate.records.Attempt": Attempt})
