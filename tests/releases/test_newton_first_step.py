"""Noisy Newton's first step clipped below the target radius (``first_clip``), and the bounds
that choose it (:func:`privopt.releases.quantile_bounds.first_step_clip`): three released
robust sigmas of the target for the full private bounds, the target radius (unchanged fits)
for public bounds, coarse bounds and known target ranges."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from privopt.accounting import PrivacyLedger
from privopt.releases.coarse_bounds import coarse_quantile_bounds
from privopt.releases.known_columns import KnownColumns
from privopt.releases.newton import _BlockStatistics, dp_newton, dp_newton_rows
from privopt.releases.preprocess import LinearBounds
from privopt.releases.quantile_bounds import (
    FIRST_STEP_SIGMAS,
    QuantileBounds,
    first_step_clip,
    private_quantile_bounds,
    tail_level,
)


def _data(n=6_000, p=4, seed=0):
    """Rows inside the unit ball's scale, targets with heavy tails: a clip at 1 acts on many."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, p)) / 2.0
    t = Z @ rng.normal(size=p) + rng.standard_t(3, size=n)
    return Z, np.clip(t, -6.0, 6.0)


def _one_step(Z, t, first_clip, relation="zero-out", mu=1e6, seed=0):
    ledger = PrivacyLedger(relation)
    w, info = dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=mu, rng=np.random.default_rng(seed),
        ledger=ledger, steps=1, first_clip=first_clip,
    )  # fmt: skip
    return w, info, ledger


def test_first_step_is_the_clipped_targets_regression_against_float64():
    """One step from w = 0 at a negligible noise: w_1 = (Z^T Z)^-1 Z^T clip(t, +-rho_0)."""
    Z, t = _data()
    w, info, _ = _one_step(Z, t, first_clip=1.0)
    clipped = np.clip(t, -1.0, 1.0)
    reference = np.linalg.solve(Z.T @ Z, Z.T @ clipped)
    np.testing.assert_allclose(w, reference, rtol=1e-5, atol=1e-6)
    assert info["residual_clips"] == [1.0]
    # the clip acts: the unclipped first step (OLS) is far from it
    assert np.linalg.norm(w - np.linalg.lstsq(Z, t, rcond=None)[0]) > 0.1


@pytest.mark.parametrize(("relation", "factor"), [("zero-out", 1.0), ("replace-one", 2.0)])
def test_first_gradient_is_calibrated_to_its_own_clip(relation, factor):
    """The first gradient's sensitivity is factor R rho_0 and its noise std is that over the
    step's mu share; the ledger's total stays mu (the shares are unchanged)."""
    Z, t = _data(seed=1)
    ledger = PrivacyLedger(relation)
    _, info = dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=0.7, rng=np.random.default_rng(1),
        ledger=ledger, first_clip=1.5,
    )  # fmt: skip
    first = {e.label: e for e in ledger.events}["noisy-Newton clipped gradient 0"]
    assert first.sensitivity == pytest.approx(factor * 4.0 * 1.5)
    assert info["gradient_stds"][0] == pytest.approx(first.std)
    assert ledger.mu == pytest.approx(0.7, rel=1e-9)
    unclipped = PrivacyLedger(relation)
    dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=0.7, rng=np.random.default_rng(1),
        ledger=unclipped,
    )  # fmt: skip
    before = {e.label: e for e in unclipped.events}["noisy-Newton clipped gradient 0"]
    assert first.std == pytest.approx(before.std * 1.5 / 6.0)  # noise scales with the clip


def test_later_clips_are_searched_up_to_the_target_bound():
    """A first clip far below the residuals does not cap the later steps' clips (their grid
    still reaches T): the later clips follow the residuals (t(3) noise, 3 x its 0.9-quantile,
    about 7), not the first clip."""
    Z, t = _data(seed=2)
    ledger = PrivacyLedger("zero-out")
    _, info = dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=50.0, rng=np.random.default_rng(2),
        ledger=ledger, first_clip=0.1,
    )  # fmt: skip
    clips = info["residual_clips"]
    assert clips[0] == 0.1 and min(clips[1:]) > 2.0 and max(clips[1:]) <= 6.0


def test_a_first_clip_at_or_above_the_target_bound_is_the_unclipped_fit():
    """first_clip >= T acts as T: the same draws and the same model, bitwise, as None."""
    Z, t = _data(seed=3)
    base = _one_step(Z, t, None, mu=1.0, seed=5)[0]
    for clip in (6.0, 60.0):
        np.testing.assert_array_equal(_one_step(Z, t, clip, mu=1.0, seed=5)[0], base)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="first_clip"):
            _one_step(Z, t, bad)


