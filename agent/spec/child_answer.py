"""The child's side of run_child (agent/spec/reference_run.py): the job read from stdin,
the child tied to its parent's life, and the answer, {"ok": true, ...} or {"error": "one
line"}, printed as the last stdout line, where nothing the user's code prints can pass
for it."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional

Job = dict[str, Any]


def answer_job(work: Callable[[Job], dict[str, Any]], refused: type[Exception], out_of_memory: Callable[[Job], str],
               one_line: Callable[[Exception], str] = str, cleanup: Optional[Callable[[], None]] = None) -> int:
    """Runs `work` on the job and prints its answer: what it returns, beside ok; `refused`'s
    message (through `one_line`) or `out_of_memory(job)` as the error. `cleanup` runs after
    `work` whatever it did, before the answer is printed."""
    job: Job = json.loads(sys.stdin.read())
    from ..runtime.parent_watch import exit_with_parent
    exit_with_parent(job["parent"])
    answer_to = sys.stdout
    sys.stdout = sys.stderr  # the user's code's prints must not look like the answer
    answer: dict[str, Any]
    try:
        answer = {"ok": True, **work(job)}
    except refused as e:
        answer = {"error": one_line(e)}
    except MemoryError:
        answer = {"error": out_of_memory(job)}
    finally:
        if cleanup is not None:
            cleanup()
    print(json.dumps(answer), file=answer_to, flush=True)
    return 0
