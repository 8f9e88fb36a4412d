"""Every timed launch judged by the judge process (agent/worker/judge.py) instead of checks
in the candidate's own context: the same rule as agent/worker/timed_checks.py (poisoned
outputs and scrubbed on-chip memory before each launch, each measured launch's outputs
checked behind it, outside its event pair), but the counts live in the judge's context,
which no candidate can address, so they need no seal."""

from __future__ import annotations

from typing import Optional

from ..spec.workload import ARRAY_ITEMSIZE
from .case_buffers import CaseBuffers
from .gpu_checks import GpuChecks
from .judge import JudgeClient
from .poison import Poisons
from .program_run import ProgramRun
from .protocol import CaseCheck
from .timed_checks import fresh_start, wrong_launches

JUDGE_TIMEOUT_S = 300.0  # for a judge's answer; the evaluator's deadlines bound the whole request anyway


def output_key(bufs: CaseBuffers, seed: int, name: str) -> str:
    """An output's name in the judge: its case, inputs and reference, and the output."""
    return f"{bufs.job.case}|{seed}|{bufs.job.reference}|{name}"


def share_outputs(judge: JudgeClient, bufs: CaseBuffers, seed: int) -> None:
    """Map a new case's outputs into the judge, each with its reference and tolerance."""
    for a in bufs.outputs():
        assert a.ref_device is not None  # set for every output
        judge.share_output(output_key(bufs, seed, a.job.name), a.buffer, a.guard, a.job.dtype,
                           a.job.nbytes // ARRAY_ITEMSIZE[a.job.dtype], a.scale_row, bufs.job.rtol[a.job.name],
                           a.ref_device)


class JudgedTimedChecks:
    def __init__(self, checks: GpuChecks, bufs: CaseBuffers, seed: int, poisons: Poisons, repetitions: int,
                 judge: JudgeClient, local_bytes: int = 0, run: Optional[ProgramRun] = None,
                 timeout_s: float = JUDGE_TIMEOUT_S):
        self.checks, self.bufs, self.poisons, self.judge, self.run = checks, bufs, poisons, judge, run
        self.local_bytes, self.timeout_s = local_bytes, timeout_s
        checks.local_scrub(local_bytes)  # compiled now, not inside the timing loop
        self.names = [a.job.name for a in bufs.outputs()]
        judge.start_run(tuple(output_key(bufs, seed, n) for n in self.names), max(1, repetitions))

    def before(self, index: int) -> None:
        fresh_start(self.checks, self.bufs, self.poisons, self.local_bytes, self.run)

    def after(self, index: int) -> None:
        self.judge.enqueue_checks(index, self.timeout_s)

    def verdict(self, measured: int) -> Optional[CaseCheck]:
        """None when every measured launch's outputs passed; else the first failure."""
        return wrong_launches(self.names, self.judge.read_run(self.timeout_s)[:measured])
