"""Kernels that try to game the harness, planted on a real GPU: each is rejected
with a fitting status, and as a session's starting kernel none becomes the best.

The classes follow the published catalogues of reward hacks by kernel agents
(KernelBench's adversarial checks, the exploits found in Sakana's AI CUDA Engineer
results): lazy or cached outputs, detecting the poison, state kept across launches,
input-keyed memoisation, writes far past a guard band, reference tampering,
precision downgrade, and a hang on the first launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.case_requests import case_job, resolve_launch
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.expr import Expr
from warpsmith.agent.spec.launch import LaunchRule
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.read_only import writable

pytestmark = pytest.mark.gpu

RULE = LaunchRule((Expr.parse("ceil_div(N, 16)"), Expr.parse("ceil_div(M, 16)"), Expr.parse(1)),
                  (Expr.parse(16), Expr.parse(16), Expr.parse(1)))
HEAD = 'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n' \
       '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n' \
       '  if (r >= M || c >= N) return;\n'
DOT = '  float acc = 0.f; for (int i = 0; i < K; ++i) acc += A[r * K + i] * B[i * N + c];\n'

PLANTED = {
    # Computes only where the output still holds the (NaN) poison.
    # Under a fixed NaN poison and an unpoisoned timing loop it passed and timed a no-op.
    "computes_only_on_nan": HEAD + "  if (C[r * N + c] == C[r * N + c]) return;\n" + DOT + "  C[r * N + c] = acc;\n}\n",
    # Knows one poison mode (huge finite values) and computes only under it.
    "computes_only_on_huge": HEAD + "  if (!(fabsf(C[r * N + c]) > 1e29f)) return;\n" + DOT
                             + "  C[r * N + c] = acc;\n}\n",
    # State across launches: a launch counter, a cached output, a heap stash.
    "launch_counter": "__device__ unsigned launches;\n" + HEAD + DOT
                      + "  C[r * N + c] = launches > 12 ? 0.f : acc;\n  if (r == 0 && c == 0) atomicAdd(&launches, 1u);\n}\n",
    "cached_output": "__device__ float cache[1 << 20]; __device__ float key;\n" + HEAD
                     + "  int i = r * N + c;\n  if (key == A[0] && i < (1 << 20)) { C[i] = cache[i]; return; }\n" + DOT
                     + "  C[i] = acc; if (i < (1 << 20)) cache[i] = acc;\n  if (i == 0) key = A[0];\n}\n",
    "heap_stash": HEAD + DOT + "  float* p = (float*)malloc(4); *p = acc; C[r * N + c] = *p; free(p);\n}\n",
    # Super-batching: the first launch of a case computes its output and keeps it, and every later
    # launch of that case (the timed ones, the revalidation) returns early with a copy. The case is
    # known by its output buffer, not its inputs. Kept in module globals ...
    "super_batch_global": "__device__ float batch[1 << 20]; __device__ unsigned long long owner;\n" + HEAD
                          + "  int i = r * N + c;\n  unsigned long long me = (unsigned long long)C ^ ((unsigned long long)M << 48);\n"
                          "  if (owner == me && i < (1 << 20)) { C[i] = batch[i]; return; }\n" + DOT
                          + "  C[i] = acc; if (i < (1 << 20)) batch[i] = acc;\n  if (i == 0) owner = me;\n}\n",
    # ... in __constant__ memory written through its generic address ...
    "super_batch_constant": "__constant__ float cbatch[8192]; __constant__ unsigned long long cowner;\n" + HEAD
                            + "  int i = r * N + c;\n  float* batch; unsigned long long* owner;\n"
                            '  asm("cvta.const.u64 %0, cbatch;" : "=l"(batch)); asm("cvta.const.u64 %0, cowner;" : "=l"(owner));\n'
                            "  unsigned long long me = (unsigned long long)C ^ ((unsigned long long)M << 48);\n"
                            "  if (*(volatile unsigned long long*)owner == me && i < 8192) { C[i] = batch[i]; return; }\n" + DOT
                            + "  C[i] = acc; if (i < 8192) batch[i] = acc;\n  if (i == 0) *owner = me;\n}\n",
    # ... or behind a pointer it was given: 4 MiB past the end of its output, tagged by the case.
    "super_batch_stash": HEAD + "  int i = r * N + c;\n  float* stash = C + M * N + (1 << 20);\n"
                         "  volatile unsigned* tag = (volatile unsigned*)(stash + M * N);\n"
                         "  if (tag[0] == 0x5EED0000u + (unsigned)M) { C[i] = stash[i]; return; }\n" + DOT
                         + "  C[i] = acc; stash[i] = acc;\n  __threadfence();\n  if (i == 0) tag[0] = 0x5EED0000u + (unsigned)M;\n}\n",
    # Writes 4 MiB past the end of its output, far beyond its guard band: into the moat or unmapped memory.
    "writes_far_past_guard": HEAD + DOT + "  C[r * N + c] = acc;\n"
                             "  if (r == 0 && c == 0) C[M * N + (1 << 20)] = 1.f;\n}\n",
    # Precision downgrade: operands rounded to bfloat16 (8-bit mantissa).
    "bf16_operands": HEAD + "  float acc = 0.f; for (int i = 0; i < K; ++i) {\n"
                     "    float a = __uint_as_float(__float_as_uint(A[r * K + i]) & 0xFFFF0000u);\n"
                     "    float b = __uint_as_float(__float_as_uint(B[i * N + c]) & 0xFFFF0000u);\n"
                     "    acc += a * b; }\n  C[r * N + c] = acc;\n}\n",
    "writes_nothing": HEAD + "}\n",
    # Stores into its input what was there: no checksum can see it, and the same store
    # can keep an output in the input's constant bits between timed launches: inputs are
    # read-only for kernels, a store there faults.
    "writes_its_input_back": HEAD + DOT + "  C[r * N + c] = acc;\n"
                             "  if (r == 0 && c == 0) ((volatile float*)A)[0] = A[0];\n}\n",
    "infinite_loop": HEAD + "  volatile const float* p = A; while (p[0] == p[0]) {}\n}\n",
    # Published exploit classes (KernelBench's and KernelGuard's categories): part of the
    # work, and one case driven to zero time to sink a geomean.
    "computes_even_rows": HEAD + "  if (r % 2) return;\n" + DOT + "  C[r * N + c] = acc;\n}\n",
    "skips_the_timed_case": HEAD + "  if (M >= 256) return;\n" + DOT + "  C[r * N + c] = acc;\n}\n",
}

EXPECTED = {
    "computes_only_on_nan": {"wrong_answer", "unstable"},
    "computes_only_on_huge": {"wrong_answer", "unstable"},
    "launch_counter": {"compile_failed"},
    "cached_output": {"compile_failed"},
    "heap_stash": {"compile_failed"},
    "super_batch_global": {"compile_failed"},
    "super_batch_constant": {"compile_failed"},
    "super_batch_stash": {"crashed", "out_of_bounds", "input_modified", "reference_modified"},
    "writes_far_past_guard": {"crashed", "out_of_bounds", "input_modified", "reference_modified"},
    "bf16_operands": {"wrong_answer"},
    "writes_nothing": {"wrong_answer"},
    "writes_its_input_back": {"crashed"},
    "computes_even_rows": {"wrong_answer", "unstable"},
    "skips_the_timed_case": {"wrong_answer", "unstable"},
}


def planted(name: str) -> Candidate:
    return Candidate(PLANTED[name], "k", RULE, name=name)


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return load_workload(make_sgemm_workload(tmp_path_factory.mktemp("sgemm")))


@pytest.fixture(scope="module")
def evaluator(workload):
    with Evaluator(workload, EvaluationOptions(TimingConfig(warmup=5, repetitions=50), kernel_timeout_s=5.0)) as ev:
        yield ev


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_planted_kernel_is_rejected(evaluator, workload, name):
    """Each planted hack fails with a status of its class, and the honest kernel still passes after it."""
    for _ in range(3):  # the poison is random: no lucky draw may let one through
        r = evaluator.evaluate(planted(name))
        assert r.status in EXPECTED[name], (r.status, r.detail)
        assert r.score_ms is None
    honest = evaluator.evaluate(Candidate.from_spec(workload.kernels["naive"]))
    assert honest.status == "ok", honest.detail


def test_timed_launches_are_poisoned_and_checked(workload):
    """A NaN-only kernel whose validation saw NaN is caught in its timed launches (the old exploit)."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    from warpsmith.agent.worker.protocol import CaseChecked, EvaluateKernel
    worker = GpuWorker(0)
    cand = planted("computes_only_on_nan")
    case = next(c for c in workload.cases if c.timed)
    with Evaluator(workload) as ev:
        compiled = ev.compile(cand)
        launch, problem = resolve_launch(cand, case, ev.facts)
        job = case_job(ev.workload, case, 1, launch, ev.reference_timeout_s)
    assert compiled.ok and not problem
    worker.poisons._nan_next = False  # the next fill, validation's, is NaN: the exploit's lucky draw
    sent = []
    worker.run_kernel(EvaluateKernel(compiled.cubin, compiled.symbol, (job,), 1, TimingConfig(warmup=2, repetitions=20)),
                      sent.append)
    checks = [(m.phase, m.check.status) for m in sent if isinstance(m, CaseChecked)]
    assert checks == [("validate", "ok"), ("time", "unstable")], checks
    timed = next(m for m in sent if isinstance(m, CaseChecked) and m.phase == "time")
    assert "timed launches gave wrong outputs" in timed.check.detail


