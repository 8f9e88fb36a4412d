"""A child that called exit_with_parent dies when its parent is SIGKILLed; so do the
children warpsmith starts (the GPU worker, the reference check, the profiled launch)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from package_env import child_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = """
import os, sys, time
from warpsmith.agent.runtime.parent_watch import exit_with_parent
exit_with_parent(int(sys.argv[1]), poll_s=0.05)
print(os.getpid(), flush=True)
time.sleep(600)
"""

PARENT = """
import subprocess, sys, os, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead for our purpose
        return f.read().split(")")[-1].split()[0] != "Z"


def test_child_dies_when_parent_is_sigkilled():
    """SIGKILL the parent (no atexit runs): the watching child is gone soon after."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30  # generous for a loaded machine; normally ~0.1 s
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid)


def test_child_of_a_dead_parent_dies_at_once():
    """A parent pid that is not the child's parent (it died first) ends the child at the call."""
    r = subprocess.run([sys.executable, "-c", "from warpsmith.agent.runtime.parent_watch import exit_with_parent; "
                        "exit_with_parent(1); import time; time.sleep(60)"], timeout=60)
    assert r.returncode == -signal.SIGKILL


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid`, from /proc/*/stat."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _wait_for(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s  # generous for a loaded machine
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _gone_after_sigkill(parent: subprocess.Popen, pids: set[int]) -> None:
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _wait_for(lambda: not any(_alive(p) for p in pids), f"still alive: {[p for p in pids if _alive(p)]}", 30)


def test_gpu_worker_dies_with_a_sigkilled_warpsmith(tmp_path):
    """The real WorkerProcess spawn path, its worker hung (a GPU double that never returns): SIGKILL
    the process that started it and no child of it survives (worker, multiprocessing's helper)."""
    marker = tmp_path / "worker.pid"
    env = child_env(HERE, HUNG_WORKER_MARKER=str(marker))
    parent = subprocess.Popen([sys.executable, str(HERE / "hung_worker_double.py")], env=env)
    try:
        _wait_for(marker.exists, "the worker never started")
        worker = int(marker.read_text())
        children = _children(parent.pid)
        assert worker in children
        _gone_after_sigkill(parent, children)
    finally:
        parent.kill()


SLEEPING_REFERENCE = """import os, time
from pathlib import Path
def reference(A, B, *, M, N, K):
    Path(os.environ["REFERENCE_MARKER"]).with_suffix(".tmp").write_text(str(os.getpid()))
    os.replace(Path(os.environ["REFERENCE_MARKER"]).with_suffix(".tmp"), os.environ["REFERENCE_MARKER"])
    time.sleep(600)
"""


def test_reference_check_dies_with_a_sigkilled_warpsmith(tmp_path):
    """`review`'s comparison process (model-written Python, time-limited by its parent) dies with
    a SIGKILLed parent instead of running out its own time."""
    from workload_factory import make_sgemm_workload
    w = make_sgemm_workload(tmp_path / "w")
    (w / "reference.py").write_text(SLEEPING_REFERENCE)
    marker = tmp_path / "reference.pid"
    env = child_env(REFERENCE_MARKER=str(marker))
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                               "from warpsmith.agent.drafting.drafting import compare_references; "
                               "compare_references(Path(sys.argv[1]), Path(sys.argv[1]) / 'reference.py')", str(w)],
                              env=env, cwd=tmp_path)
    try:
        _wait_for(marker.exists, "the reference never ran")
        _gone_after_sigkill(parent, {int(marker.read_text())})
    finally:
        parent.kill()


def test_a_child_under_another_tool_watches_warpsmith_itself(tmp_path):
    """exit_with_warpsmith in a grandchild (as the profiled launch under ncu): it dies once the
    warpsmith pid it was given is gone, although its own parent lives on."""
    warpsmith = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    tool = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                             "'-c', 'from warpsmith.agent.runtime.parent_watch import exit_with_warpsmith; import os, time; "
                             "exit_with_warpsmith(0.05); print(os.getpid(), flush=True); time.sleep(600)']); "
                             "time.sleep(600)"],
                            env=child_env(WARPSMITH_PID=str(warpsmith.pid)),
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        child = int(tool.stdout.readline())
        assert _alive(child)
        _gone_after_sigkill(warpsmith, {child})
        assert tool.poll() is None  # its parent lived on: the watch was on warpsmith
    finally:
        tool.kill()
        warpsmith.kill()


HANG = 'extern "C" __global__ void hang(const float* A, const float* B, float* C, int M, int N, int K) {\n' \
       '  if (M > 0) { while (1) { } }\n}\n'


@pytest.mark.gpu
def test_sigkilled_eval_leaves_no_worker_on_the_gpu(tmp_path):
    """`warpsmith eval` of a kernel stuck in `while (1);`, SIGKILLed while its worker holds the
    GPU: the worker is gone within seconds, its device files closed."""
    kernel = tmp_path / "hang.cu"
    kernel.write_text(HANG)
    eval_ = subprocess.Popen([sys.executable, "-m", "warpsmith.tui", "eval", str(ROOT / "examples" / "sgemm"), "--kernel",
                              str(kernel), "--entry", "hang", "--grid", "1", "--block", "1", "--timeout", "600",
                              "--no-baseline"], cwd=tmp_path)  # the installed package, as a user runs it
    try:
        def on_gpu() -> set[int]:  # /dev/nvidia* open: nvidia-smi may not see pids inside a container
            held = set()
            for pid in _children(eval_.pid):
                try:
                    if any(os.readlink(fd).startswith("/dev/nvidia") for fd in Path(f"/proc/{pid}/fd").iterdir()):
                        held.add(pid)
                except OSError:
                    continue
            return held
        _wait_for(on_gpu, "the worker never opened the GPU", 300)
        _gone_after_sigkill(eval_, _children(eval_.pid))
    finally:
        eval_.kill()
