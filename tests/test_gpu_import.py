"""On a real GPU, with PyTorch: the ten examples/kernelbench problems imported as in their
README; each starting kernel passes every check on every case and is timed, and the
problem's own Model runs as the PyTorch eager baseline (and torch.compile for layernorm, whose
parameters are bound to the case's buffers: each compile costs tens of seconds per shape),
validated the same way."""

from __future__ import annotations

import shlex

import pytest
from test_import import README_COMMANDS, _run_readme_command, needs_torch

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig

pytestmark = [pytest.mark.gpu, needs_torch]


@pytest.mark.parametrize("command", README_COMMANDS, ids=[shlex.split(c)[3] for c in README_COMMANDS])
def test_imported_workload_evaluates_beside_its_pytorch_model(command, tmp_path):
    """Starting kernel ok on every case; the Model in torch eager (and torch.compile) ok too."""
    w = load_workload(_run_readme_command(command, tmp_path))
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=3, repetitions=20))) as ev:
        r = ev.evaluate(Candidate.from_spec(w.start_kernel))
        assert r.ok, r.detail
        assert ev.baseline_kinds() == ["torch_eager", "torch_compile"]
        for kind in ev.baseline_kinds() if w.name == "layernorm" else ["torch_eager"]:
            b = ev.baseline(kind=kind)
            assert b is not None and b.ok, (kind, b.detail if b else "no baseline")
    print(w.name, {c.case: round(c.timing.median_ms, 4) for c in r.cases if c.timing}, "vs eager", b.score_ms)
