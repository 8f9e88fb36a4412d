"""benchmarks/ray_scaling.py's arithmetic on made-up records (the runs themselves need
GPUs, or a Ray cluster of stand-ins: `--stand-in`)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from warpsmith.agent.evaluate.records import Attempt
from warpsmith.agent.evaluate.results import Status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from ray_scaling import Run, kill_report, table  # noqa: E402


def attempts(n: int, every_s: float, gpus: int, start: float = 100.0, crashed_at: int | None = None) -> list:
    out = []
    for i in range(n):
        status = Status.CRASHED if i == crashed_at else Status.OK
        out.append((Attempt(iteration=i + 1, name=f"c{i}", proposer="tune", status=status,
                            gpu=f"actor {i % gpus}: H200", detail="actor 1: H200 died (RayActorError)" if status ==
                            Status.CRASHED else ""), start + 10 + i * every_s))
    return out


def test_the_rate_counts_from_the_first_attempts_end_and_the_goal_is_eight_tenths_per_gpu():
    one = Run(1, 70.0, attempts(61, 1.0, 1), 2.0, 100.0)  # 60 attempts in the 60 s after the first
    two = Run(2, 70.0, attempts(91, 0.5, 2), 2.01, 100.0)  # 90 in 45 s: 120 a minute, 2.0x
    three = Run(3, 70.0, attempts(91, 0.5, 3), 1.99, 100.0)  # 120 a minute: 2.0x of 3 is below 2.4
    assert one.per_minute == 60.0 and two.per_minute == 120.0
    rows = table([one, two, three])
    assert rows[2].startswith("| 1 | 61 | 60.0 | 1.00x | met | 2.0000 | 1.000 | actor 0 61 |")
    assert rows[3].startswith("| 2 | 91 | 120.0 | 2.00x | met | 2.0100 | 1.005 |")
    assert rows[4].startswith("| 3 | 91 | 120.0 | 2.00x | missed |")
    assert rows[3].endswith("actor 0 46, actor 1 45 |")


def test_the_kill_report_names_the_crashed_attempt_and_the_gpus_serving_after_it():
    run = Run(2, 70.0, attempts(40, 1.0, 2, crashed_at=21), 2.0, 100.0, killed="killed ray::GpuActor pid 7 (of 2) at 30 s",
              statuses=Counter())
    text = kill_report(run, 30.0)
    assert "1 attempt(s) crashed (actor 1: H200 died (RayActorError))" in text
    assert "actor 0 9, actor 1 9 (2 of 2 GPUs serving)" in text  # finished after 130 s, the crashed one not counted
