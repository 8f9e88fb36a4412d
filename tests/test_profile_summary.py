"""benchmarks/profile_summary.py on a made-up py-spy raw profile (the profiled run itself is
the GPU machine's search; py-spy is not installed where the tests run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from profile_summary import summarise  # noqa: E402

RAW = """\
process 7:"python3 -m warpsmith.tui run examples/sgemm";thread (11);<module> (tui/cli.py:60);Session.run (agent/loop/session.py:229) 30
process 7:"python3 -m warpsmith.tui run examples/sgemm";thread (11): MainThread;Session.run (agent/loop/session.py:229);\
Timeline.__call__ (agent/loop/timeline.py:32) 20
process 7:"python3 -m warpsmith.tui run examples/sgemm";thread (12): evaluate-ahead;AttemptScheduler._work (agent/evaluate/ahead.py:149);\
recv (multiprocessing/connection.py:250) 70
process 9:"python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6)";thread (9): MainThread;\
serve (agent/worker/gpu_side.py:10) 5
process 7:"python3 -m warpsmith.tui run examples/sgemm";process 14:"python3 -c print('"');f("a;b")";thread (14): MainThread;\
main (agent/runtime/compile_child.py:110) 1
process 7:"python3 -m warpsmith.tui run examples/sgemm";process 13:"python3 -P -m warpsmith.agent.runtime.compile_child";thread (13): MainThread;\
main (agent/runtime/compile_child.py:110) 4
not a sample line
"""


def test_threads_are_summed_under_their_name_busiest_first_with_our_frames_only(tmp_path):
    profile = tmp_path / "profile.txt"
    profile.write_text(RAW)
    out = summarise(profile, rate=10.0, threads=3, top=5).splitlines()
    assert out[0].startswith("130 samples at 10 Hz: 13.0 s")
    heads = [line for line in out if line and not line.startswith("    ") and "samples" not in line]
    assert heads[0].strip().startswith("7.00 s") and "thread 12 evaluate-ahead" in heads[0]
    # the main thread's samples before and after py-spy learnt its name are one thread
    assert heads[1].strip().startswith("5.00 s") and "thread 11 MainThread" in heads[1]
    assert len(heads) == 3 and heads[2].strip().startswith("0.50 s") and "9 python3 -c from" in heads[2]
    assert "serve (agent/worker/gpu_side.py:10)" in out[out.index(heads[2]) + 1]  # the ';' in its command split no frame
    # a grandchild (a compile process under the run) is its own process, not its parent's
    # thread 13; it is the fourth busiest, so listing four threads shows it
    four = summarise(profile, rate=10.0, threads=4, top=5)
    assert "13 python3 -P -m warpsmith.agent.runtime.compile_child  thread 13" in four
    # a command line with '"' and ';' in it is one process frame, and its thread is thread 14
    assert "14 python3 -c print('\"');f(\"a;b\")  thread 14" in summarise(profile, rate=10.0, threads=5, top=5)
    ahead = out[out.index(heads[0]) + 1:out.index(heads[1])]
    assert any("AttemptScheduler._work" in line and "7.00 s" in line for line in ahead)
    assert not any("multiprocessing" in line for line in ahead)  # library frames are not listed
    main_thread = out[out.index(heads[1]) + 1:out.index(heads[2])]
    assert any("Session.run" in line and "5.00 s" in line for line in main_thread)
