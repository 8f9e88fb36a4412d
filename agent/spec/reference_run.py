"""reference.py (the user's code) runs in its own process, with a time limit.

The parent sends one JSON job on stdin (reference file, case, sizes, seed, the
arrays); the child dies with its parent, draws the case's inputs itself, runs
``reference(**inputs, **sizes)`` in float64, checks what came back (count, shape,
NaN/inf) and writes the outputs to an ``.npz``; its last stdout line is one JSON
object, ``{"ok": true}`` or ``{"error": "one line"}``. A child that does not answer
within the limit is killed with its process group, and the error says how to
raise the limit. The child gets no secret in its environment. `run_child` does the
same for any such child (`warpsmith import`'s probe of a problem file too).

    python -P -m warpsmith.agent.spec.reference_run  < job.json
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Optional

import numpy as np

from ..runtime.parent_watch import python_module, with_package_root
from ..runtime.process_tree import become_subreaper, kill_descendants
from ..runtime.secrets import without_secrets
from .child_answer import answer_job
from .inputs import ArrayJob, ReferenceFailed, array_jobs, as_float64, generate_input, load_reference_function
from .workload_model import FLOAT_DTYPES, Case, Workload

REFERENCE_TIMEOUT_S = 300.0  # per case; `--reference-timeout` on check, eval, run, resume and bench


def child_env() -> dict[str, str]:
    """The parent's environment without API keys, tokens or secrets; warpsmith importable."""
    return with_package_root(without_secrets(os.environ))


def run_reference(workload: Workload, case: Case, seed: int, out: Path, timeout_s: float = REFERENCE_TIMEOUT_S) -> None:
    """Run the workload's reference on `case` in a child process; the outputs land in
    `out` (an .npz path). Raises ReferenceFailed with one line: it raised, it returned
    something unusable, it did not return within `timeout_s`, or its process died."""
    name = workload.reference_path.name
    job = {"parent": os.getpid(), "reference": str(workload.reference_path.resolve()), "case": case.name,
           "sizes": case.sizes, "seed": seed, "out": str(out),
           "arrays": [dataclasses.asdict(j) for j in array_jobs(workload, case)],
           "allow_nonfinite": [p.name for p in workload.outputs if p.allow_nonfinite]}
    try:
        answer = run_child("warpsmith.agent.spec.reference_run", job, workload.directory, timeout_s)
    except subprocess.TimeoutExpired:
        raise ReferenceFailed(f"{name} did not return within {timeout_s:g} s for case '{case.name}' "
                              "(raise --reference-timeout or make it faster)") from None
    except ChildDied as e:
        if e.how == f"signal {signal.SIGKILL.value}":  # not ours: a timeout is TimeoutExpired
            raise ReferenceFailed(f"{name} was killed (signal 9) for case '{case.name}', most likely by the "
                                  f"system's out-of-memory killer (its processes peaked at {_peak_gib():.1f} GiB): "
                                  "free host memory or make the case smaller (warpsmith check prints the "
                                  "estimate)") from None
        raise ReferenceFailed(f"{name}: its process ended ({e.how}) for case '{case.name}' without an answer"
                              + (f": {e.last}" if e.last else "")) from None
    if "error" in answer:
        raise ReferenceFailed(answer["error"])


def _peak_gib() -> float:
    """The largest resident size any waited-for child of this process reached (Linux: KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


class ChildDied(RuntimeError):
    """A child that ended without its JSON answer: how (exit code, signal) and stderr's last line."""

    def __init__(self, how: str, last: str):
        super().__init__(how + (f": {last}" if last else ""))
        self.how, self.last = how, last


def run_child(module: str, job: dict[str, Any], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """`python -m module` with `job` as JSON on stdin, in `cwd`, in its own process group
    and without secrets in its environment (it runs the user's code). Returns its answer,
    the last stdout line: {"ok": true, ...} or {"error": "one line"}. Raises
    subprocess.TimeoutExpired after `timeout_s` and ChildDied when it gives no answer.
    Either way, its process group is killed once it has ended (nothing it started in the
    background outlives the call)."""
    proc = subprocess.Popen(python_module(module), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(), cwd=cwd, start_new_session=True)
    # Only each stream's tail is kept: the code it runs may print without end (a drafted
    # reference), and the whole of it would sit in this process's memory.
    tails = [_Tail(proc.stdout, ANSWER_MAX), _Tail(proc.stderr, 64 * 1024)]
    deadline = time.monotonic() + timeout_s
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError), proc.stdin:  # a child that died before reading its job
            proc.stdin.write(json.dumps(job).encode())
        proc.wait(timeout=timeout_s)
    finally:  # answered, timed out, Ctrl-C, SIGTERM's exception: whatever it started goes too
        _kill(proc)
        # A process that left its group (setsid) may hold the pipes open past the limit: its
        # output is given up, not waited for.
        for tail in tails:
            tail.join(max(0.0, deadline - time.monotonic()) + 1.0)
    stdout, stderr = (tail.text() for tail in tails)
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        answer = {}
    if (answer.get("ok") and proc.returncode == 0) or "error" in answer:
        return answer
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
    last = (stderr.strip().splitlines() or [""])[-1][:300]
    raise ChildDied(how, last)


