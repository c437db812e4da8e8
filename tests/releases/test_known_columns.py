"""Known column ranges in the private bounds: the binary-column screen and the releases it saves
(issue 31: one-hot tables)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privopt.accounting import PrivacyLedger
from privopt.releases.coarse_bounds import coarse_budgets, coarse_quantile_bounds
from privopt.releases.known_columns import (
    SCREEN_LIMIT,
    SCREEN_STDS,
    KnownColumns,
    screen_binary_columns,
    screen_runs,
    screen_std,
)
from privopt.releases.quantile_bounds import private_quantile_bounds, release_budgets


def _table(m=20_000, seed=0):
    """Columns: normal, one-hot (10% ones), rare one-hot (0.5%), min-max scaled in [0, 1] with
    an atom at 0, and 0/1 with 3% of rows at 2; the target in {-1, 1}."""
    rng = np.random.default_rng(seed)
    X = np.c_[
        rng.normal(50.0, 10.0, m),
        rng.random(m) < 0.1,
        rng.random(m) < 0.005,
        np.where(rng.random(m) < 0.9, 0.0, rng.random(m)),
        np.where(rng.random(m) < 0.03, 2.0, rng.random(m) < 0.3),
    ].astype(float)
    y = np.where(X[:, 1] + rng.normal(0, 1, m) > 0.5, 1.0, -1.0)
    return X, y


def test_screen_finds_binary_columns_float64_reference():
    """At a large mu the noisy counts are the exact counts: the 0/1 columns (and the {-1, 1}
    target) are found; the normal column, the [0, 1] column with an atom at 0 and the 0/1 one
    with 3% of rows at 2 (3% > SCREEN_LIMIT) are not; one Gaussian event of sensitivity
    sqrt(d + 2); with ``mu_unit`` a second of sensitivity sqrt(d) finds the [0, 1] column
    inside [0, 1] (the fallback range)."""
    X, y = _table()
    ledger = PrivacyLedger("zero-out")
    known = screen_binary_columns(
        X, y, np.arange(len(y)), known=KnownColumns.none(5), mu=1e6,
        rng=np.random.default_rng(1), ledger=ledger,
    )  # fmt: skip
    assert not known.unit_mask.any()  # no [0, 1] counts without mu_unit
    exact = [np.count_nonzero((X[:, j] != 0) & (X[:, j] != 1)) for j in range(5)]
    assert [c <= SCREEN_LIMIT * len(y) for c in exact] == [False, True, True, False, False]
    np.testing.assert_array_equal(known.mask, [False, True, True, False, False])
    np.testing.assert_array_equal(known.low[known.mask], 0.0)
    np.testing.assert_array_equal(known.high[known.mask], 1.0)
    assert known.target == (-1.0, 1.0) and not known.target_public
    (event,) = ledger.events
    assert math.isclose(event.sensitivity, math.sqrt(7.0))
    assert math.isclose(event.sensitivity / event.std, 1e6, rel_tol=1e-9)
    assert "screen" in event.label
    ledger = PrivacyLedger("zero-out")
    with_unit = screen_binary_columns(
        X, y, np.arange(len(y)), known=KnownColumns.none(5), mu=1e6,
        rng=np.random.default_rng(1), ledger=ledger, mu_unit=1e6,
    )  # fmt: skip
    np.testing.assert_array_equal(with_unit.mask, known.mask)  # the same binary release
    np.testing.assert_array_equal(with_unit.unit_mask, [False, False, False, True, False])
    assert "features [3] found inside [0, 1]" in with_unit.describe()
    _, unit = ledger.events
    assert math.isclose(unit.sensitivity, math.sqrt(5.0)) and "[0, 1]" in unit.label


def test_screen_skipped_when_too_noisy():
    """Nothing released when SCREEN_STDS noise stds exceed a tenth of the rows (public)."""
    X, y = _table(m=2_000)
    ledger = PrivacyLedger("zero-out")
    mu = SCREEN_STDS * math.sqrt(7.0) / (0.1 * 2_000) * 0.99  # just below the threshold
    assert SCREEN_STDS * screen_std(7, mu) > 0.1 * 2_000
    assert not screen_runs(KnownColumns.none(5), 2_000, mu)
    known = screen_binary_columns(
        X, y, np.arange(2_000), known=KnownColumns.none(5), mu=mu,
        rng=np.random.default_rng(0), ledger=ledger,
    )  # fmt: skip
    assert not known.any and ledger.events == ()


def test_screen_counts_only_unknown_columns():
    X, y = _table()
    public = KnownColumns(
        np.array([0.0, np.nan, np.nan, np.nan, np.nan]),
        np.array([100.0, np.nan, np.nan, np.nan, np.nan]),
        np.array([True, False, False, False, False]),
        (-1.0, 1.0),
        True,
    )
    ledger = PrivacyLedger("zero-out")
    known = screen_binary_columns(
        X, y, np.arange(len(y)), known=public, mu=1e6, rng=np.random.default_rng(1),
        ledger=ledger,
    )  # fmt: skip
    (event,) = ledger.events
    assert math.isclose(event.sensitivity, 2.0)  # the four unknown features only
    np.testing.assert_array_equal(known.public, public.public)
    np.testing.assert_array_equal(known.screened, [False, True, True, False, False])


@pytest.mark.parametrize("d", [1, 5, 30])
@pytest.mark.parametrize(("free", "target_free", "counted"), [(0, True, 0), (2, False, 4)])
def test_budgets_with_known_columns_compose_to_mu(d, free, target_free, counted):
    mu = 0.3
    free, counted = min(free, d), min(counted, d)
    each, target, radius = release_budgets(d, mu, free, target_free, counted, True)
    units = 5 * free + 2 * counted + 2
    total = units * each**2 + 3 * target**2 + radius**2
    assert math.isclose(total, mu**2, rel_tol=1e-12)
    each, target, radius, counts = coarse_budgets(d, mu, free, target_free)
    total = 2 * free * each**2 + 2 * target**2 + radius**2 + counts**2
    assert math.isclose(total, mu**2, rel_tol=1e-12)


@pytest.mark.parametrize("release", [private_quantile_bounds, coarse_quantile_bounds])
def test_nothing_known_is_the_unchanged_release(release):
    X, y = _table(m=5_000)
    a = release(X, y, np.arange(5_000), mu=0.5, rng=np.random.default_rng(3),
                ledger=PrivacyLedger("zero-out"))  # fmt: skip
    b = release(X, y, np.arange(5_000), mu=0.5, rng=np.random.default_rng(3),
                ledger=PrivacyLedger("zero-out"), known=KnownColumns.none(5))  # fmt: skip
    for field in ("x_center", "x_scale", "x_radius", "y_center", "y_radius", "x_box"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@pytest.mark.parametrize("release", [private_quantile_bounds, coarse_quantile_bounds])
def test_known_columns_take_their_range(release):
    """Known features: centre (low + high) / 2, scale (high - low) / 2, box 1, no quantile of
    theirs in the ledger; the ledger composes to mu; a screened column whose range holds too
    few rows (3% at 2) is widened or dropped by the full bounds' clip counts."""
    X, y = _table()
    screened = np.array([False, True, True, True, True])
    known = KnownColumns(
        np.where(screened, 0.0, np.nan), np.where(screened, 1.0, np.nan),
        np.zeros(5, dtype=bool), (-1.0, 1.0), False,
    )  # fmt: skip
    ledger = PrivacyLedger("zero-out")
    mu = 50.0
    bounds = release(X, y, np.arange(len(y)), mu=mu, rng=np.random.default_rng(2),
                     ledger=ledger, known=known)  # fmt: skip
    np.testing.assert_array_equal(bounds.x_center[1:4], 0.5)
    np.testing.assert_array_equal(bounds.x_scale[1:4], 0.5)
    np.testing.assert_array_equal(bounds.x_box[1:], 1.0)
    if release is private_quantile_bounds:  # its clip limit is 1% of the rows: widened/dropped
        assert bounds.x_scale[4] > 0.5
    else:  # the coarse bounds drop a box only above 20% (a failed release), so it is kept
        assert bounds.x_scale[4] == 0.5
    assert bounds.y_center == 0.0 and bounds.y_radius == 1.0
    labels = " ".join(e.label for e in ledger.events)
    assert "feature 0" in labels
    assert not any(f"feature {j}" in labels for j in range(1, 5))
    assert "the target" not in labels
    assert math.isclose(ledger.mu, mu, rel_tol=1e-9)
    Z = bounds.transform(X[:5])
    assert np.all(np.abs(Z[:, 1:4]) <= 1.0 + 1e-12)


