"""Bounds of Choquette-Choo et al. (2024) §2.2 (Theorems C.14, C.18) and the lower-bound-attaining
correlation.

Golden values from docs/theory/correlated-noise.md#components item 9 (d = 32, lambda_k = 1/k, eta =
0.05, rho = G = 1).
"""

import numpy as np
import pytest

from privopt.noise import independent, nu_dpftrl, optimal_cc
from privopt.theory import (
    effective_dimension,
    linear_regression_best_lower_bound,
    linear_regression_f_inf,
    linear_regression_f_inf_lti,
    linear_regression_lower_bound,
    linear_regression_upper_bound,
    lower_bound_mechanism,
)

EIGS = 1.0 / np.arange(1, 33)
ETA = 0.05


@pytest.fixture(scope="module")
def optimized():
    return lower_bound_mechanism(ETA, EIGS)


def test_min_phase_h_inverse_sqrt_attains_the_lower_bound(optimized):
    assert optimized.anytime_sensitivity_squared() == pytest.approx(2.196749, abs=5e-7)
    attained = linear_regression_f_inf_lti(optimized, ETA, EIGS, rho=1.0)
    bound = linear_regression_best_lower_bound(ETA, EIGS, rho=1.0)
    assert bound == pytest.approx(0.0123141, abs=5e-8)
    assert attained == pytest.approx(bound, rel=1e-6)


def test_optimized_against_nu_ftrl_and_sgd_golden_values(optimized):
    nu = linear_regression_f_inf_lti(nu_dpftrl(ETA * EIGS.min()), ETA, EIGS, rho=1.0)
    sgd = linear_regression_f_inf_lti(independent(), ETA, EIGS, rho=1.0)
    assert nu == pytest.approx(0.0133035, abs=5e-8)  # only 8% above the optimum
    assert sgd == pytest.approx(0.200641, abs=5e-7)


def test_the_sensitivity_of_the_spectral_mechanism_matches_its_inverse(optimized):
    # gamma_inf^2 computed on the grid equals sum c_t^2 of the causal inverse factor.
    c = optimized.c(2**19)
    assert np.sum(c**2) == pytest.approx(optimized.anytime_sensitivity_squared(), rel=1e-9)
    # C is the inverse of B: their convolution is the unit impulse.
    conv = np.convolve(optimized.beta(4000), c[:4000])[:4000]
    np.testing.assert_allclose(conv, np.eye(1, 4000)[0], atol=1e-9)


@pytest.mark.parametrize("sigma_sgd", [0.0, 0.5])
@pytest.mark.parametrize(
    "mechanism", [independent(), nu_dpftrl(0.0025), optimal_cc()], ids=["sgd", "nu", "cc"]
)
def test_upper_bound_exact_lti_lower_bound_are_ordered(mechanism, sigma_sgd, optimized):
    if mechanism.name == "optimal-cc":  # infinite anytime sensitivity: F_inf undefined
        with pytest.raises(ValueError, match="infinite anytime sensitivity"):
            linear_regression_upper_bound(mechanism, ETA, EIGS, rho=1.0)
        return
    args = (mechanism, ETA, EIGS, 1.0, 1.0, sigma_sgd)
    best = linear_regression_best_lower_bound(ETA, EIGS, 1.0, 1.0, sigma_sgd)
    lower = linear_regression_lower_bound(*args)
    lti = linear_regression_f_inf_lti(*args)
    exact = linear_regression_f_inf(*args)
    upper = linear_regression_upper_bound(*args)
    assert best <= lower * (1 + 1e-9) and lower <= lti <= exact <= upper
    if sigma_sgd == 0.0:  # C.18's beta-specific bound is the LTI noise part exactly
        assert lower == pytest.approx(lti, rel=1e-12)


def test_upper_bound_needs_eta_r_squared_below_one():
    with pytest.raises(ValueError, match="eta R\\^2 < 1"):
        linear_regression_upper_bound(independent(), 0.2, EIGS, rho=1.0)  # R^2 = 6.06
    assert linear_regression_upper_bound(independent(), 0.2, EIGS, 1.0, r_squared=4.0) > 0


@pytest.mark.parametrize(
    ("eigs", "expected"),
    [(np.ones(7), 7.0), (np.array([1.0] + [0.01] * 100), 2.0), (1.0 / np.arange(1, 4), 11 / 6)],
)
def test_effective_dimension(eigs, expected):
    assert effective_dimension(eigs) == pytest.approx(expected)
    assert effective_dimension(3.0 * eigs) == pytest.approx(expected)  # scale-free


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: effective_dimension(np.array([1.0, -1.0])), "positive"),
        (lambda: lower_bound_mechanism(2.0, EIGS), "eta"),
        (lambda: lower_bound_mechanism(ETA, EIGS, grid_size=2048), "cannot resolve"),
        (lambda: linear_regression_best_lower_bound(ETA, EIGS, rho=0.0), "rho"),
        (lambda: linear_regression_upper_bound(independent(), ETA, EIGS, 1.0, kurtosis=0), "kurt"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
