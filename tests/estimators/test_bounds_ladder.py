"""Issue 31 item 2: below the rows the usual private bounds need, the bounds-free default fits
with what can be released (coarse bounds at a larger share, then the intercept-only model) and
warns with the expected quality; it refuses only where even the target's median would be noise,
naming the rows needed."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from privopt import DPLinearRegression
from privopt.accounting import Neighbouring, PrivacyLedger, gdp_mu
from privopt.datasets import load_power_plant
from privopt.estimators._bounds_ladder import (
    COARSE_MAX_SHARE,
    FALLBACK_MAX_SHARE,
    MIN_COARSE_RANKS,
    bounds_plan,
)
from privopt.estimators._utility import UtilityWarning
from privopt.releases.coarse_bounds import (
    COARSE_TARGET_SIGMAS,
    INTERCEPT_ONLY_SHARES,
    coarse_releases,
    intercept_only_bounds,
)
from privopt.releases.known_columns import KnownColumns
from privopt.releases.quantile_bounds import tail_level


def _power_plant(rows, seed=0):
    table = load_power_plant()
    X, y = np.asarray(table.X, float), np.asarray(table.y, float)
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    k = int(0.8 * len(y))
    train, test = order[:rows], order[k:]
    return X[train], y[train], X[test], y[test]


def _fit(X, y, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = DPLinearRegression(delta=1e-6, random_state=0, **kwargs).fit(X, y)
    utility = [str(w.message) for w in caught if issubclass(w.category, UtilityWarning)]
    return model, utility


def _labels(model):
    return [e.label for e in model.privacy_report_.events]


class _Estimator:
    preprocess_fraction = 0.1
    fit_intercept = True

    def _refuse(self, n, needed, what):
        raise ValueError(f"needs at least {needed} rows: {what}")


@pytest.mark.parametrize("d", [1, 4, 10, 30])
@pytest.mark.parametrize("epsilon", [0.1, 0.3, 1.0])
def test_the_rungs_follow_each_other_as_rows_shrink(d, epsilon):
    """Public quantities only: full -> coarse -> coarse at a larger share -> intercept-only ->
    refusal, each boundary where the ranks per release cross MIN_COARSE_RANKS."""
    mu = gdp_mu(epsilon, 1e-6)
    seen = []
    for m in np.unique(np.geomspace(20, 200_000, 400).astype(int)):
        try:
            plan = bounds_plan(_Estimator(), int(m), KnownColumns.none(d), mu)
            rung = plan.kind if plan.fallback is None else f"{plan.kind} (fallback)"
            assert plan.share <= (FALLBACK_MAX_SHARE if plan.kind == "coarse" else 1.0)
            if plan.kind == "coarse":  # every planned coarse release keeps the minimum ranks
                ranks = m * mu * math.sqrt(plan.share / coarse_releases(d))
                assert ranks >= MIN_COARSE_RANKS * (1 - 1e-12)
        except ValueError:
            rung = "refused"
        if not seen or seen[-1] != rung:
            seen.append(rung)
    order = ["refused", "intercept-only (fallback)", "coarse (fallback)", "coarse", "full"]
    assert seen == [r for r in order if r in seen]  # monotone in m
    assert seen[0] == "refused" and seen[-1] == "full"
    assert "intercept-only (fallback)" in seen and "coarse (fallback)" in seen


def test_larger_share_rung_fits_the_power_plant_and_warns_with_its_quality():
    # 450 rows at epsilon 1: the usual coarse share (40%) leaves under 23 ranks per release
    X, y, Xt, yt = _power_plant(450)
    model, utility = _fit(X, y, epsilon=1.0)
    assert model.fit_info_["method"] == "newton"
    assert any("median of feature 3" in label for label in _labels(model))
    assert model.privacy_report_.epsilon <= 1.0
    assert len(utility) == 1 and "took" in utility[0] and "private R^2 estimate" in utility[0]
    assert f"({COARSE_MAX_SHARE:.0%})" in utility[0]
    # measured over 20 seeds at 400-500 rows: median test R^2 0.70-0.75 (OLS 0.93)
    assert 1.0 - np.mean((yt - model.predict(Xt)) ** 2) / np.var(yt) > 0.3
    assert np.isfinite(model.private_r2_)


def test_intercept_only_rung_is_the_private_mean_with_its_releases_in_the_ledger():
    X, y, Xt, _yt = _power_plant(300)
    model, utility = _fit(X, y, epsilon=1.0)
    assert model.fit_info_["method"] == "intercept-only"
    np.testing.assert_array_equal(model.coef_, np.zeros(4))
    assert abs(model.intercept_ - y.mean()) < 0.1 * y.std()
    assert np.all(model.predict(Xt) == model.intercept_)
    labels = _labels(model)
    assert len(labels) == 3 and "private clipped mean of the target" in labels
    assert not any("feature" in label for label in labels)  # no feature column is read
    assert model.privacy_report_.epsilon <= 1.0 and model.privacy_report_.epsilon > 0.99
    assert model.private_r2_ == 0.0  # a constant: at most 0, nothing released for it
    assert len(utility) == 1 and "intercept only" in utility[0] and "at most 0" in utility[0]
    needed = int(utility[0].split("at least ")[1].split()[0].replace(",", ""))
    refit, _ = _fit(*_power_plant(needed)[:2], epsilon=1.0)  # the rows named fit features
    assert refit.fit_info_["method"] == "newton"


def test_refusal_only_where_the_targets_median_would_be_noise():
    rng = np.random.default_rng(0)
    mu = gdp_mu(1.0 * (1 - 1e-9), 1e-6) * math.sqrt(0.95)  # less the quality's share
    needed = math.ceil(MIN_COARSE_RANKS / (mu * math.sqrt(INTERCEPT_ONLY_SHARES[0])))
    X, y = rng.normal(size=(needed, 3)), rng.normal(size=needed)
    with pytest.raises(ValueError, match=rf"needs at least {needed} rows at epsilon=1") as info:
        DPLinearRegression(epsilon=1.0, delta=1e-6).fit(X[:-1], y[:-1])
    message = str(info.value)
    assert "target's median" in message and "feature_bounds=" in message
    assert "\n" not in message
    model, _ = _fit(X, y, epsilon=1.0)
    assert model.fit_info_["method"] == "intercept-only"


def test_without_intercept_the_constant_rung_is_refused():
    X, y, _, _ = _power_plant(300)
    with pytest.raises(ValueError, match="private preprocessing"):
        DPLinearRegression(epsilon=1.0, delta=1e-6, fit_intercept=False).fit(X, y - y.mean())


@pytest.mark.parametrize("relation", ["zero-out", "replace-one"])
def test_intercept_only_releases_against_a_float64_reference(relation):
    rng = np.random.default_rng(3)
    y = rng.standard_t(3, size=800) * 5 + 40
    ledger = PrivacyLedger(neighbouring=Neighbouring(relation))
    bounds = intercept_only_bounds(
        y, np.arange(800), 5, mu=1e5, rng=np.random.default_rng(1), ledger=ledger
    )
    # at mu = 1e5 the releases are exact to their grids: the median and the clipped mean
    centre = np.median(y)
    radius = bounds.y_radius
    level = 1.0 - 2.0 * tail_level(800, 1e5 * math.sqrt(INTERCEPT_ONLY_SHARES[1]))
    spread = np.quantile(np.abs(y - centre), level) / stats.norm.ppf(0.5 + level / 2.0)
    assert radius == pytest.approx(COARSE_TARGET_SIGMAS * spread, rel=0.25)  # a 25% grid
    reference = centre + np.clip(y - centre, -radius, radius).mean()
    assert bounds.y_center == pytest.approx(reference, abs=0.02)
    assert np.all(np.isinf(bounds.x_scale)) and bounds.intercept_scale == 1.0
    mean = next(e for e in ledger.events if e.label == "private clipped mean of the target")
    factor = 2.0 if relation == "replace-one" else 1.0
    assert mean.sensitivity == pytest.approx(factor * radius / 800)
    assert ledger.report(1e-6).mu <= 1e5 * (1 + 1e-9)  # a quantile's mu is capped by its grid


def test_intercept_only_mean_noise_has_its_stated_law(monkeypatch):
    """The clipped mean's noise is N(0, std^2) with the std of its ledger event (KS test)."""
    import privopt.releases.coarse_bounds as coarse

    drawn = []

    def tapped(rng, std, size=None):
        value = coarse_noise(rng, std, size)
        drawn.append((value, std))
        return value

    coarse_noise = coarse.gaussian_noise
    monkeypatch.setattr(coarse, "gaussian_noise", tapped)
    y = np.random.default_rng(5).normal(10.0, 2.0, 500)
    for seed in range(300):
        ledger = PrivacyLedger(neighbouring=Neighbouring.ZERO_OUT)
        intercept_only_bounds(
            y, np.arange(500), 2, mu=1.0, rng=np.random.default_rng(seed), ledger=ledger
        )
        _value, std = drawn[-1]
        event = next(e for e in ledger.events if e.label == "private clipped mean of the target")
        assert std == event.std
        assert ledger.report(1e-6).mu == pytest.approx(1.0)  # the three shares compose to mu
        assert event.std == pytest.approx(
            event.sensitivity / (1.0 * math.sqrt(INTERCEPT_ONLY_SHARES[2]))
        )
    z = np.array([v / s for v, s in drawn])
    assert stats.kstest(z, "norm").pvalue > 1e-3