def test_known_columns_without_intercept_are_held_about_zero():
    X, y = _table(m=5_000)
    known = KnownColumns(
        np.array([np.nan, 0.0, 0.0, 0.0, np.nan]), np.array([np.nan, 1.0, 1.0, 1.0, np.nan]),
        np.zeros(5, dtype=bool), (0.0, 1.0), False,
    )  # fmt: skip
    bounds = private_quantile_bounds(
        X, y, np.arange(5_000), mu=5.0, rng=np.random.default_rng(0),
        ledger=PrivacyLedger("zero-out"), fit_intercept=False, known=known,
    )  # fmt: skip
    np.testing.assert_array_equal(bounds.x_center, 0.0)
    np.testing.assert_array_equal(bounds.x_scale[1:4], 1.0)
    assert bounds.y_center == 0.0 and bounds.y_radius == 1.0


def _coarse(X, y):
    ledger = PrivacyLedger("zero-out")
    rows = np.arange(len(y))
    return coarse_quantile_bounds(X, y, rows, mu=50.0, rng=np.random.default_rng(1), ledger=ledger)


def test_coarse_radius_is_capped_at_radius_cap_sqrt_d():
    """Rows whose level-quantile norm is far above sqrt(d) (four identical Cauchy columns: a
    quarter of the rows at the box in every coordinate) get the radius RADIUS_CAP sqrt(d);
    independent normal columns keep their released radius (below the cap)."""
    from privopt.releases.coarse_bounds import RADIUS_CAP

    rng = np.random.default_rng(0)
    column = rng.standard_cauchy(20_000)
    X = np.tile(column[:, None], (1, 4))
    y = rng.normal(size=20_000)
    bounds = _coarse(X, y)
    assert bounds.x_radius == RADIUS_CAP * 2.0
    X = rng.normal(size=(20_000, 4))
    bounds = _coarse(X, y)
    assert 1.0 * 2.0 < bounds.x_radius < RADIUS_CAP * 2.0


