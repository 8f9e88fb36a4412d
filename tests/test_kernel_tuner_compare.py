"""benchmarks/kernel_tuner_compare.py without a GPU: the knob space and the #error
restrictions Kernel Tuner is given, its launch geometry, the verify rule, the options
and the table. The tuning itself needs a GPU (docs/performance.md, "Against Kernel Tuner")."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.spec.knob_space import RestrictionError
from warpsmith.agent.spec.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
SQUARE = {"M": 4096, "N": 4096, "K": 4096}


def _script():
    spec = importlib.util.spec_from_file_location("kernel_tuner_compare", ROOT / "benchmarks" / "kernel_tuner_compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


kt = _script()


@pytest.fixture(scope="module")
def warptile():
    return load_workload(ROOT / "examples" / "sgemm").kernels["warptile"]


def test_warptile_space_accepts_the_230_configurations_that_compile(warptile):
    """The #error conditions read as restrictions accept exactly the 230 of 972 combinations warptile.cu says compile."""
    space = kt.KnobSpace.from_source(warptile.source())
    assert space.knobs["BM"] == (64, 128, 256) and len(space.restrictions) == 8
    assert math.prod(len(v) for v in space.knobs.values()) == 972
    assert len(space.configurations()) == 230


def test_restrictions_refuse_what_the_source_refuses_and_keep_the_default(warptile):
    """The default tile is allowed; a warp tile wider than the block or 2048 threads is refused, with the source's message."""
    space = kt.KnobSpace.from_source(warptile.source())
    default = {k.name: k.default for k in warptile.knobs().values()}
    assert space.allows(default)
    assert not space.allows({**default, "BM": 64, "WM": 128})
    too_many = {**default, "BM": 256, "BN": 256, "WM": 32, "WN": 16}  # 8 * 16 warps
    assert [r.message for r in space.restrictions if r.refuses(too_many)][0].startswith("threads per block")


def test_conditions_use_c_integer_division_and_macros_within_macros():
    """`/` truncates as the preprocessor does, and a macro defined through another is expanded."""
    source = ("// knob A: 7 8\n#define A 7\n#define HALF (A / 2)\n#define TWICE_HALF (HALF * 2)\n"
              "#if TWICE_HALF != A - (A % 2)\n#error \"never\"\n#endif\n#if A > 7 && HALF == 4\n#error \"eight\"\n#endif\n")
    space = kt.KnobSpace.from_source(source)
    assert [c["A"] for c in space.configurations()] == [7]


@pytest.mark.parametrize("condition", ["!defined(A)", "A & 1", "A ? 1 : 0", "A << 1 > 4"])
def test_conditions_it_cannot_read_are_refused_when_parsed(condition):
    """A #if it does not read (defined, bitwise, ternary, shifts) fails on reading the source, not mid-tuning."""
    with pytest.raises(RestrictionError, match="only"):
        kt.KnobSpace.from_source(f"// knob A: 1 2\n#define A 1\n#if {condition}\n#error \"x\"\n#endif\n")


def test_peer_problem_derives_the_block_and_takes_the_workloads_grid(warptile):
    """Kernel Tuner's block_size_x is pinned to the workload's block expression and its grid is the workload's."""
    problem = kt.PeerProblem.build(warptile, SQUARE)
    params = problem.tune_params
    assert params["block_size_x"] == [64, 128, 256, 512, 1024] and params["block_size_y"] == [1]
    names = list(params)
    valid = [dict(zip(names, v)) for v in itertools.product(*params.values()) if problem.restriction(dict(zip(names, v)))]
    assert len(valid) == 230
    tile = {"BM": 128, "BN": 128, "BK": 8, "WM": 128, "WN": 32, "MINB": 2, "GROUP": 16, "block_size_y": 1, "block_size_z": 1}
    assert problem.restriction({**tile, "block_size_x": 128}) and not problem.restriction({**tile, "block_size_x": 256})
    launch = warptile.launch.resolve({**SQUARE, **problem.knobs_of(tile)})
    assert problem.grid(tile) == launch.grid == (32, 32, 1)
    assert problem.shared_bytes(tile) == 0


