"""Workload spec parsing and its one-line errors."""

import re
import shutil
from pathlib import Path

import pytest
from workload_factory import SGEMM, SMALL_CASES, make_sgemm_workload

from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError


def test_example_sgemm_parses():
    """The shipped sgemm example parses with its cases, kernels, knobs and baseline."""
    w = load_workload(SGEMM)
    assert w.name == "sgemm"
    assert [p.name for p in w.params] == ["A", "B", "C", "M", "N", "K"]
    roles = {c.name: c.role for c in w.cases}
    assert roles["odd-97x83x61"] == "correctness" and roles["square-4096"] == "performance"
    odd = [c for c in w.cases if c.role == "correctness"]
    assert all(len(set(c.sizes.values())) == 3 and c.sizes["M"] % 32 for c in odd)
    assert w.start == "naive" and set(w.kernels["tiled"].knobs()) == {"BM", "BN", "BK", "TM", "TN"}
    assert w.baseline.kind == "cublas_sgemm"
    assert w.flops.evaluate(w.case("square-1024").sizes) == 2 * 1024**3
    assert "const float* A" in w.signature()


def test_timing_only_keeps_the_named_performance_cases_timed():
    """`run --cases`: the other performance cases are still validated, just not timed."""
    w = load_workload(SGEMM)
    focused = w.timing_only(["square-4096"])
    assert [c.name for c in focused.cases if c.timed] == ["square-4096"]
    assert [c.name for c in focused.cases] == [c.name for c in w.cases]  # nothing dropped
    assert focused.case("square-1024").role == "correctness" and w.case("square-1024").role == "performance"
    assert w.timing_only([]) is w
    with pytest.raises(ValueError, match=r"--cases: odd-97x83x61, nope is not a performance case of sgemm "
                                         r"\(those are: square-1024, square-4096, "):
        w.timing_only(["odd-97x83x61", "nope"])


def test_digest_changes_with_the_reference(tmp_path):
    """Editing reference.py changes the digest that keys the reference cache."""
    d = make_sgemm_workload(tmp_path / "w")
    before = load_workload(d).digest
    (d / "reference.py").write_text((d / "reference.py").read_text() + "\n# edited\n")
    assert load_workload(d).digest != before


def break_spec(tmp_path: Path, old: str, new: str) -> Path:
    d = make_sgemm_workload(tmp_path / "w")
    text = (d / "workload.toml").read_text()
    assert old in text, old
    (d / "workload.toml").write_text(text.replace(old, new, 1))
    return d