def test_coarse_radius_level_floor_is_lower_than_the_full_bounds():
    """At a small budget the coarse row radius is the COARSE_ROW_LEVEL_FLOOR quantile (the
    full bounds stop at ROW_LEVEL_FLOOR), so its release keeps more ranks of margin."""
    from privopt.releases.coarse_bounds import COARSE_ROW_LEVEL_FLOOR
    from privopt.releases.quantile_bounds import ROW_LEVEL_FLOOR, row_level

    assert row_level(5_000, 0.0085) == ROW_LEVEL_FLOOR
    assert row_level(5_000, 0.0085, floor=COARSE_ROW_LEVEL_FLOOR) == COARSE_ROW_LEVEL_FLOOR
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(5_000, 4)), rng.normal(size=5_000)
    ledger = PrivacyLedger("zero-out")
    coarse_quantile_bounds(X, y, np.arange(5_000), mu=0.02, rng=rng, ledger=ledger)
    assert any("(0.8-quantile)" in e.label for e in ledger.events)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_unit_range_fallback_boxes_only_dropped_features_found_inside(fit_intercept):
    from privopt.releases.known_columns import unit_range_fallback
    from privopt.releases.preprocess import LinearBounds

    bounds = LinearBounds(
        x_center=np.array([1.0, 2.0, 3.0]), y_center=0.0, x_radius=2.0, y_radius=1.0,
        intercept_scale=1.0, source="private", x_scale=np.array([np.inf, np.inf, 0.3]),
        x_box=4.0,
    )  # fmt: skip
    none = KnownColumns.none(3)
    assert unit_range_fallback(bounds, none) is bounds
    unit = KnownColumns(none.low, none.high, none.public, unit=np.array([True, False, True]))
    restored = unit_range_fallback(bounds, unit, fit_intercept)
    centre, scale = (0.5, 0.5) if fit_intercept else (0.0, 1.0)
    np.testing.assert_array_equal(restored.x_center, [centre, 2.0, 3.0])
    np.testing.assert_array_equal(restored.x_scale, [scale, np.inf, 0.3])  # 1 still dropped
    np.testing.assert_array_equal(restored.x_box, [1.0, 4.0, 4.0])
    assert restored.x_radius == bounds.x_radius  # the row clip (every sensitivity) unchanged
    low, high = restored.feature_range()[0]
    assert (low, high) == ((0.0, 1.0) if fit_intercept else (-1.0, 1.0))
    # the transformed feature is the [0, 1] column mapped to [-1, 1] (or kept, about 0)
    z = restored.transform(np.array([[0.25, 2.0, 3.0], [7.0, 2.0, 3.0]]))
    expected = [-0.5, 1.0] if fit_intercept else [0.25, 1.0]
    np.testing.assert_allclose(z[:, 0] * (np.linalg.norm(z[:, :3], axis=1) > 0), expected)


