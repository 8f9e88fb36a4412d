"""16-bit workloads on a real GPU: the bf16 example and its PyTorch baselines pass; a kernel
that leaves elements unwritten, writes garbage, writes one 2-byte element past its output
or accumulates in bfloat16 is rejected with the fitting report; the float16 path likewise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.accumulation_probe import probe_name
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.half_float import round_to
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.torch_baseline import torch_available

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
TIMING = EvaluationOptions(TimingConfig(warmup=2, repetitions=10), kernel_timeout_s=10.0)
PROBE = probe_name("cols")


@pytest.fixture(scope="module")
def rmsnorm():
    return load_workload(ROOT / "examples" / "rmsnorm_bf16")


@pytest.fixture(scope="module")
def rmsnorm_ev(rmsnorm):
    with Evaluator(rmsnorm, TIMING) as ev:
        yield ev


@pytest.fixture(scope="module")
def rowmean():
    return load_workload(Path(__file__).parent / "fixtures" / "rowmean_fp16")


def variant(workload, old: str, new: str, *more: tuple[str, str], kernel: str = "rowblock") -> Candidate:
    """The workload's kernel with edits (each must apply; the first occurrence is replaced)."""
    spec = workload.kernels[kernel]
    source = spec.source()
    for a, b in ((old, new), *more):
        assert a in source, a
        source = source.replace(a, b, 1)
    return Candidate.from_spec(spec, source=source)


def failed_checks(result):
    return {c.case: c.check for c in result.cases if c.check is not None and c.check.status != "ok"}


def test_rmsnorm_bf16_rowblock_passes_every_case_and_the_probe(rmsnorm, rmsnorm_ev):
    """The starting kernel (fp32 accumulation) passes every case, the accumulation probe included, and is timed."""
    assert PROBE in [c.name for c in rmsnorm.cases]
    r = rmsnorm_ev.evaluate(Candidate.from_spec(rmsnorm.kernels["rowblock"]))
    assert r.ok, r.detail
    assert r.case(PROBE).status == "ok" and r.score_ms and r.score_ms > 0


@pytest.mark.skipif(not torch_available(), reason="needs PyTorch")
@pytest.mark.parametrize("kind", ["torch_eager", "torch_compile"])
def test_rmsnorm_bf16_torch_baselines_pass_on_bfloat16_tensors(rmsnorm_ev, kind):
    """PyTorch's rms_norm on the worker's buffers viewed as torch.bfloat16 passes the same checks."""
    assert kind in rmsnorm_ev.baseline_kinds()
    r = rmsnorm_ev.baseline(kind=kind)
    assert r.ok, r.detail


def test_an_unwritten_bf16_element_fails_as_never_written(rmsnorm, rmsnorm_ev):
    """Skipping each row's last column: wrong_answer, the report says those elements still hold the poison."""
    cand = variant(rmsnorm, "for (int c = threadIdx.x; c < cols; c += BLOCK)\n            yr[c]",
                   "for (int c = threadIdx.x; c < cols - 1; c += BLOCK)\n            yr[c]")
    for _ in range(3):  # NaN-shaped and huge finite poisons alike
        r = rmsnorm_ev.evaluate(cand)
        assert r.status == "wrong_answer", (r.status, r.detail)
        check = failed_checks(r)["3x5"]
        assert check.reports[0].unwritten == 3 and "never written" in check.detail, check.detail


def test_garbage_bf16_output_fails_with_bf16_numbers_in_the_report(rmsnorm, rmsnorm_ev):
    """y = x (no normalisation): the mismatch report's values are bfloat16 numbers, not bit patterns."""
    cand = variant(rmsnorm, "__bfloat162float(xr[c]) * scale * __bfloat162float(weight[c])", "__bfloat162float(xr[c]) * 3.0f")
    r = rmsnorm_ev.evaluate(cand)
    assert r.status == "wrong_answer", (r.status, r.detail)
    report = failed_checks(r)["33x4097"].reports[0]
    assert report.mismatches > 0 and report.unwritten == 0
    got = np.array([g for _, g, _ in report.first])
    assert np.isfinite(got).all() and (round_to(got, "bfloat16") == got).all() and np.abs(got).max() <= 3.0


