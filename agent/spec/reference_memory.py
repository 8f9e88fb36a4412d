"""What a reference holds on the host besides the arrays warpsmith counts for it
(agent/worker/footprint.py): reference.py may define ``reference_memory(**sizes)``, an
upper bound in bytes of its own intermediates at a case's sizes (an imported
KernelBench workload's traces its PyTorch Model on the meta device: every tensor it
makes, nothing allocated). It is the user's code, so it runs as reference() does: in its
own process with a time limit and no secrets (reference_run.run_child), once for all
the cases asked about. A reference.py without it is read with ast, never run here.

    python -P -m warpsmith.agent.spec.reference_memory < job.json
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from .child_answer import answer_job
from .inputs import ReferenceFailed, load_reference_function
from .reference_run import REFERENCE_TIMEOUT_S, ChildDied, run_child
from .workload_model import Case, Workload

FUNCTION = "reference_memory"


def declares_estimate(path: Path) -> bool:
    """Whether reference.py defines reference_memory() (read, not run)."""
    try:
        tree = ast.parse(path.read_text(), filename=path.name)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == FUNCTION for n in tree.body)


def reference_memory(workload: Workload, cases: Sequence[Case],
                     timeout_s: float = REFERENCE_TIMEOUT_S) -> dict[str, int]:
    """Bytes of each case's reference intermediates (case name -> bytes), by reference.py's
    reference_memory(); {} where it defines none. Raises ReferenceFailed (one line)."""
    path = workload.reference_path
    if not cases or not declares_estimate(path):
        return {}
    job = {"parent": os.getpid(), "reference": str(path.resolve()), "cases": {c.name: c.sizes for c in cases}}
    try:
        answer = run_child("warpsmith.agent.spec.reference_memory", job, workload.directory, timeout_s)
    except subprocess.TimeoutExpired:
        raise ReferenceFailed(f"{path.name}: {FUNCTION}() did not return within {timeout_s:g} s") from None
    except ChildDied as e:
        raise ReferenceFailed(f"{path.name}: {FUNCTION}()'s process ended ({e}) without an answer") from None
    if "error" in answer:
        raise ReferenceFailed(answer["error"])
    return {c.name: int(answer["bytes"][c.name]) for c in cases}


def _estimates(job: dict[str, Any]) -> dict[str, int]:
    """In the child: reference_memory(**sizes) for each case, checked to be a whole number of bytes."""
    path = Path(job["reference"])
    fn = load_reference_function(path).__globals__.get(FUNCTION)  # the module, loaded as for reference()
    if not callable(fn):
        raise ReferenceFailed(f"{path.name}: {FUNCTION} is not a function")
    out = {}
    for name, sizes in job["cases"].items():
        try:
            value = fn(**sizes)
        except Exception as e:  # the user's code: one line, not its traceback
            raise ReferenceFailed(f"{path.name}: {FUNCTION}() raised {type(e).__name__}: "
                                  f"{' '.join(str(e).split())[:300]} (case '{name}')") from None
        if type(value) is not int or value < 0:
            raise ReferenceFailed(f"{path.name}: {FUNCTION}() returned {value!r} for case '{name}'; "
                                  "it must return a whole number of bytes")
        out[name] = value
    return out


def main() -> int:
    return answer_job(lambda job: {"bytes": _estimates(job)}, ReferenceFailed,
                      lambda job: f"{Path(job['reference']).name}: {FUNCTION}() ran out of host memory")

if __name__ == "__main__":
    sys.exit(main())
