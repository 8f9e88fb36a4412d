"""Bad input is refused before any work, with one line: names, files, sizes and
memory, scalars, tolerances, and reference.py (hung, raising, NaN)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from package_env import child_env
from workload_factory import ROOT, make_sgemm_workload

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.inputs import ReferenceFailed
from warpsmith.agent.spec.references import compute_reference, ensure_reference, load_reference
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError
from warpsmith.agent.worker.footprint import case_footprint, check_memory

SCALAR = '[[params]]\nname = "{name}"\nrole = "scalar"\ndtype = "{dtype}"\nvalue = {value}\n\n[tolerance]'


def _sub(old: str, new: str):
    def edit(d: Path) -> None:
        text = (d / "workload.toml").read_text()
        assert old in text, old
        (d / "workload.toml").write_text(text.replace(old, new, 1))
    return edit


def _outside_reference(d: Path) -> None:
    (d.parent / "outside.py").write_text("def reference(A, B, *, M, N, K):\n    return A @ B\n")
    _sub('reference = "reference.py"', 'reference = "../outside.py"')(d)


def _symlinked_source(d: Path) -> None:
    (d.parent / "evil.cu").write_text((d / "naive.cu").read_text())
    (d / "naive.cu").unlink()
    (d / "naive.cu").symlink_to(d.parent / "evil.cu")


def _directory_reference(d: Path) -> None:
    (d / "refdir").mkdir()
    _sub('reference = "reference.py"', 'reference = "refdir"')(d)


def _fifo_torch(d: Path) -> None:
    (d / "torch_baseline.py").unlink()
    os.mkfifo(d / "torch_baseline.py")


BROKEN = {  # id: (edit of the small sgemm workload, key in the message, words in the message)
    "name-dotdot": (_sub('name = "sgemm"', 'name = "../escape"'), "workload.name", "must be 1 to 64"),
    "name-dot": (_sub('name = "sgemm"', 'name = ".hidden"'), "workload.name", "not starting with '.'"),
    "name-300": (_sub('name = "sgemm"', f'name = "{"w" * 300}"'), "workload.name", "1 to 64"),
    "name-slash": (_sub('name = "sgemm"', 'name = "a/b"'), "workload.name", "letters, digits"),
    "case-name": (_sub('name = "odd-97x83x61"', 'name = "../../odd"'), "cases[0].name", "must be 1 to 64"),
    "kernel-name": (_sub("[kernels.naive]", '[kernels."../naive"]'), "kernels.../naive", "kernel name"),
    "param-name": (_sub('name = "A"', f'name = "{"A" * 65}"'), "params[0].name", "1 to 64"),
    "reference-outside": (_outside_reference, "workload.reference", "outside the workload directory"),
    "source-absolute": (_sub('source = "naive.cu"', 'source = "/etc/passwd"'), "kernels.naive.source", "outside"),
    "source-symlink-out": (_symlinked_source, "kernels.naive.source", "outside the workload directory"),
    "reference-directory": (_directory_reference, "workload.reference", "not a regular file"),
    "torch-fifo": (_fifo_torch, "baseline.torch", "not a regular file"),
    "size-huge": (_sub("sizes = { M = 97, N = 83, K = 61 }", "sizes = { M = 1000000000000, N = 83, K = 1000 }"),
                  "params[0].shape", "bytes, more than any machine"),
    "int32-overflow": (_sub("[tolerance]", SCALAR.format(name="big", dtype="int32", value='"M * 100000000"')),
                       "params[6].value", "outside int32's range"),
    "int64-overflow": (_sub("[tolerance]", SCALAR.format(name="big", dtype="int64",
                                                         value='"M * 1000000000000000000"')),
                       "params[6].value", "outside int64's range"),
    "float32-overflow": (_sub("[tolerance]", SCALAR.format(name="eps", dtype="float32", value="1e39")),
                         "params[6].value", "outside float32's range"),
    "float64-inf": (_sub("[tolerance]", SCALAR.format(name="eps", dtype="float64", value="inf")),
                    "params[6].value", "not finite"),
    "rtol-inf": (_sub("allow_tf32 = false", "rtol = inf"), "tolerance.rtol", "must be finite"),
    "rtol-nan": (_sub("allow_tf32 = false", "rtol = nan"), "tolerance.rtol", "must be finite"),
    "rtol-huge": (_sub("allow_tf32 = false", "rtol = 0.5"), "tolerance.rtol", "<= 0.1"),
    "rtol-zero": (_sub("allow_tf32 = false", "rtol = 0.0"), "tolerance.rtol", "> 0"),
    "range-inf": (_sub('dtype = "float32"\nshape = ["M", "K"]', 'dtype = "float32"\nshape = ["M", "K"]\nrange = [-inf, 1.0]'),
                  "params[0].range", "finite"),
    "range-nan": (_sub('dtype = "float32"\nshape = ["M", "K"]', 'dtype = "float32"\nshape = ["M", "K"]\nrange = [nan, 1.0]'),
                  "params[0].range", "finite"),
    "nonfinite-on-input": (_sub('shape = ["M", "K"]', 'shape = ["M", "K"]\nallow_nonfinite = true'),
                           "params[0].allow_nonfinite", "float output"),
    "config-unknown-knob": (_sub('entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = [{ BM = 64, SPLITK = 4 }]'),
                            "kernels.tiled.configs[0].SPLITK", "not a knob of the kernel's source"),
    "config-undeclared-value": (_sub('entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = [{ BM = 96 }]'),
                                "kernels.tiled.configs[0].BM", "not one of the knob's values [32, 64, 128]"),
    "config-not-a-table": (_sub('entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = ["BM=64"]'),
                           "kernels.tiled.configs[0]", "table of knob = value"),
    "config-huge-value": (_sub('entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = [{ BM = "' + "x" * 5000 + '" }]'),
                          "kernels.tiled.configs[0].BM", "is not one of the knob's values"),
    "input-scale-not-power-of-two": (_sub('name = "odd-97x83x61"', 'name = "odd-97x83x61"\ninput_scale = 3.0'),
                                     "cases[0].input_scale", "power of two"),
    "input-scale-zero": (_sub('name = "odd-97x83x61"', 'name = "odd-97x83x61"\ninput_scale = 0'),
                         "cases[0].input_scale", "power of two"),
    "stress-on-performance": (_sub('role = "performance"', 'role = "performance"\nsigned_zeros = true'),
                              "cases[1].signed_zeros", "only a correctness case"),
    "row-scale-unknown": (_sub("allow_tf32 = false", 'allow_tf32 = false\nscale = "rows"'), "tolerance.scale",
                          "must be \"case\""),
    "range-expr-float": (_sub('shape = ["M", "K"]', 'shape = ["M", "K"]\nrange = [0, "K"]'), "params[0].range",
                         "only an integer input's range may follow the sizes"),
    "range-expr-unknown": (_sub('shape = ["M", "K"]\n', 'shape = ["M", "K"]\n\n[[params]]\nname = "idx"\nrole = "input"\n'
                                'dtype = "int32"\nshape = ["M"]\nrange = [0, "Q - 1"]\n'), "params[1].range",
                           "for case 'odd-97x83x61'"),
    "range-expr-empty": (_sub('shape = ["M", "K"]\n', 'shape = ["M", "K"]\n\n[[params]]\nname = "idx"\nrole = "input"\n'
                              'dtype = "int32"\nshape = ["M"]\nrange = [0, "K - 61"]\n'), "params[1].range",
                         "for case 'odd-97x83x61': expected low < high, got [0, 0]"),
    "config-too-many": (_sub('entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = [' + ", ".join(["{ BM = 64 }"] * 33)
                             + "]"), "kernels.tiled.configs", "at most 32"),
}


@pytest.fixture(params=sorted(BROKEN), ids=sorted(BROKEN))
def broken(request, tmp_path):
    edit, key, words = BROKEN[request.param]
    d = make_sgemm_workload(tmp_path / "w")
    edit(d)
    return d, key, words


def _one_line(text: str) -> str:
    text = text.strip()
    assert text.count("\n") == 0 and "Traceback" not in text, text
    return text


def test_broken_spec_is_one_spec_error_naming_the_key(broken):
    """The parser refuses each broken workload with one SpecError line naming the key."""
    d, key, words = broken
    with pytest.raises(SpecError) as e:
        load_workload(d)
    message = _one_line(str(e.value))
    assert f": {key}: " in message and words in message


def test_check_and_eval_refuse_with_exit_2(broken, capsys):
    """`warpsmith check` prints one FAIL line and exits 2; `eval` exits 2 with one line."""
    d, key, words = broken
    assert main(["check", str(d)]) == 2
    out = _one_line(capsys.readouterr().out)
    assert out.startswith("FAIL") and key in out and words in out
    assert main(["eval", str(d)]) == 2
    assert key in _one_line(capsys.readouterr().err)


def test_run_refuses_without_writing_to_the_store(broken, tmp_path, capsys):
    """`warpsmith run` exits 2 with one line and creates nothing: no store, no session."""
    d, key, words = broken
    store = tmp_path / "store"
    assert main(["run", str(d), "--proposer", "tune", "--headless", "--store", str(store)]) == 2
    assert key in _one_line(capsys.readouterr().err)
    assert not store.exists() and not (tmp_path / "escape").exists()


# -- memory ------------------------------------------------------------------------------------

def test_case_footprint_counts_what_the_harness_adds(tmp_path):
    """GPU: arrays, two guard bands each, float64 references, each in whole 2 MiB pages, the moats; host: float64
    copies."""
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    case = w.case("odd-97x83x61")
    a, b, c = 97 * 61, 61 * 83, 97 * 83
    guard = lambda n: (max(4096, min(n, 1 << 20)) + 255) // 256 * 256  # agent/worker/case_buffers.py
    pages = lambda n: -(-n // (2 << 20)) * (2 << 20)  # agent/worker/pages.py
    moats = 2 * (8 << 20)  # agent/worker/case_buffers.py MOAT_BYTES, before and after the arrays
    assert case_footprint(w, case, "gpu") == sum(pages(4 * n + 2 * guard(4 * n)) for n in (a, b, c)) + pages(8 * c) + moats
    assert case_footprint(w, case, "host") == (4 + 8) * (a + b) + 2 * 8 * c


def test_case_too_big_for_the_gpu_or_the_host_is_one_line(tmp_path):
    """A case beyond 90 % of the GPU's memory, or 80 % of the host's, names the case and both sizes."""
    w = load_workload(make_sgemm_workload(tmp_path / "w"))
    need = max(case_footprint(w, c, "gpu") for c in w.cases)
    with pytest.raises(SpecError, match=r"cases\[\d+\]: case '[\w-]+' needs .* of GPU memory .* of the GPU's"):
        check_memory(w, gpu_bytes=need, host=False)
    check_memory(w, gpu_bytes=2 * need, host=False)
    with pytest.raises(SpecError, match=r"case 'square-256' needs .* of host memory .* available"):
        check_memory(w, host_bytes=case_footprint(w, w.case("square-256"), "host"))


def test_check_refuses_a_case_beyond_host_memory(tmp_path, capsys):
    """M = 10**9 parses (the arrays are bounded) but no host holds it: check and run say so, exit 2."""
    d = make_sgemm_workload(tmp_path / "w")
    _sub("sizes = { M = 97, N = 83, K = 61 }", "sizes = { M = 1000000000, N = 83, K = 61 }")(d)
    assert main(["check", str(d)]) == 2
    out = capsys.readouterr().out
    assert "FAIL  memory" in out and "case 'odd-97x83x61' needs" in out and "Traceback" not in out
    store = tmp_path / "store"
    assert main(["run", str(d), "--proposer", "tune", "--headless", "--store", str(store)]) == 2
    assert "of host memory" in _one_line(capsys.readouterr().err) and not store.exists()


def test_check_measures_memory_for_the_references_it_runs(tmp_path, capsys):
    """A performance case no host here holds, whose reference check does not compute: a warning naming
    its bytes, and check passes on the correctness case it did compute; run still refuses it."""
    d = make_sgemm_workload(tmp_path / "w", kernels=("naive",))
    _sub("sizes = { M = 256, N = 256, K = 256 }", "sizes = { M = 1000000, N = 1000000, K = 256 }")(d)
    assert main(["check", str(d)]) == 0
    out = capsys.readouterr().out
    assert "ok    memory     largest case checked here, 'odd-97x83x61'" in out
    assert "warn  memory     case 'square-256' needs" in out and "eval and run need a host with that much" in out
    assert "ok    reference  case 'odd-97x83x61'" in out
    assert main(["run", str(d), "--proposer", "tune", "--headless", "--store", str(tmp_path / "store")]) == 2
    assert "of host memory" in _one_line(capsys.readouterr().err)


# -- the reference -----------------------------------------------------------------------------

def _reference(d: Path, body: str) -> None:
    (d / "reference.py").write_text("import os, time\nimport numpy as np\n\n"
                                    f"def reference(A, B, *, M, N, K):\n{body}")


def test_hung_reference_is_killed_in_time(tmp_path):
    """A reference that never returns is killed after --reference-timeout; check exits 2 with one line."""
    d = make_sgemm_workload(tmp_path / "w")
    pids = tmp_path / "pids"
    _reference(d, f"    open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n    time.sleep(10**6)\n")
    env = child_env()
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-P", "-c", "import sys; from warpsmith.agent.cli.commands import main; sys.exit(main(sys.argv[1:]))",
                           "check", str(d), "--reference-timeout", "2"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 2
    assert time.monotonic() - t0 < 60  # one 2 s limit per checked case, not for ever
    assert "FAIL  reference  reference.py did not return within 2 s for case 'odd-97x83x61' " \
           "(raise --reference-timeout or make it faster)" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_eval_with_hung_reference_is_exit_2_before_the_gpu(tmp_path, capsys):
    """eval stops at the reference's time limit with one line and exit 2, GPU or not."""
    d = make_sgemm_workload(tmp_path / "w")
    _reference(d, "    time.sleep(10**6)\n")
    assert main(["eval", str(d), "--reference-timeout", "1"]) == 2
    assert "reference.py did not return within 1 s for case 'odd-97x83x61'" in _one_line(capsys.readouterr().err)


