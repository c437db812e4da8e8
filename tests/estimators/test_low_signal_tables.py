"""Issue 31, low-signal tables at epsilon 1: the bounds-free default keeps 0.9x the median test
R^2 of the default given correct public bounds on a Gaussian table of 4,000 x 12 (OLS test R^2
about 0.086), the row of benchmarks/small_epsilon.py that missed it (0.865x over these 80 seeds
before noisy Newton's first step was clipped at three released target sigmas; 0.908x after).

The ratio of medians moves by +-0.04 between disjoint sets of 20 seeds (0.857 to 0.921), so the
test takes the median over 80 (160 fits, about 8 s)."""

import statistics
import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.estimators._utility import UtilityWarning

pytestmark = pytest.mark.slow

SEEDS = 80


def _table(seed: int, rows: int = 4_000, d: int = 12):
    """benchmarks/small_epsilon.py's synthetic normal table: y = x.beta + 5 + N(0, 1)."""
    rng = np.random.default_rng(seed)
    beta = np.linspace(1.0, -1.0, d) / np.sqrt(d) * 0.5

    def draw(m):
        X = rng.normal(size=(m, d))
        return X, X @ beta + 5.0 + rng.normal(size=m)

    return (*draw(rows), *draw(20_000))


def _r2(y, prediction) -> float:
    return float(1.0 - np.mean((y - prediction) ** 2) / np.var(y))


def _medians() -> tuple[float, float, int, int]:
    """(median public-bounds R^2, median no-bounds R^2, no-bounds fits warned, no-bounds fits
    with test R^2 <= 0 that did not warn)."""
    public, free, warned, silent = [], [], 0, 0
    for seed in range(SEEDS):
        X, y, Xt, yt = _table(seed)
        bounds = {"feature_bounds": np.c_[X.min(0), X.max(0)], "target_bounds": (y.min(), y.max())}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = DPLinearRegression(epsilon=1.0, random_state=seed, **bounds).fit(X, y)
            public.append(_r2(yt, fitted.predict(Xt)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fitted = DPLinearRegression(epsilon=1.0, random_state=seed).fit(X, y)
        free.append(_r2(yt, fitted.predict(Xt)))
        warn = any(issubclass(w.category, UtilityWarning) for w in caught)
        warned += warn
        silent += free[-1] <= 0.0 and not warn
    return statistics.median(public), statistics.median(free), warned, silent


def test_gaussian_4000_x_12_keeps_09x_of_public_bounds():
    public, free, warned, silent = _medians()
    assert public > 0.07  # the public-bounds fit itself works (OLS: 0.086)
    assert free >= 0.9 * public, f"no bounds {free:.4f} against public bounds {public:.4f}"
    # never silently worse than the mean: every fit at or below zero warned (the warning is
    # conservative here: measured 7 warned in 10 fits of R^2 about 0.07)
    assert silent == 0 and warned > 0
