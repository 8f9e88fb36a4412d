"""Where a session's time goes: each loop event with its wall-clock time, one JSON line
per event in the session directory's timeline.jsonl (appended to on resume).

Only the event's kind and its timing facts are kept (FIELDS: node, iteration, case,
phase, status, compile_ms, cached, score_ms, elapsed_ms, and each attempt half's
began_s, evaluator_ms, call_ms): no source, log, rationale or name, so nothing a model
wrote lands in the file. benchmarks/search_speed.py reads it to split a session's wall
time into start-up, compiles waited on, validation, timing and the loop's own share,
and to say how busy the evaluator was with the attempts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, TextIO

FILE = "timeline.jsonl"
FIELDS = ("node", "iteration", "case", "phase", "status", "compile_ms", "cached", "score_ms", "elapsed_ms",
          "began_s", "evaluator_ms", "call_ms")


class Timeline:
    """An event sink that writes the timeline and passes each event on to `then`."""

    def __init__(self, directory: Path, then: Callable[[object], None]):
        self.then = then
        self.file: TextIO = (directory / FILE).open("a", encoding="utf-8")

    def __call__(self, event: object) -> None:
        record = {"t": round(time.time(), 4), "event": type(event).__name__}
        record.update({k: v for k in FIELDS if (v := getattr(event, k, None)) is not None})
        self.file.write(json.dumps(record, default=str) + "\n")
        self.file.flush()  # a session killed mid-way keeps its timeline up to there
        self.then(event)

    def close(self) -> None:
        self.file.close()


def read_timeline(session_dir: Path) -> list[dict[str, Any]]:
    path = session_dir / FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