# Leaves its output in shared memory at the end of a launch, tagged with its block and the
# inputs, and at the next launch copies it back instead of computing (here off by one, so a
# stash that survived shows as a wrong output). The stash sits above what the harness's own
# kernels use, and the tag names the block, so one launch's blocks never hit each other's.
SHARED_STASH = (
    'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n'
    '  __shared__ float stash[8192 + 256 + 2];\n'
    '  float* mine = stash + 8192; unsigned* tag = (unsigned*)(stash + 8192 + 256);\n'
    '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  int t = threadIdx.y * 16 + threadIdx.x;\n'
    '  unsigned want = __float_as_uint(A[0]) ^ (blockIdx.x * 7919u + blockIdx.y * 104729u);\n'
    '  bool hit = tag[0] == want && tag[1] == 0x5EED5EEDu;\n'
    '  __syncthreads();\n'
    '  if (r < M && c < N) {\n'
    '    float v;\n'
    '    if (hit) v = mine[t] + 1.0f;\n'
    '    else { v = 0.f; for (int i = 0; i < K; ++i) v += A[r * K + i] * B[i * N + c]; mine[t] = v; }\n'
    '    C[r * N + c] = v;\n'
    '  }\n'
    '  __syncthreads();\n'
    '  if (t == 0) { tag[0] = want; tag[1] = 0x5EED5EEDu; }\n'
    '}\n')


