"""Run a module as `python -m` would, sampling every thread's stack every few
milliseconds; at exit, write where the samples landed (the innermost frames of this
checkout's code and their callers, by share of samples) to a file.

    python -P benchmarks/sample_profile.py OUT.txt warpsmith.tui run examples/sgemm --proposer tune ...

cProfile sees only the main thread; the loop's nodes, the compile-ahead threads and the
GPU worker's pipe readers run in others. A thread parked in an idle pool is left out.
"""

from __future__ import annotations

import atexit
import collections
import runpy
import sys
import threading
import time

INTERVAL_S = 0.005
IDLE = ("_worker", "wait", "get", "select", "_wait_for_tstate_lock", "accept", "poll", "readline")


def main() -> None:
    out, module, *args = sys.argv[1:]
    samples: collections.Counter = collections.Counter()
    callers: collections.Counter = collections.Counter()
    total = [0]
    def sample() -> None:
        me = threading.get_ident()
        while True:
            time.sleep(INTERVAL_S)
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = []
                f = frame
                while f is not None and len(stack) < 40:
                    stack.append("/".join(f.f_code.co_filename.rsplit("/", 2)[-2:]) + ":" + f.f_code.co_name)
                    f = f.f_back
                if stack[0].split(":")[1] in IDLE and not any(ours(s) for s in stack):
                    continue  # a parked pool thread
                total[0] += 1
                mine = [s for s in stack if ours(s)]
                samples[stack[0] + (" <- " + mine[0] if mine and mine[0] != stack[0] else "")] += 1
                for s in dict.fromkeys(mine):  # each function once per sample: inclusive share
                    callers[s] += 1

    def report() -> None:
        n = max(1, total[0])
        with open(out, "w") as f:
            f.write(f"{total[0]} busy-thread samples every {INTERVAL_S * 1e3:.0f} ms\n\ninnermost frames:\n")
            for key, c in samples.most_common(30):
                f.write(f"{100 * c / n:5.1f}%  {key}\n")
            f.write("\ninclusive, this project's functions:\n")
            for key, c in callers.most_common(40):
                f.write(f"{100 * c / n:5.1f}%  {key}\n")

    atexit.register(report)
    threading.Thread(target=sample, daemon=True, name="sampler").start()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


PACKAGES = ("loop/", "evaluate/", "proposers/", "runtime/", "worker/", "spec/", "tracking/", "cli/", "tui/")


def ours(frame: str) -> bool:
    """A frame of this project's packages (the last directory and file name)."""
    return frame.startswith(PACKAGES)

if __name__ == "__main__":
    main()
