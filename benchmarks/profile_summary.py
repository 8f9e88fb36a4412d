"""Where a profiled run spent its CPU time: py-spy's raw output (`py-spy record -f raw
--threads --subprocesses`, idle threads not sampled) summed per process and thread,
with each thread's heaviest functions of warpsmith's own code by inclusive samples: what
keeps the GPU waiting between attempts (the graph's propose and reflect, say, taking
130 ms per attempt while the worker sits idle).

    py-spy record -r 100 -f raw --threads --subprocesses -o PROFILE.txt -- \
        python3 benchmarks/search_speed.py examples/sgemm --cases square-4096 --time-budget 60
    python3 benchmarks/profile_summary.py PROFILE.txt [--rate 100] [--threads 12] [--top 15]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

OURS = ("agent/", "tui/", "benchmarks/", "tests/")  # frames of warpsmith's own code
_PROCESS = re.compile(r'process (\d+):"(.*)"')
_THREAD = re.compile(r"thread \((\w+)\)(?::\s*(.*))?")


def _short_process(frame: str) -> str:
    m = _PROCESS.fullmatch(frame)
    if not m:
        return frame
    words = m.group(2).split()
    # The command's first arguments name it (python3 -m warpsmith.tui run ..., the worker's spawn, a compile process).
    return f"{m.group(1)} {' '.join(w.rsplit('/', 1)[-1] for w in words[:4])}"[:90]


_FRAME_START = re.compile(r'process \d+:"|thread \(')


def _frames(stack: str) -> list[str]:
    """The stack's frames: split at ';', but a process's quoted command line may hold ';'
    or '"' (multiprocessing's spawn: `-c from multiprocessing.spawn import spawn_main;
    spawn_main(...)`): a process frame runs on to the next process or thread frame."""
    frames: list[str] = []
    for part in stack.split(";"):
        if frames and frames[-1].startswith("process ") and not _FRAME_START.match(part):
            frames[-1] += ";" + part
        else:
            frames.append(part)
    return frames


def summarise(path: Path, rate: float, threads: int, top: int) -> str:
    per_thread: Counter[tuple[str, str]] = Counter()
    frames: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    names: dict[str, str] = {}  # thread id -> its name (py-spy gives it once the thread has one)
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        parts = _frames(stack)
        # With --subprocesses py-spy names every ancestor process before the thread: the
        # last of them is the one the thread lives in.
        depth = 0
        while depth < len(parts) and parts[depth].startswith("process "):
            depth += 1
        if depth >= len(parts):
            continue
        process, thread = (parts[depth - 1] if depth else ""), parts[depth]
        m = _THREAD.fullmatch(thread)
        tid = m.group(1) if m else thread
        if m and m.group(2):
            names[tid] = m.group(2)
        key = (_short_process(process), tid)
        n = int(count)
        per_thread[key] += n
        seen = set()
        for frame in parts[depth + 1:]:
            if any(o in frame for o in OURS) and frame not in seen:
                seen.add(frame)
                frames[key][frame] += n
    total = sum(per_thread.values())
    out = [f"{total} samples at {rate:g} Hz: {total / rate:.1f} s of CPU time in sampled (non-idle) threads"]
    for key, n in per_thread.most_common(threads):
        out.append(f"\n{n / rate:7.2f} s  {key[0]}  thread {key[1]} {names.get(key[1], '')}")
        for frame, k in frames[key].most_common(top):
            out.append(f"    {k / rate:6.2f} s  {frame[:140]}")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (-r)")
    p.add_argument("--threads", type=int, default=12, help="how many of the busiest threads")
    p.add_argument("--top", type=int, default=15, help="functions shown per thread")
    args = p.parse_args()
    print(summarise(args.profile, args.rate, args.threads, args.top))


if __name__ == "__main__":
    main()