def test_raising_reference_is_one_line_with_type_and_message(tmp_path, capsys):
    """A reference that raises gives its exception type and message, one line, no traceback."""
    d = make_sgemm_workload(tmp_path / "w")
    _reference(d, "    raise KeyError('no such\\nthing')\n")
    w = load_workload(d)
    with pytest.raises(ReferenceFailed) as e:
        compute_reference(w, w.case("odd-97x83x61"), 1)
    assert _one_line(str(e.value)) == "reference.py: reference raised KeyError: 'no such\\nthing' (case 'odd-97x83x61')"
    assert main(["check", str(d)]) == 2
    assert "FAIL  reference  reference.py: reference raised KeyError" in capsys.readouterr().out


@pytest.mark.parametrize("body,says", [
    ("    return None\n", "reference.py: reference returned nothing (None): it must return C (case 'odd-97x83x61')"),
    ("    return {'C': None}\n", "reference.py: reference returned None for C: it must return C (case 'odd-97x83x61')"),
    ("    return (A @ B) * (1 + 1j)\n", "reference.py: output C for case 'odd-97x83x61' is complex (complex128)"),
])
def test_a_reference_returning_none_or_complex_is_named_for_what_it_is(tmp_path, body, says):
    """None is not "1 value(s)"; a complex result is refused rather than cast to its real part."""
    d = make_sgemm_workload(tmp_path / "w")
    _reference(d, body)
    w = load_workload(d)
    with pytest.raises(ReferenceFailed) as e:
        compute_reference(w, w.case("odd-97x83x61"), 1)
    assert _one_line(str(e.value)).startswith(says)