def test_rows_form_with_a_first_clip_equals_dp_newton_on_the_transform():
    """dp_newton_rows folds the first clip into its Gram pass (the moment Z^T clip(t, +-rho_0)),
    the same statistic dp_newton computes from the transformed rows."""
    rng = np.random.default_rng(4)
    n, d = 5_000, 5
    X = rng.standard_t(3, size=(n, d)) * 2.0 + 1.0
    y = X @ rng.normal(size=d) + 3.0 * rng.standard_t(3, size=n)
    bounds = LinearBounds(
        np.ones(d), 0.5, 3.0, 12.0, 3.0 / math.sqrt(d), "private", x_scale=np.full(d, 2.0),
        x_box=4.0,
    )  # fmt: skip
    results = []
    for form in ("transform", "rows"):
        ledger, gen = PrivacyLedger("zero-out"), np.random.default_rng(9)
        if form == "transform":
            Z, t = bounds.transform(X, y)
            w, info = dp_newton(
                Z, t, row_bound=bounds.row_bound, target_bound=bounds.y_radius, mu=2.0,
                rng=gen, ledger=ledger, first_clip=2.5,
            )  # fmt: skip
        else:
            w, info = dp_newton_rows(X, y, bounds, mu=2.0, rng=gen, ledger=ledger, first_clip=2.5)
        results.append((w, info))
    (w0, i0), (w1, i1) = results
    np.testing.assert_allclose(w1, w0, rtol=1e-10, atol=1e-10 * np.linalg.norm(w0))
    assert i0["residual_clips"][0] == i1["residual_clips"][0] == 2.5
    # the moment itself against float64
    Z, t = bounds.transform(X, y)
    blocks = _BlockStatistics(X, np.clip(y - 0.5, -12.0, 12.0), bounds, 12.0, 2.5)
    blocks.gram_pass()
    np.testing.assert_allclose(blocks.moment, Z.T @ np.clip(t, -2.5, 2.5), rtol=1e-11, atol=1e-8)
    np.testing.assert_allclose(
        blocks.clipped_gradient(np.zeros(d + 1), 2.5), -blocks.moment, rtol=0, atol=0
    )


def _normal_table(n=4_000, d=3, seed=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ np.array([0.5, -0.2, 0.1]) + 5.0 + 2.0 * rng.normal(size=n)


def test_full_private_bounds_carry_the_released_target_scale():
    """At a large budget the released robust sigma is the tau-quantile half-range over z_tau
    (float64 quantiles, to the grid's 5% resolution), and the first clip is three of them."""
    X, y = _normal_table()
    m, mu = X.shape[0], 1e3
    bounds = private_quantile_bounds(
        X, y, np.arange(m), mu=mu, rng=np.random.default_rng(0), ledger=PrivacyLedger("zero-out")
    )
    assert isinstance(bounds, QuantileBounds) and bounds.y_scale is not None
    tau = tail_level(m, mu)
    low, high = np.quantile(y, [tau, 1.0 - tau])
    assert bounds.y_scale == pytest.approx((high - low) / 2.0 / norm.isf(tau), rel=0.06)
    assert first_step_clip(bounds) == pytest.approx(FIRST_STEP_SIGMAS * bounds.y_scale)
    assert first_step_clip(bounds) < bounds.y_radius


def test_other_bounds_keep_the_target_radius():
    """Public bounds, coarse bounds (T is already 3 sigmas) and a known target range give
    None: their fits are unchanged."""
    X, y = _normal_table()
    m = X.shape[0]
    public = LinearBounds(np.zeros(3), 5.0, 8.0, 12.0, 1.0, "public")
    assert first_step_clip(public) is None
    coarse = coarse_quantile_bounds(
        X, y, np.arange(m), mu=1.0, rng=np.random.default_rng(0), ledger=PrivacyLedger("zero-out")
    )
    assert first_step_clip(coarse) is None
    known = KnownColumns.none(3)
    known = KnownColumns(known.low, known.high, known.public, target=(-5.0, 15.0))
    full = private_quantile_bounds(
        X, y, np.arange(m), mu=1.0, rng=np.random.default_rng(0),
        ledger=PrivacyLedger("zero-out"), known=known,
    )  # fmt: skip
    assert full.y_scale is None and first_step_clip(full) is None


def test_the_estimator_uses_it_with_private_bounds_only():
    """A bounds-free fit's first residual clip is three released sigmas of the target; with
    complete public bounds it is the target radius."""
    from privopt import DPLinearRegression
    from privopt.estimators import _regression_methods

    X, y = _normal_table(n=6_000)
    seen = []

    def spy(bounds):
        seen.append((bounds, first_step_clip(bounds)))
        return seen[-1][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_regression_methods, "first_step_clip", spy)
        private = DPLinearRegression(epsilon=1.0, random_state=0).fit(X, y)
        public = DPLinearRegression(
            epsilon=1.0, random_state=0, feature_bounds=(-5.0, 5.0), target_bounds=(-5.0, 15.0)
        ).fit(X, y)
    (bounds, clip), (public_bounds, public_clip) = seen
    assert clip == pytest.approx(FIRST_STEP_SIGMAS * bounds.y_scale)
    assert private.fit_info_["residual_clips"][0] == clip < bounds.y_radius
    assert public_clip is None
    assert public.fit_info_["residual_clips"][0] == public_bounds.y_radius
