"""The checkpoint stores each record (attempt, candidate, best, case winner) once
(agent/loop/checkpoint_serde.py): a checkpoint's size stays bounded however many
attempts came before, and what a session reads back, resumes from or shows is what it
wrote."""

from __future__ import annotations

import sqlite3

import pytest
from test_loop import open_session
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.records import Attempt, Best, CandidateSpec
from warpsmith.agent.loop import checkpoint_serde
from warpsmith.agent.loop.checkpoint_serde import TABLE, CheckpointSerde, Stored
from warpsmith.agent.loop.session import stored_session
from warpsmith.agent.loop.state import STATE_TAGS
from warpsmith.agent.spec.workload import load_workload


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def checkpoint_sizes(directory) -> list[int]:
    with sqlite3.connect(directory / "checkpoint.sqlite") as conn:
        return [n for (n,) in conn.execute("SELECT length(checkpoint) FROM checkpoints ORDER BY rowid")]


def test_a_session_reads_back_resumes_and_keeps_each_record_once(tmp_path, workload, monkeypatch):
    """Blocks of 4 keys here (256 in use): 14 attempts fill three. The latest checkpoint holds no CUDA source and
    is no bigger than one from the first attempts; every attempt's row is there once; a reopened session reads
    the same history and best, a read-only peek (stored_session, as `runs` reads) too, and it goes on to 16."""
    monkeypatch.setattr(checkpoint_serde, "BLOCK", 4)
    s = open_session(tmp_path, workload, 14)
    assert s.end(s.run()) == "finished"
    history, best = s.state["history"], s.state["best"]
    directory = s.dir
    s.close()
    assert [a.iteration for a in history] == list(range(1, 15))
    sizes = checkpoint_sizes(directory)
    with sqlite3.connect(directory / "checkpoint.sqlite") as conn:
        last = conn.execute("SELECT checkpoint FROM checkpoints ORDER BY rowid DESC LIMIT 1").fetchone()[0]
        keys = [k for (k,) in conn.execute(f"SELECT key FROM {TABLE}")]
    assert b"__global__" not in last  # the sources of best, start, winners are rows, not in every checkpoint
    assert max(sizes[-6:]) < 2 * max(sizes[:20]), sizes  # bounded, not growing with the history
    assert len(keys) == len(set(keys))
    # read back by a fresh serializer (the stored form, not this process's objects)
    _, stored = stored_session(tmp_path / "store", directory.name)
    assert stored["history"] == history and stored["best"] == best
    again = open_session(tmp_path, workload, 14)
    assert again.state["history"] == history and again.state["best"] == best
    again.set_budget(16)
    assert again.end(again.run()) == "finished"
    assert [a.iteration for a in again.state["history"]] == list(range(1, 17))
    assert again.state["history"][:14] == history
    again.close()


def test_the_serializer_round_trips_each_shape_and_writes_a_record_once(tmp_path):
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    serde = CheckpointSerde(conn, STATE_TAGS)
    spec = CandidateSpec(source="extern \"C\" __global__ void k() {}", entry="k", name="k", grid=["1"], block=["32"])
    attempts = [Attempt(iteration=i, name=f"a{i}", proposer="tune", status="ok", score_ms=float(i)) for i in range(1, 4)]
    best = Best(spec=spec, score_ms=1.0, cases=[], iteration=1)
    checkpoint = {"v": 4, "id": "c1", "channel_values": {"history": attempts, "pending": spec, "best": best,
                                                         "queued": [], "iteration": 3, "winners": {"case": best}}}
    data = serde.dumps_typed(checkpoint)
    rows = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    assert rows == 5  # three attempts, the spec, the best (the dict's value is the same object)
    again = serde.dumps_typed({**checkpoint, "channel_values": {**checkpoint["channel_values"],
                                                                "history": attempts + [attempts[0]]}})
    assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0] == rows  # nothing new to write
    fresh = CheckpointSerde(conn, STATE_TAGS)
    values = fresh.loads_typed(data)["channel_values"]
    assert values["history"] == attempts and values["pending"] == spec and values["best"] == best
    assert values["winners"] == {"case": best} and values["queued"] == [] and values["iteration"] == 3
    assert fresh.loads_typed(again)["channel_values"]["history"] == attempts + [attempts[0]]
    write = serde.store(attempts)  # a node's write of the channel, as RecordSaver stores it
    assert isinstance(write, Stored) and fresh.loads_typed(serde.dumps_typed(write)) == attempts


def test_a_missing_record_is_an_error_naming_the_table(tmp_path):
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    serde = CheckpointSerde(conn, STATE_TAGS)
    data = serde.dumps_typed([Attempt(iteration=1, name="a", proposer="tune", status="ok")])
    conn.execute(f"DELETE FROM {TABLE}")
    with pytest.raises(ValueError, match=f"1 record\\(s\\) missing from {TABLE}"):
        CheckpointSerde(conn, STATE_TAGS).loads_typed(data)

