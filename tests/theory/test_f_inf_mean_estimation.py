"""F_inf for mean estimation (Choquette-Choo et al. 2024, Section 2.1): closed forms, golden values,
simulation."""

import math

import numpy as np
import pytest
from scipy.signal import lfilter

from privopt.noise import anti_pgd, custom, independent, nu_dpftrl, optimal_cc
from privopt.theory import (
    mean_estimation_f_inf,
    mean_estimation_f_inf_dpsgd,
    mean_estimation_f_inf_optimal,
    optimal_to_dpsgd_ratio,
    toeplitz_quadratic,
)


def test_golden_values_notes_001():
    # docs/theory/correlated-noise.md#mean-estimation: eta = 0.05, rho = 0.5, G = 1
    assert mean_estimation_f_inf_dpsgd(0.05, 0.5) == pytest.approx(0.025641, abs=5e-7)
    assert mean_estimation_f_inf_optimal(0.05, 0.5) == pytest.approx(0.0067968, abs=5e-8)


@pytest.mark.parametrize(
    ("eta", "ratio"),
    [
        (0.001, 0.016374),
        (0.01, 0.090868),
        (0.05, 0.265075),
        (0.1, 0.400491),
        (0.5, 0.863790),
        (0.9, 0.994984),
        (1.0, 1.0),
        (1.9, 0.400491),
    ],
)
def test_fig1_ratio(eta, ratio):
    assert optimal_to_dpsgd_ratio(eta) == pytest.approx(ratio, abs=5e-7)


@pytest.mark.parametrize("eta", [0.02, 0.05, 0.3])
def test_time_domain_formula_matches_closed_forms(eta):
    assert mean_estimation_f_inf(independent(), eta, 0.5) == pytest.approx(
        mean_estimation_f_inf_dpsgd(eta, 0.5), rel=1e-12
    )
    assert mean_estimation_f_inf(nu_dpftrl(eta), eta, 0.5) == pytest.approx(
        mean_estimation_f_inf_optimal(eta, 0.5), rel=1e-8
    )


def test_beta_star_minimises_over_nu():
    eta = 0.05
    grid = np.linspace(0.01, 0.2, 39)
    values = [mean_estimation_f_inf(nu_dpftrl(nu), eta, 0.5) for nu in grid]
    assert grid[int(np.argmin(values))] == pytest.approx(eta)


def test_toeplitz_quadratic_against_brute_force():
    rng = np.random.default_rng(0)
    beta = rng.normal(size=40)
    r = 0.83
    idx = np.arange(40)
    brute = float(beta @ (r ** np.abs(idx[:, None] - idx[None, :])) @ beta)
    assert toeplitz_quadratic(beta, r) == pytest.approx(brute, rel=1e-12)


def test_simulation_agrees_with_the_formula():
    """Simulate delta_{t+1} = (1 - eta) delta_t - eta sigma_dp (B w)_t over many chains.

    4000 chains x 1500 stationary steps: the time-average of delta^2 has a relative standard
    error of roughly 1-2% (correlated over ~1/eta steps); we allow 5%.
    """
    eta, rho, chains, burn, keep = 0.05, 0.5, 4000, 600, 1500
    rng = np.random.default_rng(1)
    for mech, expected in (
        (independent(), mean_estimation_f_inf_dpsgd(eta, rho)),
        (nu_dpftrl(eta), mean_estimation_f_inf_optimal(eta, rho)),
    ):
        sigma_dp = math.sqrt(mech.anytime_sensitivity_squared() / (2 * rho))
        beta = mech.beta(800)  # |beta*_t| ~ t^-1.5 (0.95)^t: negligible beyond 800 terms
        w = rng.standard_normal((burn + keep, chains))
        noise = lfilter(beta, [1.0], w, axis=0)  # (B w)_t
        delta = lfilter([0.0, -eta * sigma_dp], [1.0, -(1.0 - eta)], noise, axis=0)
        measured = float(np.mean(delta[burn:] ** 2))
        assert measured == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: mean_estimation_f_inf_dpsgd(0.0, 0.5), "eta"),
        (lambda: mean_estimation_f_inf_dpsgd(2.0, 0.5), "eta"),
        (lambda: mean_estimation_f_inf_optimal(float("nan"), 0.5), "eta"),
        (lambda: mean_estimation_f_inf(optimal_cc(), 0.05, 0.5), "infinite anytime"),
        (lambda: mean_estimation_f_inf(anti_pgd(), 0.05, 0.5), "infinite anytime"),
        (lambda: mean_estimation_f_inf(nu_dpftrl(0.1), 0.05, 0.0), "rho"),
        (lambda: optimal_to_dpsgd_ratio(-1.0), "eta"),
        (lambda: toeplitz_quadratic(np.ones(3), 1.0), "r"),
        (lambda: nu_dpftrl(1.5), "nu"),
    ],
)
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_custom_mechanism_f_inf_is_finite_when_its_anytime_sensitivity_is():
    mech = custom([1.0, -0.5])
    value = mean_estimation_f_inf(mech, 0.1, 0.5)
    assert math.isfinite(value) and value > 0
