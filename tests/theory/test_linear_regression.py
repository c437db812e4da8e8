"""Exact stationary F_inf for linear regression (notes/001.md §4.4 values)."""

import numpy as np
import pytest

from privopt.noise import independent, nu_dpftrl, optimal_cc
from privopt.theory import linear_regression_f_inf, linear_regression_f_inf_lti


def test_small_problem_values():
    # d = 3, lambda = (1, 0.3, 0.1), eta = 0.1, nu = eta mu = 0.01, sigma_sgd = 0.5, rho = G = 1;
    # the note's simulation (3000 chains x 4000 steps) measured 0.0529064 and 0.0222527.
    lam = np.array([1.0, 0.3, 0.1])
    sgd = linear_regression_f_inf(independent(), 0.1, lam, 1.0, sigma_sgd=0.5)
    ftrl = linear_regression_f_inf(nu_dpftrl(0.01), 0.1, lam, 1.0, sigma_sgd=0.5)
    assert sgd == pytest.approx(0.0529374, abs=5e-8)
    assert ftrl == pytest.approx(0.0222469, abs=5e-8)
    assert sgd == pytest.approx(0.0529064, rel=0.01) and ftrl == pytest.approx(0.0222527, rel=0.01)
    assert linear_regression_f_inf_lti(independent(), 0.1, lam, 1.0, sigma_sgd=0.5) == (
        pytest.approx(0.04752, abs=5e-6)
    )
    assert linear_regression_f_inf_lti(nu_dpftrl(0.01), 0.1, lam, 1.0, sigma_sgd=0.5) == (
        pytest.approx(0.01973, abs=5e-6)
    )


def test_fig2_setting_ratio():
    # d = 128, lambda_k = 1/k, eta = 0.02, nu = eta * mu: ratio 0.01415 (issue 5 golden value)
    lam = 1.0 / np.arange(1, 129)
    sgd = linear_regression_f_inf(independent(), 0.02, lam, 1.0)
    ftrl = linear_regression_f_inf(nu_dpftrl(0.02 * lam.min()), 0.02, lam, 1.0)
    assert sgd == pytest.approx(0.33879, abs=5e-6)
    assert ftrl == pytest.approx(0.0047923, abs=5e-8)
    assert ftrl / sgd == pytest.approx(0.01415, abs=5e-5)


def test_exact_is_above_the_lti_lower_bound_process():
    lam = np.array([1.0, 0.5, 0.2, 0.05])
    for mech in (independent(), nu_dpftrl(0.005), nu_dpftrl(0.2)):
        exact = linear_regression_f_inf(mech, 0.1, lam, 0.5, sigma_sgd=0.3)
        assert exact > linear_regression_f_inf_lti(mech, 0.1, lam, 0.5, sigma_sgd=0.3)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((independent(), 1.5, np.array([1.0]), 1.0), "eta"),
        ((independent(), 0.0, np.array([1.0]), 1.0), "eta"),
        ((independent(), 0.5, np.full(10, 1.0), 1.0), "stationary"),
        ((optimal_cc(), 0.1, np.array([1.0]), 1.0), "infinite anytime"),
        ((independent(), 0.1, np.array([1.0, -1.0]), 1.0), "eigenvalues"),
        ((independent(), 0.1, np.array([1.0]), 0.0), "rho"),
    ],
)
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        linear_regression_f_inf(*args)
