"""benchmarks/backend_replay.py on this machine: the sequence read from a kept session's
records, written and read back, and the passes run with EvaluatorDouble standing in for
both backends (on a GPU, the script itself: docs/performance.md, "The Ray backend against local")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from evaluator_double import EvaluatorDouble, knob_score
from workload_factory import make_sgemm_workload

from warpsmith.agent.spec.workload import load_workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import backend_replay  # noqa: E402


def kept_session(root: Path, rows: list[tuple[str, str, dict, float | None]]) -> Path:
    """A search_speed.py --keep folder: one session, an attempt a row (name, status, defines, best_ms)."""
    attempts = root / "sessions" / "20261206-000000-sgemm-abcdef" / "attempts"
    for i, (name, status, defines, best_ms) in enumerate(rows, start=1):
        d = attempts / f"{i:03d}"
        d.mkdir(parents=True)
        d.joinpath("attempt.json").write_text(json.dumps({"iteration": i, "name": name, "proposer": "tune",
                                                          "status": status, "defines": defines}))
        if best_ms is not None:
            d.joinpath("samples.json").write_text(json.dumps({"status": status, "best_ms": best_ms,
                                                              "case_best_ms": {"big": best_ms}}))
    return root


def test_the_sequence_keeps_the_attempts_that_reached_the_gpu_with_their_screen_inputs(tmp_path):
    records = kept_session(tmp_path / "kept", [
        ("tiled@1234abcd[BM=64]", "ok", {"BM": 64}, None),
        ("tiled@1234abcd[BM=128]", "compile_failed", {"BM": 128}, None),  # never reached the GPU: left out
        ("tiled@1234abcd[BM=32]", "rejected_early", {"BM": 32}, 1.5),
        ("tiled@1234abcd[BM=16]", "wrong_answer", {"BM": 16}, 1.25),
        ("tiled@1234abcd[BM=8]", "wrong_answer", {"BM": 8}, None),  # no samples kept: the bests before
    ])
    steps = backend_replay.read_records(records)
    assert [(s.kernel, s.defines, s.best_ms, s.recorded) for s in steps] == [
        ("tiled", {"BM": 64}, None, "ok"), ("tiled", {"BM": 32}, 1.5, "rejected_early"),
        ("tiled", {"BM": 16}, 1.25, "wrong_answer"), ("tiled", {"BM": 8}, 1.25, "wrong_answer")]
    assert steps[1].case_best_ms == {"big": 1.5}
    written = tmp_path / "sequence.json"
    backend_replay.write_sequence(steps, written)
    assert backend_replay.read_sequence(written) == steps
    assert len(written.read_text().splitlines()) == len(steps) + 2  # an attempt a line


def test_a_sequence_of_a_kernel_the_workload_lacks_is_refused_in_one_line(tmp_path):
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    with pytest.raises(SystemExit, match="has no kernel warptile"):
        backend_replay.candidates_of(workload, [backend_replay.Step("warptile", {}, None, None, "ok")])


def test_each_backend_runs_the_whole_sequence_and_the_table_compares_them(tmp_path, monkeypatch):
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    kernel = next(name for name, k in workload.kernels.items() if k.knobs())
    best = knob_score({"BM": 128, "BN": 128})
    steps = [backend_replay.Step(kernel, {"BM": 128, "BN": 128}, None, None, "ok"),
             backend_replay.Step(kernel, {"BM": 32, "BN": 32}, best, None, "rejected_early")]
    opened: list[str] = []

    def open_double(w, options, log_dir):  # the double in place of the GPU evaluator and of Ray's actor
        opened.append(options.backend)
        return EvaluatorDouble(w)

    monkeypatch.setattr("warpsmith.agent.evaluate.backend_choice.open_backend", open_double)
    candidates = backend_replay.candidates_of(workload, steps)
    passes = [backend_replay.run_pass(b, workload, candidates, steps, 1, load=1) for b in ("local", "ray", "ray", "local")]
    assert opened == ["local", "ray", "ray", "local"]
    assert all(p.verdicts == ["ok", "rejected_early"] and len(p.seconds) == 2 for p in passes)
    lines = backend_replay.report(passes, steps)
    assert lines[2].startswith("| local | 2 | 2 |") and lines[3].startswith("| ray | 2 | 2 |")
    assert "Ray over local:" in lines[4]
    assert lines[5].startswith("verdicts as the first pass's: 2 of 2, 2 of 2, 2 of 2; as recorded in the session: 2 of 2")


def test_the_compile_load_keeps_real_compiles_going_until_it_is_stopped(tmp_path):
    """What stands in for a tune session's compile-ahead during the passes: uncached NVRTC compiles, one after
    another on each thread, until the block ends; its threads are gone after it."""
    import time
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    kernel = next(name for name, k in workload.kernels.items() if k.knobs())
    candidates = backend_replay.candidates_of(workload, [backend_replay.Step(kernel, {}, None, None, "ok")])
    with backend_replay.CompileLoad(candidates, 2, "sm_90") as load:
        deadline = time.monotonic() + 300  # a bound, not a timing: it waits for the third compile
        while load.compiles < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert load.compiles >= 3 and not any(w.is_alive() for w in load._workers)