def test_a_byte_order_mark_is_not_a_syntax_error(tmp_path):
    """workload.toml saved by an editor with a UTF-8 BOM loads like the same file without one."""
    d = make_sgemm_workload(tmp_path / "w")
    toml = d / "workload.toml"
    toml.write_bytes(b"\xef\xbb\xbf" + toml.read_bytes())
    assert load_workload(d).name == "sgemm"


def test_a_reference_with_a_byte_order_mark_runs(tmp_path):
    """reference.py saved with a UTF-8 BOM computes the same case as without one."""
    d = make_sgemm_workload(tmp_path / "w")
    reference = d / "reference.py"
    reference.write_bytes(b"\xef\xbb\xbf" + reference.read_bytes())
    w = load_workload(d)
    assert load_reference(ensure_reference(w, w.case("odd-97x83x61"), 1))["C"].shape == (97, 83)


def test_nan_reference_is_refused_naming_output_case_count_and_index(tmp_path):
    """NaN in a reference would let an unwritten (NaN-poisoned) output pass: refused, unless declared."""
    d = make_sgemm_workload(tmp_path / "w")
    _reference(d, "    C = A @ B\n    C[3, 5] = np.nan\n    C[4, :2] = np.inf\n    return C\n")
    w = load_workload(d)
    with pytest.raises(ReferenceFailed) as e:
        ensure_reference(w, w.case("odd-97x83x61"), 1)
    assert _one_line(str(e.value)).startswith("reference.py: output C for case 'odd-97x83x61' has 3 NaN/inf "
                                              "value(s), the first at [3, 5]")
    _sub('shape = ["M", "N"]', 'shape = ["M", "N"]\nallow_nonfinite = true')(d)
    w = load_workload(d)
    ref = load_reference(ensure_reference(w, w.case("odd-97x83x61"), 1))["C"]
    assert (ref[3, 5] != ref[3, 5]) and ref[4, 0] == float("inf")


