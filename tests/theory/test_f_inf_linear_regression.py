"""Exact stationary F_inf for linear regression
(docs/theory/correlated-noise.md#exact-stationary-error values)."""

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


@pytest.mark.parametrize(
    ("chains", "keep", "tolerance"),
    [
        (800, 2000, 0.05),  # fast: relative standard error about 1.3%
        pytest.param(3000, 4000, 0.02, marks=pytest.mark.slow),  # the note's size: ~0.5%
    ],
)
def test_exact_formula_agrees_with_simulation(chains, keep, tolerance):
    """Noisy-SGD / nu-Noisy-FTRL on x ~ N(0, diag(lambda)), batch size 1, many chains.

    delta_{t+1} = delta_t - eta x_t x_t^T delta_t + eta xi_t x_t - eta sigma (B w)_t; the
    time-and-chain average of 1/2 delta^T H delta after burn-in estimates F_inf. The chains are
    independent and the autocorrelation time is ~ 1/(eta mu) = 100 steps, so the relative
    standard error is about sqrt(2 * 100 / (chains * keep)); the tolerance is ~4 of them.
    """
    from scipy.signal import lfilter

    lam = np.array([1.0, 0.3, 0.1])
    eta, rho, sigma_sgd, burn = 0.1, 1.0, 0.5, 500
    rng = np.random.default_rng(0)
    for mech in (independent(), nu_dpftrl(0.01)):
        sigma = np.sqrt(mech.anytime_sensitivity_squared() / (2 * rho))
        beta = mech.beta(1500)  # (1 - 0.01)^1500 ~ 3e-7: negligible tail
        w = rng.standard_normal((burn + keep, chains, 3))
        noise = lfilter(beta, [1.0], w, axis=0)
        delta = np.zeros((chains, 3))
        total, count = 0.0, 0
        for t in range(burn + keep):
            x = rng.standard_normal((chains, 3)) * np.sqrt(lam)
            xi = sigma_sgd * rng.standard_normal(chains)
            proj = np.einsum("ij,ij->i", x, delta)
            delta = delta - eta * (proj - xi)[:, None] * x - eta * sigma * noise[t]
            if t >= burn:
                total += 0.5 * float(np.mean(delta**2 @ lam))
                count += 1
        expected = linear_regression_f_inf(mech, eta, lam, rho, sigma_sgd=sigma_sgd)
        assert total / count == pytest.approx(expected, rel=tolerance)
