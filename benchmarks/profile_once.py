"""Launch one kernel of a workload once (for ncu to profile): compile with NVRTC,
upload seeded inputs, launch through the runner, synchronise. No timing.

    ncu ... python3 benchmarks/profile_once.py WORKLOAD KERNEL CASE
"""

from __future__ import annotations

import sys
from pathlib import Path


from agent import native
from agent.candidate import Candidate
from agent.compiler import compile_kernel
from agent.inputs import array_jobs, generate_input
from agent.workload import SCALAR_DTYPES, ArrayParam, load_workload


def main() -> int:
    workload, kernel, case_name = load_workload(Path(sys.argv[1])), sys.argv[2], sys.argv[3]
    case = workload.case(case_name)
    cand = Candidate.from_spec(workload.kernels[kernel])
    device = native.open_device()
    compiled = compile_kernel(cand.source, cand.entry, device.facts.arch, cand.compile_options())
    fn = device.load_module(compiled.cubin).function(compiled.symbol)
    buffers, args = {}, []
    for job in array_jobs(workload, case):
        buf = device.alloc(job.nbytes)
        if job.role == "input":
            buf.upload(generate_input(job, case.name, 1))
        buffers[job.name] = buf
    for p in workload.params:
        if isinstance(p, ArrayParam):
            args.append(("ptr", buffers[p.name].ptr))
        else:
            kind = SCALAR_DTYPES[p.dtype]
            args.append((kind, p.value.evaluate_int(case.sizes) if kind[0] == "i" else float(p.value.evaluate(case.sizes))))
    launch = cand.rule_for(case).resolve(cand.launch_env(case))
    device.launch(fn, launch.grid, launch.block, launch.shared, args)
    device.synchronize()
    print(f"launched {compiled.symbol} {launch.grid}x{launch.block} on {case.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