def test_kernel_tuners_own_search_space_agrees():
    """Kernel Tuner's Searchspace built from these tune_params and restriction holds the same 230 configurations."""
    searchspace = pytest.importorskip("kernel_tuner.searchspace")
    problem = kt.PeerProblem.build(load_workload(ROOT / "examples" / "sgemm").kernels["warptile"], SQUARE)
    assert searchspace.Searchspace(problem.tune_params, problem.restriction, 1024).size == 230


def test_verify_uses_warpsmiths_rule():
    """Within rtol * (|ref| + rms(ref)) passes; one element outside it, or a NaN, fails; inputs (None) are skipped."""
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    scale = math.sqrt(np.mean(ref ** 2))
    verify = kt.same_rule(1e-3, [None, ref])
    near = (ref + 0.9e-3 * (np.abs(ref) + scale)).astype(np.float32)
    assert verify([None, ref], [np.zeros(1), near])
    off = near.copy()
    off[2] = 1.1e-3 * scale
    assert not verify([None, ref], [np.zeros(1), off])
    assert not verify([None, ref], [np.zeros(1), np.array([1.0, -2.0, np.nan, 4.0], dtype=np.float32)])


def test_options_default_to_the_issues_comparison():
    """Defaults: examples/sgemm, warptile, square-4096, 60 s, both tools; --only picks one; a zero budget is refused."""
    o = kt.parse_args([])
    assert (o.workload, o.kernel, o.case, o.time_budget_s, o.tools) == \
        (Path("examples/sgemm"), "warptile", "square-4096", 60.0, ("kernel_tuner", "warpsmith"))
    assert kt.parse_args(["--only", "warpsmith", "--strategy", "random_sample"]).tools == ("warpsmith",)
    assert kt._strategy_options(kt.parse_args(["--strategy", "random_sample", "--time-budget", "30"])) == \
        {"time_limit": 30.0, "fraction": 1.0}
    with pytest.raises(SystemExit):
        kt.parse_args(["--time-budget", "0"])


def test_table_rates_and_ratios():
    """Candidates per minute from count and wall time; TFLOP/s and the ratio to cuBLAS from warpsmith's timing only."""
    runs = [kt.ToolRun("Kernel Tuner", 90, 88, 60.0, {"BM": 128}, own_ms=2.5, common_ms=3.0, note="hot L2"),
            kt.ToolRun("warpsmith tune", 45, 40, 90.0, {"BM": 64}, own_ms=2.9, common_ms=2.7),
            kt.ToolRun("broken", 0, 0, 1.0, note="RuntimeError: verification failed")]
    text = kt.render(runs, "square-4096", 2 * 4096 ** 3, 2.7, "cublas_sgemm")
    lines = text.splitlines()
    assert lines[0] == "case square-4096; cublas_sgemm 2.7000 ms (warpsmith's timing)"
    assert lines[3] == "| Kernel Tuner | 90 (88) | 60.0 | 90.0 | BM=128 | 2.5000 | 3.0000 | 45.81 | 0.90x |"
    assert lines[4] == "| warpsmith tune | 45 (40) | 90.0 | 30.0 | BM=64 | 2.9000 | 2.7000 | 50.90 | 1.00x |"
    assert lines[5] == "| broken | 0 (0) | 1.0 | 0.0 | - | - | - | - | - |"
    assert lines[-1] == "broken: RuntimeError: verification failed"


def test_peer_results_count_each_configuration_once(warptile):
    """A configuration Kernel Tuner revisited counts once; a failed one is evaluated but not passed; the best is the fastest."""
    problem = kt.PeerProblem.build(warptile, SQUARE)
    tile = {"BM": 128, "BN": 128, "BK": 8, "WM": 64, "WN": 32, "MINB": 2, "GROUP": 1,
            "block_size_x": 256, "block_size_y": 1, "block_size_z": 1}
    other = {**tile, "GROUP": 16}
    broken = {**tile, "MINB": 1}
    results = [{**tile, "time": 3.2}, {**other, "time": 3.1}, {**tile, "time": 3.2},
               {**broken, "time": 1e20, "__error__": RuntimeError("RuntimeFailedConfig")}]
    run = kt.summarise_peer("Kernel Tuner", results, problem, 60.0, "hot L2")
    assert (run.evaluated, run.passed, run.own_ms) == (3, 2, 3.1)
    assert run.best == problem.knobs_of(other) and "block_size_x" not in run.best