def test_min_max_column_with_an_atom_is_kept_by_the_default():
    """Issue 31: a min-max scaled column at 0 on 92% of the rows (Adult's capital gain) was
    dropped by the private bounds; found inside [0, 1] by the screen it is now kept, boxed to
    [0, 1], and its coefficient is learned."""
    from privopt import DPLinearRegression

    rng = np.random.default_rng(4)
    n = 15_000
    gain = np.where(rng.random(n) < 0.92, 0.0, rng.uniform(0.02, 0.2, n))
    other = rng.normal(0.0, 1.0, (n, 3))
    X = np.c_[gain, other]
    y = 10.0 * gain + other @ [0.2, -0.1, 0.05] + rng.normal(0.0, 0.3, n)
    model = DPLinearRegression(epsilon=1.0, random_state=0).fit(X, y)
    assert "features [0] found inside [0, 1]" in model.fit_info_["known_ranges"]
    np.testing.assert_array_equal(model.feature_range_[0], [0.0, 1.0])
    # as learned with its range given publicly (measured 2.16 and 2.22; 0 when dropped; the
    # true 10 is shrunk by the Gram noise on a column using a tenth of its [0, 1] box)
    public = DPLinearRegression(
        epsilon=1.0, random_state=0, feature_bounds=[(0, 1), None, None, None]
    ).fit(X, y)
    assert model.coef_[0] > 1.0
    assert model.coef_[0] == pytest.approx(public.coef_[0], rel=0.3)


def test_unit_counts_only_where_their_noise_allows():
    """Public: the [0, 1] counts run when SCREEN_STDS noise stds of their d-vector are at most
    a tenth of the rows; the binary release is unchanged when they do not."""
    from privopt.releases.known_columns import unit_screen_runs

    X, y = _table(m=2_000)
    none = KnownColumns.none(5)
    edge = SCREEN_STDS * math.sqrt(5.0) / (0.1 * 2_000)
    assert unit_screen_runs(none, 2_000, edge * 1.01)
    assert not unit_screen_runs(none, 2_000, edge * 0.99)
    ledger = PrivacyLedger("zero-out")
    known = screen_binary_columns(
        X, y, np.arange(2_000), known=none, mu=1.0, rng=np.random.default_rng(0),
        ledger=ledger, mu_unit=edge * 0.99,
    )  # fmt: skip
    (event,) = ledger.events
    assert math.isclose(event.sensitivity, math.sqrt(7.0))
    assert not known.unit_mask.any() and known.screened[1]
