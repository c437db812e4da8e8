"""Issue 31 item 4, "no collapsed seeds", below the power-plant table's full size: over 20 seeds
no bounds-free fit falls below half the median test R^2 at 5,000 rows / epsilon 0.1 and 2,000
rows / 0.3 (the coarse bounds: row radius held at 1.5 sqrt(d), level floor 0.8)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.datasets import load_power_plant


def _scores(rows, epsilon, seeds=20):
    table = load_power_plant()
    X, y = np.asarray(table.X, float), np.asarray(table.y, float)
    out = []
    for seed in range(seeds):
        order = np.random.default_rng(1000 + seed).permutation(len(y))
        train, test = order[:rows], order[int(0.8 * len(y)) :]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=epsilon, random_state=seed).fit(X[train], y[train])
        prediction = model.predict(X[test])
        out.append(1.0 - np.mean((y[test] - prediction) ** 2) / np.var(y[test]))
    return np.array(out)


@pytest.mark.slow
@pytest.mark.parametrize(("rows", "epsilon"), [(5_000, 0.1), (2_000, 0.3)])
def test_no_collapsed_seed_in_20_on_fewer_rows(rows, epsilon):
    """Measured: 5,000 / 0.1 median 0.854, worst 0.563 (before: 0.844, -0.044); 2,000 / 0.3
    median 0.876, worst 0.636 (before: 0.824, 0.007)."""
    scores = _scores(rows, epsilon)
    assert np.median(scores) > 0.8
    assert scores.min() >= 0.5 * np.median(scores)
