"""The worker's 16-bit machinery on the CPU: the check kernels compile with real NVRTC,
16-bit poisons, mismatch reports on bfloat16 bits, and the accumulation probe that
fails 16-bit accumulators while float32 passes."""

import re
from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.spec.accumulation_probe import PROBE_REDUCTION, probe_name
from warpsmith.agent.spec.half_float import HALF_FORMATS, round_to, to_float64, to_storage
from warpsmith.agent.spec.inputs import generate_inputs
from warpsmith.agent.spec.tolerance import case_rtol, relative_error
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.case_buffers import GUARD_HALF
from warpsmith.agent.worker.gpu_checks import CLOSE_KERNELS, KERNELS, SOURCE
from warpsmith.agent.worker.mismatch import build_report
from warpsmith.agent.worker.poison import POISON_WIDTH, Poisons

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_the_check_kernels_compile_with_every_16_bit_entry(arch):
    """NVRTC compiles the checker source (the reserved-memory scrub's registers exist only from sm_80:
    guarded), and every kernel the worker looks up is in the CUBIN."""
    r = compile_kernel(SOURCE, "", arch, filename="warpsmith_checks.cu", use_cache=False)
    assert r.ok, r.log
    entries = set(re.findall(r"Compiling entry function '(\w+)'", r.log))
    assert set(KERNELS) <= entries and {"float16", "bfloat16"} <= set(CLOSE_KERNELS)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_poisons_alternate_nan_and_huge_and_never_repeat(dtype):
    """16-bit words: a NaN of the format, then a finite value far from normalised results; never twice in a row."""
    poisons, words = Poisons(), []
    poisons._nan_next = True
    for _ in range(200):
        poisons.next_fill()
        words.append(poisons.word(dtype))
    assert POISON_WIDTH[dtype] == 2 and all(0 <= w <= 0xFFFF for w in words)
    assert all(a != b for a, b in zip(words, words[1:]))
    values = to_float64(np.array(words, dtype=np.uint16), dtype) if dtype == "bfloat16" else \
        np.array(words, dtype=np.uint16).view(np.float16).astype(np.float64)
    assert np.isfinite(values[::2]).all() and np.isnan(values[1::2]).all()
    assert np.abs(values[::2]).min() >= (2.0**97 if dtype == "bfloat16" else 8192)


def test_the_16_bit_guard_sentinel_is_a_nan_no_kernel_writes_by_default():
    """0xFFAD: NaN in both formats, and not the canonical NaN a conversion produces."""
    for dtype in HALF_FORMATS:
        value = to_float64(np.array([GUARD_HALF], np.uint16), dtype) if dtype == "bfloat16" else \
            np.array([GUARD_HALF], np.uint16).view(np.float16).astype(np.float64)
        assert np.isnan(value[0])
    assert GUARD_HALF not in (0x7FFF, 0xFFFF, 0x7FC0, 0x7E00)


def test_a_bfloat16_report_counts_unwritten_bits_and_prints_numbers():
    """An output downloaded as uint16 bits: poison matched on bits, got/expected printed as bf16 values."""
    ref = round_to(np.linspace(-2, 2, 48).reshape(6, 8) + 0.01, "bfloat16")
    out = to_storage(ref, "bfloat16")
    word = 0x7F85
    out[4:, :] = word  # never written
    out[0, 1] = to_storage(np.array([3.0]), "bfloat16")[0]  # written wrong
    r = build_report("y", out, ref, 0.01, word, dtype="bfloat16")
    assert (r.mismatches, r.unwritten) == (17, 16)
    text = r.text()
    assert "y[0, 1]: got 3, expected " in text and "got nan" in text
    assert "16 wrong elements were never written" in r.hint


def test_a_float16_report_reads_its_values():
    """float16 downloads as float16: wrong values are reported as the numbers, unwritten by the 16-bit word."""
    ref = np.linspace(0.5, 1.5, 10)
    out = ref.astype(np.float16)
    out[3] = np.float16(-1.25)
    out[7:] = np.array([0x7405], np.uint16).view(np.float16)[0]  # a finite poison (16400)
    r = build_report("y", out, ref, 0.01, 0x7405, dtype="float16")
    assert (r.mismatches, r.unwritten) == (4, 3) and "got -1.25" in r.text()


# -- the accumulation probe ----------------------------------------------------------------

def _rmsnorm(x: np.ndarray, weight: np.ndarray, acc: str, threads: int) -> np.ndarray:
    """A one-row RMSNorm kernel simulated: `threads` strided running sums of x^2 in `acc`,
    then a pairwise tree in `acc`, the result rounded to bf16 like __float2bfloat16."""
    rnd = (lambda v: v.astype(np.float32).astype(np.float64)) if acc == "float32" else (lambda v: round_to(v, acc))
    n = x.shape[-1]
    chains = np.zeros(threads)
    for start in range(0, n, threads):
        v = x[0, start:start + threads]
        chains[: len(v)] = rnd(chains[: len(v)] + rnd(v * v))
    while len(chains) > 1:
        chains = rnd(chains[0::2] + chains[1::2])
    inv = 1 / np.sqrt(chains[0] / n + 1e-6)
    return round_to(x * inv * weight, "bfloat16")


