"""What the worker's own checks cost on the GPU, per run of a case (a benchmark, not a test).

search_speed.py says how long the worker spends per case and phase; this says what inside
that is the harness rather than the kernel: with every case of a workload resident (as in a
session, both seeds), for its largest performance case, the median of several passes of

- prepare: the outputs poisoned and the guards armed before a run;
- fence: raising the fence over every other resident case and moat, and checking it;
- scrub: overwriting every SM's shared memory, and every thread slot's local window;
- output check: one keyed comparison of each output against its masked reference (what
  every timed launch gets behind it), on poisoned outputs (every element a mismatch, the
  check's slow path) and on right ones (what an honest launch costs);
- sweep: the integrity pass after a candidate (moats, inputs' and references' checksums).

Run on the GPU machine from the checkout's root:
    python3 benchmarks/worker_costs.py examples/sgemm
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from warpsmith.agent.evaluate.case_requests import case_job
from warpsmith.agent.evaluate.evaluator import DEFAULT_SEED, FRESH_SEED, Evaluator
from warpsmith.agent.spec.half_float import STORAGE, to_storage
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.gpu_side import GpuWorker

PASSES = 9


def timed(worker: GpuWorker, fn) -> float:
    """Median wall ms of fn() over PASSES passes, the GPU drained before and after each."""
    samples = []
    for _ in range(PASSES):
        worker.device.synchronize()
        t0 = time.perf_counter()
        fn()
        worker.device.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main(workload_dir: str) -> None:
    w = load_workload(workload_dir)
    with Evaluator(w) as ev:  # the jobs as a session builds them (its own worker is not used)
        jobs = {(c.name, seed): case_job(ev.workload, c, seed, None, ev.reference_timeout_s) for c in w.cases for seed in (DEFAULT_SEED, FRESH_SEED)}
    worker = GpuWorker(0)
    t0 = time.perf_counter()
    for (_, seed), job in jobs.items():
        worker.buffers(job, seed)
    worker.device.synchronize()
    print(f"{w.name}: {len(jobs)} case buffers resident (every case, both seeds) in {time.perf_counter() - t0:.1f} s")
    timed_cases = [c for c in w.cases if c.timed]
    case = max(timed_cases, key=lambda c: sum(a.nbytes for a in worker.buffers(jobs[(c.name, DEFAULT_SEED)],
                                                                               DEFAULT_SEED).outputs()))
    bufs = worker.buffers(jobs[(case.name, DEFAULT_SEED)], DEFAULT_SEED)
    fence = worker.fence(bufs, None)
    fenced = sum(r.nbytes for r in fence.regions)
    fence.breached()  # (raised by worker.fence: taken down before the passes)

    def fence_pass() -> None:
        worker.fence(bufs, None).breached()

    def output_checks() -> None:  # the comparison alone (poisoned outputs: no report is built)
        for a in bufs.outputs():
            worker.checks.close(a.job.dtype, a.ptr, a.ref.ptr, int(np.prod(a.job.shape)), a.scale_row,
                                bufs.job.rtol[a.job.name])

    def right_outputs() -> None:  # each output set to its reference, rounded to its dtype: every element passes
        for a in bufs.outputs():
            ref = a.ref_host
            values = to_storage(ref, a.job.dtype) if a.job.dtype in STORAGE else ref.astype(a.job.dtype)
            a.buffer.upload(np.ascontiguousarray(values), a.guard)

    bufs.prepare(worker.poisons)  # every output poisoned
    poisoned_check = timed(worker, output_checks)
    right_outputs()
    right_check = timed(worker, output_checks)
    rows = [
        ("prepare (poison, guards)", timed(worker, lambda: bufs.prepare(worker.poisons))),
        (f"fence raise + check ({len(fence.regions)} regions, {fenced / 2**20:.0f} MiB)", timed(worker, fence_pass)),
        ("scrub shared memory", timed(worker, worker.checks.scrub_shared)),
        (f"scrub local memory ({worker.device.stack_limit()} B a thread)",
         timed(worker, lambda: worker.checks.scrub_local(0))),
        ("scrub the register files", timed(worker, worker.checks.scrub_registers)),
        (f"output check, every element wrong ({sum(a.nbytes for a in bufs.outputs()) / 2**20:.0f} MiB poisoned)",
         poisoned_check),
        ("output check, every element right (the reference rounded to the output's dtype)", right_check),
        ("sweep (every resident case)", timed(worker, lambda: worker.sweep(lambda reply: None))),
    ]
    print(f"case {case.name}, median of {PASSES} passes, ms:")
    for what, ms in rows:
        print(f"| {what} | {ms:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/sgemm")
