"""fp8 (e4m3fn, e5m2) as an input dtype on the CPU: its exact encoding, specs that use or
misuse it, exact inputs and float64 references, the fp8_gemm example's policy, tolerance
and floor, and how the worker guards and checksums a byte-wide array."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from workload_factory import ROOT

from warpsmith.agent.spec.half_float import FP8_FORMATS, round_to, to_float64, to_storage
from warpsmith.agent.spec.inputs import ArrayJob, as_float64, generate_input, generate_inputs
from warpsmith.agent.spec.workload import SpecError, load_workload

EXAMPLE = ROOT / "examples" / "fp8_gemm"


def _copy(tmp_path: Path, old: str, new: str) -> Path:
    d = tmp_path / "fp8_gemm"
    shutil.copytree(EXAMPLE, d)
    toml = d / "workload.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))
    return d


# -- the formats ------------------------------------------------------------------------

def test_e4m3fn_codes_decode_to_their_values():
    """Bits as __nv_fp8_e4m3 reads them: 448 at most, subnormals down to 2^-9, NaN only at S.1111.111."""
    codes = np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x7E, 0x7F, 0x80, 0xB8, 0xFE, 0xFF], np.uint8)
    values = to_float64(codes, "float8_e4m3fn")
    assert values[:6].tolist() == [0.0, 2.0**-9, 7 * 2.0**-9, 2.0**-6, 1.0, 448.0]
    assert math.isnan(values[6]) and math.isnan(values[10]) and values[7:10].tolist() == [0.0, -1.0, -448.0]
    assert np.signbit(values[7])
    assert np.isnan(to_float64(np.arange(256, dtype=np.uint8), "float8_e4m3fn")).sum() == 2


def test_e5m2_codes_decode_to_their_values():
    """e5m2 is float16's top byte: 57344 at most, subnormals down to 2^-16, infinities and NaNs."""
    codes = np.arange(256, dtype=np.uint8)
    as_half = (codes.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
    assert np.array_equal(to_float64(codes, "float8_e5m2"), as_half, equal_nan=True)


@pytest.mark.parametrize("dtype", list(FP8_FORMATS))
def test_every_code_round_trips_and_rounding_lands_on_codes(dtype):
    """Each non-NaN code's value encodes to that code; rounding then encoding gives the nearest value."""
    codes = np.arange(256, dtype=np.uint8)
    values = to_float64(codes, dtype)
    keep = ~np.isnan(values)
    assert np.array_equal(to_storage(values[keep], dtype), codes[keep])
    x = np.random.default_rng(5).uniform(-500, 500, 20000) * 10.0 ** np.random.default_rng(6).integers(-5, 2, 20000)
    rounded = round_to(x, dtype)
    finite = np.isfinite(rounded)
    assert np.array_equal(to_float64(to_storage(x, dtype), dtype)[finite], rounded[finite])
    grid = np.sort(values[keep & np.isfinite(values)])
    nearest = grid[np.abs(grid[None, :] - x[finite][:200, None]).argmin(axis=1)]
    assert np.all(np.abs(rounded[finite][:200] - x[finite][:200]) <= np.abs(nearest - x[finite][:200]))


def test_ties_go_to_even_and_overflow_is_nan_in_e4m3fn_and_inf_in_e5m2():
    """1 + 2^-4 ties down to 1 (e4m3), 464 down to 448 and 470 up past it to NaN; e5m2 overflows to inf."""
    e4 = round_to(np.array([1 + 2.0**-4, 1 + 3 * 2.0**-4, 464.0, 470.0, -470.0, 2.0**-10, 3 * 2.0**-11]),
                  "float8_e4m3fn")
    assert e4[:4].tolist()[:3] == [1.0, 1 + 2.0**-2, 448.0] and math.isnan(e4[3]) and math.isnan(e4[4])
    assert e4[5:].tolist() == [0.0, 2.0**-9]
    assert to_storage(np.array([470.0, -470.0]), "float8_e4m3fn").tolist() == [0x7F, 0xFF]
    assert round_to(np.array([57344.0, 61440.0, -61440.0]), "float8_e5m2").tolist() == [57344.0, math.inf, -math.inf]


# -- specs and inputs -------------------------------------------------------------------

def test_the_example_loads_with_fp8_inputs_and_the_fp32_policy():
    """A and B are e4m3fn (C type __nv_fp8_e4m3), C bfloat16, fp32 accumulation, the probe added."""
    w = load_workload(EXAMPLE)
    assert [a.dtype for a in w.inputs] == ["float8_e4m3fn", "float8_e4m3fn", "float32", "float32"]
    assert "const __nv_fp8_e4m3* A /* [M x K] input */" in w.signature()
    assert w.wide_accumulation and w.tolerance.accumulate == "float32"
    assert [c.sizes for c in w.cases if c.probe] == [{"M": 1, "N": 16, "K": 1 << 22}]


@pytest.mark.parametrize("old,new,key,problem", [
    ('name = "C"\nrole = "output"\ndtype = "bfloat16"', 'name = "C"\nrole = "output"\ndtype = "float8_e4m3fn"',
     "params[4].dtype", "float8_e4m3fn is an input dtype here"),
    ("range = [-448.0, 448.0]", "range = [-449.0, 448.0]", "params[0].range", "beyond float8_e4m3fn's largest"),
    ("range = [-448.0, 448.0]", "range = [1e-5, 2e-5]", "params[0].range", "holds no non-zero float8_e4m3fn"),
])
def test_fp8_specs_are_refused_in_one_line(tmp_path, old, new, key, problem):
    """An fp8 output, a range e4m3 cannot hold or that rounds to zero: file, key and problem in one line."""
    with pytest.raises(SpecError) as e:
        load_workload(_copy(tmp_path, old, new))
    assert e.value.key == key and problem in e.value.problem and "\n" not in str(e.value)


@pytest.mark.parametrize("dtype", list(FP8_FORMATS))
def test_fp8_inputs_are_exact_never_zero_and_in_range(dtype):
    """Generated fp8 inputs are the GPU's bytes, exactly representable, non-zero, in range."""
    job = ArrayJob("x", "input", dtype, (1 << 15,), -448.0, 448.0)
    x = generate_input(job, "c", 1)
    values = as_float64(x, dtype)
    assert x.dtype == np.uint8 and job.nbytes == 1 << 15
    assert np.array_equal(round_to(values, dtype), values) and np.isfinite(values).all()
    assert np.count_nonzero(values) == values.size and values.min() >= -448 and values.max() <= 448
    assert len(np.unique(x)) > 64  # many codes over the range, not a handful


def test_the_reference_is_float64_from_the_exact_fp8_values():
    """fp8_gemm's reference is scale_a * scale_b * A @ B^T from exactly the bytes the GPU gets."""
    from warpsmith.agent.spec.references import ensure_reference, load_reference
    w = load_workload(EXAMPLE)
    case = w.case("odd-97x80x80")
    ref = load_reference(ensure_reference(w, case, 1))["C"]
    raw = generate_inputs(w, case, 1)
    a, b = as_float64(raw["A"], "float8_e4m3fn"), as_float64(raw["B"], "float8_e4m3fn")
    expected = (a @ b.T) * (float(raw["scale_a"][0]) * float(raw["scale_b"][0]))
    assert ref.dtype == np.float64 and ref.shape == (97, 80) and np.allclose(ref, expected, rtol=1e-15, atol=0)


def test_the_default_tolerance_is_fp32_accumulation_and_one_bf16_rounding():
    """rtol = 8 u(fp32) sqrt(K) + 2 u(bf16): 2.015 u of bfloat16 on the down projection's K = 14336."""
    from warpsmith.agent.spec.tolerance import case_rtol
    w = load_workload(EXAMPLE)
    rtol = case_rtol(w, w.case("llm-down-8192x4096x14336"), "bfloat16")
    assert rtol == 8 * 2.0**-24 * math.sqrt(14336) + 2 * 2.0**-8
    assert 2.01 < rtol / 2.0**-8 < 2.02


# -- what the machine code may use, and the floor --------------------------------------

def test_the_policy_allows_e4m3_and_bf16_and_widens_e4m3_to_f16():
    """The arrays' types are allowed; float16 only as e4m3's exact widening."""
    from warpsmith.agent.spec.precision_policy import allowed_types, widened
    allowed = allowed_types(load_workload(EXAMPLE))
    assert allowed == {"E4M3", "BF16"} and widened(allowed) == {"F16"}


def test_fp8_inputs_are_floored_at_twice_the_16_bit_tensor_rate():
    """Hopper's fp8 wgmma runs at twice the bf16 rate: a fast fp8 kernel is not called faster than physics."""
    from warpsmith.agent.spec.speed_of_light import Ceilings, case_floor, compute_ceiling
    c = Ceilings(4274.5, 60.5, "measured", 1070.5)
    w = load_workload(EXAMPLE)
    assert compute_ceiling(w, c) == (2141.0, "fp8 tensor core")
    # 4096^3 in 0.1 ms is 1374 TFLOP/s: past the bf16 rate, within fp8's
    assert not case_floor(w, w.case("square-4096"), c, 0.1).suspect


# -- the worker's byte-wide arrays ---------------------------------------------------------

def test_fp8_arrays_are_guarded_and_checksummed_a_byte_at_a_time():
    """An fp8 input's data may end on any byte: its guard word, sentinel and constant fill are one byte wide."""
    from warpsmith.agent.worker.case_buffers import GUARD_BYTE, DeviceArray, _constant_word
    from warpsmith.agent.worker.gpu_checks import CHECKSUM_KERNELS, COUNT_NOT_KERNELS, KERNELS
    arr = DeviceArray(ArrayJob("A", "input", "float8_e4m3fn", (3, 5), -448.0, 448.0), buffer=None, guard=4096)
    assert arr.width == 1 and arr.sentinel == GUARD_BYTE and arr.nbytes == 15
    assert _constant_word(np.full(15, 0x38, np.uint8), 1) == 0x38
    assert {CHECKSUM_KERNELS[1], COUNT_NOT_KERNELS[1], "ws_fill8"} <= set(KERNELS)
    assert not np.isnan(to_float64(np.array([GUARD_BYTE], np.uint8), "float8_e4m3fn")[0])


def test_the_checker_kernels_compile_with_the_byte_wide_ones():
    """warpsmith's own checker source, the 8-bit fill, count and checksum among it, compiles for sm_90."""
    from warpsmith.agent.runtime.compiler import compile_kernel
    from warpsmith.agent.worker.gpu_checks import SOURCE
    r = compile_kernel(SOURCE, "", "sm_90", filename="warpsmith_checks.cu", use_cache=False)
    assert r.ok, r.log[-2000:]
