"""Timing statistics and the score."""

import pytest

from warpsmith.agent.evaluate.stats import TimingStats, geomean


def test_stats_of_samples():
    """Median, min, p10/p90 and CV come from the samples as given."""
    s = TimingStats.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.n, s.median_ms, s.min_ms) == (5, 3.0, 1.0)
    assert s.p10_ms == pytest.approx(1.4) and s.p90_ms == pytest.approx(61.6)
    assert s.cv == pytest.approx(43.617 / 22.0, rel=1e-4)  # sample std (ddof=1) / mean


def test_geomean_is_the_score():
    """The score is the geometric mean of the performance medians."""
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geomean([])
