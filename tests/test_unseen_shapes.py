"""benchmarks/unseen_shapes.py --summarize without a GPU: the table from bench JSONs (ours,
its TFLOP/s, the fastest library, the ratio, % of the floor) and the bars it checks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("unseen_shapes", ROOT / "benchmarks" / "unseen_shapes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


us = _script()


def _bench(tmp_path, workload: str, ours: dict[str, float], library: dict[str, float], pct: float) -> Path:
    """A `bench --json` file of one workload: the dispatch and one baseline, rows for the dispatch."""
    entry = lambda name, role, medians: {"name": name, "role": role, "status": "ok", "medians": medians,
                                         "score_ms": min(medians.values()), "detail": ""}
    data = {"workload": workload, "gpu": "NVIDIA H100 80GB HBM3", "session": "s", "tune_iterations": 3,
            "tune_wall_s": 1.0, "ceilings": "measured", "entries": [entry("dispatch: 2 variants", "dispatch", ours),
                                                                   entry("cublas", "baseline", library)],
            "rows": [{"case": c, "role": "dispatch", "pct_of_floor": pct, "tflops": 100.0 + i}
                     for i, c in enumerate(ours)]}
    path = tmp_path / f"{workload}.json"
    path.write_text(json.dumps([data]))
    return path


def test_the_table_gives_tflops_and_every_bar_met(tmp_path, capsys):
    path = _bench(tmp_path, "sgemm", {"a": 1.0, "b": 2.0}, {"a": 1.2, "b": 2.4}, 0.5)
    assert us.summarize([path]) == 0
    out = capsys.readouterr().out
    assert "| sgemm | a | dispatch | 1.0000 | 100.0 | cublas | 1.2000 | 1.200x | 50% |" in out
    assert "| sgemm | geomean | | | | | | 1.200x | |" in out and "every bar met" in out


def test_a_shape_behind_the_library_and_a_norm_under_the_floor_miss_their_bars(tmp_path, capsys):
    paths = [_bench(tmp_path, "sgemm", {"a": 1.0, "b": 1.0}, {"a": 1.3, "b": 0.9}, 0.5),
             _bench(tmp_path, "softmax", {"r": 1.0}, {"r": 1.5}, 0.8)]
    assert us.summarize(paths) == 1
    out = capsys.readouterr().out
    assert "- sgemm b: 0.900x the fastest library, under 1.00x" in out
    assert "- softmax r: 80% of the floor, under 90%" in out
