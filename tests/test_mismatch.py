"""Mismatch reports and their pattern hints, for the proposer."""

import numpy as np
import pytest

from warpsmith.agent.worker.mismatch import build_report, pattern_hint
from warpsmith.agent.worker.poison import Poisons


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


@pytest.mark.parametrize("nan_first", [True, False])
def test_unwritten_block_is_named_whatever_the_poison(nan_first):
    """An unwritten corner block still holding the fill's word (NaN-shaped or huge finite)
    is reported as never written, as a block of rows and columns."""
    poisons = Poisons()
    poisons._nan_next = not nan_first  # next_fill() flips it: the first fill is NaN-shaped or finite
    poisons.next_fill()
    word = poisons.word("float32")
    ref, out = ref_and_out()
    out[96:, 64:] = np.frombuffer(np.uint32(word).tobytes(), np.float32)[0]
    assert np.isnan(out[99, 79]) == nan_first
    r = build_report("C", out, ref, 1e-5, word)
    assert r.unwritten == 4 * 16 == r.mismatches
    assert "never written" in r.hint and "only columns >= 64" in r.hint and "full block" in r.hint


def test_unwritten_integers_and_doubles_hold_the_word():
    """Integer and float64 outputs: the word (repeated in 8-byte elements) marks unwritten ones."""
    word = 0x9ABCDEF1
    ref = np.arange(64, dtype=np.int64).reshape(8, 8)
    out = ref.copy()
    out[:, 6:] = np.frombuffer(np.uint32(word).tobytes() * 2, np.int64)[0]
    out[0, 0] = 99  # wrong but written
    r = build_report("C", out, ref, 0.0, word)
    assert (r.mismatches, r.unwritten) == (17, 16)
    ref64 = np.linspace(-1, 1, 64).reshape(8, 8)
    out64 = ref64.copy()
    out64[5:] = np.frombuffer(np.uint32(0xFC123456).tobytes() * 2, np.float64)[0]
    assert build_report("C", out64, ref64, 1e-9, 0xFC123456).unwritten == 24


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
