"""The judge process on a GPU: an output of this process (the worker's role) compared in the
judge's own context through CUDA IPC, ordered after the launch that writes it by an
interprocess event alone."""

from __future__ import annotations

import numpy as np
import pytest

from warpsmith.agent.runtime import compiler, native
from warpsmith.agent.spec import tolerance
from warpsmith.agent.spec.expr import Expr
from warpsmith.agent.spec.launch import LaunchRule
from warpsmith.agent.worker.pages import alloc_pages

pytestmark = pytest.mark.gpu

ROWS, COLS = 512, 1000
OFFSET = 4096  # the output starts past a guard band, as a case's arrays do
# Spins about `cycles` clocks, then writes y = x: a check not ordered after it sees the poison.
SLOW_COPY = r"""
extern "C" __global__ void slow_copy(const float* x, float* y, unsigned n, long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i];
}
"""


def _setup(seed: int):
    """A device, the slow copy, input values on it, an output buffer shared with a new judge
    as "y" (reference: the values)."""
    from warpsmith.agent.worker.judge import JudgeClient, start_judge
    device = native.open_device(0)
    compiled = compiler.compile_kernel(SLOW_COPY, "slow_copy", device.facts.arch, filename="slow_copy.cu")
    assert compiled.ok, compiled.log
    slow_copy = device.load_module(compiled.cubin).function("slow_copy")
    values = np.random.default_rng(seed).standard_normal((ROWS, COLS)).astype(np.float32)
    x = device.alloc(values.nbytes)
    x.upload(values)
    out = alloc_pages(device, OFFSET + values.nbytes)
    reference = values.astype(np.float64)
    process, conn = start_judge(0)
    judge = JudgeClient(device, conn)
    judge.share_output("y", out, OFFSET, "float32", values.size, COLS, 1e-5,
                       np.concatenate([reference.ravel(), tolerance.scales(reference, True)]))
    return device, slow_copy, values, x, out, judge, process


def test_the_judge_compares_what_the_launch_wrote_in_a_context_of_its_own():
    device, slow_copy, values, x, out, judge, process = _setup(3)
    try:
        for _ in range(3):
            out.fill_u32(0x7FC00001, OFFSET, values.nbytes)  # poison: a NaN no honest kernel writes
            device.launch(slow_copy, (132, 1, 1), (256, 1, 1), 0,
                          [("ptr", x.ptr), ("ptr", out.ptr + OFFSET), ("i32", values.size), ("i64", 100_000_000)])
            right = judge.check("y", timeout_s=60)  # no host wait: the judge's stream waits on the launch
            assert (right.mismatches, right.first_bad) == (0, -1), right
        wrong = values.copy()
        wrong[7, 11] += 1.0
        out.upload(wrong, OFFSET)
        found = judge.check("y", timeout_s=60)
        assert (found.mismatches, found.first_bad) == (1, 7 * COLS + 11), found
    finally:
        judge.close()
        process.join(timeout=30)


def test_a_run_of_launches_is_judged_without_the_host_waiting_for_the_gpu():
    """Five slow launches, each poisoned before and checked after by the judge, the host
    waiting only for the judge to have enqueued each check; the third launch writes one
    wrong element (it copies another input). Each launch's counts come
    back at the end: only the third is wrong, so no check read another launch's output or
    the poison."""
    device, slow_copy, values, x, out, judge, process = _setup(4)
    wrong = values.copy()
    wrong[100, 5] += 2.0
    bad_x = device.alloc(values.nbytes)
    bad_x.upload(wrong)
    try:
        judge.start_run(("y",), 5)
        for launch in range(5):
            out.fill_u32_async(0x7FC00001, OFFSET, values.nbytes)  # behind the judge's last checks
            source = bad_x if launch == 2 else x
            device.launch(slow_copy, (132, 1, 1), (256, 1, 1), 0,
                          [("ptr", source.ptr), ("ptr", out.ptr + OFFSET), ("i32", values.size),
                           ("i64", 50_000_000)])
            judge.enqueue_checks(launch, timeout_s=60)
        assert judge.read_run(timeout_s=60) == ((0,), (0,), (1,), (0,), (0,))
    finally:
        judge.close()
        process.join(timeout=30)


# Wrong on about one launch in four, by the GPU's clock: no rule of the audit sees it, and
# validation alone may pass it; the judge's check behind every timed launch does not.
NAIVE_RULE = LaunchRule((Expr.parse("ceil_div(N, 16)"), Expr.parse("ceil_div(M, 16)"), Expr.parse(1)),
                        (Expr.parse(16), Expr.parse(16), Expr.parse(1)))
SOMETIMES_WRONG = (
    'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n'
    '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  if (r >= M || c >= N) return;\n'
    '  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));\n'
    '  float acc = 0.f; for (int i = 0; i < K; ++i) acc += A[r * K + i] * B[i * N + c];\n'
    '  C[r * N + c] = ((t >> 16) & 3) == 1 ? acc + 1.f : acc;\n'
    '}\n')


def test_an_evaluation_with_the_separate_judge(tmp_path):
    """`--separate-judge`: the starting kernel passes and is timed, a kernel wrong on half its rows is a wrong
    answer, and one wrong on about a quarter of its launches does not pass."""
    from workload_factory import make_sgemm_workload

    from warpsmith.agent.evaluate.evaluator import Evaluator
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.spec.workload import load_workload
    from warpsmith.agent.worker.protocol import TimingConfig
    workload = load_workload(make_sgemm_workload(tmp_path / "sgemm"))
    options = EvaluationOptions(timing=TimingConfig(warmup=3, repetitions=50), separate_judge=True)
    with Evaluator(workload, options) as ev:
        naive = Candidate.from_spec(workload.kernels["naive"])
        r = ev.evaluate(naive)
        assert r.status == "ok", r.detail
        assert r.case("square-256").timing.n == 50
        half = naive.source.replace("if (row >= M || col >= N) return;", "if (row >= M / 2 || col >= N) return;")
        assert half != naive.source
        assert ev.evaluate(Candidate(half, naive.entry, naive.launch, name="half")).status == "wrong_answer"
        sometimes = ev.evaluate(Candidate(SOMETIMES_WRONG, "k", NAIVE_RULE, name="sometimes"))
        assert sometimes.status in ("wrong_answer", "unstable"), sometimes.detail