def test_one_bf16_element_past_the_output_is_out_of_bounds(rmsnorm, rmsnorm_ev):
    """A write of y[rows * cols] (2 bytes past the end, which need not be 4-byte aligned) hits the guard band."""
    cand = variant(rmsnorm, "    const float scale = inv_rms;\n",
                   "    const float scale = inv_rms;\n    if (row == 0 && threadIdx.x == 0) y[(long long)rows * cols] = y[0];\n")
    r = rmsnorm_ev.evaluate(cand)
    assert r.status == "out_of_bounds", (r.status, r.detail)
    assert "y (after)" in r.detail


def test_bf16_accumulation_fails_the_precision_policy(rmsnorm, rmsnorm_ev):
    """Squares summed in a bfloat16 running sum: the accumulation probe fails it by far more than its rtol."""
    bf16 = "sum = __bfloat162float(__float2bfloat16(fmaf({0}, {0}, sum)));"  # a bf16 running sum, rounded each step
    cand = variant(rmsnorm, "sum = fmaf(f.x, f.x, sum);", bf16.format("f.x"),
                   ("sum = fmaf(f.y, f.y, sum);", bf16.format("f.y")), ("sum = fmaf(v, v, sum);", bf16.format("v")))
    r = rmsnorm_ev.evaluate(cand)
    assert r.status == "wrong_answer", (r.status, r.detail)
    probe = failed_checks(r)[PROBE]
    assert probe.max_rel_error > 10 * r.case(PROBE).check.reports[0].rtol


def test_the_float16_path(rowmean):
    """fp16: the honest kernel passes; an unwritten row is reported as never written; garbage shows fp16 numbers."""
    with Evaluator(rowmean, TIMING) as ev:
        ok = ev.evaluate(Candidate.from_spec(rowmean.kernels["rowblock"]))
        assert ok.ok, ok.detail
        unwritten = ev.evaluate(variant(rowmean, "if (threadIdx.x == 0)", "if (threadIdx.x == 0 && blockIdx.x != 1)"))
        garbage = ev.evaluate(variant(rowmean, "partial[0] / cols", "partial[0]"))
        past = ev.evaluate(variant(rowmean, "if (threadIdx.x == 0)",
                                   "if (threadIdx.x == 0 && blockIdx.x == 0) y[rows] = y[0];\n    if (threadIdx.x == 0)"))
    assert unwritten.status == "wrong_answer", unwritten.detail
    report = failed_checks(unwritten)["3x5"].reports[0]
    assert (report.mismatches, report.unwritten) == (1, 1) and report.first[0][0] == (1,)
    assert garbage.status == "wrong_answer", garbage.detail
    got = np.array([g for _, g, _ in failed_checks(garbage)["33x4097"].reports[0].first])
    assert (got.astype(np.float16).astype(np.float64) == got).all() and got.min() > 1000
    assert past.status == "out_of_bounds" and "y (after)" in past.detail, (past.status, past.detail)


def test_the_16_bit_gpu_comparison_agrees_with_numpy(rmsnorm, rmsnorm_ev, rowmean):
    """bf16 and fp16 outputs: the GPU check's mismatch count and max error equal the NumPy report's."""
    bf16 = rmsnorm_ev.evaluate(variant(rmsnorm, "* scale * __bfloat162float(weight[c])",
                                       "* scale * __bfloat162float(weight[c]) * (c % 3 ? 1.0f : 1.03f)"))
    with Evaluator(rowmean, TIMING) as ev:
        fp16 = ev.evaluate(variant(rowmean, "partial[0] / cols", "partial[0] / cols * (blockIdx.x % 2 ? 1.0f : 1.05f)"))
    for result, case in ((bf16, "33x4097"), (fp16, "33x4097")):
        check = result.case(case).check
        assert check.status == "wrong_answer", (result.status, result.detail)
        cpu = check.reports[0]
        assert check.mismatches == cpu.mismatches > 0 and cpu.unwritten == 0
        assert check.max_rel_error == pytest.approx(cpu.max_rel_error, rel=1e-9)