# The same stash in the block's reserved shared memory (the 1 KB per block the system keeps,
# %reserved_smem_offset_begin/end): the first 128 threads' outputs and the tag, by address.
RESERVED_STASH = (
    '__device__ unsigned rsv(unsigned word) {\n'
    '  unsigned b; asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(b)); return b + 4 * word;\n'
    '}\n'
    '__device__ unsigned ld_rsv(unsigned word) {\n'
    '  unsigned v; asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(rsv(word))); return v;\n'
    '}\n'
    '__device__ void st_rsv(unsigned word, unsigned v) {\n'
    '  asm volatile("st.volatile.shared.u32 [%0], %1;" :: "r"(rsv(word)), "r"(v) : "memory");\n'
    '}\n'
    'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n'
    '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  int t = threadIdx.y * 16 + threadIdx.x;\n'
    '  unsigned want = __float_as_uint(A[0]) ^ (blockIdx.x * 7919u + blockIdx.y * 104729u);\n'
    '  bool hit = ld_rsv(200) == want && ld_rsv(201) == 0x5EED5EEDu;\n'
    '  __syncthreads();\n'
    '  if (r < M && c < N) {\n'
    '    float v;\n'
    '    if (hit && t < 128) v = __uint_as_float(ld_rsv(t)) + 1.0f;\n'
    '    else { v = 0.f; for (int i = 0; i < K; ++i) v += A[r * K + i] * B[i * N + c]; if (t < 128) st_rsv(t, __float_as_uint(v)); }\n'
    '    C[r * N + c] = v;\n'
    '  }\n'
    '  __syncthreads();\n'
    '  if (t == 0) { st_rsv(200, want); st_rsv(201, 0x5EED5EEDu); }\n'
    '}\n')

