"""The warpsmith command line, without a GPU."""

import os

import pytest
from package_env import child_env
from workload_factory import SGEMM, make_sgemm_workload

from warpsmith.agent.cli.commands import main


def test_eval_with_broken_spec_fails_before_gpu_work(tmp_path, capsys):
    """A broken workload gives exit 2 and one line naming file and key, GPU or not."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "workload.toml").write_text((d / "workload.toml").read_text().replace('dtype = "float32"', 'dtype = "f32"', 1))
    assert main(["eval", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "workload.toml: params[0].dtype:" in err


def test_eval_with_unknown_kernel_is_a_spec_error(capsys):
    """--kernel naming neither a file nor a workload kernel is refused before GPU work."""
    assert main(["eval", str(SGEMM), "--kernel", "nope"]) == 2
    assert "neither a file nor one of the workload's kernels (naive, tiled, warptile, splitk, splitk_warptile, tf32x3, tf32x3_splitk, tf32x3_padded, colstream)" in capsys.readouterr().err


def test_eval_shapes_file_without_the_workload_is_refused_before_gpu_work(tmp_path, capsys):
    """eval --shapes takes the file's shapes for this workload; a file with none for it is one line, exit 2."""
    f = tmp_path / "shapes.toml"
    f.write_text('[[softmax]]\nname = "long"\nsizes = { rows = 4, cols = 100000 }\n')
    assert main(["eval", str(SGEMM), "--shapes", str(f), "--no-baseline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no [[sgemm]] shapes for workload sgemm" in err


def test_eval_without_gpu_is_one_clear_line(capsys):
    """On a machine without a GPU, eval exits 3 with one line pointing at doctor."""
    from warpsmith.agent.runtime import native
    try:
        native.open_device()
        pytest.skip("a GPU is present")
    except native.CudaError:
        pass
    assert main(["eval", str(SGEMM), "--no-baseline"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no usable GPU" in err and "warpsmith doctor" in err


def test_compile_with_arch_needs_no_gpu(capsys):
    """compile --arch sm_90 -D... prints the ptxas log and the entry's resources."""
    assert main(["compile", str(SGEMM / "tiled.cu"), "--arch", "sm_90", "--entry", "sgemm_tiled", "-D", "BM=128"]) == 0
    out = capsys.readouterr().out
    assert "sgemm_tiled:" in out and "registers" in out and "-> sm_90 CUBIN" in out


def test_compile_error_shows_log_and_fails(tmp_path, capsys):
    """A kernel that does not compile prints NVRTC's log with line numbers and exits 1."""
    f = tmp_path / "bad.cu"
    f.write_text('extern "C" __global__ void k() {\n  nope();\n}\n')
    assert main(["compile", str(f), "--arch", "sm_90"]) == 1
    captured = capsys.readouterr()
    assert "bad.cu(2): error" in captured.out and "NVRTC_ERROR_COMPILATION" in captured.err


def test_doctor_reports_key_presence_never_its_value(monkeypatch, capsys):
    """doctor says the API key is set without printing it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-do-not-print-0123456789")
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert "OPENAI_API_KEY set" in out and "sk-test" not in out
    assert "NVRTC" in out and "13." in out
    if not os.path.exists("/dev/nvidia0"):
        assert code == 1 and "GPU            none usable" in out


def _skip_with_a_gpu():
    from warpsmith.agent.runtime import native
    try:
        native.open_device()
        pytest.skip("a GPU is present")
    except native.CudaError:
        pass


@pytest.mark.parametrize("command", [["run", "--proposer", "tune", "--budget", "2", "--headless"],
                                     ["bench", "--budget", "2"], ["bench", "--budget", "0"]])
def test_no_gpu_is_exit_3_one_line_and_nothing_left_behind(tmp_path, capsys, command):
    """run and bench with no GPU: exit 3 (as eval), one line, and no session folder, MLflow run or store."""
    _skip_with_a_gpu()
    store = tmp_path / "store"
    assert main([command[0], str(SGEMM), *command[1:], "--store", str(store)]) == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no usable GPU" in err and "warpsmith doctor" in err
    assert not store.exists()


def test_help_shows_defaults(capsys):
    """run --help names the default model, budget and store; bench and eval theirs."""
    for argv, shown in ((["run", "--help"], ["default: gpt-5-mini", "(default: 30)", "mlruns"]),
                        (["bench", "--help"], ["(default: 40)"]), (["eval", "--help"], ["repetitions REPETITIONS default: 100"])):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        assert all(s in out for s in shown), (argv, out)


def test_run_with_broken_workload_fails_before_any_session(tmp_path, capsys):
    """A broken spec is refused by `run` with the same one line as `eval`, and no session is created."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "workload.toml").write_text((d / "workload.toml").read_text().replace("[[cases]]", "[[casez]]", 1))
    assert main(["run", str(d), "--store", str(tmp_path / "store")]) == 2
    assert "workload.toml: casez: unknown key" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_run_llm_without_key_says_what_to_do(tmp_path, monkeypatch, capsys):
    """`run --proposer llm` with no key and no base URL: exit 2 with one line, no session created."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["run", str(SGEMM), "--proposer", "llm", "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "OPENAI_API_KEY" in err and "--proposer tune" in err
    assert not (tmp_path / "store").exists()


def test_run_llm_with_unreachable_server_is_one_line_before_any_session(tmp_path):
    """run --proposer llm --base-url nobody listens on: exit 2 at once, one line with the URL, no
    traceback, no session created (the reachability check comes before the GPU set-up)."""
    import socket
    import subprocess
    import sys
    from pathlib import Path
    with socket.socket() as s:  # a closed port: bound, then released
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    root = Path(__file__).resolve().parents[1]
    store = tmp_path / "store"
    done = subprocess.run([sys.executable, "-P", "-m", "warpsmith.tui", "run", str(make_sgemm_workload(tmp_path / "w")), "--proposer",
                           "llm", "--base-url", url, "--headless", "--store", str(store)], capture_output=True,
                          text=True, cwd=root, env=child_env(OPENAI_API_KEY="sk-x"),
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"warpsmith: error: cannot reach the model server at {url} (connection refused); "
                           "check --base-url or start the server\n")
    assert not (store / "sessions").exists()


def test_resume_llm_with_unreachable_server_is_one_line(tmp_path, capsys):
    """resume of an llm session whose --base-url server is down: exit 2, one line naming it, the
    session left as it was."""
    import socket

    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import SessionInfo, session_dir
    from warpsmith.agent.proposers.choice import ProposerChoice
    with socket.socket() as s:  # a closed port: bound, then released
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    directory = session_dir(tmp_path / "store", "s1")
    directory.mkdir(parents=True)
    SessionInfo("s1", str(make_sgemm_workload(tmp_path / "w")), SearchOptions(ProposerChoice("llm", base_url=url), 3),
                status="paused").save(directory)
    assert main(["resume", "s1", "--store", str(tmp_path / "store"), "--headless", "--no-tracking"]) == 2
    assert capsys.readouterr().err == (f"warpsmith: error: cannot reach the model server at {url} (connection refused); "
                                       "check --base-url or start the server\n")
    assert SessionInfo.load(directory).status == "paused"


def test_runs_takes_a_workload_directory_or_its_toml(tmp_path, capsys):
    """`runs examples/sgemm` (or its workload.toml) lists the sgemm sessions, as `runs sgemm` does."""
    from warpsmith.agent.tracking.tracker import Tracker
    store = tmp_path / "store"
    Tracker(store).start("sgemm", "sgemm-s1", {"proposer": "tune"})
    Tracker(store).start("other", "other-s1", {"proposer": "tune"})
    listed = []
    for given in ("sgemm", str(SGEMM), str(SGEMM / "workload.toml")):
        assert main(["runs", given, "--store", str(store)]) == 0
        listed.append(capsys.readouterr().out)
    assert all("sgemm-s1" in out and "other-s1" not in out for out in listed), listed


def test_runs_without_a_store_creates_none(tmp_path, capsys):
    """A read-only command in a fresh checkout says there is nothing yet and writes nothing."""
    store = tmp_path / "mlruns"
    assert main(["runs", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("no runs yet: no MLflow store at")
    assert main(["runs", "--store", str(store), "--attempts", "s1"]) == 2
    assert "no MLflow run for session s1" in capsys.readouterr().err
    assert not store.exists() and list(tmp_path.iterdir()) == []


def test_missing_torch_is_one_line_naming_the_lost_baselines(monkeypatch, capsys):
    """eval of a workload with PyTorch baselines, torch not importable: one line saying which
    baselines are left out and `pip install torch`, then the usual table (GPU stand-in)."""
    from evaluator_double import EvaluatorDouble

    from warpsmith.agent.worker import torch_baseline

    class EvaluatorInCli(EvaluatorDouble):
        def __init__(self, workload, *args, **kwargs):
            super().__init__(workload)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()
    monkeypatch.setattr(torch_baseline, "torch_available", lambda: False)
    monkeypatch.setattr("warpsmith.agent.evaluate.evaluator.Evaluator", EvaluatorInCli)
    assert main(["eval", str(SGEMM)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "PyTorch" in line]
    assert notes == ["warpsmith: note: PyTorch is not installed, so the PyTorch eager and torch.compile baselines "
                     "are left out; `pip install torch` adds them"]
    assert main(["eval", str(SGEMM), "--no-baseline"]) == 0
    assert "PyTorch" not in capsys.readouterr().err


def test_missing_torch_line_says_when_nothing_is_left_to_compare(monkeypatch):
    """A workload whose only baseline is PyTorch's is named: it has no baseline without torch."""
    from warpsmith.agent.spec.workload import load_workload
    from warpsmith.agent.worker import torch_baseline
    monkeypatch.setattr(torch_baseline, "torch_available", lambda: False)
    line = torch_baseline.torch_missing_line([load_workload(SGEMM.parent / "rowsum")])
    assert "rowsum then has no baseline to compare with" in line and "pip install torch" in line
    monkeypatch.setattr(torch_baseline, "torch_available", lambda: True)
    assert torch_baseline.torch_missing_line([load_workload(SGEMM)]) is None


def test_check_stops_at_the_first_reference_failure(tmp_path, capsys):
    """A reference that hangs costs one --reference-timeout, not one per case: exit 2 at the first."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "reference.py").write_text("import time\n\ndef reference(A, B, M, N, K):\n    time.sleep(1000)\n")
    assert main(["check", str(d), "--reference-timeout", "1"]) == 2
    out = capsys.readouterr().out
    assert out.count("FAIL  reference") == 1 and "did not return within 1 s" in out
    assert "not tried after the first failure" in out


def test_a_detached_child_of_the_reference_neither_holds_the_answer_back_nor_outlives_it(tmp_path, capsys):
    """reference.py starts a process in its own session that keeps the answer's pipe open: each
    case's reference still returns at once, and nothing it started is left running."""
    import os
    d = make_sgemm_workload(tmp_path / "w")
    marker = f"warpsmith-detached-{os.getpid()}"
    (d / "reference.py").write_text(
        "import subprocess, sys\nimport numpy as np\n\n"
        "def reference(A, B, M, N, K):\n"
        f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'], start_new_session=True)\n"
        "    return A @ B\n")
    assert main(["check", str(d), "--reference-timeout", "30", "--allow-no-reference"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "FAIL" not in out and "ok    reference" in out
    left = [p for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _cmdline(p)]
    assert left == []


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_reference_killed_by_signal_9_is_named_as_out_of_memory(tmp_path, capsys):
    """The OOM killer's SIGKILL (a reference dying of signal 9 stands in for it) is said as such,
    with what to do, not as a bare signal number."""
    d = make_sgemm_workload(tmp_path / "w")
    (d / "reference.py").write_text("import os, signal\n\ndef reference(A, B, M, N, K):\n"
                                    "    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert main(["check", str(d)]) == 2
    out = capsys.readouterr().out
    assert "killed (signal 9)" in out and "out-of-memory killer" in out and "make the case smaller" in out