def test_intercept_only_rung_refuses_sample_weight():
    X, y, _, _ = _power_plant(300)
    with pytest.raises(ValueError, match="intercept-only fallback takes no sample_weight"):
        DPLinearRegression(epsilon=1.0, max_sample_weight=2.0).fit(X, y, sample_weight=np.ones(300))


@pytest.mark.filterwarnings("always::privopt.UtilityWarning")  # the suite ignores them
def test_cli_fits_the_intercept_only_model_and_says_so(capsys, tmp_path):
    import json

    from cli_runner import run

    X, y, _, _ = _power_plant(290)
    data = tmp_path / "small.csv"
    np.savetxt(data, np.c_[X, y], delimiter=",", header="a,b,c,d,y", comments="")
    out = tmp_path / "model.json"
    code, stdout, stderr = run(capsys, "fit", data, "--target", "y", "--out", out)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if "intercept only" in line], (stdout, stderr)
    assert "The model is the intercept only" in stdout
    model = json.loads(out.read_text())
    assert model["method"] == "intercept-only" and model["coef"] == [0.0] * 4
    code, _, stderr = run(
        capsys, "fit", data, "--target", "y", "--out", out, "--epsilon", "0.1", "--overwrite"
    )
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "any private fit" in stderr and "--bounds" in stderr


