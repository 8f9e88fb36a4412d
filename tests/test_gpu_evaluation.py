"""The evaluation engine on a real GPU: launch, timing, every validation check,
fault and hang isolation, and the cuBLAS baseline."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.attempt import AttemptJob
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.expr import Expr
from warpsmith.agent.spec.launch import LaunchRule
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig

pytestmark = pytest.mark.gpu

NAIVE_RULE = LaunchRule((Expr.parse("ceil_div(N, 16)"), Expr.parse("ceil_div(M, 16)"), Expr.parse(1)),
                        (Expr.parse(16), Expr.parse(16), Expr.parse(1)))

# Every bad kernel shares the naive kernel's signature and launch.
HEAD = 'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {\n' \
       '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
DOT = '  float acc = 0.f; for (int i = 0; i < K; ++i) acc += A[r * K + i] * B[i * N + c];\n'
BAD = {
    "writes_nothing": HEAD + "}\n",
    "writes_half": HEAD + "  if (r >= M / 2 || c >= N) return;\n" + DOT + "  C[r * N + c] = acc;\n}\n",
    "out_of_bounds": HEAD + "  if (r >= M || c >= N) return;\n" + DOT + "  C[r * N + c] = acc;\n"
                     "  if (r == M - 1 && c == N - 1) C[M * N + 7] = 1.f;\n}\n",
    "modifies_input": HEAD + "  if (r >= M || c >= N) return;\n" + DOT + "  C[r * N + c] = acc;\n"
                      "  if (r == 0 && c == 0) ((float*)A)[1] = 3.f;\n}\n",
    # Right on the first launches, then wrong: needs state kept across launches, which the
    # CUBIN audit refuses before any launch (tests/test_gpu_adversarial.py has the rest).
    "changes_after_20": "__device__ unsigned launches;\n" + HEAD + "  if (r >= M || c >= N) return;\n" + DOT +
                        "  C[r * N + c] = *(volatile unsigned*)&launches > 20 ? acc + 1.f : acc;\n"
                        "  if (r == 0 && c == 0) atomicAdd(&launches, 1u);\n}\n",
    # Rounds both operands to TF32 (10-bit mantissa) before the product.
    "tf32": HEAD + "  if (r >= M || c >= N) return;\n"
            "  float acc = 0.f; for (int i = 0; i < K; ++i) {\n"
            "    unsigned a, b; asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(a) : \"f\"(A[r * K + i]));\n"
            "    asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(b) : \"f\"(B[i * N + c]));\n"
            "    acc += __uint_as_float(a) * __uint_as_float(b); }\n  C[r * N + c] = acc;\n}\n",
    "illegal_address": HEAD + "  ((float*)0x8)[r * N + c] = 1.f;\n}\n",
    # A volatile global read the compiler cannot remove; inputs are never NaN.
    "infinite_loop": HEAD + "  volatile const float* p = A; while (p[0] == p[0]) {}\n}\n",
}


def bad(name: str) -> Candidate:
    return Candidate(BAD[name], "k", NAIVE_RULE, name=name)


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return load_workload(make_sgemm_workload(tmp_path_factory.mktemp("sgemm")))


@pytest.fixture(scope="module")
def evaluator(workload):
    with Evaluator(workload, EvaluationOptions(TimingConfig(warmup=5, repetitions=50), kernel_timeout_s=5.0)) as ev:
        yield ev


def naive(workload) -> Candidate:
    return Candidate.from_spec(workload.kernels["naive"])


def test_naive_kernel_passes_and_is_timed(evaluator, workload):
    """The starting kernel validates on every case and gets 50 timing samples per performance case."""
    r = evaluator.evaluate(naive(workload))
    assert r.status == "ok", r.detail
    perf = r.case("square-256")
    assert perf.timing.n == 50 and perf.timing.median_ms > 0
    assert perf.recheck.status == "ok"
    assert r.score_ms == pytest.approx(perf.timing.median_ms)
    assert r.case("odd-97x83x61").check.max_rel_error < 1e-5


def test_an_attempt_loads_the_kernel_once_and_validates_each_case_once(evaluator, workload):
    """run_attempt(), as the loop runs an attempt: one module load, one validation per case
    before timing, a revalidation after it, and the same verdict as evaluate()."""
    from warpsmith.agent.worker.protocol import CaseChecked, Started
    seen = []
    c = Candidate.from_spec(workload.kernels["tiled"], {"BM": 64, "BN": 64, "TM": 4, "TN": 4})
    attempt = evaluator.run_attempt(AttemptJob(c), seen.append)
    assert attempt.validated.status == "ok", attempt.validated.detail
    r = attempt.timed
    assert r.status == "ok" and r.score_ms > 0, r.detail
    assert [e.phase for e in seen if isinstance(e, Started)].count("load") == 1
    checks = [(e.case, e.phase) for e in seen if isinstance(e, CaseChecked)]
    cases = [case.name for case in workload.cases]
    assert sorted(case for case, phase in checks if phase == "validate") == sorted(cases)
    assert sorted(case for case, phase in checks if phase == "revalidate") == sorted(cases)
    assert r.case("square-256").timing.n == 50 and r.case("odd-97x83x61").check.status == "ok"


def test_tiled_kernel_passes_with_other_knobs(evaluator, workload):
    """The register-tiled kernel is correct on odd sizes for a non-default tile."""
    c = Candidate.from_spec(workload.kernels["tiled"], {"BM": 128, "BN": 32, "TM": 8, "TN": 4})
    r = evaluator.evaluate(c)
    assert r.status == "ok", r.detail


@pytest.mark.parametrize("name,status,hint", [
    ("writes_nothing", "wrong_answer", "never written"),
    ("writes_half", "wrong_answer", "only rows >= 48"),
    ("out_of_bounds", "out_of_bounds", "C (after)"),
    ("modifies_input", "crashed", "inputs are read-only"),  # a store into an input faults (read-only mapping)
    ("tf32", "wrong_answer", "outside rtol"),
])
def test_validation_catches(evaluator, name, status, hint):
    """Each kind of wrong kernel gets its own status and a detail the proposer can act on."""
    r = evaluator.evaluate(bad(name))
    assert r.status == status
    assert hint in r.detail, r.detail
    assert r.score_ms is None


@pytest.mark.parametrize("name,status,hint", [
    ("writes_nothing", "wrong_answer", "before any validation"),
    ("writes_half", "wrong_answer", "before any validation"),
    ("out_of_bounds", "out_of_bounds", "C (after)"),
])
def test_a_wrong_kernel_screened_first_gets_the_status_validation_would_give(evaluator, name, status, hint):
    """An attempt told the best screens first; a kernel wrong in the screen's timed launches is a wrong answer
    (not "unstable": it was never correct), one writing out of bounds is out_of_bounds, as validation says."""
    r = evaluator.run_attempt(AttemptJob(bad(name), best_ms=1e9)).verdict
    assert r.status == status, r.detail
    assert hint in r.detail, r.detail
    assert r.score_ms is None


def test_behaviour_change_after_repeated_launches_is_refused(evaluator):
    """A kernel that counts its launches in a __device__ global is refused before it runs."""
    r = evaluator.evaluate(bad("changes_after_20"))
    assert r.status == "compile_failed" and "state between launches" in r.detail, r.detail


def test_tf32_passes_when_the_workload_allows_it(tmp_path):
    """The precision policy is the workload's: allow_tf32 = true accepts TF32-level error."""
    w = load_workload(make_sgemm_workload(tmp_path / "w", tolerance="allow_tf32 = true"))
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=1, repetitions=5))) as ev:
        assert ev.evaluate(bad("tf32")).status == "ok"


