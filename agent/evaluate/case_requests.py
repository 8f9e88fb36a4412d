"""What the worker is sent for a candidate: each case's job (its inputs, reference,
arguments and tolerance) with the launch, or the program, resolved for that case, and
why a case cannot be served at all (the candidate's launch rule, the GPU's limits, a
program's workspace beside everything resident).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.inputs import array_jobs
from ..spec.launch import Launch, LaunchJob, ProgramJob
from ..spec.references import ensure_reference
from ..spec.tolerance import case_rtol
from ..spec.workload_model import ArrayParam, Case, ScalarParam, Workload, array_layouts, program_problem
from ..worker.case_buffers import guard_bytes
from ..worker.footprint import GPU_FRACTION, case_footprint
from ..worker.pages import in_pages
from ..worker.protocol import Arg, CaseJob
from .results import CaseResult, EvaluationResult, Status


def case_job(w: Workload, case: Case, seed: int, launch: Optional[Launch], reference_timeout_s: float) -> CaseJob:
    """One case's job: its arrays, arguments, per-output tolerance and cached reference
    (computed first where missing, within `reference_timeout_s`)."""
    args, scalars = [], {}
    for p in w.params:
        if isinstance(p, ArrayParam):
            args.append(Arg(array=p.name))
        else:
            kind, value = p.arg(case)
            args.append(Arg(kind=kind, value=value))
            scalars[p.name] = value
    rtol = {p.name: case_rtol(w, case, p.dtype) for p in w.outputs}
    return CaseJob(case.name, tuple(array_jobs(w, case)), tuple(args),
                   str(ensure_reference(w, case, seed, reference_timeout_s)), rtol, case.timed, launch, scalars,
                   per_row_scale=w.tolerance.per_row_scale)


def resolve_launch(candidate: Candidate, case: Case, facts: DeviceFacts) -> tuple[Optional[Launch], str]:
    """The candidate's launch on `case`, and why it cannot run there ('' when it can)."""
    try:
        launch = candidate.rule_for(case).resolve(candidate.launch_env(case))
    except ValueError as e:  # ExprError, or a malformed `// knob` declaration
        return None, f"launch rule for case '{case.name}': {e}"
    problem = launch.problems() or device_problem(launch, facts)
    return launch, (f"case '{case.name}': {problem}" if problem else "")


def device_problem(launch: Launch, facts: DeviceFacts) -> str:
    """Why this GPU cannot run `launch` (threads, opt-in shared memory, clusters), or ''."""
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if threads > facts.max_threads_per_block:
        return f"block {launch.block} has {threads} threads, the GPU allows {facts.max_threads_per_block}"
    if launch.shared > facts.smem_per_block_optin:
        return f"{launch.shared} B dynamic shared memory, the GPU allows {facts.smem_per_block_optin}"
    if launch.cluster != (1, 1, 1) and facts.cc_major < 9:
        return f"cluster {launch.cluster}: thread block clusters need compute capability 9.0 or newer"
    return ""


def workspace_room(w: Workload, facts: DeviceFacts) -> Optional[tuple[int, int, int]]:
    """(bytes a program's workspace may take over all cases, the cases' own bytes, the GPU's
    memory), None where the GPU's memory is not known. The cases' buffers stay resident
    (agent/worker/footprint.py counts them), and so does each case's workspace while its
    kernel is loaded (GpuWorker.program)."""
    total = facts.total_memory
    if not total:
        return None
    resident = sum(case_footprint(w, c, "gpu") for c in w.cases)
    return int(total * GPU_FRACTION) - resident, resident, total


def resolve_program(w: Workload, candidate: Candidate, case: Case, facts: DeviceFacts) -> tuple[Optional[ProgramJob], str]:
    """A program's steps and workspace for `case`, or why it cannot run there."""
    program = candidate.program
    assert program is not None  # called for programs only
    problem = program_problem(w, program, case, candidate.launch_env(case))
    if problem:
        return None, f"program for case '{case.name}': {problem}"
    job = program.resolve(candidate.launch_env(case),
                          {p.name: p.arg(case) for p in w.params if isinstance(p, ScalarParam)},
                          array_layouts(w, case))
    for step in job.steps:
        problem = device_problem(step.launch, facts) if isinstance(step, LaunchJob) else ""
        if problem and isinstance(step, LaunchJob):
            return None, f"case '{case.name}': {step.entry}: {problem}"
    return job, ""


def case_jobs(w: Workload, candidate: Candidate, facts: DeviceFacts, seed: int, reference_timeout_s: float,
              result: EvaluationResult) -> list[CaseJob]:
    """The job of every case the candidate can serve; each case gets its CaseResult in
    `result`, ``not_applicable`` with the reason where the candidate cannot serve it."""
    jobs = []
    room = workspace_room(w, facts) if candidate.program is not None else None
    workspace = 0
    for case in w.cases:
        program, launch, problem = None, None, ""
        if candidate.program is not None:
            program, problem = resolve_program(w, candidate, case, facts)
            if program is not None and room is not None:
                size = sum(in_pages(ws.nbytes + 2 * guard_bytes(ws.nbytes)) for ws in program.workspace)
                if workspace + size > room[0]:
                    problem = (f"program for case '{case.name}': its workspace, {size} bytes, beside the other "
                               f"cases' ({workspace} bytes: the worker keeps each case's while the kernel is "
                               f"loaded) and the cases' own {room[1]} bytes is more than {GPU_FRACTION:.0%} "
                               f"of the GPU memory ({room[2]} bytes)")
                else:
                    workspace += size
        else:
            launch, problem = resolve_launch(candidate, case, facts)
        result.cases.append(CaseResult(case.name, case.role, launch=launch))
        if problem:  # the candidate cannot serve this case; another variant will
            result.cases[-1].status, result.cases[-1].detail = Status.NOT_APPLICABLE, problem
            continue
        job = case_job(w, case, seed, launch, reference_timeout_s)
        jobs.append(dataclasses.replace(job, program=program) if program else job)
    return jobs
