"""Mismatch reports and their pattern hints, for the proposer."""

import numpy as np

from agent.worker.mismatch import build_report, pattern_hint


def ref_and_out(shape=(100, 80)):
    rng = np.random.default_rng(0)
    ref = rng.uniform(-1, 1, shape)
    return ref, ref.astype(np.float32).copy()


def test_rows_beyond_a_tile_are_named():
    """Rows >= 64 wrong reads 'only rows >= 64 wrong'."""
    ref, out = ref_and_out()
    out[64:] += 1
    r = build_report("C", out, ref, 1e-5)
    assert r.mismatches == 36 * 80
    assert "only rows >= 64 wrong (of 100)" in r.hint
    assert "wrong in every one of the 80 columns" in r.hint


def test_unwritten_block_is_named():
    """An unwritten corner block is reported as never written, as a block of rows and columns."""
    ref, out = ref_and_out()
    out[96:, 64:] = np.nan
    r = build_report("C", out, ref, 1e-5)
    assert r.unwritten == 4 * 16 == r.mismatches
    assert "never written" in r.hint and "only columns >= 64" in r.hint and "full block" in r.hint
    assert "got nan" in r.text()


def test_first_indices_and_errors_are_reported():
    """The report lists the first wrong indices with got/expected and the max errors."""
    ref, out = ref_and_out((10, 10))
    out[3, 4] = ref[3, 4] + 0.5
    r = build_report("C", out, ref, 1e-5)
    assert r.mismatches == 1 and r.first[0][0] == (3, 4)
    assert abs(r.max_abs_error - 0.5) < 1e-6
    assert "C[3, 4]: got" in r.text()


def test_strided_and_everything_patterns():
    """Every 4th column wrong, and every element wrong, each get their own words."""
    bad = np.zeros((8, 16), bool)
    bad[:, ::4] = True
    assert "every 4th of the columns from 0" in pattern_hint(bad, 0)
    assert "every element is wrong" in pattern_hint(np.ones((4, 4), bool), 0)
