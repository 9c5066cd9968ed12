"""Summaries of raw samples (numpy). Samples are never dropped; a wide spread is flagged, not hidden."""

from __future__ import annotations

import numpy as np

SPREAD_WARN = 0.10  # (p90 - p10) / median above this gets a warning, as pyperf warns at std >= 10% of the mean


def summarize(samples_ms: list[float]) -> dict:
    x = np.asarray(samples_ms, dtype=float)
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"step samples must be finite and > 0, got {samples_ms[:5]}...")
    p10, p50, p90, p99 = np.percentile(x, [10, 50, 90, 99])
    return {
        "step_ms_median": float(p50), "step_ms_p10": float(p10), "step_ms_p90": float(p90),
        "step_ms_p99": float(p99), "step_ms_mean": float(x.mean()),
        "step_ms_stdev": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "step_ms_min": float(x.min()), "step_ms_max": float(x.max()),
    }


def spread_warning(s: dict) -> str | None:
    spread = (s["step_ms_p90"] - s["step_ms_p10"]) / s["step_ms_median"]
    if spread > SPREAD_WARN:
        return f"unstable: p90-p10 spread is {spread:.0%} of the median (kept all samples; check for contention)"
    return None


DRIFT_WARN = 0.10  # the last third's median this far from the first third's gets a warning


def drift_warning(samples_ms: list[float]) -> str | None:
    """Steps that keep getting faster or slower over the timed run (a clock, a cache, a host still warming up): the
    median of the last third of the samples against the first third's. A spread says the samples scatter; this says
    they move. None below 9 samples."""
    n = len(samples_ms) // 3
    if n < 3:
        return None
    first, last = float(np.median(samples_ms[:n])), float(np.median(samples_ms[-n:]))
    if abs(last / first - 1) > DRIFT_WARN:
        return (f"drifting: the last third of the steps has a median of {last:.3g} ms, the first third {first:.3g} ms "
                f"({last / first - 1:+.0%}; kept all samples; a longer --warmup or a quieter machine)")
    return None


def sample_warnings(rec: dict) -> list[str]:
    """What a record's timed samples warn of: their spread (spread_warning), their drift (drift_warning)."""
    return [w for w in (spread_warning(rec), drift_warning(rec.get("samples_ms") or [])) if w]


def bootstrap_ci(x: list[float], statistic: str = "mean", n_resamples: int = 10_000, seed: int = 0,
                 confidence: float = 0.95) -> tuple[float, float | None, float | None]:
    """(point estimate, low, high): scipy's percentile bootstrap of the mean or geometric mean of `x`.

    With fewer than 2 values there is no interval (None, None). The percentile interval under-covers at small N
    (a nominal 95% held the mean in about 91% of draws of N = 10 normal samples, 94% at N = 50: docs/method.md);
    ab's summary line (display.ab_gmean_line) says so.
    """
    import inspect

    from scipy import stats as st

    fn = {"mean": np.mean, "gmean": st.gmean}[statistic]
    arr = np.asarray(x, dtype=float)
    point = float(fn(arr))
    if arr.size < 2 or np.all(arr == arr[0]):
        return point, None, None
    rng = np.random.default_rng(seed)
    key = "rng" if "rng" in inspect.signature(st.bootstrap).parameters else "random_state"  # scipy < 1.15
    res = st.bootstrap((arr,), fn, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                       vectorized=True, axis=-1, **{key: rng})
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)