@pytest.mark.parametrize("name,status,error", [
    ("illegal_address", "crashed", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("infinite_loop", "timeout", "no answer within"),
])
def test_fault_and_hang_cost_only_the_worker(evaluator, workload, name, status, error):
    """A faulting or hanging kernel is isolated; the next candidate evaluates fine."""
    restarts = evaluator.restarts
    r = evaluator.evaluate(bad(name))
    assert r.status == status and error in r.detail, r.detail
    after = evaluator.evaluate(naive(workload))
    assert after.status == "ok", after.detail
    assert evaluator.restarts == restarts + 1


def test_invalid_launch_is_typed(evaluator):
    """A block of 2048 threads is launch_invalid before it reaches the GPU."""
    rule = LaunchRule(NAIVE_RULE.grid, (Expr.parse(2048), Expr.parse(1), Expr.parse(1)))
    r = evaluator.evaluate(Candidate(BAD["writes_half"], "k", rule))
    assert r.status == "launch_invalid" and "1024" in r.detail


def test_cublas_baseline_matches_numpy(evaluator):
    """cuBLAS SGEMM (default math, no TF32) passes the fp32 tolerance and is timed by the same loop."""
    b = evaluator.baseline()
    assert b.status == "ok", b.detail
    assert b.case("odd-97x83x61").check.max_rel_error < 1e-5
    assert b.case("square-256").timing.n == 50


def test_hot_and_cold_timing_both_work(workload):
    """Hot L2 (no flush) is never slower in median than cold for the same kernel."""
    medians = {}
    for cold in (True, False):
        with Evaluator(workload, EvaluationOptions(TimingConfig(warmup=5, repetitions=50, cold_l2=cold))) as ev:
            medians[cold] = ev.evaluate(naive(workload)).case("square-256").timing.median_ms
    assert medians[False] <= medians[True] * 1.05


def test_gpu_check_agrees_with_numpy(evaluator):
    """The GPU comparison's error and mismatch count equal the NumPy report's on the same output."""
    source = HEAD + "  if (r < M && c < N) C[r * N + c] = (r + c) % 3 ? 1.0f : -0.5f;\n}\n"
    r = evaluator.evaluate(Candidate(source, "k", NAIVE_RULE, name="constant"))
    check = r.case("odd-97x83x61").check
    assert check.status == "wrong_answer"
    cpu = check.reports[0]
    assert check.max_rel_error == pytest.approx(cpu.max_rel_error, rel=1e-9)
    # (r + c) % 3 picks 1 or -0.5 whatever the reference: a random reference is within the
    # tolerance of that constant at no more than a handful of elements
    assert check.mismatches == cpu.mismatches and cpu.mismatches >= 97 * 83 - 8


def test_a_clearly_slower_candidate_stops_after_the_first_chunk(evaluator, workload):
    """An attempt told a best 10x faster than the naive kernel: rejected_early after SCREEN_LAUNCHES launches per
    performance case, partial samples kept, no score, no revalidation; told a best 10x slower: timed in full."""
    from warpsmith.agent.evaluate.results import Status
    from warpsmith.agent.spec.timing_policy import SCREEN_LAUNCHES
    full = evaluator.evaluate(naive(workload))
    assert full.ok, full.detail
    rejected = evaluator.run_attempt(AttemptJob(naive(workload), best_ms=full.score_ms / 10))
    r = rejected.verdict
    assert r.status == Status.REJECTED_EARLY and r.score_ms is None and "rejected early" in r.detail
    assert rejected.timed is None
    perf = r.case("square-256")
    assert len(perf.samples_ms) == SCREEN_LAUNCHES and perf.timing.n == SCREEN_LAUNCHES and perf.recheck is None
    kept = evaluator.run_attempt(AttemptJob(naive(workload), best_ms=full.score_ms * 10)).timed
    assert kept.ok and len(kept.case("square-256").samples_ms) == 50 and kept.case("square-256").recheck.status == "ok"


def test_an_attempt_told_the_best_screens_first_and_never_validates_a_rejected_candidate(evaluator, workload):
    """An attempt told a best 10x faster: rejected_early from the first chunk alone, no case validated; told a
    best 10x slower: screened, every case validated, then timed in full without a second chunk."""
    from warpsmith.agent.evaluate.results import Status
    from warpsmith.agent.spec.timing_policy import SCREEN_LAUNCHES
    from warpsmith.agent.worker.protocol import CaseChecked
    full = evaluator.evaluate(naive(workload))
    assert full.ok, full.detail
    seen = []
    r = evaluator.run_attempt(AttemptJob(naive(workload), best_ms=full.score_ms / 10), seen.append).validated
    assert r.status == Status.REJECTED_EARLY and "before validation" in r.detail, r.detail
    assert [c.case for c in r.cases] == ["square-256"] and len(r.case("square-256").samples_ms) == SCREEN_LAUNCHES
    assert not [e for e in seen if isinstance(e, CaseChecked) and e.phase == "validate"]
    attempt = evaluator.run_attempt(AttemptJob(naive(workload), best_ms=full.score_ms * 10), seen.append)
    assert attempt.validated.ok
    kept = attempt.timed
    assert kept.ok and len(kept.case("square-256").samples_ms) == 50, kept.detail
    assert sorted(e.case for e in seen if isinstance(e, CaseChecked) and e.phase == "validate") \
        == sorted(c.name for c in workload.cases)


def test_an_infinite_reference_entry_passes_the_same_infinity_only(tmp_path):
    """allow_nonfinite: the case's scale is the RMS of the finite entries (an inf made it inf
    or NaN, failing every honest output); where the reference is inf the output must be too."""
    import shutil
    d = tmp_path / "rowsum"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "rowsum", d)
    text = (d / "workload.toml").read_text()
    (d / "workload.toml").write_text(text.replace('name = "y"\nrole = "output"', 'name = "y"\nrole = "output"\nallow_nonfinite = true'))
    (d / "reference.py").write_text((d / "reference.py").read_text().replace(
        "    return np.sum(x, axis=1, dtype=np.float64)",
        "    y = np.sum(x, axis=1, dtype=np.float64)\n    y[0] = np.inf\n    return y"))
    w = load_workload(d)
    naive = Candidate.from_spec(w.kernels["naive"])
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=2, repetitions=5))) as ev:
        right = ev.evaluate(dataclasses.replace(naive, name="inf_where_inf", source=naive.source.replace(
            "    y[row] = acc;", "    y[row] = row == 0 ? __int_as_float(0x7f800000) : acc;")))
        assert right.status == "ok", right.detail
        wrong = ev.evaluate(dataclasses.replace(naive, name="minus_inf_where_inf", source=naive.source.replace(
            "    y[row] = acc;", "    y[row] = row == 0 ? __int_as_float(0xff800000) : acc;")))
        assert wrong.status == "wrong_answer", wrong.detail