@pytest.mark.parametrize("old,new,key,problem", [
    ('dtype = "float32"', 'dtype = "float13"', "params[0].dtype", "must be one of"),
    ('shape = ["M", "K"]', 'shape = ["M", "Q"]', "params[0].shape[1]", "uses 'Q'"),
    ('role = "output"', 'role = "outptu"', "params[2].role", "must be input, output or scalar"),
    ('grid = ["ceil_div(N, 16)"', 'grid = ["ceil_div(N, 16"', "kernels.naive.grid[0]", "does not parse"),
    ('block = [16, 16, 1]', 'block = [64, 64, 1]', "kernels.naive", "4096 threads, more than 1024"),
    ('source = "naive.cu"', 'source = "missing.cu"', "kernels.naive.source", "not found"),
    ('kernel = "naive"', 'kernel = "fast"', "start.kernel", "'fast' is not one of"),
    ('kernel = "naive"', 'kernel = "naive"\ntune = "fast"', "start.tune", "'fast' is not one of"),
    ('kernel = "naive"', 'kernel = "naive"\ntune = "naive"', "start.tune", "declares no knobs"),
    ('sizes = { M = 97, N = 83, K = 61 }', 'sizes = { M = 97, N = 83, K = -1 }', "cases[0].sizes.K", "non-negative integer"),
    ('sizes = { M = 97, N = 83, K = 61 }', 'sizes = { M = 97, N = 83, K = 0 }', "params[0].shape[1]", "dimension 0 < 1"),
    ('a = "A"', 'a = "X"', "baseline.a", "must name a parameter"),
    ('role = "performance"', 'role = "perf"', "cases[1].role", "correctness or performance"),
    ('flops = "2 * M * N * K"', 'flops = "2 * M * N * Z"', "metrics.flops", "uses 'Z'"),
    ('name = "sgemm"', '', "workload.name", "missing"),
    ('allow_tf32 = false', 'allow_tf32 = "no"', "tolerance.allow_tf32", "expected bool"),
    ('[[cases]]', '[[casez]]', "casez", "unknown key"),
    ('reduction = "K"', 'reduce = "K"', "workload.reduce", "unknown key (expected one of description, name"),
    ('entry = "sgemm_naive"', 'entry = "sgemm_naive"\ngird = [1]', "kernels.naive.gird", "unknown key"),
    ('entry = "sgemm_naive"', 'entry = "sgemm_naive"\noptions = ["--time=t.csv"]', "kernels.naive.options",
     "'--time=t.csv' is not allowed"),
    ('entry = "sgemm_naive"', 'entry = "sgemm_naive"\noptions = ["--use_fast_math"]', "kernels.naive.options",
     "allow_fast_math = false"),
    ('allow_tf32 = false', 'allow_fast_math = "yes"', "tolerance.allow_fast_math", "expected bool"),
])
def test_spec_errors_name_file_key_and_problem(tmp_path, old, new, key, problem):
    """Each broken spec fails with one line: the file, the key and what is wrong."""
    d = break_spec(tmp_path, old, new)
    with pytest.raises(SpecError) as e:
        load_workload(d)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(str(d / "workload.toml") + ": " + key + ": "), message
    assert problem in message


def test_toml_syntax_error_is_one_line(tmp_path):
    """A TOML syntax error names the file and the line."""
    d = break_spec(tmp_path, "[tolerance]", "[tolerance")
    with pytest.raises(SpecError, match=r"workload\.toml: \(syntax\): .*line \d+"):
        load_workload(d)


def test_missing_reference_and_missing_directory(tmp_path):
    """A workload without reference.py, or no workload at all, says so."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "reference.py").unlink()
    with pytest.raises(SpecError, match="workload.reference: reference.py not found"):
        load_workload(d)
    with pytest.raises(SpecError, match="not found"):
        load_workload(tmp_path / "nowhere")


def test_workload_without_performance_case_is_refused(tmp_path):
    """A spec with nothing to time is an error: the score would be empty."""
    d = make_sgemm_workload(tmp_path / "w", cases='[[cases]]\nname = "c"\nrole = "correctness"\nsizes = { M = 3, N = 4, K = 5 }\n')
    with pytest.raises(SpecError, match="cases: no case has role"):
        load_workload(d)


def test_knob_launch_rule_checked_against_every_case(tmp_path):
    """A launch rule using an undefined knob fails at load time, naming the case."""
    d = break_spec(tmp_path, 'grid = ["ceil_div(N, BN)"', 'grid = ["ceil_div(N, BX)"')
    with pytest.raises(SpecError, match=re.escape("kernels.tiled: launch for case 'odd-97x83x61'")):
        load_workload(d)


@pytest.mark.parametrize("old,new,key", [
    ('entry = "sgemm_naive"', 'entry = "sgemm_naive"\ndefines = { BM = "x" }', "kernels.naive.defines.BM"),
    ('shape = ["M", "K"]', 'shape = ["M", "K"]\nrange = [0, 1, 2]', "params[0].range"),
    ('dtype = "float32"\nshape = ["M", "K"]', 'dtype = "int32"\nshape = ["M", "K"]\nrange = [0.2, 0.8]', "params[0].range"),
    ('a = "A"', 'a = ["A"]', "baseline.a"),
])
def test_wrong_value_types_are_spec_errors(tmp_path, old, new, key):
    """Wrongly typed values are one-line spec errors, not tracebacks."""
    d = break_spec(tmp_path, old, new)
    with pytest.raises(SpecError, match=re.escape(key)):
        load_workload(d)


def test_fast_math_options_load_where_the_workload_allows_them(tmp_path):
    """tolerance.allow_fast_math = true lets a kernel carry --use_fast_math."""
    d = break_spec(tmp_path, 'entry = "sgemm_naive"', 'entry = "sgemm_naive"\noptions = ["--use_fast_math"]')
    toml = d / "workload.toml"
    toml.write_text(toml.read_text().replace("allow_tf32 = false", "allow_tf32 = false\nallow_fast_math = true"))
    w = load_workload(d)
    assert w.tolerance.allow_fast_math and w.kernels["naive"].options == ("--use_fast_math",)


def test_start_tune_names_the_kernel_the_tuner_searches_first(tmp_path):
    """[start] tune overrides "the kernel with most knobs" as the tuner's main kernel."""
    from warpsmith.agent.proposers.base import ProposalContext
    from warpsmith.agent.proposers.tune import TuneProposer
    from warpsmith.agent.runtime.device_facts import DeviceFacts
    plain = load_workload(make_sgemm_workload(tmp_path / "a"))
    chosen = load_workload(break_spec(tmp_path / "b", 'kernel = "naive"', 'kernel = "naive"\ntune = "tiled"'))
    assert plain.tune == "" and chosen.tune == "tiled"
    ctx = lambda w: ProposalContext(w, DeviceFacts(), 1, "optimise", [], None, None)
    assert TuneProposer(0, ahead=0).base(ctx(chosen))[0].entry == chosen.kernels["tiled"].entry


