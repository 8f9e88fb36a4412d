"""float16 / bfloat16 workloads on the CPU: rounding, specs, exact inputs, float64
references, default tolerances, and the refusal before any GPU work."""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.cli.bench import _evaluable_or_noted
from warpsmith.agent.cli.check import preflight
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.spec.half_float import HALF_FORMATS, round_to, to_float64, to_storage
from warpsmith.agent.spec.inputs import ArrayJob, array_jobs, as_float64, generate_input, generate_inputs
from warpsmith.agent.spec.references import ensure_reference, load_reference
from warpsmith.agent.spec.tolerance import case_rtol, default_rtol, relative_error
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rmsnorm_bf16"


def _copy(tmp_path: Path, old: str = "", new: str = "") -> Path:
    d = tmp_path / "rmsnorm_bf16"
    shutil.copytree(EXAMPLE, d)
    toml = d / "workload.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))
    return d


# -- rounding -------------------------------------------------------------------------

def _awkward_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(50000) * 10.0 ** rng.integers(-45, 39, 50000)
    edges = [65504, 65519.99, 65520, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
             1 + 2.0**-8, 1 + 3 * 2.0**-8, 2.0**-133, 2.0**-134, 3.3895313892515355e38, 3.39e38, 0.0, -0.0]
    return np.concatenate([spread, edges, np.negative(edges)])


def test_float16_rounding_is_numpys():
    """round_to(x, "float16") is NumPy's own float16 conversion, ties, subnormals and overflow included."""
    x = _awkward_values()
    with np.errstate(over="ignore"):
        assert np.array_equal(round_to(x, "float16"), x.astype(np.float16).astype(np.float64))


def test_bfloat16_rounding_is_round_to_nearest_even_on_the_float32_bits():
    """For float32 values, bfloat16 rounding is the GPU's RNE on the top 16 bits; the storage round-trips."""
    with np.errstate(over="ignore"):
        x = _awkward_values().astype(np.float32)
    x = x[np.isfinite(x)]
    bits = x.view(np.uint32).astype(np.uint64)
    rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    stored = to_storage(x.astype(np.float64), "bfloat16")
    assert stored.dtype == np.uint16 and np.array_equal(stored, rne)
    assert np.array_equal(to_float64(stored, "bfloat16"), round_to(x.astype(np.float64), "bfloat16"))


def test_rounding_ties_go_to_even_and_overflow_to_infinity():
    """1 + u/2 ties down to 1, 1 + 3u/2 up to 1 + 2u; past the largest finite value is inf."""
    for dtype, fmt in HALF_FORMATS.items():
        u = fmt.unit_roundoff
        assert round_to(np.array([1 + u, 1 + 3 * u]), dtype).tolist() == [1.0, 1 + 4 * u]
        assert round_to(np.array([fmt.max_finite, -fmt.overflow]), dtype).tolist() == [fmt.max_finite, -math.inf]


# -- specs ----------------------------------------------------------------------------

def test_a_bfloat16_workload_loads_with_its_policy():
    """The example's bf16 arrays, C signature and accumulate policy come through the parser."""
    w = load_workload(EXAMPLE)
    assert [p.dtype for p in w.arrays] == ["bfloat16", "bfloat16", "bfloat16"]
    assert "const __nv_bfloat16* x" in w.signature() and w.tolerance.accumulate == "float32"
    assert array_jobs(w, w.case("3x5"))[0].nbytes == 30


@pytest.mark.parametrize("old,new,key,problem", [
    ('range = [0.5, 1.5]', 'range = [0.5, 1e39]', "params[1].range", "beyond bfloat16's largest"),
    ('range = [0.5, 1.5]', 'range = [1e-50, 2e-50]', "params[1].range", "holds no non-zero bfloat16 value"),
    ('dtype = "bfloat16"\nshape = ["cols"]\nrange = [0.5, 1.5]', 'dtype = "float16"\nshape = ["cols"]\n'
     'range = [0.5, 70000.0]', "params[1].range", "beyond float16's largest value (+-65504)"),
    ('accumulate = "float32"', 'accumulate = "tf32"', "tolerance.accumulate", "must be one of float16, bfloat16"),
    ('dtype = "bfloat16"', 'dtype = "bfloat8"', "params[0].dtype", "must be one of float16, bfloat16, float32"),
])
def test_half_specs_are_refused_in_one_line(tmp_path, old, new, key, problem):
    """Ranges a 16-bit format cannot hold, unknown accumulation or dtype: file, key and problem in one line."""
    with pytest.raises(SpecError) as e:
        load_workload(_copy(tmp_path, old, new))
    assert e.value.key == key and problem in e.value.problem and "\n" not in str(e.value)


def test_a_bfloat16_output_may_allow_nonfinite(tmp_path):
    """allow_nonfinite is a float output's key, bfloat16's too."""
    d = _copy(tmp_path, 'name = "y"\nrole = "output"', 'name = "y"\nrole = "output"\nallow_nonfinite = true')
    assert load_workload(d).outputs[0].allow_nonfinite


# -- inputs and references --------------------------------------------------------------

@pytest.mark.parametrize("dtype,storage", [("float16", np.float16), ("bfloat16", np.uint16)])
def test_half_inputs_are_exact_never_zero_and_in_range(dtype, storage):
    """Generated 16-bit inputs are stored as the GPU reads them, exactly representable, non-zero, in range."""
    job = ArrayJob("x", "input", dtype, (1 << 15,), -0.3, 2.0)
    x = generate_input(job, "c", 1)
    values = as_float64(x, dtype)
    assert x.dtype == storage and values.dtype == np.float64
    assert np.array_equal(round_to(values, dtype), values)
    assert np.count_nonzero(values) == values.size
    bounds = round_to(np.array([-0.3, 2.0]), dtype)
    assert values.min() >= bounds[0] and values.max() <= bounds[1] and (values < 0).any()
    assert np.array_equal(x, generate_input(job, "c", 1)) and not np.array_equal(x, generate_input(job, "c", 2))


