"""The program Nsight Compute profiles: launch one candidate once per named case
(NVRTC compile, seeded inputs, one launch each, synchronise; no timing, no checks).
A candidate that is a program runs its whole sequence per case (workspace zeroed);
ncu profiles its first launch's entry (agent/profiling/nsight.py filters on it).
Runs as its own process under ncu, never inside the evaluator's worker.

    python -P -m warpsmith.agent.profiling.profile_launch WORKLOAD_DIR CANDIDATE_JSON CASE [CASE ...]

CANDIDATE_JSON holds a CandidateSpec (warpsmith.agent.evaluate.records) as JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..evaluate.records import CandidateSpec
from ..runtime import native
from ..runtime.compiler import compile_kernel
from ..runtime.parent_watch import exit_with_warpsmith
from ..spec.candidate import Candidate
from ..spec.inputs import array_jobs, generate_input
from ..spec.launch import LaunchJob
from ..spec.workload import load_workload
from ..spec.workload_model import ArrayParam, Case, ScalarParam, Workload, array_layouts


def launch_cases(workload_dir: Path, spec: CandidateSpec, case_names: list[str]) -> list[str]:
    workload = load_workload(workload_dir)
    cand = spec.to_candidate()
    device = native.open_device()
    compiled = compile_kernel(cand.source, cand.entry, device.facts.arch, cand.compile_options(),
                              allow_fast_math=workload.tolerance.allow_fast_math)
    if not compiled.ok:
        raise RuntimeError(f"{compiled.error}: the candidate did not compile")
    module = device.load_module(compiled.cubin)
    fn = module.function(compiled.symbol)
    done = []
    for name in case_names:
        case = workload.case(name)
        buffers, args = {}, []
        for job in array_jobs(workload, case):
            buf = device.alloc(job.nbytes)
            if job.role == "input":
                buf.upload(generate_input(job, case.name, 1))
            buffers[job.name] = buf
        if cand.program is not None:
            done.append(_run_program(device, module, workload, cand, case, buffers))
            continue
        for p in workload.params:
            args.append(("ptr", buffers[p.name].ptr) if isinstance(p, ArrayParam) else p.arg(case))
        launch = cand.rule_for(case).resolve(cand.launch_env(case))
        device.launch(fn, launch.grid, launch.block, launch.shared, args)
        device.synchronize()
        done.append(f"{compiled.symbol} {launch.grid}x{launch.block} on {case.name}")
    return done


def _run_program(device: native.Device, module: native.Module, workload: Workload, cand: Candidate, case: Case,
                 buffers: dict[str, native.Buffer]) -> str:
    """Every step of the program once on `case`, over zeroed workspace; returns what ran."""
    assert cand.program is not None  # called for programs only
    job = cand.program.resolve(cand.launch_env(case),
                               {p.name: p.arg(case) for p in workload.params if isinstance(p, ScalarParam)},
                               array_layouts(workload, case))
    for w in job.workspace:
        buffers[w.name] = device.alloc(w.nbytes)
        buffers[w.name].fill_u32(0, 0, w.nbytes)
    program = native.Program()
    for step in job.steps:
        if isinstance(step, LaunchJob):
            l = step.launch
            program.add_launch(module.function(step.entry), l.grid, l.block, l.shared,
                               [a.native(lambda name: buffers[name].ptr) for a in step.args], l.cluster)
        else:
            program.add_memset(buffers[step.target].ptr, buffers[step.target].nbytes, 0)
    device.run(program)
    device.synchronize()
    return f"program of {len(program)} steps ({', '.join(cand.program.entries)}) on {case.name}"


def main(argv: list[str]) -> int:
    exit_with_warpsmith()  # ncu (its parent) would outlive a SIGKILLed warpsmith; this process holds the GPU
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    spec = CandidateSpec.model_validate_json(Path(argv[1]).read_text())
    for line in launch_cases(Path(argv[0]), spec, argv[2:]):
        print("launched", line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