def test_refitting_one_estimator_takes_the_rung_of_each_fit():
    model = DPLinearRegression(epsilon=1.0, random_state=0)
    for rows, method in ((300, "intercept-only"), (2000, "newton"), (300, "intercept-only")):
        X, y, _, _ = _power_plant(rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X, y)
        assert model.fit_info_["method"] == method
        assert (model.coef_ == 0).all() == (method == "intercept-only")
        assert not any(k in vars(model) for k in ("_intercept_only", "_fallback", "_quality"))


def test_public_ranges_count_in_the_plan():
    """Public feature ranges spend nothing, so 300 rows at epsilon 1 with every feature's range
    given (the target's not) fit a model with features, where with none given they fit the
    intercept-only one; a public target range is the intercept-only model's range (no median
    or spread released)."""
    X, y, _, _ = _power_plant(300)
    ranges = [(0, 40), (25, 85), (990, 1035), (20, 101)]
    model, _ = _fit(X, y, epsilon=1.0, feature_bounds=ranges)
    assert model.fit_info_["method"] == "newton" and np.any(model.coef_ != 0)
    constant, utility = _fit(X, y, epsilon=1.0, target_bounds=(410, 500))
    assert constant.fit_info_["method"] == "intercept-only"
    assert _labels(constant) == ["private clipped mean of the target"]
    assert abs(constant.intercept_ - y.mean()) < 0.2 * y.std()
    assert "at least" in utility[0]


def test_large_tables_below_the_usual_rungs_use_every_row():
    """The private bounds read a secret subset of at most 20,000 rows; below the usual rungs the
    plan counts every row instead (d = 10, 200,000 rows: at epsilon 0.02 and 0.005 a model with
    features, where 20,000 rows would be intercept-only or refused)."""
    rng = np.random.default_rng(0)
    n, d = 200_000, 10
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    mu = gdp_mu(0.02 * (1 - 1e-9), 1e-6) * math.sqrt(0.95)
    assert bounds_plan(_Estimator(), 20_000, KnownColumns.none(d), mu).kind == "intercept-only"
    assert bounds_plan(_Estimator(), n, KnownColumns.none(d), mu).kind == "full"
    model, _ = _fit(X, y, epsilon=0.02)
    assert model.fit_info_["method"] == "newton" and np.any(model.coef_ != 0)
    # where 20,000 rows would be refused, every row is counted before refusing
    mu = gdp_mu(0.005 * (1 - 1e-9), 1e-6) * math.sqrt(0.95)
    assert bounds_plan(_Estimator(), 20_000, KnownColumns.none(d), mu, refuse=False) is None
    model, _ = _fit(X, y, epsilon=0.005)
    assert model.fit_info_["method"] == "newton"
