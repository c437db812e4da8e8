"""Private quantiles: the exponential mechanism's law, its GDP accounting, accuracy, atoms."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from privopt.accounting import gdp_delta
from privopt.clipping.quantiles import (
    bounded_range_epsilon,
    bounded_range_gdp_mu,
    interval_quantile_scores,
    log_grid,
    private_interval_quantile,
    private_quantile,
    value_grid,
)
from privopt.noise.selection import exponential_mechanism


def test_exponential_mechanism_has_the_softmax_law():
    # P[j] ~ exp(eps u_j / (2 Delta)): scores (0, 1, 2), eps = 2, Delta = 1 -> ~ (1, e, e^2)
    rng = np.random.default_rng(0)
    draws = 30_000
    counts = np.bincount(
        [exponential_mechanism(rng, np.array([0.0, 1.0, 2.0]), 2.0, 1.0) for _ in range(draws)],
        minlength=3,
    )
    p = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    sd = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(counts - draws * p) < 4.5 * sd), (counts, draws * p)


@pytest.mark.parametrize(
    ("scores", "eps", "sens", "match"),
    [
        (np.array([0.0, np.nan]), 1.0, 1.0, "finite"),
        (np.array([0.0, np.inf]), 1.0, 1.0, "finite"),
        (np.array([]), 1.0, 1.0, "non-empty"),
        (np.array([0.0]), 0.0, 1.0, "epsilon"),
        (np.array([0.0]), math.inf, 1.0, "epsilon"),
        (np.array([0.0]), 1.0, -1.0, "sensitivity"),
        (np.array([0.0]), 1.0, math.nan, "sensitivity"),
    ],
)
def test_exponential_mechanism_refuses_inputs_that_void_the_guarantee(scores, eps, sens, match):
    with pytest.raises(ValueError, match=match):
        exponential_mechanism(np.random.default_rng(0), scores, eps, sens)


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 4.0, 20.0])
def test_bounded_range_mu_is_the_worst_two_point_case(eps):
    # the two-point pairs with privacy loss in {a, a + eps}, a in [-eps, 0]: their GDP mu
    a = np.linspace(-eps, 0.0, 4001)[1:-1]
    h = np.expm1(-a) / np.expm1(eps)
    worst = float(np.max(norm.isf(h) - norm.ppf(np.exp(a) * (1 - h))))
    mu = bounded_range_gdp_mu(eps)
    assert worst <= mu * (1 + 1e-9)
    assert worst >= mu * (1 - 1e-6)
    # half of what a plain eps-DP mechanism costs for small eps, never more
    assert mu <= 2 * norm.ppf(math.exp(eps) / (1 + math.exp(eps))) + 1e-12


def test_exponential_mechanism_privacy_curve_is_below_its_gdp_curve():
    # Two candidates whose utilities move by Delta in opposite directions: the output laws of
    # the exponential mechanism on neighbours; their exact hockey-stick divergence must stay
    # below the GDP curve of the mu the ledger records.
    eps = 1.5
    for gap in (0.0, 0.7, 3.0):
        u = np.array([gap, 0.0])
        p = np.exp(eps * u / 2) / np.exp(eps * u / 2).sum()
        moved = u + np.array([-1.0, 1.0])
        q = np.exp(eps * moved / 2) / np.exp(eps * moved / 2).sum()
        mu = bounded_range_gdp_mu(eps)
        for e in (0.0, 0.3, 0.7):
            exact = max(
                np.sum(np.maximum(p - np.exp(e) * q, 0)), np.sum(np.maximum(q - np.exp(e) * p, 0))
            )
            assert exact <= gdp_delta(mu, e) + 1e-12


def test_inverse_rounds_toward_privacy_and_survives_large_budgets():
    for mu in (1e-4, 0.03, 0.5, 3.0, 60.0, 1e4):
        eps = bounded_range_epsilon(mu)
        assert bounded_range_gdp_mu(eps) <= mu
        if mu <= 60:
            assert bounded_range_gdp_mu(eps) == pytest.approx(mu, rel=1e-9)


def test_quartiles_are_accurate_at_two_thousand_rows():
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(30):
        x = np.sort(1013.0 + 6.0 * rng.standard_t(df=3, size=2000))
        shift = 1013.0
        for q in (0.25, 0.75):
            r = private_interval_quantile(x - shift, q, value_grid(), mu=0.05, rng=rng, n=2000)
            errors.append(abs(np.searchsorted(x - shift, r.value) / 2000 - q))
    # mu = 0.05 per release (epsilon 0.08): the rank error is Laplace-like with scale
    # 2 / (eps n) ~ 1.3% (median 0.9%), widened by the log grid's density (denser towards the
    # coarse centre); the largest of 60 draws of such a law is about ln(60) ~ 4 scales
    assert np.median(errors) < 0.025, np.median(errors)
    assert max(errors) < 0.1, max(errors)


def test_atoms_are_quantiles_of_every_level_they_cover():
    y = np.sort(np.r_[np.zeros(700), np.ones(300)])
    scores = interval_quantile_scores(y, np.array([-0.5, 0.0, 0.5, 1.0, 1.5]), 0.25, 1000)
    assert scores.tolist() == [-250.0, 0.0, -450.0, -450.0, -750.0]
    rng = np.random.default_rng(0)
    # levels 10% / 90%: the atoms 0 and 1 hold them with 200+ ranks of margin
    lo = private_interval_quantile(y, 0.1, value_grid(), mu=0.2, rng=rng, n=1000)
    hi = private_interval_quantile(y, 0.9, value_grid(), mu=0.2, rng=rng, n=1000)
    assert (lo.value, hi.value) == (0.0, 1.0)


def test_plain_quantile_and_grid_validation():
    rng = np.random.default_rng(0)
    grid = log_grid(0.01, 100.0, 1.01)
    assert grid[0] == 0.01 and grid[-1] >= 100.0 and np.all(np.diff(grid) > 0)
    r = private_quantile(rng.exponential(size=5000), 0.5, grid, mu=0.5, rng=rng)
    assert r.value == pytest.approx(math.log(2), rel=0.1)
    with pytest.raises(ValueError, match="q"):
        private_quantile(np.ones(10), 1.0, grid, mu=1.0, rng=rng)
    with pytest.raises(ValueError, match="increasing"):
        private_quantile(np.ones(10), 0.5, grid[::-1], mu=1.0, rng=rng)
    with pytest.raises(ValueError, match="finite"):
        private_quantile(np.array([1.0, np.nan]), 0.5, grid, mu=1.0, rng=rng)
