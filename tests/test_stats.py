"""stats: summaries of step samples, and the spread warning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from floorline.core import stats


def test_summarize_known_samples():
    x = [float(i) for i in range(1, 11)]  # 1..10
    s = stats.summarize(x)
    assert s["step_ms_median"] == 5.5
    assert s["step_ms_p10"] == pytest.approx(1.9)  # numpy's linear interpolation: 1 + 0.1 * 9
    assert s["step_ms_p90"] == pytest.approx(9.1)
    assert s["step_ms_p99"] == pytest.approx(9.91)
    assert s["step_ms_mean"] == 5.5
    assert s["step_ms_min"] == 1.0 and s["step_ms_max"] == 10.0
    assert s["step_ms_stdev"] == pytest.approx(math.sqrt(sum((v - 5.5) ** 2 for v in x) / 9))  # sample stdev


def test_summarize_matches_numpy_on_random_samples():
    rng = np.random.default_rng(0)
    x = list(rng.lognormal(mean=1.0, sigma=0.3, size=37))
    s = stats.summarize(x)
    assert s["step_ms_median"] == pytest.approx(float(np.median(x)))
    assert s["step_ms_p90"] == pytest.approx(float(np.percentile(x, 90)))
    assert s["step_ms_p10"] == pytest.approx(float(np.percentile(x, 10)))
    assert s["step_ms_stdev"] == pytest.approx(float(np.std(x, ddof=1)))
    assert all(isinstance(v, float) for v in s.values())


def test_summarize_does_not_drop_outliers():
    s = stats.summarize([1.0, 1.0, 1.0, 1.0, 100.0])
    assert s["step_ms_max"] == 100.0
    assert s["step_ms_mean"] == pytest.approx(20.8)


def test_single_sample():
    s = stats.summarize([2.5])
    assert s["step_ms_median"] == 2.5 and s["step_ms_stdev"] == 0.0


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -0.5], [1.0, float("nan")], [1.0, float("inf")]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        stats.summarize(bad)


def test_spread_warning_on_wide_spread():
    w = stats.spread_warning(stats.summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]))
    assert w is not None and "unstable" in w and "131%" in w  # (9.1 - 1.9) / 5.5


def test_no_spread_warning_on_tight_samples():
    x = [10.0, 10.1, 9.9, 10.05, 9.95, 10.02, 9.98, 10.0, 10.03, 9.97]
    assert stats.spread_warning(stats.summarize(x)) is None


def test_spread_warning_threshold():
    # a spread of exactly 10% of the median is not above the threshold; 12% is
    assert stats.spread_warning({"step_ms_p10": 9.5, "step_ms_p90": 10.5, "step_ms_median": 10.0}) is None
    assert stats.spread_warning({"step_ms_p10": 9.4, "step_ms_p90": 10.6, "step_ms_median": 10.0}) is not None


def test_drift_warning_on_steps_that_keep_getting_faster():
    """The H200's eager steps: ~100 ms for the first half of a 300-step run, ~60 ms after (results/h200/endpoint/)."""
    w = stats.drift_warning([100.0] * 150 + [60.0] * 150)
    assert w is not None and "60 ms" in w and "100 ms" in w and "-40%" in w


def test_no_drift_warning_on_scatter_without_a_trend_or_few_samples():
    rng = np.random.default_rng(0)
    assert stats.drift_warning(list(10 + rng.normal(0, 1, 300))) is None  # a wide spread, no trend
    assert stats.drift_warning([10.0, 10.0, 10.0, 20.0, 20.0]) is None  # under 9 samples: no thirds to compare
    assert stats.drift_warning([10.0] * 10 + [11.5] * 10) is not None  # +15%, slower
    assert stats.drift_warning([10.0] * 10 + [10.5] * 10) is None  # +5%: within DRIFT_WARN