ANSWER_MAX = 1 << 20  # bytes of a child's stdout kept: its answer is the last line, small


class _Tail:
    """A thread reading a pipe to its end, keeping the last `keep` bytes."""

    def __init__(self, pipe: Optional[IO[bytes]], keep: int):
        self.keep, self.data = keep, bytearray()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe: Optional[IO[bytes]]) -> None:
        if pipe is None:
            return
        with pipe:
            for chunk in iter(lambda: os.read(pipe.fileno(), 1 << 16), b""):
                self.data += chunk
                if len(self.data) > 2 * self.keep:
                    del self.data[:-self.keep]

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)

    def text(self) -> str:
        return bytes(self.data[-self.keep:]).decode(errors="replace")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    kill_descendants(proc.pid)  # while it lives, what left its group is still its descendant
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own children too
    except ProcessLookupError:
        pass
    proc.wait()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:500]


def compute(job: dict[str, Any]) -> dict[str, np.ndarray]:
    """In the child: draw the inputs, run the reference, check and convert its outputs."""
    path, case = Path(job["reference"]), job["case"]
    arrays = [ArrayJob(**{**a, "shape": tuple(a["shape"])}) for a in job["arrays"]]
    upcast = {a.name: as_float64(generate_input(a, case, job["seed"]), a.dtype) for a in arrays if a.role == "input"}
    try:
        result = load_reference_function(path)(**upcast, **job["sizes"])
    except ReferenceFailed:
        raise
    except Exception as e:  # the user's code: one line, not its traceback
        raise ReferenceFailed(f"{path.name}: reference raised {type(e).__name__}: {_one_line(e)} "
                              f"(case '{case}')") from None
    outputs = [a for a in arrays if a.role == "output"]
    if isinstance(result, dict):
        values = [result.get(a.name) for a in outputs]
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if result is None or any(v is None for v in values):
        missing = "nothing (None)" if result is None else \
            "None for " + ", ".join(a.name for a, v in zip(outputs, values) if v is None)
        raise ReferenceFailed(f"{path.name}: reference returned {missing}: it must return "
                              f"{', '.join(a.name for a in outputs)} (case '{case}')")
    if len(values) != len(outputs):
        raise ReferenceFailed(f"{path.name}: reference returned {len(values)} value(s) "
                              f"for outputs {', '.join(a.name for a in outputs)}")
    refs = {}
    for a, v in zip(outputs, values):
        v = np.asarray(v)
        if v.shape != a.shape:
            raise ReferenceFailed(f"{path.name}: output {a.name} for case '{case}' "
                                  f"has shape {v.shape}, the spec says {a.shape}")
        if np.iscomplexobj(v):  # a cast would drop the imaginary part without a word
            raise ReferenceFailed(f"{path.name}: output {a.name} for case '{case}' is complex ({v.dtype}); "
                                  "the spec's dtypes are real: return the real part explicitly if that is meant")
        is_float = a.dtype in FLOAT_DTYPES  # a float reference stays float64, whatever the output's width
        try:
            ref = np.ascontiguousarray(v, dtype=np.float64 if is_float else a.dtype)
        except (TypeError, ValueError) as e:
            raise ReferenceFailed(f"{path.name}: output {a.name} for case '{case}' is not numeric "
                                  f"({_one_line(e)})") from None
        bad = ~np.isfinite(ref) if is_float else None
        if bad is not None and bad.any() and a.name not in job["allow_nonfinite"]:
            first = [int(i) for i in np.unravel_index(int(np.argmax(bad)), ref.shape)]
            raise ReferenceFailed(f"{path.name}: output {a.name} for case '{case}' has {int(bad.sum())} NaN/inf "
                                  f"value(s), the first at {first} (an unwritten output would match it; declare "
                                  "allow_nonfinite = true on the output if that is intended)")
        refs[a.name] = ref
    return refs


def _save_outputs(job: dict[str, Any]) -> dict[str, Any]:
    outputs: dict[str, Any] = compute(job)  # by output name, none of them savez's own keywords
    np.savez(job["out"], **outputs)
    return {}


def main() -> int:
    become_subreaper()  # what the reference starts stays in this tree, detached or not
    return answer_job(_save_outputs, ReferenceFailed,
                      lambda job: f"{Path(job['reference']).name}: out of host memory for case '{job['case']}'",
                      one_line=_one_line,
                      # nothing it started outlives it or holds the answer's pipe open
                      cleanup=lambda: kill_descendants(os.getpid()))

if __name__ == "__main__":
    sys.exit(main())
