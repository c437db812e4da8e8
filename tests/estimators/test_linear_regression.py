"""DPLinearRegression: the default's accuracy, privacy reports, scikit-learn contract, bad input."""

import numpy as np
import pytest

import privopt
from privopt import DPLinearRegression
from privopt.datasets import make_linear_regression


def _ratio_to_ols(model, data):
    design = np.hstack([data.X, np.ones((data.X.shape[0], 1))])
    ols = np.linalg.lstsq(design, data.y, rcond=None)[0]
    ols_risk = data.excess_risk(ols[:-1], intercept=float(ols[-1]))
    return data.excess_risk(model.coef_, intercept=model.intercept_) / ols_risk


def test_default_is_within_2x_ols_and_spends_at_most_epsilon():
    """The issue's bar: x ~ N(0, I_20), sigma = 1, N = 200,000, only epsilon and delta given.

    The default picks noisy Newton here; measured over 5 seeds: 0.96, 1.39, 1.22, 1.71, 0.90
    (median 1.22; issue 16's bar 2x, goal 1.5x). Before issue 16 the default was DP-SGD at
    2.5, 5.2, 1.1, 1.7, 5.3 (median 2.5, bar 6x).
    """
    ratios = []
    for seed in range(5):
        data = make_linear_regression(200_000, 20, sigma=1.0, rng=np.random.default_rng(seed))
        model = DPLinearRegression(epsilon=1.0, delta=1e-6, random_state=seed).fit(data.X, data.y)
        ratios.append(_ratio_to_ols(model, data))
        report = model.privacy_report_
        assert model.fit_info_["method"] == "newton"
        assert report.epsilon <= 1.0 + 1e-9
        assert report["epsilon"] == report.epsilon and report["delta"] == 1e-6
        # Gaussian releases only (each exponential mechanism as its dominating GDP): rho given
        assert report["rho"] == report.rho > 0 and "rho" in report.to_dict()
    assert np.median(ratios) <= 2.0, ratios


@pytest.mark.parametrize(
    "method", ["newton", "adassp", "ambssgd", pytest.param("dpsgd", marks=pytest.mark.slow)]
)
def test_methods_are_private_by_their_ledger_and_beat_a_trivial_predictor(method):
    data = make_linear_regression(60_000, 5, sigma=1.0, rng=np.random.default_rng(1))
    model = DPLinearRegression(epsilon=2.0, delta=1e-6, method=method, random_state=0)
    model.fit(data.X, data.y)
    assert model.privacy_report_.epsilon <= 2.0 + 1e-9
    trivial = data.excess_risk(np.zeros(5), intercept=0.0)
    assert data.excess_risk(model.coef_, intercept=model.intercept_) < 0.05 * trivial
    # every relation keeps N fixed (issue 12 item 4): zero-out for Poisson DP-SGD and noisy
    # Newton (as the default), replace-one for the others
    assert model.privacy_report_.neighbouring == (
        "zero-out" if method in ("dpsgd", "newton") else "replace-one"
    )
    assert "N is public" in " ".join(model.privacy_report_.assumptions)
    assert "public size N" in model.privacy_report_.neighbouring_description
    # issue 16: the private quantiles are recorded; DP-SGD (calibrated alone) gets them on a
    # disjoint slice (parallel composition), the Gaussian-only methods share the rows and the
    # budget (sequential composition in exact GDP)
    labels = [e.label for e in model.privacy_report_.events]
    # a coarse median, two central quantiles and an outer extent per feature (the extents are
    # released: normal features have 30-50% of their rows outside the central range), three
    # for the target, the row radius; and two Gaussian count vectors (outer rows, clipped rows)
    assert sum("exponential mechanism" in label for label in labels) == 4 * 5 + 3 + 1
    assert labels.count("private outer counts") == 1
    assert labels.count("private clip counts of the boxes") == 1
    if method == "dpsgd":  # the bounds' slice, the fit's rows, the quality release's slice
        assert model.privacy_report_.num_partitions == 3
    else:  # Gaussian releases only: rho-zCDP is reported too
        assert 0 < model.privacy_report_.rho


def test_ssgd_refuses_epsilon_outside_the_shuffling_region():
    data = make_linear_regression(20_000, 3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"validity|certify"):
        DPLinearRegression(epsilon=4.0, method="ssgd", random_state=0).fit(data.X, data.y)


def test_ssgd_runs_inside_the_region():
    data = make_linear_regression(40_000, 3, rng=np.random.default_rng(0))
    model = DPLinearRegression(epsilon=0.5, method="ssgd", random_state=0).fit(data.X, data.y)
    assert model.privacy_report_.epsilon <= 0.5 + 1e-9
    assert model.fit_trace_.steps > 0


def test_public_bounds_spend_no_rows_on_preprocessing():
    data = make_linear_regression(30_000, 4, rng=np.random.default_rng(2))
    model = DPLinearRegression(
        epsilon=1.0, feature_bounds=(-5, 5), target_bounds=(-8, 8), random_state=0
    ).fit(data.X, data.y)
    assert model.privacy_report_.num_partitions == 1  # only the main fit
    assert "public bounds" in model.fit_info_["bounds"]
    assert any("public bounds" in a for a in model.privacy_report_.assumptions)


def test_intercept_is_learned_and_no_intercept_model_has_none():
    data = make_linear_regression(100_000, 3, rng=np.random.default_rng(3))
    shifted = data.y + 7.0
    model = DPLinearRegression(epsilon=4.0, random_state=0).fit(data.X + 2.0, shifted)
    assert model.intercept_ == pytest.approx(7.0 - 2.0 * data.w_star.sum(), abs=0.1)
    plain = DPLinearRegression(epsilon=4.0, fit_intercept=False, random_state=0)
    plain.fit(data.X, data.y)
    assert plain.intercept_ == 0.0
    np.testing.assert_allclose(plain.coef_, data.w_star, atol=0.1)