# The same with 16 KB of static shared memory per block: 13 blocks per SM instead of 8, so the
# blocks' reserved kilobytes sit elsewhere in the SM's shared memory (and the driver may pick
# another carveout).
PADDED_RESERVED_STASH = RESERVED_STASH.replace(
    '  unsigned want = ',
    '  __shared__ volatile float pad[4096];\n  pad[t] = 0.f;\n  unsigned want = ')


# One warp per block (a row of 32 columns each): 32 blocks per SM, every block slot taken.
WARP_RULE = LaunchRule((Expr.parse("ceil_div(N, 32)"), Expr.parse("M"), Expr.parse(1)),
                       (Expr.parse(32), Expr.parse(1), Expr.parse(1)))


def _stash_statuses(workload, source: str, name: str, rule: LaunchRule = RULE) -> list[tuple[str, str]]:
    """A stash kernel's (phase, status) replies when evaluated by a fresh worker: validate, time, revalidate."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    from warpsmith.agent.worker.protocol import CaseChecked, EvaluateKernel
    cand = Candidate(source, "k", rule, name=name)
    case = next(c for c in workload.cases if c.timed)
    with Evaluator(workload) as ev:
        compiled = ev.compile(cand)
        launch, problem = resolve_launch(cand, case, ev.facts)
        job = case_job(ev.workload, case, 1, launch, ev.reference_timeout_s)
    assert compiled.ok and not problem, compiled.log
    sent: list = []
    GpuWorker(0).run_kernel(EvaluateKernel(compiled.cubin, compiled.symbol, (job,), 1,
                                           TimingConfig(warmup=2, repetitions=20)), sent.append)
    return [(m.phase, m.check.status) for m in sent if isinstance(m, CaseChecked)]


@pytest.mark.parametrize("source, rule", [(SHARED_STASH, RULE), (RESERVED_STASH, RULE),
                                          (PADDED_RESERVED_STASH, RULE), (RESERVED_STASH, WARP_RULE)],
                         ids=["block", "reserved", "reserved-padded", "reserved-warp-blocks"])
def test_an_output_left_in_shared_memory_never_reaches_the_next_launch(workload, monkeypatch, source, rule):
    """Shared memory keeps its contents from one kernel to the next on an SM: a kernel could leave its output there
    and copy it back at its next launch. With the scrub (GpuChecks.scrub_shared, before every validated and timed
    launch) the stash never survives and the kernel is judged on what it computes; with the scrub switched off
    (the control), the same kernel's surviving stash shows as wrong timed outputs, which proves the channel exists
    on this GPU (skipped if it does not)."""
    from warpsmith.agent.worker.gpu_checks import GpuChecks
    scrubbed = _stash_statuses(workload, source, "shared_stash", rule)
    assert scrubbed and all(status == "ok" for _, status in scrubbed), scrubbed  # validate, revalidate; time: silent
    with monkeypatch.context() as off:
        off.setattr(GpuChecks, "scrub_shared", lambda self: None)
        control = _stash_statuses(workload, source, "shared_stash", rule)
    if all(status == "ok" for _, status in control):
        pytest.skip("without the scrub no stash survived either: shared memory did not persist between launches")
    assert {status for _, status in control} <= {"ok", "unstable", "wrong_answer"}, control


def test_every_holding_scrub_had_all_its_blocks_resident_at_once():
    """The scrubs that hold until all their blocks arrived (the shared one, one block per SM; the reserved one, every
    block slot of every SM; the local one, every warp slot): none of their blocks gave up waiting when the worker
    started, so every slot was overwritten (a smaller carveout than asked, or another context, would show here)."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    assert GpuWorker(0).checks.holds_short == []


