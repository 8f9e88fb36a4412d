"""A launch's outputs against their references: in this context (agent/worker/gpu_checks.py)
or in the judge's (agent/worker/judge.py), with the detailed report built on the CPU for
an output that failed (agent/worker/mismatch.py)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .case_buffers import CaseBuffers
from .gpu_checks import GpuChecks
from .judge import JudgeClient
from .judged_timing import JUDGE_TIMEOUT_S, output_key
from .mismatch import build_report
from .protocol import CaseCheck
from .status import Status


def compare_outputs(checks: GpuChecks, judge: Optional[JudgeClient], bufs: CaseBuffers, seed: int) -> CaseCheck:
    worst_abs = worst_rel = 0.0
    bad_total, reports = 0, []
    for a in bufs.outputs():
        assert a.ref_host is not None  # set for every output
        rtol = bufs.job.rtol[a.job.name]
        if judge is not None:
            stats = judge.check(output_key(bufs, seed, a.job.name), JUDGE_TIMEOUT_S)
        else:
            assert a.ref is not None  # uploaded into this context when no judge compares
            stats = checks.close(a.job.dtype, a.ptr, a.ref.ptr, int(np.prod(a.job.shape)), a.scale_row, rtol)
        bad = stats.mismatches
        worst_abs, worst_rel = max(worst_abs, stats.max_abs_error), max(worst_rel, stats.max_rel_error)
        if bad:
            bad_total += bad
            reports.append(build_report(a.job.name, bufs.download(a.job.name), a.ref_host, rtol, a.poison_word,
                                        dtype=a.job.dtype, per_row=bufs.job.per_row_scale))
    if reports:
        return CaseCheck(Status.WRONG_ANSWER, worst_abs, worst_rel, bad_total,
                         "\n".join(r.text() for r in reports), tuple(reports))
    return CaseCheck(Status.OK, worst_abs, worst_rel)