def test_a_kernel_that_cannot_serve_a_case_is_not_applicable_there(tmp_path):
    """A split-K workspace past the runner's limit on one case leaves that kernel out there, not the workload."""
    d = tmp_path / "sg"
    shutil.copytree(SGEMM, d)
    with open(d / "workload.toml", "a") as f:
        f.write('\n[[cases]]\nname = "big-output"\nrole = "performance"\nsizes = { M = 32768, N = 32768, K = 64 }\n')
    w = load_workload(d)
    pairs = {(k, c) for k, c, _ in w.not_applicable}
    assert ("splitk", "big-output") in pairs and ("splitk_warptile", "big-output") in pairs
    assert all(c == "big-output" for _, c in pairs)
    assert not any(k == "tf32x3" for k, _ in pairs)  # served by the kernels without that workspace


def test_a_case_no_kernel_serves_is_an_error(tmp_path):
    """Only a case that no shipped kernel can serve refuses the workload, naming the case."""
    cases = SMALL_CASES + '[[cases]]\nname = "square-512"\nrole = "performance"\nsizes = { M = 512, N = 512, K = 512 }\n'
    d = make_sgemm_workload(tmp_path / "w", cases=cases)
    toml = d / "workload.toml"
    only_small = "ceil_div(M, {}) * min(1, max(0, 300 - M))"
    toml.write_text(toml.read_text().replace('"ceil_div(M, 16)"', f'"{only_small.format(16)}"', 1))
    assert {(k, c) for k, c, _ in load_workload(d).not_applicable} == {("naive", "square-512")}
    toml.write_text(toml.read_text().replace('"ceil_div(M, BM)"', f'"{only_small.format("BM")}"', 1))
    with pytest.raises(SpecError, match="launch for case 'square-512'.*no other kernel"):
        load_workload(d)


def test_a_kernel_that_serves_no_performance_case_is_an_error(tmp_path):
    """A shipped kernel must serve a correctness case and a performance case, or it could not be judged."""
    d = break_spec(tmp_path, '"ceil_div(M, 16)"', '"ceil_div(M, 16) * min(1, max(0, 200 - M))"')
    with pytest.raises(SpecError, match="kernels.naive: launch for case 'square-256'.*serves no performance case"):
        load_workload(d)