def test_a_tiny_half_range_still_draws_no_zero():
    """A range that mostly rounds to zero in bfloat16 falls back to a non-zero value of the range."""
    x = as_float64(generate_input(ArrayJob("x", "input", "bfloat16", (4096,), -1e-40, 2e-39), "c", 1), "bfloat16")
    assert np.count_nonzero(x) == x.size


def test_the_reference_is_float64_from_the_exact_16_bit_values():
    """The bf16 example's reference is stored in float64 and computed from exactly the inputs the GPU gets."""
    w = load_workload(EXAMPLE)
    case = w.case("33x4097")
    ref = load_reference(ensure_reference(w, case, 1))["y"]
    ins = {k: as_float64(v, "bfloat16") for k, v in generate_inputs(w, case, 1).items()}
    x, weight = ins["x"], ins["weight"]
    expected = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * weight
    assert ref.dtype == np.float64 and ref.shape == (33, 4097)
    assert np.allclose(ref, expected, rtol=1e-15, atol=0)


# -- tolerance ----------------------------------------------------------------------

def test_default_rtol_of_half_outputs():
    """fp32 accumulation plus two units of the output's roundoff; the fp32 and fp64 rules are unchanged."""
    assert default_rtol("bfloat16", 4096) == 8 * 2.0**-24 * 64 + 2 * 2.0**-8
    assert default_rtol("float16", 1) == 8 * 2.0**-24 + 2 * 2.0**-11
    assert default_rtol("bfloat16", 64, accumulate="bfloat16") == 8 * 2.0**-8 * 8
    assert default_rtol("float32", 4096) == 8 * 2.0**-24 * 64
    assert default_rtol("float32", 4096, accumulate="float32") == default_rtol("float32", 4096)
    w = load_workload(EXAMPLE)
    assert case_rtol(w, w.case("33x4097"), "bfloat16") == default_rtol("bfloat16", 4097)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fp32_accumulation_passes_and_16_bit_accumulation_fails(dtype):
    """Row sums of 1024 exact 16-bit values: fp32-accumulated then rounded passes the default; summed in 16 bits fails."""
    x = round_to(np.random.default_rng(3).uniform(-1, 1, (64, 1024)), dtype)
    ref, fp32, half = x.sum(axis=1), np.zeros(64, np.float32), np.zeros(64)
    for k in range(x.shape[1]):
        fp32 = (fp32 + x[:, k].astype(np.float32)).astype(np.float32)
        half = round_to(half + x[:, k], dtype)
    rtol = default_rtol(dtype, 1024)
    assert relative_error(round_to(fp32.astype(np.float64), dtype), ref).max() <= rtol
    assert relative_error(half, ref).max() > 3 * rtol


# -- evaluable: what is still refused before any GPU work ----------------------------------

def test_half_workloads_pass_the_evaluable_check():
    """The bf16 example reaches the evaluator: preflight and Evaluator accept 16-bit arrays."""
    w = load_workload(EXAMPLE)
    w.check_evaluable()
    assert _evaluable_or_noted(w)


def test_a_cublas_sgemm_baseline_on_half_operands_is_refused_in_one_line(tmp_path):
    """cuBLAS SGEMM reads float32: a bf16 operand bound to it is refused before the GPU, naming the key."""
    d = tmp_path / "sgemm"
    shutil.copytree(EXAMPLE.parent / "sgemm", d)
    toml = d / "workload.toml"
    toml.write_text(toml.read_text().replace('dtype = "float32"', 'dtype = "bfloat16"', 1))
    w = load_workload(d)
    with pytest.raises(SpecError) as e:
        w.check_evaluable()
    assert e.value.key == "baseline.a" and "is bfloat16" in e.value.problem and "\n" not in str(e.value)
    for refuse in (lambda: preflight(w), lambda: Evaluator(w)):
        with pytest.raises(SpecError, match="reads float32 operands"):
            refuse()


def test_probe_false_removes_the_accumulation_probe_alone():
    """attention_bf16 says `probe = false` (its reduction, the head dimension, cannot be 2^22
    long): no probe case, the float32 policy's tolerance unchanged; rmsnorm keeps its probe."""
    from workload_factory import ROOT

    from warpsmith.agent.spec.workload import load_workload
    attention = load_workload(ROOT / "examples" / "attention_bf16")
    assert not attention.tolerance.probe and not any(c.probe for c in attention.cases)
    assert attention.tolerance.accumulate == "float32"
    assert any(c.probe for c in load_workload(ROOT / "examples" / "rmsnorm_bf16").cases)


def test_a_bf16_cublas_baseline_is_evaluable_and_an_sgemm_one_on_bf16_is_not(tmp_path):
    """check_evaluable refuses cuBLAS SGEMM bound to 16-bit arrays, never cublas_gemm_bf16."""
    import shutil

    import pytest
    from workload_factory import ROOT

    from warpsmith.agent.spec.workload import load_workload
    from warpsmith.agent.spec.workload_model import SpecError
    load_workload(ROOT / "examples" / "bf16_gemm").check_evaluable()
    shutil.copytree(ROOT / "examples" / "bf16_gemm", tmp_path / "w")
    toml = tmp_path / "w" / "workload.toml"
    toml.write_text(toml.read_text().replace('kind = "cublas_gemm_bf16"', 'kind = "cublas_sgemm"'))
    with pytest.raises(SpecError, match="reads float32 operands"):
        load_workload(tmp_path / "w").check_evaluable()
