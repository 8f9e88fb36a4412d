"""Kernels and settings written for some sizes (a kernel's `suits`, a listed config's `when`)
take the tuner's turns for a case of those sizes first: a short search over many shapes has
few turns per kernel, and the decode kernel for M = 16 or the narrow tile for N = 32 must not
wait behind kernels written for square shapes. The rules are read from the sgemm workload as
shipped; parsing refuses a range it cannot use."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_tune import _sgemm_best, _tf32x3_attempts
from workload_factory import SGEMM

from warpsmith.agent.proposers.base import ProposalContext
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import Case, SpecError

SHAPES = {"square-2048": {"M": 2048, "N": 2048, "K": 2048}, "decode-16x4096x4096": {"M": 16, "N": 4096, "K": 4096},
          "tall-8192x32x4096": {"M": 8192, "N": 32, "K": 4096}}


def _first_turn(focus: str):
    """The sgemm workload on SHAPES, tf32x3 having had its three turns and `focus` 4x behind
    everywhere else: the first other kernel's turn and its proposal."""
    w = load_workload(SGEMM)
    w = dataclasses.replace(w, cases=[c for c in w.cases if c.role != "performance"] +
                            [Case(n, "performance", s) for n, s in SHAPES.items()])
    history = [a.model_copy(update={"cases": [c.model_copy(update={"median_ms": 4.0 if c.case == focus else 1.0})
                                              for c in a.cases]}) for a in _tf32x3_attempts(w, 3)]
    best = _sgemm_best(w, {n: (4.0 if n == focus else 1.0) for n in SHAPES})
    ctx = ProposalContext(w, DeviceFacts(), 4, "optimise", history, best, None)
    tuner = TuneProposer(0, ahead=0)
    return w, tuner._other_turn(ctx), tuner.propose(ctx).spec


def test_a_decode_case_gives_its_first_turn_to_the_kernel_that_suits_few_rows():
    w, turn, spec = _first_turn("decode-16x4096x4096")
    assert w.kernels["colstream"].suits == {"M": (1, 16)}
    assert turn == ("colstream", "decode-16x4096x4096")
    assert spec.kernel == "colstream"


def test_a_few_columns_case_gets_the_narrow_tile_before_the_kernels_defaults():
    w, turn, spec = _first_turn("tall-8192x32x4096")
    narrow = w.kernels["tf32x3_splitk"].configs_written_for(SHAPES["tall-8192x32x4096"])
    assert narrow and narrow[0]["BN"] == 32
    assert turn == ("tf32x3_splitk", "tall-8192x32x4096")
    assert spec.kernel == "tf32x3_splitk" and {k: spec.defines[k] for k in narrow[0]} == narrow[0], spec.name


def test_a_square_case_is_served_as_before():
    """No kernel is written for a square case: the listed-settings rule picks (tf32x3_splitk,
    whose unconditional settings come first), and the narrow tile is not among them."""
    w, turn, spec = _first_turn("square-2048")
    assert turn is not None and not w.kernels[turn[0]].written_for(SHAPES["square-2048"])
    assert spec.defines.get("BN") != 32 or spec.kernel != "tf32x3_splitk"


@pytest.mark.parametrize("table,where,says", [
    ('suits = { Q = [1, 64] }', "kernels.naive.suits.Q", "not a size of the workload"),
    ('suits = { M = [64, 1] }', "kernels.naive.suits.M", "0 <= lowest <= highest"),
    ('suits = { M = 64 }', "kernels.naive.suits.M", "expected [lowest, highest]"),
    ('suits = "M <= 64"', "kernels.naive.suits", "expected a table of size"),
])
def test_a_range_it_cannot_use_is_refused_naming_the_key(tmp_path: Path, table, where, says):
    text = (Path(SGEMM) / "workload.toml").read_text().replace(
        '[kernels.naive]\nsource = "naive.cu"', f'[kernels.naive]\nsource = "naive.cu"\n{table}', 1)
    for f in Path(SGEMM).iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "workload.toml").write_text(text)
    with pytest.raises(SpecError) as e:
        load_workload(tmp_path)
    assert where in str(e.value) and says in str(e.value)


def test_a_configs_when_is_refused_like_a_suits(tmp_path: Path):
    text = (Path(SGEMM) / "workload.toml").read_text().replace("when = { N = [1, 32] }", "when = { P = [1, 32] }")
    for f in Path(SGEMM).iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "workload.toml").write_text(text)
    with pytest.raises(SpecError) as e:
        load_workload(tmp_path)
    assert "kernels.tf32x3_splitk.configs[2].when.P" in str(e.value) and "not a size" in str(e.value)
