"""Seeded inputs (never zero, reproducible) and the on-disk reference cache."""

from pathlib import Path

import numpy as np
import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.spec.inputs import ArrayJob, generate_input, generate_inputs
from warpsmith.agent.spec.references import compute_reference, ensure_reference, load_reference
from warpsmith.agent.spec.workload import load_workload

SOFTMAX = Path(__file__).resolve().parents[1] / "examples" / "softmax"


def test_inputs_are_reproducible_and_differ_by_seed_and_case():
    """Same (case, seed) gives the same data; another seed or case gives other data."""
    job = ArrayJob("A", "input", "float32", (64, 32), -1.0, 1.0)
    a, b = generate_input(job, "c1", 1), generate_input(job, "c1", 1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, generate_input(job, "c1", 2))
    assert not np.array_equal(a, generate_input(job, "c2", 1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_a_large_input_is_drawn_in_chunks_whatever_the_threads(monkeypatch, dtype):
    """An array of several CHUNKs is drawn chunk by chunk, each from its own generator, in parallel threads: the
    same values with one thread as with many, and no chunk a copy of another."""
    from concurrent.futures import ThreadPoolExecutor

    from warpsmith.agent.spec import inputs
    monkeypatch.setattr(inputs, "CHUNK", 1000)
    job = ArrayJob("A", "input", dtype, (35, 100), -4.0, 4.0)
    many = generate_input(job, "c1", 1)
    with ThreadPoolExecutor(max_workers=1) as one:
        monkeypatch.setattr(inputs, "_pool", (__import__("os").getpid(), one))
        assert np.array_equal(generate_input(job, "c1", 1), many)
    flat = many.reshape(-1)
    assert many.shape == (35, 100) and not np.array_equal(flat[:1000], flat[1000:2000])
    assert np.count_nonzero(flat == 0) == 0 and len(np.unique(flat[3000:])) > 1


def test_inputs_are_never_zero():
    """Even integer inputs over a range containing 0 hold no zeros."""
    assert np.count_nonzero(generate_input(ArrayJob("x", "input", "int32", (10000,), -2, 2), "c", 1) == 0) == 0
    x = generate_input(ArrayJob("x", "input", "float32", (1 << 16,), -1e-3, 1e-3), "c", 1)
    assert np.count_nonzero(x == 0) == 0 and x.dtype == np.float32


def test_reference_is_float64_and_cached(tmp_path):
    """The reference runs in float64 on the case's inputs and is read back from disk."""
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    case = w.case("odd-97x83x61")
    path = ensure_reference(w, case, 1)
    assert path.is_file() and ensure_reference(w, case, 1) == path
    ref = load_reference(path)["C"]
    ins = generate_inputs(w, case, 1)
    assert ref.dtype == np.float64 and ref.shape == (97, 83)
    assert np.allclose(ref, ins["A"].astype(np.float64) @ ins["B"].astype(np.float64), rtol=0, atol=1e-12)


def test_reference_with_wrong_shape_is_refused(tmp_path):
    """A reference returning the wrong shape is a clear error naming the output and both shapes."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "reference.py").write_text("def reference(A, B, *, M, N, K):\n    return (A @ B).T\n")
    w = load_workload(d)
    with pytest.raises(ValueError, match=r"output C for case 'odd-97x83x61' has shape \(83, 97\), the spec says \(97, 83\)"):
        compute_reference(w, w.case("odd-97x83x61"), 1)


def test_reference_that_raises_is_one_clear_error(tmp_path):
    """A reference.py that raises is reported with its exception and the case, not a traceback."""
    from warpsmith.agent.spec.inputs import ReferenceFailed
    d = make_sgemm_workload(tmp_path / "w")
    (d / "reference.py").write_text("def reference(A, B, *, M, N, K):\n    return A @ B.T\n")
    w = load_workload(d)
    with pytest.raises(ReferenceFailed, match=r"reference.py: reference raised ValueError: .* \(case 'odd-97x83x61'\)"):
        compute_reference(w, w.case("odd-97x83x61"), 1)


def test_one_thread_computes_a_reference_the_others_wait_for(tmp_path, monkeypatch):
    """The plan computes the fresh seed's references in the background while the loop may
    ask for the same file: the second asker waits and reads it, nothing is computed twice
    and no two threads write one temporary file."""
    import threading
    from pathlib import Path

    import warpsmith.agent.spec.references as references
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    case = w.case("odd-97x83x61")
    second_looked = threading.Event()
    release = threading.Event()
    computed = []

    class Watched(type(Path())):  # the second thread's first look at the file is seen
        def is_file(self):
            if threading.current_thread().name == "second":
                second_looked.set()
            return super().is_file()

    real_path, real_run = references.reference_path, references.run_reference
    monkeypatch.setattr(references, "reference_path", lambda *a: Watched(real_path(*a)))

    def run(workload, case_, seed, out, timeout_s):
        computed.append(out.name)
        release.wait(60)
        real_run(workload, case_, seed, out, timeout_s)
    monkeypatch.setattr(references, "run_reference", run)
    paths = {}
    threads = [threading.Thread(target=lambda n=n: paths.__setitem__(n, ensure_reference(w, case, 7)), name=n)
               for n in ("first", "second")]
    threads[0].start()
    while not computed:  # the first is computing (blocked in run until released)
        threads[0].join(0.01)
    threads[1].start()
    assert second_looked.wait(60)  # the second found no file yet
    release.set()
    for t in threads:
        t.join(60)
    assert len(computed) == 1 and paths["first"] == paths["second"] and paths["first"].is_file()


def test_prefetch_computes_every_case_for_the_seed(tmp_path):
    from warpsmith.agent.spec.references import prefetch_references, reference_path
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    prefetch_references(w, 9).join(120)
    assert all(reference_path(w, c, 9).is_file() for c in w.cases)


def test_a_child_that_prints_without_end_costs_this_process_only_its_tail(tmp_path, monkeypatch):
    """The children that run written code (a reference, a drafted one) may print gigabytes; run_child keeps
    each stream's tail, and the answer on stdout's last line still comes through."""
    from warpsmith.agent.spec.reference_run import ChildDied, run_child
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the child finds the module there (it runs with -P)
    module = tmp_path / "chatty.py"
    module.write_text("import sys, json\nsys.stdin.read()\nchunk = 'x' * 65536\n"
                      "for _ in range(256):\n    sys.stdout.write(chunk + '\\n'); sys.stderr.write(chunk)\n"
                      "print(json.dumps({'ok': True, 'n': 1}))\n")
    answer = run_child("chatty", {}, tmp_path, 120)
    assert answer == {"ok": True, "n": 1}
    module.write_text("import sys\nsys.stdin.read()\nfor _ in range(256):\n    sys.stderr.write('y' * 65536)\n"
                      "sys.stderr.write('\\nthe last line')\nsys.exit(3)\n")
    with pytest.raises(ChildDied, match="exit code 3: the last line"):
        run_child("chatty", {}, tmp_path, 120)
    import os

    from warpsmith.agent.spec.reference_run import _Tail
    read, write = os.pipe()
    tail, peak = _Tail(os.fdopen(read, "rb"), 4096), []
    with os.fdopen(write, "wb") as w:
        for i in range(256):  # 16 MiB through the pipe; what the reader holds stays near `keep`
            w.write(bytes([65 + i % 26]) * 65536)
            w.flush()
            peak.append(len(tail.data))
    tail.join(60)
    assert max(peak) <= 2 * 4096 + 65536 and tail.text() == chr(65 + 255 % 26) * 4096


def test_a_child_that_leaves_a_process_holding_its_output_returns_at_once(tmp_path, monkeypatch):
    """Reading the streams to their end would wait for anything the child left behind with the pipes open (a
    `sleep` it started), so the call would end only when that did. The child's process group is killed once it
    has answered, and the answer comes back at once."""
    import sys

    from warpsmith.agent.spec.reference_run import run_child
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    marker = tmp_path / "left.pid"
    (tmp_path / "leaver.py").write_text(
        "import json, subprocess, sys\nsys.stdin.read()\n"
        f"p = subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        "print(json.dumps({'ok': True}))\n")
    assert run_child("leaver", {}, tmp_path, 120) == {"ok": True}
    import time
    from pathlib import Path
    stat = Path(f"/proc/{int(marker.read_text())}/stat")

    def dead() -> bool:  # gone, or a zombie its new parent has yet to reap
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True
    deadline = time.monotonic() + 60  # a bound on the wait for SIGKILL to land, not a timing
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead()  # it was left sleeping for 600 s


def test_a_stress_case_scales_float_inputs_by_a_power_of_two_and_leaves_indices_alone():
    """input_scale multiplies each float input's range (bf16 values stay exact: a power of
    two); an integer input keeps its range."""
    from warpsmith.agent.spec.half_float import to_float64
    from warpsmith.agent.spec.inputs import array_jobs
    from warpsmith.agent.spec.workload import Case
    w = load_workload(SOFTMAX)
    plain, stressed = Case("p", "correctness", {"rows": 7, "cols": 100}), \
        Case("s", "correctness", {"rows": 7, "cols": 100}, input_scale=128.0)
    (job,) = [j for j in array_jobs(w, stressed) if j.role == "input"]
    (base,) = [j for j in array_jobs(w, plain) if j.role == "input"]
    assert (job.low, job.high) == (base.low * 128, base.high * 128)
    x = generate_input(job, "s", 1)
    assert np.abs(x).max() > 64
    half = ArrayJob("q", "input", "bfloat16", (4096,), -16.0, 16.0)
    values = to_float64(generate_input(half, "s", 1), "bfloat16")
    assert np.array_equal(values / 16, to_float64(generate_input(ArrayJob("q", "input", "bfloat16", (4096,), -1.0, 1.0),
                                                                 "s", 1), "bfloat16"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_signed_zeros_are_an_eighth_of_the_values_both_signs(dtype):
    """signed_zeros: about 1/8 of a float input is +0 or -0, each sign present."""
    from warpsmith.agent.spec.half_float import to_float64
    x = to_float64(generate_input(ArrayJob("A", "input", dtype, (1 << 14,), -1.0, 1.0, zeros=True), "c", 1), dtype)
    zeros = x[x == 0]
    assert 0.10 < zeros.size / x.size < 0.15
    assert np.signbit(zeros).any() and (~np.signbit(zeros)).any()


def test_the_large_softmax_case_overflows_a_softmax_without_the_row_max():
    """The shipped stress case does what it is there for: exp without the max subtracted
    gives inf/NaN in float32 there, with it every value is within the fp32 tolerance."""
    from warpsmith.agent.spec.tolerance import case_rtol, relative_error
    w = load_workload(SOFTMAX)
    case = w.case("stress-large-7x1000")
    (x,) = generate_inputs(w, case, 1).values()
    ref = compute_reference(w, case, 1)["y"]
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
        e = np.exp(x - x.max(axis=1, keepdims=True))
    safe = e / e.sum(axis=1, keepdims=True)
    rtol = case_rtol(w, case, "float32")
    assert not (relative_error(naive, ref) <= rtol).all()
    assert (relative_error(safe, ref) <= rtol).all()