def test_shapes_replace_the_performance_cases_and_travel_with_the_session(tmp_path):
    """bench --shapes: the file's shapes become the performance cases (another digest), and a session stores them so that resume loads the same cases."""
    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import SessionInfo
    from warpsmith.agent.spec.shapes import load_shapes
    f = tmp_path / "shapes.toml"
    f.write_text('[[sgemm]]\nname = "decode-16x512x512"\nsizes = { M = 16, N = 512, K = 512 }\n'
                 '[[softmax]]\nname = "long"\nsizes = { rows = 4, cols = 100000 }\n')
    shapes = load_shapes(f)
    own = load_workload(SGEMM)
    w = load_workload(SGEMM, shapes["sgemm"])
    assert [c.name for c in w.cases if c.timed] == ["decode-16x512x512"] and w.shapes == shapes["sgemm"]
    assert w.digest != own.digest
    assert {c.name for c in w.cases if not c.timed} == {c.name for c in own.cases if not c.timed}
    info = SessionInfo("s1", str(SGEMM), SearchOptions(), shapes=w.shapes)
    info.save(tmp_path)
    assert SessionInfo.load(tmp_path).shapes == w.shapes
    f.write_text('[[sgemm]]\nname = "x"\nsizes = { M = -1 }\n')
    with pytest.raises(SpecError, match=r"sgemm\[0\].sizes"):
        load_shapes(f)


def test_a_candidate_that_would_dodge_every_correctness_case_is_refused():
    """A launch rule that makes a kernel not applicable on every correctness case (so it would be judged at
    performance sizes only) is launch_invalid, in the evaluator as in the tuner's rule."""
    from warpsmith.agent.evaluate.results import CaseResult, Status
    from warpsmith.agent.evaluate.verdict import coverage_problem
    from warpsmith.agent.spec.applicability import coverage_gap
    na = lambda name, role: CaseResult(name, role, Status.NOT_APPLICABLE, detail=f"case '{name}': grid (0, 1, 1)")
    dodging = [na("odd", "correctness"), na("probe", "correctness"), CaseResult("square", "performance")]
    assert coverage_problem(dodging).startswith("not applicable to any correctness case") and "case 'odd'" in coverage_problem(dodging)
    assert coverage_problem([CaseResult("odd", "correctness"), na("square", "performance")]).startswith(
        "not applicable to any performance case")
    assert coverage_problem([CaseResult("odd", "correctness"), na("big", "performance"),
                             CaseResult("square", "performance")]) == ""
    assert coverage_gap(["performance"]) and coverage_gap(["correctness"]) and not coverage_gap(["correctness", "performance"])


def test_split_row_kernels_serve_rows_up_to_their_grid_and_no_longer():
    """The split-row kernels (softmax, layernorm, rmsnorm_bf16) serve 10^6-column rows at their
    defaults, and are not applicable (an empty grid, no launch) where a row has more slices than
    half the grid's buffers: the rule that keeps their cross-block exchange free of deadlock."""
    from warpsmith.agent.spec.applicability import case_problem
    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.spec.workload_model import Case
    for name in ("softmax", "layernorm", "rmsnorm_bf16"):
        w = load_workload(SGEMM.parent / name)
        split = Candidate.from_spec(w.kernels["split"])
        assert case_problem(w, split, Case("1M", "performance", {"rows": 64, "cols": 1 << 20})) is None, name
        huge = case_problem(w, split, Case("huge", "performance", {"rows": 1, "cols": 1 << 28}))
        assert huge is not None and "grid" in huge, (name, huge)
        # 16 KB slices and 2 buffers: 256 slices of fp32 against 132 buffers; bf16 rows have 128.
        small = Candidate.from_spec(w.kernels["split"], {"SLICE": 16384, "NBUF": 2})
        served = case_problem(w, small, Case("1M", "performance", {"rows": 64, "cols": 1 << 20})) is None
        assert served == (name == "rmsnorm_bf16"), name
