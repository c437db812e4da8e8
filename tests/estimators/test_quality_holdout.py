"""The private R^2 of the self-calibrating methods (dpsgd, ssgd, ftrl-sigma): a held-out secret
slice that the method never reads, released at the fit's full mu in its own partition (parallel
composition), so the claim is unchanged and every fit reports its own quality."""

import contextlib

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.estimators import _regression_methods
from privopt.releases import fit_quality

BOUNDS = dict(feature_bounds=(-4, 4), target_bounds=(-6, 6))


def _data(n=8_000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) / 2 + rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("bounds", [BOUNDS, {}])
def test_dpsgd_reports_a_held_out_quality_and_keeps_its_claim(bounds, monkeypatch):
    X, y = _data()
    held, read = [], []
    original_holdout, original_run = fit_quality.quality_holdout, _regression_methods.run_dpsgd

    def holdout(n, excluded, take, mu, rng):
        out, quality = original_holdout(n, excluded, take, mu, rng)
        held.append((np.setdiff1d(out, excluded), excluded))
        return out, quality

    def run(est, Z, t, *args):
        read.append(Z.shape[0])
        return original_run(est, Z, t, *args)

    from privopt.estimators import linear_regression

    monkeypatch.setattr(linear_regression, "quality_holdout", holdout)
    monkeypatch.setattr(linear_regression, "run_dpsgd", run)
    model = DPLinearRegression(epsilon=1.0, delta=1e-6, method="dpsgd", random_state=0, **bounds)
    model.fit(X, y)
    ((rows, bounds_slice),) = held
    assert rows.size == 400  # min(2,000, n // 20)
    assert np.intersect1d(rows, bounds_slice).size == 0
    assert read == [len(y) - rows.size - bounds_slice.size]  # the method never reads them
    report = model.privacy_report_
    assert report.epsilon <= 1.0
    assert any("fit quality" in str(event) for event in report.events)
    # the clipped R^2 of held-out rows, within its noise and clipping of the test R^2
    assert abs(model.private_r2_ - model.score(X, y)) < 0.15
    assert model.fit_info_["private_r2_se"] < 0.1


@pytest.mark.parametrize("method", ["ssgd", "ftrl-sigma"])
def test_the_other_self_calibrating_methods_report_it_too(method):
    X, y = _data()
    model = DPLinearRegression(epsilon=1.0, delta=1e-6, method=method, random_state=0, **BOUNDS)
    with pytest.warns(Warning) if method == "ssgd" else contextlib.nullcontext():
        model.fit(X, y)
    assert np.isfinite(model.private_r2_)
    assert model.privacy_report_.epsilon <= 1.0 + 1e-9
    if model.score(X, y) <= 0:  # a fit worse than the mean is told so
        assert model.private_r2_ < 0.1


def test_too_few_rows_for_a_held_out_estimate_keep_every_row():
    excluded = np.array([0, 1, 2])
    out, quality = fit_quality.quality_holdout(1_999, excluded, None, 1.0, None)
    assert quality is None and np.array_equal(out, excluded)  # 1,999 // 20 = 99 < 100
    out, quality = fit_quality.quality_holdout(
        100_000, excluded, None, 1.0, np.random.default_rng(0)
    )
    assert quality["n"] == 2_000 and quality["partition"] == "quality"
    assert out.size == 2_003 and set(excluded) <= set(out.tolist())