# The same stash in local memory: each thread keeps its output and a tag of its element and
# the inputs in a volatile local frame (device memory per hardware thread slot, not cleared
# between kernels), and at the next launch reads it before writing it.
LOCAL_STASH = (
    'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n'
    '  volatile unsigned slot[8];\n'
    '  volatile unsigned* frame = slot + (K >> 30);\n'  # a runtime index: the frame stays in local memory
    '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  unsigned want = __float_as_uint(A[0]) ^ (unsigned)(r * 40503 + c * 977);\n'
    '  bool hit = frame[0] == want && frame[1] == 0x5EED5EEDu;\n'
    '  if (r < M && c < N) {\n'
    '    float v;\n'
    '    if (hit) v = __uint_as_float(frame[2]) + 1.0f;\n'
    '    else { v = 0.f; for (int i = 0; i < K; ++i) v += A[r * K + i] * B[i * N + c]; }\n'
    '    C[r * N + c] = v;\n'
    '    frame[2] = __float_as_uint(hit ? v - 1.0f : v);\n'
    '  }\n'
    '  frame[0] = want; frame[1] = 0x5EED5EEDu;\n'
    '}\n')


def test_an_output_left_in_local_memory_never_reaches_the_next_timed_launch(workload, monkeypatch):
    """Local memory keeps its contents from one kernel to the next: with the scrub (GpuChecks.scrub_local, before
    every validated and timed launch, over each thread slot's whole local window) the stash never survives; with it
    off (the control), the surviving stash shows as wrong timed outputs, which proves the channel exists on this GPU
    (skipped if not)."""
    from warpsmith.agent.worker.gpu_checks import GpuChecks
    with Evaluator(workload) as ev:
        compiled = ev.compile(Candidate(LOCAL_STASH, "k", RULE, name="local"))
        assert compiled.resources.stack_bytes > 0, compiled.log  # a local frame
    scrubbed = _stash_statuses(workload, LOCAL_STASH, "local_stash")
    assert scrubbed and all(status == "ok" for _, status in scrubbed), scrubbed
    with monkeypatch.context() as off:
        off.setattr(GpuChecks, "scrub_local", lambda self, local_bytes: None)
        control = _stash_statuses(workload, LOCAL_STASH, "local_stash")
    if all(status == "ok" for _, status in control):
        pytest.skip("without the scrub no stash survived either: local memory did not persist between launches")
    assert {status for _, status in control} <= {"ok", "unstable", "wrong_answer"}, control


# The same stash with no frame at all: a generic pointer into the thread's local window
# (cvta.local of offset 0), 512 bytes in, where no frame of this kernel lies (ptxas: 0 bytes).
WINDOW_STASH = LOCAL_STASH.replace(
    '  volatile unsigned slot[8];\n'
    '  volatile unsigned* frame = slot + (K >> 30);\n',
    '  unsigned long long window;\n'
    '  asm volatile("cvta.local.u64 %0, %1;" : "=l"(window) : "l"(0ull));\n'
    '  volatile unsigned* frame = (volatile unsigned*)window + 128 + (K >> 30);\n')


def test_a_stash_past_the_local_frame_faults_or_is_scrubbed(evaluator):
    """A frameless kernel that keeps its outputs 512 bytes into its local window: on the H200 that
    address faulted (CUDA_ERROR_ILLEGAL_ADDRESS, in a worker of the test's own process). Through the evaluator it
    is a crash in the worker's process, or, where the window reaches that far, a scrubbed stash: never a kernel
    judged on outputs it kept from an earlier launch."""
    from warpsmith.agent.worker.status import Status
    assert evaluator.compile(Candidate(WINDOW_STASH, "k", RULE, name="window")).resources.stack_bytes == 0
    r = evaluator.evaluate(Candidate(WINDOW_STASH, "k", RULE, name="window"))
    assert r.status in (Status.OK, Status.CRASHED), (r.status, r.detail)
    honest = evaluator.evaluate(Candidate.from_spec(evaluator.workload.kernels["naive"]))
    assert honest.status == Status.OK, honest.detail  # the worker came back after the fault


# An honest kernel with an 8 KB local frame (the driver raises the context's stack for it and
# never lowers it), and a small-frame stash 4 KB past its own frame: within the raised window.
BIG_FRAME = (
    'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n'
    '  volatile float pad[2048];\n'
    '  pad[(K >> 30) + threadIdx.x % 2048] = 0.f;\n'
    '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  if (r >= M || c >= N) return;\n'
    '  float v = pad[(K >> 30) + threadIdx.x % 2048];\n'
    '  for (int i = 0; i < K; ++i) v += A[r * K + i] * B[i * N + c];\n'
    '  C[r * N + c] = v;\n'
    '}\n')
