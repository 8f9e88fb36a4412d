"""A child that called exit_with_parent dies when its parent is SIGKILLed."""

import os
import signal
import subprocess
import sys
import time

CHILD = """
import os, sys, time
from agent.parent_watch import exit_with_parent
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
    r = subprocess.run([sys.executable, "-c", "from agent.parent_watch import exit_with_parent; "
                        "exit_with_parent(1); import time; time.sleep(60)"], timeout=60)
    assert r.returncode == -signal.SIGKILL
