"""Whether a kernel can serve a case: its launch (each step of a program) within CUDA's
limits, its workspace sizes within the runner's. A kernel that cannot is "not
applicable" there, not broken: a split-K kernel's SPLITK * M * N workspace passes the
limit on a case with a 4 GiB output, a TMA kernel needs rows of 16-byte multiples. The
session's dispatch serves such a case with another variant; only a case no kernel can
serve is an error (agent/spec/workload_checks.py).

Two kinds of problem are kept apart: a program that is malformed (names that do not
resolve) is the candidate's mistake everywhere; a size-dependent one is a fact about one
case. The GPU's own limits (threads per block, opt-in shared memory) are added by the
evaluator, which knows the device.
"""

from __future__ import annotations

from typing import Iterable, Optional

from .candidate import Candidate
from .launch import Launch, LaunchJob
from .workload_model import Case, ScalarParam, Workload, array_layouts, step_problem

MIN_THREADS = 32  # the tuner's floor: a block of less than a warp wastes the SM


def malformed(workload: Workload, candidate: Candidate) -> Optional[str]:
    """Why the candidate's program cannot run on any case (a name that is neither a
    parameter nor a workspace buffer...), or None."""
    if candidate.program is None:
        return None
    return candidate.program.problems({p.name: p.role for p in workload.arrays},
                                      {p.name for p in workload.params if p.role == "scalar"})


def _resolved(workload: Workload, candidate: Candidate, case: Case) -> tuple[list[Launch], Optional[str]]:
    """Every launch of the candidate on `case`, and why it cannot serve the case (or None)."""
    env = candidate.launch_env(case)
    try:
        if candidate.program is None:
            launch = candidate.rule_for(case).resolve(env)
            return [launch], launch.problems()
        scalars = {p.name: p.arg(case) for p in workload.params if isinstance(p, ScalarParam)}
        job = candidate.program.resolve(env, scalars, array_layouts(workload, case))
    except ValueError as e:  # ExprError is one; so is a workspace size out of range
        return [], str(e)
    steps = [s for s in job.steps if isinstance(s, LaunchJob)]
    problem = next((p for s in steps if (p := step_problem(s))), None)
    return ([], problem) if problem else ([s.launch for s in steps], None)


def case_problem(workload: Workload, candidate: Candidate, case: Case) -> Optional[str]:
    """Why the candidate cannot serve `case` (a launch or a workspace out of range, an
    expression that does not evaluate at these sizes), or None."""
    return _resolved(workload, candidate, case)[1]


def serves(workload: Workload, candidate: Candidate, case: Case) -> bool:
    """Applicable to `case`, with blocks of at least a warp (what the tuner proposes)."""
    launches, problem = _resolved(workload, candidate, case)
    return problem is None and all(x.block[0] * x.block[1] * x.block[2] >= MIN_THREADS for x in launches)


def coverage_gap(served_roles: Iterable[str]) -> Optional[str]:
    """Why a candidate serving cases of these roles cannot be judged at all, or None: it
    must serve a correctness case (else it would be validated at performance sizes only)
    and a performance case (else there is nothing it could serve)."""
    roles = set(served_roles)
    if "correctness" not in roles:
        return "not applicable to any correctness case, so it cannot be validated"
    if "performance" not in roles:
        return "not applicable to any performance case, so it serves none"
    return None
