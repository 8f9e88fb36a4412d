"""The checkpointer's serializer, which stores each record of the state once.

LangGraph's SQLite saver writes the whole state after every node (five or six per
attempt), and the history of attempts is most of it: about 4 KB an attempt, so a session
of n attempts wrote some 28 KB x n per attempt, O(n^2) in all (300 attempts of
benchmarks/loop_overhead.py's session left a 926 MB checkpoint file, and the loop spent
230 ms an attempt at the end; a 10-minute session on the H200 makes about a thousand).
The best, the starting kernel, the queue and each case's winner carry a CUDA source of a
few KB, in every checkpoint too.

Here a record (an Attempt, a CandidateSpec, a Best, a CaseWinner), alone, in a list or as
the values of a dict, as a channel's value in a checkpoint or in a node's write, is
stored as a Stored reference: the key of its bytes, the bytes in the `attempt_records`
table, written once. A record already stored (the same object as at an earlier write)
is not serialised again. A long list's keys go in blocks of BLOCK, each block stored
once as a record of its own, so a checkpoint holds a key per block and per record of
the last, open one: its size stays bounded however long the session runs.

Each type is named by its tag (checkpoint_tags: warpsmith/Attempt, never a module path),
the Stored references too.

Records are never changed in place (the loop makes a new one with model_copy): an
object is stored under the key of its bytes the first time it is seen. Checkpoints
written before this serializer existed hold the values themselves and load as they
always did.

The rows go in on the saver's own connection, under its lock, before any checkpoint or
write that names them, and a record counts as stored only once its row is in: the
saver's next commit, whichever thread makes it, carries the row, so a checkpoint never
names a row that was not committed. A node's writes are stored before the saver's
put_writes (RecordSaver): it serialises them inside its own statement, where no other
statement may run.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from ..evaluate.dispatch import CaseWinner
from ..evaluate.records import Attempt, Best, CandidateSpec
from .checkpoint_tags import Tags

TABLE = "attempt_records"
RECORDS = (Attempt, CandidateSpec, Best, CaseWinner)
BLOCK = 256  # a list's keys per stored block
CHUNK = 500  # keys per SELECT (SQLite's limit on bound parameters is far above)
KEYS_TYPE = "keys"  # a block's row: its keys, joined by spaces


@dataclass(frozen=True)
class Stored:
    """Records as stored: the keys of their bytes, in order, after those of the stored
    `blocks` of keys. `shape`: "one" record, a "list", or a "dict" under `names`."""

    keys: tuple[str, ...]
    shape: str = "one"
    names: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()


class CheckpointSerde(JsonPlusSerializer):
    """`tags`: the types the state holds, each under its tag (state.STATE_TAGS)."""

    def __init__(self, conn: sqlite3.Connection, tags: Mapping[str, type]):
        super().__init__(allowed_msgpack_modules=None)  # only LangGraph's own types besides the tagged ones
        self.tags = Tags({**tags, "warpsmith/Stored": Stored})
        self._conn = conn
        self._stored: dict[int, tuple[Any, str]] = {}  # id -> (the record, kept alive so the id stays its, key)
        self._blocks: dict[tuple[str, ...], str] = {}  # a block of keys -> its key
        self._loaded: dict[str, Any] = {}  # key -> record, or a block's keys
        self._table_ready = False
        self.lock: Any = threading.Lock()  # the saver's, once it has one (RecordSaver)

    # -- writing ------------------------------------------------------------------------
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, dict) and isinstance(values := obj.get("channel_values"), dict):  # a checkpoint
            obj = {**obj, "channel_values": {k: self.store(v) for k, v in values.items()}}
        else:  # a node's write of one channel
            obj = self.store(obj)
        return super().dumps_typed(self.tags.tagged(obj))

    def store(self, value: Any) -> Any:
        """The value as a Stored reference when it is records, its rows written; else itself."""
        if isinstance(value, RECORDS):
            return Stored(self._keys([value]))
        if isinstance(value, list) and value and all(isinstance(v, RECORDS) for v in value):
            keys = self._keys(value)
            whole = len(keys) // BLOCK * BLOCK
            blocks = tuple(self._block(keys[i:i + BLOCK]) for i in range(0, whole, BLOCK))
            return Stored(keys[whole:], "list", blocks=blocks)
        if isinstance(value, dict) and value and all(isinstance(k, str) and isinstance(v, RECORDS)
                                                     for k, v in value.items()):
            return Stored(self._keys(list(value.values())), "dict", tuple(value))
        return value

    def _keys(self, records: list[Any]) -> tuple[str, ...]:
        # Under the saver's lock, and a record known only once its row is in: LangGraph puts a
        # checkpoint and a node's writes from several threads at once, and a checkpoint that
        # found a record known before its row was inserted could be committed without it.
        # Once inserted, any later commit on the connection carries the row.
        with self.lock:
            keys, new, rows = [], [], []
            for record in records:
                known = self._stored.get(id(record))
                if known is not None and known[0] is record:
                    keys.append(known[1])
                    continue
                type_, data = super().dumps_typed(self.tags.tagged(record))
                key = _key(type_, data)
                keys.append(key)
                new.append((record, key))
                rows.append((key, type_, data))
            self._insert(rows)
            for record, key in new:
                self._stored[id(record)] = (record, key)
        return tuple(keys)

    def _block(self, keys: tuple[str, ...]) -> str:
        with self.lock:
            key = self._blocks.get(keys)
            if key is None:
                data = " ".join(keys).encode()
                key = _key(KEYS_TYPE, data)
                self._insert([(key, KEYS_TYPE, data)])
                self._blocks[keys] = key
        return key

    def _insert(self, rows: list[tuple[str, str, bytes]]) -> None:
        """The rows into the table (the caller holds the lock); committed by the saver's next commit."""
        if rows:
            if not self._table_ready:
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, "
                                   "type TEXT NOT NULL, value BLOB NOT NULL)")
                self._table_ready = True
            self._conn.executemany(f"INSERT OR IGNORE INTO {TABLE} (key, type, value) VALUES (?, ?, ?)", rows)

    # -- reading ------------------------------------------------------------------------
    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        obj = self._load(data)
        if isinstance(obj, dict) and isinstance(values := obj.get("channel_values"), dict):
            for k, v in values.items():
                if isinstance(v, Stored):
                    values[k] = self._resolve(v)
            return obj
        return self._resolve(obj) if isinstance(obj, Stored) else obj

    def _load(self, data: tuple[str, bytes]) -> Any:
        type_, value = data
        return self.tags.loads(value) if type_ == "msgpack" else super().loads_typed(data)

    def _resolve(self, ref: Stored) -> Any:
        blocks = self._fetch(ref.blocks)
        keys = [k for block in blocks for k in block] + list(ref.keys)
        records = self._fetch(keys)
        if ref.shape == "list":
            return records
        if ref.shape == "dict":
            return dict(zip(ref.names, records))
        return records[0]

    def _fetch(self, keys: list[str] | tuple[str, ...]) -> list[Any]:
        missing = [k for k in dict.fromkeys(keys) if k not in self._loaded]
        for i in range(0, len(missing), CHUNK):
            chunk = missing[i:i + CHUNK]
            # Not under the saver's lock: it reads its checkpoints (and so calls this) holding it.
            rows = self._conn.execute(f"SELECT key, type, value FROM {TABLE} WHERE key IN "
                                      f"({','.join('?' * len(chunk))})", chunk).fetchall()
            for key, type_, value in rows:
                if type_ == KEYS_TYPE:
                    block = tuple(bytes(value).decode().split())
                    self._loaded[key], self._blocks[block] = block, key
                else:
                    record = self._loaded[key] = self._load((type_, bytes(value)))
                    self._stored[id(record)] = (record, key)  # written back as the same key, not serialised again
        lost = [k for k in keys if k not in self._loaded]
        if lost:
            raise ValueError(f"checkpoint: {len(lost)} record(s) missing from {TABLE} (first {lost[0]})")
        return [self._loaded[k] for k in keys]


def _key(type_: str, data: bytes) -> str:
    return hashlib.sha256(type_.encode() + b"\0" + data).hexdigest()[:32]


class RecordSaver(SqliteSaver):
    """LangGraph's SQLite saver with the CheckpointSerde."""

    serde: CheckpointSerde

    def __init__(self, conn: sqlite3.Connection, tags: Mapping[str, type]):
        serde = CheckpointSerde(conn, tags)
        super().__init__(conn, serde=serde)
        # Reentrant: the serializer takes it to insert rows, and a saver that serialised while
        # holding it (this version does so only for writes already stored) must not deadlock.
        self.lock = serde.lock = threading.RLock()  # type: ignore[assignment]

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        super().put_writes(config, [(channel, self.serde.store(value)) for channel, value in writes], task_id, task_path)
