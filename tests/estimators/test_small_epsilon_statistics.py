"""Issue 31's "Must hold" statistics on the power-plant table (slow suite): the no-bounds
default against the default given correct public bounds (the table's ranges) and OLS."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.datasets import load_power_plant


def _split(seed):
    table = load_power_plant()
    X, y = np.asarray(table.X, float), np.asarray(table.y, float)
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    k = int(0.8 * len(y))
    return X[order[:k]], y[order[:k]], X[order[k:]], y[order[k:]], X, y


def _r2(y, prediction):
    return 1.0 - np.mean((y - prediction) ** 2) / np.var(y)


def _scores(epsilon, seeds, bounds):
    out = []
    for seed in seeds:
        X, y, Xt, yt, X_all, y_all = _split(seed)
        kwargs = {}
        if bounds:
            kwargs = {
                "feature_bounds": np.c_[X_all.min(0), X_all.max(0)],
                "target_bounds": (y_all.min(), y_all.max()),
            }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=epsilon, delta=1e-6, random_state=seed, **kwargs)
            out.append(_r2(yt, model.fit(X, y).predict(Xt)))
    return np.array(out)


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [0.1, 0.3])
def test_no_bounds_keeps_09x_of_public_bounds(epsilon):
    free = np.median(_scores(epsilon, range(5), bounds=False))
    given = np.median(_scores(epsilon, range(5), bounds=True))
    assert free >= 0.9 * given


@pytest.mark.slow
def test_no_bounds_keeps_095x_of_ols_at_epsilon_1():
    X, y, Xt, yt, _, _ = _split(0)
    w = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
    ols = _r2(yt, np.c_[Xt, np.ones(len(Xt))] @ w)
    assert np.median(_scores(1.0, range(5), bounds=False)) >= 0.95 * ols


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [0.1, 0.3, 1.0])
def test_no_collapsed_seed_in_20(epsilon):
    scores = _scores(epsilon, range(20), bounds=False)
    assert scores.min() >= 0.5 * np.median(scores)