def test_inputs_are_never_modified_and_fits_are_reproducible():
    data = make_linear_regression(20_000, 3, rng=np.random.default_rng(4))
    X, y = np.array(data.X), np.array(data.y)
    X0, y0 = X.copy(), y.copy()
    a = DPLinearRegression(random_state=5).fit(X, y)
    b = DPLinearRegression(random_state=5).fit(X, y)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.predict(X[:3]).shape == (3,)


def test_top_level_import():
    assert privopt.DPLinearRegression is DPLinearRegression


@pytest.mark.parametrize(
    ("X", "y", "kwargs", "match"),
    [
        (np.full((5000, 2), np.nan), np.zeros(5000), {}, "NaN"),
        (np.ones((5000, 2)), np.full(5000, np.inf), {}, "infinity|inf"),
        (np.ones((5000, 2)), np.ones(4000), {}, "inconsistent"),
        (np.ones((0, 2)), np.ones(0), {}, "0 sample"),
        (np.ones((60, 2)), np.ones(60), {}, "rows"),
        (np.ones((5000, 2)), np.ones(5000), {"epsilon": 0.0}, "epsilon"),
        (np.ones((5000, 2)), np.ones(5000), {"epsilon": float("inf")}, "epsilon"),
        (np.ones((5000, 2)), np.ones(5000), {"delta": 1.5}, "delta"),
        (np.ones((5000, 2)), np.ones(5000), {"method": "magic"}, "method"),
        # partial public bounds are accepted (the target's are then private); a bad pair is named
        (np.ones((5000, 2)), np.ones(5000), {"feature_bounds": [(0, 1), (1, 0)]}, r"\[1\]"),
        (
            np.ones((5000, 2)),
            np.ones(5000),
            {"feature_bounds": np.zeros((3, 2)), "target_bounds": (0, 1)},
            "feature_bounds",
        ),
        (np.ones((5000, 2)), np.ones(5000), {"random_state": "seed"}, "random_state"),
    ],
)
def test_bad_input_is_named(X, y, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPLinearRegression(**kwargs).fit(X, y)


# scikit-learn's estimator checks of DPLinearRegression (the same configuration) run once, in
# tests/estimators/test_sklearn_checks.py, with every other privopt estimator.


@pytest.mark.parametrize(
    "method",
    [
        "adassp",
        "ambssgd",
        pytest.param("dpsgd", marks=pytest.mark.slow),
        pytest.param("ftrl-sigma", marks=pytest.mark.slow),
    ],
)
def test_one_relation_for_every_method_on_request(method):
    # issue 13 item 4: neighbouring="zero-out" accounts every method under one relation, so
    # methods compare at one guarantee; replace-one is refused for Poisson DP-SGD only.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60_000, 3))
    y = X @ np.ones(3) + 0.1 * rng.normal(size=60_000)
    kwargs = dict(method=method, feature_bounds=(-1, 1), target_bounds=(-4, 4), random_state=0)
    zero = DPLinearRegression(neighbouring="zero-out", **kwargs).fit(X, y)
    assert zero.privacy_report_.neighbouring == "zero-out"
    assert zero.privacy_report_.epsilon <= 1.0
    if method == "dpsgd":
        with pytest.raises(ValueError, match="neighbouring='zero-out'"):
            DPLinearRegression(neighbouring="replace-one", **kwargs).fit(X, y)
        return
    replace = DPLinearRegression(neighbouring="replace-one", **kwargs).fit(X, y)
    assert replace.privacy_report_.neighbouring == "replace-one"
    if method in ("adassp", "ftrl-sigma"):  # zero-out sensitivities are at most replace-one's
        s_zero = [e.parameters["sensitivity"] for e in zero.privacy_report_.events]
        s_replace = [e.parameters["sensitivity"] for e in replace.privacy_report_.events]
        assert all(a <= b for a, b in zip(s_zero, s_replace, strict=True))
        assert any(a < b for a, b in zip(s_zero, s_replace, strict=True))


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_default_newton_reads_x_blockwise_with_the_same_model(fit_intercept, monkeypatch):
    """The default noisy-Newton fit runs on X block by block (no transformed copy): the same
    coefficients, to summation order, as noisy Newton on ``bounds.transform(X, y)``, and the
    same privacy report."""
    from privopt.estimators import _regression_methods as methods
    from privopt.estimators import linear_regression as module

    data = make_linear_regression(30_000, 8, sigma=1.0, rng=np.random.default_rng(2))
    kwargs = {"delta": 1e-6, "random_state": 4, "fit_intercept": fit_intercept}
    fast = DPLinearRegression(**kwargs).fit(data.X, data.y)
    assert fast.fit_info_["method"] == "newton"

    def on_transform(est, X, y, bounds, mu, rng, ledger, n_public):
        Z, t = bounds.transform(X, y)
        return methods.run_newton(est, Z, t, bounds, mu, rng, ledger, n_public)

    monkeypatch.setattr(module, "run_newton_rows", on_transform)
    slow = DPLinearRegression(**kwargs).fit(data.X, data.y)
    scale = np.linalg.norm(slow.coef_)
    np.testing.assert_allclose(fast.coef_, slow.coef_, rtol=0, atol=1e-10 * scale)
    assert fast.intercept_ == pytest.approx(slow.intercept_, rel=1e-10, abs=1e-10 * scale)
    assert fast.privacy_report_.epsilon == pytest.approx(slow.privacy_report_.epsilon, rel=1e-12)