def test_reference_process_gets_no_secrets(tmp_path, monkeypatch):
    """The reference's process environment holds no API key, token or secret."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nope")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-nope")
    monkeypatch.setenv("MY_SECRET_THING", "nope")
    d = make_sgemm_workload(tmp_path / "w")
    seen = tmp_path / "env"
    _reference(d, f"    open({str(seen)!r}, 'w').write(' '.join(os.environ))\n    return A @ B\n")
    w = load_workload(d)
    compute_reference(w, w.case("odd-97x83x61"), 1)
    names = seen.read_text().split()
    assert "PATH" in names and not {"OPENAI_API_KEY", "GITHUB_TOKEN", "MY_SECRET_THING"} & set(names)


# -- the examples ------------------------------------------------------------------------------

@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").iterdir()
                                           if (p / "workload.toml").is_file()))
def test_examples_pass_check(example, capsys):
    """Every shipped example passes `warpsmith check` (spec, memory, references, compiles for sm_90)."""
    assert main(["check", str(ROOT / "examples" / example)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "ok    compile" in out and "ok    reference" in out


@pytest.mark.parametrize("command", ["resume", "diff", "export"])
def test_session_ids_cannot_leave_the_store(command, tmp_path, capsys):
    """A session id such as ../../x names no path outside the store: one line, exit 2."""
    (tmp_path / "x").mkdir()
    extra = {"resume": [], "diff": ["1"], "export": [str(tmp_path / "out")]}[command]
    assert main([command, "../../x", *extra, "--store", str(tmp_path / "store")]) == 2
    assert "no session '../../x'" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("signature,problem", [
    ("def baseline(x, weight, *, rows, cols):", "does not accept eps"),          # the scalar the worker passes
    ("def baseline(x, w, *, rows, cols, eps):", "does not accept weight"),
    ("def baseline(x, weight, *, rows, cols, eps, CAUSAL):", "asks for CAUSAL, which is neither"),
    ("def run(x, weight, *, rows, cols, eps):", "must define baseline(x, weight, *, rows, cols, eps)"),
])
def test_a_torch_baseline_that_the_worker_cannot_call_is_refused_before_the_gpu(tmp_path, signature, problem):
    """The worker calls baseline(**inputs, **scalars): the file's signature is checked statically
    (ast, never imported) when the workload loads."""
    import shutil

    from workload_factory import ROOT
    shutil.copytree(ROOT / "examples" / "rmsnorm_bf16", tmp_path / "w")
    (tmp_path / "w" / "torch_baseline.py").write_text(f"{signature}\n    return x\n")
    with pytest.raises(SpecError, match="baseline.torch") as e:
        load_workload(tmp_path / "w")
    assert problem in str(e.value)


def test_check_that_computed_no_reference_fails_unless_told(tmp_path, capsys):
    """A workload whose every case is above the CPU budget (no correctness case, no kernels yet) checks
    nothing: check says so and exits 2; --allow-no-reference passes, saying so in one line."""
    from workload_factory import make_from_scratch_workload
    d = make_from_scratch_workload(tmp_path / "w")
    toml = d / "workload.toml"
    text = toml.read_text().replace('name = "odd-97x83x61"\nrole = "correctness"\nsizes = { M = 97, N = 83, K = 61 }\n\n'
                                    '[[cases]]\n', "")
    toml.write_text(text.replace("{ M = 256, N = 256, K = 256 }", "{ M = 4096, N = 4096, K = 4096 }"))
    assert main(["check", str(d)]) == 2
    out = capsys.readouterr().out
    assert "FAIL  reference  no case's reference was computed here" in out and "--allow-no-reference" in out
    assert main(["check", str(d), "--allow-no-reference"]) == 0
    assert "skip  reference  no case's reference was computed here (--allow-no-reference)" in capsys.readouterr().out
