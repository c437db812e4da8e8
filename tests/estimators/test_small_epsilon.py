"""Issue 31: the bounds-free default at small epsilon (coarse private bounds, no refusal where
a private fit is possible, residual clips that never grow)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.accounting import PrivacyLedger
from privopt.datasets import load_power_plant
from privopt.estimators._utility import UtilityWarning
from privopt.releases.coarse_bounds import (
    COUNT_SHARE,
    coarse_budgets,
    coarse_quantile_bounds,
    coarse_releases,
)
from privopt.releases.newton import QUANTILE_SHARE, residual_quantile_share


def _power_plant(rows=None, seed=0):
    table = load_power_plant()
    X, y = np.asarray(table.X, float), np.asarray(table.y, float)
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    k = int(0.8 * len(y))
    train, test = order[:k], order[k:]
    if rows is not None:
        train = train[:rows]
    return X[train], y[train], X[test], y[test]


def _r2(y, prediction):
    return 1.0 - np.mean((y - prediction) ** 2) / np.var(y)


@pytest.mark.parametrize("d", [1, 4, 18, 100])
def test_coarse_budgets_compose_to_mu(d):
    mu = 0.37
    each, target, radius, counts = coarse_budgets(d, mu)
    total = 2 * d * each**2 + 2 * target**2 + radius**2 + counts**2
    assert math.isclose(total, mu**2, rel_tol=1e-12)
    assert math.isclose(counts**2, COUNT_SHARE * mu**2, rel_tol=1e-12)
    assert coarse_releases(d) == 2 * d + 3


def test_coarse_bounds_ledger_and_float64_reference():
    """2 d + 3 exponential-mechanism events and one count vector, composing to mu-GDP; with a
    large mu the centres are the medians and the scales the robust sigmas of the data."""
    rng = np.random.default_rng(0)
    X = rng.normal([5.0, -200.0, 1013.0], [2.0, 30.0, 6.0], size=(20_000, 3))
    y = X @ [1.0, 0.1, 0.5] + rng.normal(0, 1, 20_000)
    ledger = PrivacyLedger("zero-out")
    mu = 20.0
    bounds = coarse_quantile_bounds(
        X, y, np.arange(20_000), mu=mu, rng=np.random.default_rng(1), ledger=ledger
    )
    events = ledger.report(1e-6).events
    assert len(events) == coarse_releases(3) + 1
    assert math.isclose(ledger.report(1e-6).mu, mu, rel_tol=1e-6)
    np.testing.assert_allclose(bounds.x_center, np.median(X, axis=0), atol=0.02 * 30)
    sigma = np.quantile(np.abs(X - np.median(X, axis=0)), 0.9, axis=0) / 1.6449
    np.testing.assert_allclose(bounds.x_scale, sigma, rtol=0.3)
    assert np.all(np.isfinite(bounds.x_scale))


def test_coarse_bounds_drop_a_feature_whose_box_holds_no_rows():
    """A constant feature (spread collapses: dropped) and a target with an atom are handled
    from released values only."""
    rng = np.random.default_rng(2)
    X = np.c_[rng.normal(size=5000), np.full(5000, 3.0)]
    y = X[:, 0] + rng.normal(size=5000)
    ledger = PrivacyLedger("zero-out")
    bounds = coarse_quantile_bounds(
        X, y, np.arange(5000), mu=5.0, rng=np.random.default_rng(3), ledger=ledger
    )
    assert np.isfinite(bounds.x_scale[0]) and np.isinf(bounds.x_scale[1])


@pytest.mark.parametrize(("epsilon", "rows"), [(0.1, 5000), (0.1, None), (0.3, 2000)])
def test_no_refusal_where_issue_31_asks(epsilon, rows):
    X, y, _, _ = _power_plant(rows)
    model = DPLinearRegression(epsilon=epsilon, delta=1e-6, random_state=0).fit(X, y)
    labels = [e.label for e in model.privacy_report_.events]
    assert any("median of feature 0" in label for label in labels)
    assert not any("outer extent" in label for label in labels)  # the coarse bounds
    assert model.privacy_report_.epsilon <= epsilon
    assert np.all(np.isfinite(model.coef_))


def test_full_bounds_kept_where_they_fit():
    X, y, _, _ = _power_plant()
    model = DPLinearRegression(epsilon=1.0, delta=1e-6, random_state=0).fit(X, y)
    labels = [e.label for e in model.privacy_report_.events]
    assert any("outer" in label for label in labels)


def test_refusal_names_the_rows_needed():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 2)), rng.normal(size=60)
    with pytest.raises(ValueError, match=r"needs at least \d+ rows at epsilon=1"):
        DPLinearRegression(epsilon=1.0, delta=1e-6).fit(X, y)
    # one row fewer than the threshold named is refused, the threshold fits
    with pytest.raises(ValueError) as info:
        DPLinearRegression(epsilon=1.0, delta=1e-6).fit(X, y)
    needed = int(str(info.value).split("needs at least ")[1].split()[0])
    X, y = rng.normal(size=(needed, 2)), rng.normal(size=needed)
    DPLinearRegression(epsilon=1.0, delta=1e-6, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="needs at least"):
        DPLinearRegression(epsilon=1.0, delta=1e-6).fit(X[:-1], y[:-1])


def test_residual_quantile_share_rises_only_at_small_budgets():
    shares = (0.2, 0.1, 0.7)
    assert residual_quantile_share(0.2, 3, shares, 7654.0) == QUANTILE_SHARE
    small = residual_quantile_share(0.02, 3, shares, 7654.0)
    assert QUANTILE_SHARE < small <= 0.5


def test_residual_clips_never_grow():
    X, y, _, _ = _power_plant()
    for seed in range(4):
        model = DPLinearRegression(epsilon=0.1, delta=1e-6, random_state=seed).fit(X, y)
        clips = model.fit_info_["residual_clips"]
        assert all(b <= a for a, b in itertools.pairwise(clips))


def _fit_recording(model, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    return [w for w in caught if issubclass(w.category, UtilityWarning)]


def test_quality_release_in_ledger_and_warning_on_pure_noise():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(5000, 5)), rng.normal(size=5000)
    model = DPLinearRegression(epsilon=1.0, delta=1e-6, random_state=0)
    caught = _fit_recording(model, X, y)
    labels = [e.label for e in model.privacy_report_.events]
    assert labels.count("private fit quality (clipped residual sums)") == 1
    assert model.privacy_report_.epsilon <= 1.0
    assert len(caught) == 1 and "not expected to beat predicting the mean" in str(caught[0].message)
    assert model.private_r2_ < 0.1
    assert "private_r2_" in DPLinearRegression._private_outputs


def test_no_quality_warning_on_a_strong_target():
    X, y, Xt, yt = _power_plant()
    model = DPLinearRegression(epsilon=1.0, delta=1e-6, random_state=0)
    assert not _fit_recording(model, X, y)
    assert abs(model.private_r2_ - _r2(yt, model.predict(Xt))) < 0.1


def test_private_r2_against_float64_reference():
    """At a huge budget the release is the exact clipped R^2 computed here in float64."""
    from privopt.releases.fit_quality import QUALITY_CLIP, private_r2
    from privopt.releases.preprocess import LinearBounds

    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 3))
    y = X @ [1.0, -2.0, 0.5] + rng.normal(size=3000)
    coef, intercept = np.array([0.9, -1.8, 0.4]), 0.1
    bounds = LinearBounds(np.zeros(3), 0.2, 10.0, 12.0, 1.0, "public")
    ledger = PrivacyLedger("zero-out")
    r2, se = private_r2(
        coef, intercept, bounds, lambda rows: (X[rows], y[rows]), 3000,
        mu=1e9, rng=np.random.default_rng(0), ledger=ledger,
    )  # fmt: skip
    c = QUALITY_CLIP * 12.0
    u = np.sum(np.minimum(((y - X @ coef - intercept) / c) ** 2, 1.0))
    a = np.clip((y - 0.2) / c, -1.0, 1.0)
    reference = 1.0 - u / (np.sum(a**2) - np.sum(a) ** 2 / 3000)
    assert r2 == pytest.approx(reference, abs=1e-6) and se < 1e-6