def test_a_kernel_is_judged_on_the_cases_it_serves(tmp_path):
    """A kernel whose launch cannot serve one performance case is ok on the others: that case is
    not_applicable (never run), the kernel has no score, its medians are timed, the screen and the
    attempt's validation and timing treat it the same way."""
    from workload_factory import SMALL_CASES
    cases = SMALL_CASES + '[[cases]]\nname = "square-512"\nrole = "performance"\nsizes = { M = 512, N = 512, K = 512 }\n'
    w = load_workload(make_sgemm_workload(tmp_path / "w", cases=cases))
    small_only = LaunchRule((Expr.parse("ceil_div(N, 16)"), Expr.parse("ceil_div(M, 16) * min(1, max(0, 300 - M))"),
                             Expr.parse(1)), NAIVE_RULE.block)
    cand = dataclasses.replace(naive(w), launch=small_only, name="small-only")
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=5, repetitions=50), kernel_timeout_s=5.0)) as ev:
        r = ev.evaluate(cand)
        assert r.status == "ok" and r.score_ms is None, r.detail
        assert r.case("square-512").status == "not_applicable" and r.case("square-512").timing is None
        assert r.case("square-256").timing.n == 50 and r.case("odd-97x83x61").check.max_rel_error < 1e-5
        full = ev.evaluate(naive(w))
        assert full.ok and full.score_ms is not None
        winners = {c.case: c.timing.median_ms for c in full.cases if c.timing}
        attempt = ev.run_attempt(AttemptJob(cand, best_ms=full.score_ms, case_best_ms=winners))
        v, b = attempt.validated, attempt.verdict
        assert v.status in ("ok", "rejected_early") and b.status in ("ok", "rejected_early"), (v.detail, b.detail)
        assert b.case("square-512").status == "not_applicable"