def test_rmsnorm_bf16_gets_a_probe_case_drawn_like_any_other():
    """The example (bf16, accumulate float32, reduction cols) has one probe: the smallest case
    with 2^22 cols, its inputs random over the workload's ranges like every case's (nothing in
    the data singles it out)."""
    w = load_workload(EXAMPLES / "rmsnorm_bf16")
    probes = [c for c in w.cases if c.probe]
    assert [(c.name, c.role, c.sizes) for c in probes] == [
        (probe_name("cols"), "correctness", {"rows": 1, "cols": PROBE_REDUCTION})]
    x = to_float64(generate_inputs(w, probes[0], 1)["x"], "bfloat16")
    ordinary = to_float64(generate_inputs(w, w.case("33x4097"), 1)["x"], "bfloat16")
    assert x.shape == (1, PROBE_REDUCTION) and len(np.unique(x)) > 100
    assert np.isclose(x.mean(), ordinary.mean(), atol=0.02) and np.isclose(x.std(), ordinary.std(), rtol=0.02)


def _probe_error(acc: str, threads: int) -> tuple[float, float]:
    """A simulated RMSNorm's worst error on the probe, and the probe's rtol."""
    w = load_workload(EXAMPLES / "rmsnorm_bf16")
    probe = next(c for c in w.cases if c.probe)
    inputs = generate_inputs(w, probe, 1)
    x, weight = (to_float64(inputs[k], "bfloat16") for k in ("x", "weight"))
    ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * weight
    return float(relative_error(_rmsnorm(x, weight, acc, threads), ref).max()), case_rtol(w, probe, "bfloat16")


@pytest.mark.parametrize("acc,threads,fails", [("float32", 1024, False), ("float32", 128, False),
                                               ("bfloat16", 1024, True), ("bfloat16", 128, True),
                                               ("float16", 1024, True)])
def test_the_probe_fails_16_bit_accumulators_widely_and_passes_float32(acc, threads, fails):
    """On the probe's random inputs, against its own rtol: a 16-bit running sum misses by far more
    than 10x rtol (80x to 450x when this was written); float32 stays under half of it."""
    worst, rtol = _probe_error(acc, threads)
    assert worst > 10 * rtol if fails else worst <= rtol / 2


def test_short_random_cases_let_a_bf16_accumulator_through_where_the_probe_does_not():
    """Why the probe is long: on the 33x4097 case's inputs a bf16 running sum over 256 threads passes."""
    w = load_workload(EXAMPLES / "rmsnorm_bf16")
    case = w.case("33x4097")
    inputs = generate_inputs(w, case, 1)
    x, weight = (to_float64(inputs[k], "bfloat16") for k in ("x", "weight"))
    ref = x[:1] / np.sqrt((x[:1] * x[:1]).mean(axis=1, keepdims=True) + 1e-6) * weight
    assert relative_error(_rmsnorm(x[:1], weight, "bfloat16", 256), ref).max() <= case_rtol(w, case, "bfloat16")


@pytest.mark.parametrize("example,edit", [("rmsnorm_bf16", ('accumulate = "float32"', 'accumulate = "bfloat16"')),
                                          ("layernorm", None), ("sgemm", None)])
def test_no_probe_where_the_policy_allows_16_bits_or_nothing_is_16_bit(tmp_path, example, edit):
    """accumulate = "bfloat16" declares 16-bit accumulation: no probe; float32 workloads get none either."""
    import shutil
    d = tmp_path / example
    shutil.copytree(EXAMPLES / example, d)
    if edit:
        toml = d / "workload.toml"
        toml.write_text(toml.read_text().replace(*edit))
    assert not any(c.probe for c in load_workload(d).cases)


def test_the_float16_fixture_loads_and_its_kernel_compiles():
    """The GPU tests' fp16 workload: a valid spec (no probe: its output is float16) whose kernel compiles for sm_90."""
    w = load_workload(Path(__file__).parent / "fixtures" / "rowmean_fp16")
    assert [p.dtype for p in w.arrays] == ["float16", "float16"] and not any(c.probe for c in w.cases)
    k = w.kernels["rowblock"]
    r = compile_kernel(k.source(), k.entry, "sm_90", use_cache=False)
    assert r.ok, r.log


