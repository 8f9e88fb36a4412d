"""Workload directories for tests, made from the shipped examples."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SGEMM = ROOT / "examples" / "sgemm"

SMALL_CASES = """
[[cases]]
name = "odd-97x83x61"
role = "correctness"
sizes = { M = 97, N = 83, K = 61 }

[[cases]]
name = "square-256"
role = "performance"
sizes = { M = 256, N = 256, K = 256 }
"""


def make_sgemm_workload(directory: Path, cases: str = SMALL_CASES, tolerance: str = "allow_tf32 = false",
                        kernels: tuple[str, ...] = ("naive", "tiled")) -> Path:
    """A copy of the sgemm example with small cases, its naive and tiled kernels (or
    those named), and another tolerance if asked."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in [*SGEMM.glob("*.cu"), *SGEMM.glob("*.py")]:
        shutil.copy(path, directory / path.name)
    text = (SGEMM / "workload.toml").read_text()
    text = text.split("# Correctness:")[0] + cases
    # The tests were written against the naive and tiled kernels: other shipped kernels stay out,
    # with the steps of a program kernel.
    kept = "|".join(kernels)
    text = re.sub(rf"\[kernels\.(?!(?:{kept})\])\w+\]\n(?:[^\[\n].*\n|\n)*", "", text)
    text = re.sub(rf"\[\[kernels\.(?!(?:{kept})\.)\w+\.steps\]\]\n(?:[^\[\n].*\n|\n)*", "", text)
    if not re.search(r'^tune = "(?:' + kept + ')"', text, re.M):  # the example's tuned kernel was left out
        text = re.sub(r'^tune = ".*\n', "", text, flags=re.M)
    text = text.replace("allow_tf32 = false", tolerance)
    (directory / "workload.toml").write_text(text)
    return directory


def make_from_scratch_workload(directory: Path) -> Path:
    """The small sgemm workload without kernels: [start] from_scratch = true (the llm
    proposer writes the first kernel)."""
    make_sgemm_workload(directory)
    for path in directory.glob("*.cu"):
        path.unlink()
    text = (directory / "workload.toml").read_text()
    text = re.sub(r"\[start\]\nkernel = \"naive\"\n", "[start]\nfrom_scratch = true\n", text)
    text = re.sub(r"\[kernels\.\w+\]\n(?:[^\[\n].*\n|\n)*", "", text)
    (directory / "workload.toml").write_text(text)
    return directory


def evaluate_on_correctness_cases(workload: str, kernel: str, knobs: dict[str, int], extra: tuple = ()):
    """A shipped kernel at these knobs evaluated on a real GPU over the example's correctness
    cases and `extra` ones (Case objects), briefly timed; the result and the cases it had to pass."""
    from dataclasses import replace

    from warpsmith.agent.evaluate.evaluator import Evaluator
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.spec.workload import load_workload
    from warpsmith.agent.worker.protocol import TimingConfig

    w = load_workload(ROOT / "examples" / workload)
    w = replace(w, cases=tuple(c for c in w.cases if not c.timed) + tuple(extra))
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=1, repetitions=3), kernel_timeout_s=10.0)) as ev:
        return ev.evaluate(Candidate.from_spec(w.kernels[kernel], knobs)), {c.name for c in w.cases}
