"""Inputs that keep their meaning in every case: bool inputs, inputs drawn from the standard
normal, and structured inputs (symmetric, triangular, rows that sum to 1, masks, signs), for
the CPU reference and the GPU's inputs alike (both draw with agent/spec/inputs.py); and the
spec's one-line refusals of what cannot be drawn so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.spec.half_float import to_float64
from warpsmith.agent.spec.inputs import ArrayJob, array_jobs, as_float64, generate_input, generate_inputs
from warpsmith.agent.spec.references import compute_reference
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError

PARAMS = {  # name -> its [[params]] lines besides name and role
    "S": 'dtype = "float32"\nshape = [2, "N", "N"]\nstructure = "symmetric"\nrange = [-3.0, 5.0]',
    "U": 'dtype = "bfloat16"\nshape = ["N", "N"]\nstructure = "upper_triangular"',
    "L": 'dtype = "float64"\nshape = ["N", "N"]\nstructure = "lower_triangular"\ndistribution = "normal"',
    "P": 'dtype = "float16"\nshape = ["R", "N"]\nstructure = "rows_sum_to_1"\nrange = [0.0, 1.0]',
    "Q": 'dtype = "float32"\nshape = ["R", "N"]\nstructure = "rows_sum_to_1"\nrange = [0.5, 2.0]',
    "M": 'dtype = "int32"\nshape = ["R", "N"]\nstructure = "mask"',
    "G": 'dtype = "float32"\nshape = ["R"]\nstructure = "sign"',
    "B": 'dtype = "bool"\nshape = ["R", "N"]',
    "Z": 'dtype = "bfloat16"\nshape = ["R", "N"]\ndistribution = "normal"',
}
CASES = '''
[[cases]]
name = "small"
role = "correctness"
sizes = { N = 7, R = 5 }

[[cases]]
name = "stressed"
role = "correctness"
sizes = { N = 33, R = 300 }
input_scale = 4
signed_zeros = true

[[cases]]
name = "big"
role = "performance"
sizes = { N = 129, R = 1000 }
'''


def _workload(d: Path, params: dict[str, str] = PARAMS, reference: str = "", extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    names = ", ".join(params)
    (d / "reference.py").write_text(reference or f"def reference({names}, *, N, R):\n    return {next(iter(params))}\n")
    first = next(iter(params))
    role = lambda lines: "" if "role =" in lines else 'role = "input"\n'
    body = "".join(f'[[params]]\nname = "{n}"\n{role(lines)}{lines}\n\n' for n, lines in params.items())
    out = params[first].split("\n")[1]  # the first input's shape
    (d / "workload.toml").write_text(
        f'[workload]\nname = "structured"\ndescription = "x"\n\n{body}'
        f'[[params]]\nname = "out"\nrole = "output"\ndtype = "float32"\n{out}\n\n'
        '[[params]]\nname = "N"\nrole = "scalar"\ndtype = "int32"\nvalue = "N"\n\n'
        f'{extra}[start]\nfrom_scratch = true\n{CASES}')
    return d


def _values(x: np.ndarray, dtype: str) -> np.ndarray:
    return to_float64(x, dtype) if dtype in ("bfloat16", "float16") else as_float64(x, dtype).astype(np.float64)


def test_structured_inputs_keep_their_structure_in_every_case_and_seed(tmp_path):
    """Symmetric, upper and lower triangular, rows summing to 1, 0/1 masks, +-1 signs and bools, in every
    case (a stress case too) and seed, in 16-bit formats as in float64."""
    w = load_workload(_workload(tmp_path / "w"))
    for case in w.cases:
        for seed in (1, 2):
            x = generate_inputs(w, case, seed)
            s = _values(x["S"], "float32")
            assert np.array_equal(s, np.swapaxes(s, -1, -2)) and len(np.unique(s)) > s.shape[-1]
            u, low = _values(x["U"], "bfloat16"), _values(x["L"], "float64")
            n = u.shape[-1]
            # the other triangle as drawn: non-zero but for a stress case's signed zeros (an eighth)
            assert not np.tril(u, -1).any() and (u[np.triu_indices(n)] != 0).mean() > 0.75
            assert not np.triu(low, 1).any() and (low[np.tril_indices(n)] != 0).mean() > 0.75
            p, q = _values(x["P"], "float16"), _values(x["Q"], "float32")
            assert np.allclose(p.sum(-1), 1, atol=1e-2) and (p >= 0).all()
            assert np.allclose(q.sum(-1), 1, atol=1e-5) and (q > 0).all()
            assert x["M"].dtype == np.int32 and set(np.unique(x["M"])) == {0, 1}
            assert set(np.unique(x["G"])) == {-1.0, 1.0}
            assert x["B"].dtype == np.bool_ and set(np.unique(x["B"])) == {False, True}


def test_a_stress_case_scales_shapes_but_leaves_masks_signs_and_normalised_rows_alone(tmp_path):
    """input_scale multiplies a symmetric input's range (it stays symmetric); a mask, a sign and rows that
    sum to 1 are their values: unscaled, no signed zeros."""
    w = load_workload(_workload(tmp_path / "w"))
    jobs = {j.name: j for j in array_jobs(w, w.case("stressed"))}
    assert (jobs["S"].low, jobs["S"].high, jobs["S"].zeros) == (-12.0, 20.0, True)
    assert all(not jobs[n].zeros and (jobs[n].low, jobs[n].high) == (lo, hi)
               for n, lo, hi in (("M", 0, 1), ("G", -1, 1), ("Q", 0.5, 2.0)))
    assert jobs["L"].std == 4.0 and jobs["Z"].std == 4.0


def test_normal_inputs_are_drawn_from_the_standard_normal():
    """distribution = "normal": mean 0, deviation 1 (values past 1, as torch.randn's), never zero, a bfloat16
    input rounded once to its format; a stress case multiplies the deviation."""
    x = generate_input(ArrayJob("x", "input", "float32", (200_000,), -1.0, 1.0, std=1.0), "c", 1)
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01 and (abs(x) > 3).any() and (x != 0).all()
    b = to_float64(generate_input(ArrayJob("x", "input", "bfloat16", (50_000,), -1.0, 1.0, std=8.0), "c", 1),
                   "bfloat16")
    assert abs(b.std() - 8) < 0.2 and (b != 0).all()
    assert np.array_equal(b.astype(np.float32).view(np.uint32) & 0xFFFF, np.zeros(b.shape, np.uint32))


def test_the_reference_sees_the_structured_values(tmp_path):
    """The reference process draws the same structured inputs the GPU gets: its output (the inputs, echoed)
    equals generate_inputs' values exactly, the bool mask arriving as a NumPy bool array."""
    reference = ("import numpy as np\n\ndef reference(S, U, L, P, Q, M, G, B, Z, *, N, R):\n"
                 "    assert B.dtype == np.bool_ and M.dtype == np.int32\n"
                 "    return S * 1000 + U.sum() + L[0, 0] + P[0, 0] + Q[0, 0] + M.sum() + G.sum() + B.sum() + Z[0, 0]\n")
    w = load_workload(_workload(tmp_path / "w", reference=reference))
    case = w.case("small")
    out = compute_reference(w, case, 1)["out"]
    x = {n: _values(v, p.dtype) for (n, v), p in zip(generate_inputs(w, case, 1).items(), w.inputs)}
    expected = x["S"] * 1000 + x["U"].sum() + x["L"][0, 0] + x["P"][0, 0] + x["Q"][0, 0] + x["M"].sum() \
        + x["G"].sum() + x["B"].sum() + x["Z"][0, 0]
    assert np.allclose(out, expected, rtol=1e-12)
    assert np.array_equal(out - np.swapaxes(out, -1, -2), np.zeros_like(out))


def test_bool_inputs_are_one_byte_arrays_the_worker_guards_a_byte_at_a_time(tmp_path):
    """A bool input: `const bool*` for the kernel, guarded, checksummed and filled one byte at a time by
    kernels the checker source has, aliased as torch.bool for a PyTorch baseline."""
    from warpsmith.agent.worker.case_buffers import GUARD_BYTE, DeviceArray, _constant_word
    from warpsmith.agent.worker.gpu_checks import CHECKSUM_KERNELS, COUNT_NOT_KERNELS, KERNELS
    from warpsmith.agent.worker.torch_baseline import TYPESTR
    w = load_workload(_workload(tmp_path / "w"))
    assert "const bool* B /* [R x N] input */" in w.signature() and "U /* [N x N] input, upper triangular */" \
        in w.signature()
    job = next(j for j in array_jobs(w, w.case("small")) if j.name == "B")
    arr = DeviceArray(job, buffer=None, guard=4096)
    assert arr.width == 1 and arr.sentinel == GUARD_BYTE and arr.nbytes == 35
    assert _constant_word(np.ones(35, np.bool_), 1) == 1
    assert {CHECKSUM_KERNELS[1], COUNT_NOT_KERNELS[1], "ws_fill8"} <= set(KERNELS) and TYPESTR["bool"] == "|b1"


REFUSED = {  # id: (params replacing PARAMS, extra tables, key, words)
    "bool-output": ({"A": 'dtype = "float32"\nshape = ["N"]', "O": 'role = "output"\ndtype = "bool"\nshape = ["N"]'}, "",
                    "params[1].dtype", "bool is an input dtype here: write the output in int32"),
    "bool-range": ({"B": 'dtype = "bool"\nshape = ["N"]\nrange = [0, 1]'}, "", "params[0].range", "takes no range"),
    "bool-structure": ({"B": 'dtype = "bool"\nshape = ["N"]\nstructure = "mask"'}, "", "params[0].structure",
                       "holds False and True already"),
    "unknown": ({"A": 'dtype = "float32"\nshape = ["N", "N"]\nstructure = "hermitian"'}, "", "params[0].structure",
                "must be one of symmetric, upper_triangular"),
    "symmetric-1d": ({"A": 'dtype = "float32"\nshape = ["N"]\nstructure = "symmetric"'}, "", "params[0].structure",
                     "needs two or more"),
    "symmetric-not-square": ({"A": 'dtype = "float32"\nshape = ["N", "R"]\nstructure = "symmetric"'}, "",
                             "params[0].structure", "for case 'small': A is 7 x 5; symmetric needs its last two"),
    "rows-negative": ({"A": 'dtype = "float32"\nshape = ["N"]\nstructure = "rows_sum_to_1"\nrange = [-1.0, 1.0]'},
                      "", "params[0].range", "low >= 0"),
    "rows-int": ({"A": 'dtype = "int32"\nshape = ["N"]\nstructure = "rows_sum_to_1"\nrange = [1, 4]'}, "",
                 "params[0].structure", "for a float input"),
    "mask-range": ({"A": 'dtype = "float32"\nshape = ["N"]\nstructure = "mask"\nrange = [0.0, 1.0]'}, "",
                   "params[0].range", "draws 0 and 1 (their shares: density); it takes no range"),
    "density-float": ({"A": 'dtype = "float32"\nshape = ["N"]\ndensity = 0.1'}, "", "params[0].density",
                      "only a bool input or a mask or sign structure has a density"),
    "density-one": ({"A": 'dtype = "float32"\nshape = ["N"]\nstructure = "mask"\ndensity = 1.0'}, "",
                    "params[0].density", "strictly between 0 and 1"),
    "density-true": ({"B": 'dtype = "bool"\nshape = ["N"]\ndensity = true'}, "", "params[0].density", "density"),
    "normal-int": ({"A": 'dtype = "int64"\nshape = ["N"]\ndistribution = "normal"'}, "", "params[0].distribution",
                   "cannot be drawn from a normal"),
    "normal-range": ({"A": 'dtype = "float32"\nshape = ["N"]\ndistribution = "normal"\nrange = [0.0, 1.0]'}, "",
                     "params[0].range", "N(0, 1); it takes no range"),
    "distribution-unknown": ({"A": 'dtype = "float32"\nshape = ["N"]\ndistribution = "cauchy"'}, "",
                             "params[0].distribution", "must be one of uniform, normal"),
    "exact-probe": ({"A": 'dtype = "float32"\nshape = ["N", "N"]'},
                    '[tolerance]\nexact_probe = true\n\n', "tolerance.exact_probe", "no longer exists"),
}


@pytest.mark.parametrize("which", sorted(REFUSED))
def test_what_cannot_be_drawn_so_is_one_line_naming_the_key(tmp_path, which):
    """Each drawing the spec cannot honour is one SpecError line naming the key and why."""
    params, extra, key, words = REFUSED[which]
    d = _workload(tmp_path / "w", params, extra=extra)
    if which == "exact-probe":
        text = (d / "workload.toml").read_text().replace('description = "x"', 'description = "x"\nreduction = "N"')
        (d / "workload.toml").write_text(text)
    with pytest.raises(SpecError) as e:
        load_workload(d)
    assert f": {key}: " in str(e.value) and words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_output_is_not_drawn(tmp_path):
    """structure or distribution on an output or a scalar: refused, naming the key."""
    d = _workload(tmp_path / "w")
    text = (d / "workload.toml").read_text().replace('name = "out"\nrole = "output"',
                                                      'name = "out"\nrole = "output"\nstructure = "symmetric"')
    (d / "workload.toml").write_text(text)
    with pytest.raises(SpecError, match=r"params\[9\]\.structure: only an input is drawn"):
        load_workload(d)
    text = (d / "workload.toml").read_text().replace('role = "output"\nstructure = "symmetric"', 'role = "output"')
    (d / "workload.toml").write_text(text.replace('role = "scalar"', 'role = "scalar"\ndistribution = "normal"'))
    with pytest.raises(SpecError, match=r"params\[10\]\.distribution: only an input is drawn"):
        load_workload(d)


def test_a_tensor_map_of_a_bool_array_is_one_line():
    """TMA has no bool type: a program's descriptor of a bool array is refused in a line, not a KeyError."""
    from warpsmith.agent.spec.tensor_map import TensorMap
    assert "not bool" in TensorMap("bool", 64, 64, 16, 16, 0).problems()


def test_a_density_sets_the_share_of_true_of_one_and_of_plus_one(tmp_path):
    """density = p draws True (bool), 1 (mask) or +1 (sign) with odds p, in every case; 0.5 without it."""
    params = {"M": 'dtype = "int32"\nshape = ["R", "N"]\nstructure = "mask"\ndensity = 0.1',
              "G": 'dtype = "float32"\nshape = ["R", "N"]\nstructure = "sign"\ndensity = 0.9',
              "B": 'dtype = "bool"\nshape = ["R", "N"]\ndensity = 0.25',
              "H": 'dtype = "bool"\nshape = ["R", "N"]'}
    w = load_workload(_workload(tmp_path / "w", params))
    assert [p.density for p in w.arrays] == [0.1, 0.9, 0.25, 0.5, 0.5]
    x = generate_inputs(w, w.case("big"), 1)
    assert set(np.unique(x["M"])) == {0, 1} and abs(x["M"].mean() - 0.1) < 0.01
    assert set(np.unique(x["G"])) == {-1, 1} and abs((x["G"] > 0).mean() - 0.9) < 0.01
    assert abs(x["B"].mean() - 0.25) < 0.01 and abs(x["H"].mean() - 0.5) < 0.01


def test_an_integer_range_may_follow_the_sizes(tmp_path):
    """Indices below a size (`range = [0, "N - 1"]`): each case draws them below its own N, every value
    of the range turning up."""
    w = load_workload(_workload(tmp_path / "w", {"I": 'dtype = "int64"\nshape = ["R", "N"]\nrange = [0, "N - 1"]'}))
    for case in w.cases:
        job = next(j for j in array_jobs(w, case) if j.name == "I")
        assert (job.low, job.high) == (0, case.sizes["N"] - 1), case.name
        drawn = generate_input(job, case.name, 3)
        assert drawn.max() == case.sizes["N"] - 1 and drawn.min() >= 0, case.name