def test_a_bf16_running_sum_on_a_short_row_path_passes_the_run_time_checks():
    """Why the PTX audit exists (next tests): the usual shape of a fast row kernel keeps the
    row on chip up to some length and falls back to global memory past it (examples/softmax,
    layernorm's bulk kernels). A short-row path with bf16 running sums (256 threads) and a
    float32 fallback from 2^16 columns passes every correctness case of rmsnorm_bf16 (the
    performance cases' 4096 and 8192 columns are as short as 33x4097's) and the probe, whose
    2^22 columns take the fallback. The run-time checks alone do not enforce the policy on
    the path that is timed."""
    w = load_workload(EXAMPLES / "rmsnorm_bf16")
    passed = []
    for case in (c for c in w.cases if c.role == "correctness"):
        inputs = generate_inputs(w, case, 1)
        x, weight = (to_float64(inputs[k], "bfloat16") for k in ("x", "weight"))
        acc = "float32" if x.shape[-1] >= 1 << 16 else "bfloat16"
        ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * weight
        out = np.concatenate([_rmsnorm(x[r:r + 1], weight, acc, 256) for r in range(x.shape[0])])
        passed.append(relative_error(out, ref).max() <= case_rtol(w, case, "bfloat16"))
    assert all(passed)


SHORT_ROW_BF16 = r"""#include <cuda_bf16.h>
// rmsnorm_bf16's signature: a bf16 running sum of squares on the short-row path only
extern "C" __global__ void rmsnorm(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                                   __nv_bfloat16* __restrict__ y, int rows, int cols, float eps) {
  const __nv_bfloat16* row = x + (size_t)blockIdx.x * cols;
  __shared__ float part[256];
  float total = 0.f;
  if (cols < 65536) {
    __nv_bfloat16 s = __float2bfloat16(0.f);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s = __hfma(row[i], row[i], s);
    total = __bfloat162float(s);
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = __bfloat162float(row[i]); total += v * v; }
  }
  part[threadIdx.x] = total;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  float inv = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(weight[i]));
}
"""


def test_the_ptx_audit_refuses_16_bit_accumulation_on_any_path():
    """The same kernel through compile_candidate for rmsnorm_bf16 (policy: float32): refused
    before any GPU time, naming the instruction; as float32 everywhere it compiles."""
    from warpsmith.agent.evaluate.compile_audit import compile_candidate
    from warpsmith.agent.spec.candidate import Candidate
    w = load_workload(EXAMPLES / "rmsnorm_bf16")
    assert w.wide_accumulation and not load_workload(EXAMPLES / "sgemm").wide_accumulation
    start = w.kernels[w.start]
    refused = compile_candidate(Candidate(SHORT_ROW_BF16, "rmsnorm", start.launch, name="short-row-bf16"), "sm_90",
                                False, wide_accumulation=True)
    assert not refused.ok and refused.error == "HALF_ACCUMULATION" and not refused.cubin
    assert "fma.rn.bf16" in refused.log and "accumulates in 16 bits" in refused.log
    assert "__hfma" not in refused.log and "row[i]" not in refused.log  # instruction names only, no source
    honest = SHORT_ROW_BF16.replace("__nv_bfloat16 s = __float2bfloat16(0.f);", "float s = 0.f;").replace(
        "s = __hfma(row[i], row[i], s);", "{ float v = __bfloat162float(row[i]); s += v * v; }").replace(
        "total = __bfloat162float(s);", "total = s;")
    assert compile_candidate(Candidate(honest, "rmsnorm", start.launch, name="honest"), "sm_90", False,
                             wide_accumulation=True).ok
    # A workload that declares 16-bit accumulation (or has no 16-bit array) is not audited.
    assert compile_candidate(Candidate(SHORT_ROW_BF16, "rmsnorm", start.launch, name="declared"), "sm_90", False).ok


@pytest.mark.parametrize("workload", ["rmsnorm_bf16", "bf16_gemm", "attention_bf16"])
def test_every_shipped_16_bit_kernel_passes_the_ptx_audit(workload):
    """No false refusal: every kernel of the 16-bit examples, at its default knobs and at
    every configuration it lists for the tuner, accumulates in float32 by the PTX."""
    from warpsmith.agent.evaluate.compile_audit import compile_candidate
    from warpsmith.agent.spec.candidate import Candidate
    w = load_workload(EXAMPLES / workload)
    assert w.wide_accumulation
    for k in w.kernels.values():
        for defines in [{}, *k.configs]:
            c = compile_candidate(Candidate.from_spec(k, defines), "sm_90", False, wide_accumulation=True)
            assert c.ok, (k.name, defines, c.error, c.log[-400:])


def test_check_says_which_kernel_accumulates_in_16_bits(tmp_path, capsys):
    """`warpsmith check` compiles each kernel as a candidate is compiled: the starting kernel
    of a copy of rmsnorm_bf16 rewritten with a bf16 running sum fails the check in one line."""
    import shutil

    from warpsmith.agent.cli.commands import main
    w = tmp_path / "rmsnorm_bf16"
    shutil.copytree(EXAMPLES / "rmsnorm_bf16", w)
    (w / "rowblock.cu").write_text("// knob BLOCK: 256\n" + SHORT_ROW_BF16.replace("void rmsnorm(", "void rmsnorm_bf16_rows("))
    assert main(["check", str(w)]) == 2
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "FAIL" in x]
    assert "kernel rowblock (rowblock.cu): HALF_ACCUMULATION" in line and "fma.rn.bf16" in line