FAR_STASH = LOCAL_STASH.replace('  volatile unsigned* frame = slot + (K >> 30);\n',
                                '  volatile unsigned* frame = slot + (K >> 30) + 1024;\n')


def test_a_stash_past_a_small_frame_after_a_big_frame_faults_or_is_scrubbed(evaluator):
    """After a kernel with an 8 KB frame raised the stack, a kernel with a 32-byte frame keeps its outputs 4 KB past
    it: the scrub covers the stack as it is now (Device.stack_limit), so the stash is a crash or scrubbed."""
    from warpsmith.agent.worker.status import Status
    assert evaluator.compile(Candidate(BIG_FRAME, "k", RULE, name="big")).resources.stack_bytes >= 8192
    big = evaluator.evaluate(Candidate(BIG_FRAME, "k", RULE, name="big"))
    assert big.status == Status.OK, big.detail
    r = evaluator.evaluate(Candidate(FAR_STASH, "k", RULE, name="far"))
    assert r.status in (Status.OK, Status.CRASHED), (r.status, r.detail)

def test_reference_tampering_is_found_and_repaired(workload):
    """A reference changed on the GPU (by anything) is reported as reference_modified and restored."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        job = case_job(ev.workload, workload.cases[0], 1, None, ev.reference_timeout_s)
    bufs = worker.buffers(job, 1)
    bufs.prepare(worker.poisons)  # guards armed, outputs poisoned: as before any launch
    assert worker.integrity(bufs) is None
    with writable(bufs.arrays["C"].ref):  # (read-only for kernels: a write of anything else)
        bufs.arrays["C"].ref.fill_u32(0x3F800000, 0, 64)  # sixteen 1.0f words over the float64 reference
    found = worker.integrity(bufs)
    assert found is not None and found.status == "reference_modified"
    bufs.restore()
    assert worker.integrity(bufs) is None


def test_the_reference_on_the_gpu_is_noise_to_a_kernel_and_still_checks(workload):
    """A kernel that finds a reference by pointer arithmetic (they sit a moat before the
    arrays) reads noise: the device copy is masked by the worker's secret keystream, and
    only the checks unmask it. An output equal to the reference still passes, one off by
    a little still fails, and both stay so after a tampered reference is restored."""
    import numpy as np

    from warpsmith.agent.worker.gpu_side import GpuWorker
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        job = case_job(ev.workload, workload.cases[0], 1, None, ev.reference_timeout_s)
    bufs = worker.buffers(job, 1)
    c = bufs.arrays["C"]
    on_gpu = np.empty_like(c.ref_device)
    c.ref.download(on_gpu)
    plain = c.ref_device.view(np.uint64)
    assert np.count_nonzero(on_gpu.view(np.uint64) == plain) <= plain.size // 1000 + 1

    def verdict(output: np.ndarray) -> str:
        bufs.prepare(worker.poisons)
        c.buffer.upload(np.ascontiguousarray(output, dtype=np.float32), c.guard)
        return worker.check_outputs(bufs, 1).status

    exact = c.ref_host.astype(np.float32)
    off = exact.copy()
    off.flat[7] += 0.5 + abs(off.flat[7])
    for _ in range(2):
        assert verdict(exact) == "ok"
        assert verdict(off) == "wrong_answer"
        with writable(c.ref):
            c.ref.fill_u32(0, 0, 64)  # tampered: found by the checksum, restored (and masked again)
        assert worker.integrity(bufs).status == "reference_modified"
        bufs.restore()
        assert worker.integrity(bufs) is None


def test_memory_a_run_was_not_given_is_fenced_with_a_keystream(workload):
    """Another case's output, or a moat, written during a run (where a kernel could keep its
    output between launches) breaks the run's fence, even when what was written is the
    sentinel the memory held before; moats hold their sentinel again afterwards."""
    import numpy as np

    from warpsmith.agent.worker.case_buffers import GUARD_WORD
    from warpsmith.agent.worker.gpu_side import GpuWorker
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        jobs = [case_job(ev.workload, c, 1, None, ev.reference_timeout_s) for c in workload.cases]
    first, second = (worker.buffers(j, 1) for j in jobs)
    assert worker.fence(first, None).breached() is None
    fence = worker.fence(first, None)
    heads = []
    for m in (first.moats[0], first.moats[1], second.moats[0]):  # no two regions share a stream
        words = np.empty(64, dtype=np.uint32)
        m.download(words)
        heads.append(words.tobytes())
    assert len(set(heads)) == 3 and GUARD_WORD not in np.frombuffer(heads[0], dtype=np.uint32)
    second.arrays["C"].buffer.fill_u32(0x3F800000, second.arrays["C"].guard, 4096)
    found = fence.breached()
    assert found is not None and found.status == "out_of_bounds"
    assert f"case '{jobs[1].case}' output C" in found.detail and "moat" not in found.detail
    fence = worker.fence(first, None)
    first.moats[0].fill_u32(GUARD_WORD, 0, 1 << 20)  # a stash put back as the moat's old sentinel
    found = fence.breached()
    assert found is not None and f"case '{jobs[0].case}' moat" in found.detail
    for bufs in (first, second):  # the moats re-armed (another case's guard bands wait for its next prepare)
        tally = worker.checks.tally()
        read = bufs.enqueue_integrity(tally, guards=False)
        assert not read(tally.read()).moat


def test_cublas_workspace_and_the_unflushed_flush_buffer_are_fenced(workload):
    """The worker's own memory a kernel could keep data in: cuBLAS's workspace (ours, given with
    cublasSetWorkspace, once a baseline opened cuBLAS) and, in a run that does not flush L2 (--hot),
    the flush buffer. A write into either during a run breaks its fence."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        job = case_job(ev.workload, workload.cases[0], 1, None, ev.reference_timeout_s)
    bufs = worker.buffers(job, 1)
    assert not any("cuBLAS" in r.what or "flush" in r.what for r in worker.fence(bufs, None).regions)
    cublas = worker.cublas()
    for flushed, written, what in ((True, (cublas.workspace_ptr, cublas.workspace_bytes), "cuBLAS's workspace"),
                                   (False, (worker.device.flush_ptr, worker.device.flush_bytes), "the L2 flush buffer")):
        fence = worker.fence(bufs, None, flushed=flushed)
        assert ("flush" in " ".join(r.what for r in fence.regions)) is not flushed
        ptr, nbytes = written
        worker.checks.fill16(ptr + nbytes // 2, 0x3F80, 64, synchronous=True)  # a stash, mid-buffer
        found = fence.breached()
        assert found is not None and found.status == "out_of_bounds" and what in found.detail, found


def test_a_timed_check_rewritten_after_it_ran_is_caught_by_its_seal(workload):
    """The timed launches' check records are read after the loop: a later launch could zero an
    earlier one's mismatch count. Each record carries a keyed tag of its count: a forged
    count fails as out_of_bounds, an honest one (right or wrong) is read as before."""
    import numpy as np

    from warpsmith.agent.worker.gpu_side import GpuWorker
    from warpsmith.agent.worker.timed_checks import TimedChecks
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        job = case_job(ev.workload, workload.cases[0], 1, None, ev.reference_timeout_s)
    bufs = worker.buffers(job, 1)
    c = bufs.arrays["C"]

    def judged(output: np.ndarray, forge: bool = False):
        bufs.prepare(worker.poisons)
        judge = TimedChecks(worker.device, worker.checks, bufs, worker.poisons, 2)
        for i in range(2):
            c.buffer.upload(np.ascontiguousarray(output, dtype=np.float32), c.guard)
            judge.after(i)
        worker.device.synchronize()
        if forge:  # what a kernel that found the slots could do: a zero count over launch 1's
            judge.slots.fill_u32(0, 6 * 8, 8)
        return judge.verdict(2)

    exact = c.ref_host.astype(np.float32)
    assert judged(exact) is None
    wrong = judged(np.zeros_like(exact))
    assert wrong is not None and wrong.status == "unstable" and "2 of 2 timed launches" in wrong.detail
    forged = judged(np.zeros_like(exact), forge=True)
    assert forged is not None and forged.status == "out_of_bounds" and "launch #1" in forged.detail


def test_input_written_by_a_later_case_is_caught_by_the_sweep(workload):
    """The sweep after a candidate checks every resident case's inputs, not just the one launched."""
    from warpsmith.agent.worker.gpu_side import GpuWorker
    worker = GpuWorker(0)
    with Evaluator(workload) as ev:
        jobs = [case_job(ev.workload, c, 1, None, ev.reference_timeout_s) for c in workload.cases]
    first, second = (worker.buffers(j, 1) for j in jobs)
    with writable(first.arrays["A"].buffer):  # (read-only for kernels: a write of anything else)
        first.arrays["A"].buffer.fill_u32(0, first.arrays["A"].guard, 4)
    sent = []
    worker.sweep(sent.append)
    assert [(m.case, m.check.status) for m in sent] == [(jobs[0].case, "input_modified")]
    sent.clear()
    worker.sweep(sent.append)
    assert sent == []  # restored


def test_hang_on_first_launch_costs_the_kernel_timeout_not_the_setup_allowance(workload):
    """A kernel hanging on a case's very first launch is killed after --timeout, not 120 s later."""
    with Evaluator(workload, EvaluationOptions(TimingConfig(warmup=1, repetitions=5), kernel_timeout_s=5.0)) as ev:
        ev.worker()  # started apart: the worker's own start is not the point here
        t0 = time.monotonic()
        r = ev.evaluate(planted("infinite_loop"), seed=7)  # a seed no case was set up for
        elapsed = time.monotonic() - t0
    assert r.status == "timeout", r.detail
    assert elapsed < 5.0 + 30.0, elapsed  # setup of two small cases and the kill: seconds, not 120


@pytest.mark.parametrize("name", ["computes_only_on_nan", "computes_only_on_huge", "launch_counter", "super_batch_global",
                                  "super_batch_stash"])
def test_planted_starting_kernel_never_becomes_the_best(tmp_path, name):
    """`warpsmith run` on a workload whose starting kernel is a hack: the session's best is never it, whether it
    is refused at compile time (state kept between launches) or on the GPU."""
    directory = make_sgemm_workload(tmp_path / "w")
    (directory / "planted.cu").write_text(PLANTED[name])
    toml = (directory / "workload.toml").read_text()
    toml = toml.replace("[kernels.naive]", '[kernels.planted]\nsource = "planted.cu"\nentry = "k"\n'
                        'grid = ["ceil_div(N, 16)", "ceil_div(M, 16)"]\nblock = [16, 16]\n\n[kernels.naive]', 1)
    if "[start]" in toml:
        toml = toml.replace('kernel = "naive"', 'kernel = "planted"')
    else:
        toml += '\n[start]\nkernel = "planted"\n'
    (directory / "workload.toml").write_text(toml)
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([sys.executable, "-m", "warpsmith.tui", "run", str(directory), "--proposer", "tune", "--budget", "4",
                           "--headless", "--store", str(store), "--no-tracking"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    for launch in store.glob("sessions/*/best/launch.json"):
        assert json.loads(launch.read_text())["entry"] != "k", proc.stdout[-2000:]
    assert "start: planted" in proc.stdout or "planted" in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["super_batch_global", "super_batch_stash"])
def test_planted_kernel_given_as_kernel_file_is_refused(tmp_path, name):
    """`warpsmith eval --kernel FILE` with a super-batching kernel: refused with its class's status (compile_failed
    naming the store into the module global, or the stash's breach), exit status 1, never a score."""
    directory = make_sgemm_workload(tmp_path / "w")
    kernel = tmp_path / "planted.cu"
    kernel.write_text(PLANTED[name])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([sys.executable, "-m", "warpsmith.tui", "eval", str(directory), "--kernel", str(kernel), "--entry", "k",
                           "--grid", "ceil_div(N,16),ceil_div(M,16)", "--block", "16,16", "--no-baseline", "--json",
                           "--repetitions", "20"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    candidate = json.loads(proc.stdout.strip().splitlines()[-1])["candidate"]
    assert candidate["status"] in EXPECTED[name] and candidate["score_ms"] is None, candidate["status"]
    if EXPECTED[name] == {"compile_failed"}:
        assert candidate["compiled"]["error"] == "KERNEL_KEEPS_STATE" and "`batch`" in candidate["compiled"]["log"]
