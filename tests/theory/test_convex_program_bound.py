"""Theorem 3.1's convex-program bound and Optimized DP-FTRL (Choquette-Choo et al. (2024) §3, App.
E; docs/theory/correlated-noise.md#convex-program-bound).

Reference values come from closed forms, not from the solver:

* L = mu (a quadratic): the constraint reduces to psi >= 2R / (2R |mu - q|^2 - 1), whose
  infimum over the multiplier scale is eta^2 / |1 - eta mu - e^{i omega}|^2, the transfer
  function of the linear recursion. So ``distance`` must *equal* lim E[delta^2] of mean
  estimation (:func:`privopt.theory.mean_estimation_f_inf`, no 1/2) with step eta * L, divided by
  L^2. The certified value reaches the limit (the scale search goes to s ~ e^40) and the
  trapezoid rule on the k-point grid errs by O(exp(-k eta mu)) (about e^-50 here), so 1e-6
  relative is a generous tolerance.
* L > mu: the bound holds for every quadratic with curvatures in [mu, L], so it must dominate
  their exact errors (mean estimation per curvature; the LTI linear-regression F_inf).
"""

import math
import sys

import numpy as np
import pytest

pytest.importorskip("cvxpy")

from privopt.noise import (
    TreeAggregation,
    anti_pgd,
    custom,
    damped_anti_pgd,
    independent,
    nu_beta,
    nu_dpftrl,
    optimal_cc,
)
from privopt.theory import convex_bound_program, linear_regression_f_inf_lti, mean_estimation_f_inf
from privopt.theory.convex_bound import (
    PowerSpectrum,
    convex_program_bound,
    frequency_grid,
    multiplier_basis,
    optimized_correlation,
)


@pytest.mark.parametrize("eta", [0.05, 0.3])
@pytest.mark.parametrize("curvature", [1.0, 2.0])
@pytest.mark.parametrize("mechanism", [independent(), nu_dpftrl(0.05), nu_dpftrl(0.3)])
def test_quadratic_case_is_exact(eta, curvature, mechanism):
    rho, sigma_sgd = 0.5, 0.3
    result = convex_program_bound(
        mechanism, eta=eta, L=curvature, mu=curvature, rho=rho, sigma_sgd=sigma_sgd
    )
    exact = mean_estimation_f_inf(mechanism, eta * curvature, rho, sigma_sgd=sigma_sgd)
    exact /= curvature**2  # delta_{t+1} = (1 - eta h) delta_t - eta zeta_t
    assert result.distance >= exact * (1 - 1e-9)
    assert result.distance == pytest.approx(exact, rel=1e-6)
    assert result.value == pytest.approx(curvature / 2 * result.distance, rel=1e-12)


def test_mean_estimation_reference_numbers():
    # docs/theory/correlated-noise.md#mean-estimation: eta = 0.05, rho = 0.5, G = 1: DP-SGD
    # 0.025641, beta* 0.0067968 (lim E delta^2).
    sgd = convex_program_bound(independent(), eta=0.05, L=1, mu=1, rho=0.5)
    star = convex_program_bound(nu_dpftrl(0.05), eta=0.05, L=1, mu=1, rho=0.5)
    assert sgd.distance == pytest.approx(0.025641, abs=1e-6)
    assert star.distance == pytest.approx(0.0067968, abs=1e-7)
    assert sgd.value == pytest.approx(0.025641 / 2, abs=1e-6)  # excess risk: the 1/2


@pytest.mark.parametrize("mechanism", [independent(), nu_dpftrl(0.025)])
def test_bound_dominates_every_quadratic_in_the_class(mechanism):
    eta, L, mu, rho = 0.5, 1.0, 0.05, 0.5
    result = convex_program_bound(mechanism, eta=eta, L=L, mu=mu, rho=rho, n_freq=400)
    for h in (mu, math.sqrt(mu * L), 0.5 * L, L):
        quadratic = mean_estimation_f_inf(mechanism, eta * h, rho) / h**2
        assert result.distance >= quadratic
    eigs = np.geomspace(mu, 0.9 * L, 4)  # linear regression needs eta < 1 / lambda_max
    several = convex_program_bound(mechanism, eta=eta, L=L, mu=mu, rho=rho, dim=4, n_freq=400)
    assert several.value >= linear_regression_f_inf_lti(mechanism, eta, eigs, rho)


def test_certified_point_satisfies_the_papers_constraint():
    eta, L, mu = 0.5, 1.0, 0.1
    result = convex_program_bound(independent(), eta=eta, L=L, mu=mu, rho=0.5, n_freq=200)
    lam, lags = result.multiplier, result.lags
    assert np.all(lam >= 0)
    assert np.sum(lam) <= 2 * lam[lags == 0][0] * (1 + 1e-12)
    assert np.all(result.psi >= 0)
    # Paper (89)-(90) literally: diag(-eta^2, psi_E1) - A^* M~ A >= 0, psi_E1 = eta^2 psi.
    for omega, psi in zip(result.omega, result.psi, strict=True):
        big_lambda = np.sum(lam * np.exp(-1j * omega * lags))
        a = np.array([[eta, 0.0], [1 - np.exp(1j * omega), -eta]])
        two_re = big_lambda + np.conj(big_lambda)
        m_tilde = np.array(
            [
                [-mu * L * two_re, mu * big_lambda + L * np.conj(big_lambda)],
                [mu * np.conj(big_lambda) + L * big_lambda, -two_re],
            ]
        )
        slack = np.diag([-(eta**2), eta**2 * psi]) - a.conj().T @ m_tilde @ a
        assert np.allclose(slack, slack.conj().T)
        eigenvalues = np.linalg.eigvalsh(slack)
        assert eigenvalues.min() >= -1e-9 * np.abs(eigenvalues).max()
    # and the bound is the quadrature of psi times the noise spectrum
    spectrum = result.noise_variance * result.power
    assert result.distance == pytest.approx(np.mean(result.psi * spectrum), rel=1e-10)


def test_monotone_in_condition_number():
    eta = 1.0
    previous = {"sgd": 0.0, "nu": 0.0}
    for kappa in (1.0, 2.0, 5.0, 10.0, 20.0):
        mu = 1.0 / kappa
        kwargs = {"eta": eta, "L": 1.0, "mu": mu, "rho": 0.5, "n_freq": 300}
        values = {
            "sgd": convex_program_bound(independent(), **kwargs).value,
            "nu": convex_program_bound(nu_dpftrl(eta * mu), **kwargs).value,
        }
        for name, value in values.items():
            assert value >= previous[name] * (1 - 1e-6), (kappa, name)
        previous = values


@pytest.mark.parametrize("mechanism", [independent(), nu_dpftrl(0.1)])
def test_grid_refinement_changes_the_bound_by_less_than_one_percent(mechanism):
    kwargs = {"eta": 1.0, "L": 1.0, "mu": 0.1, "rho": 0.5}
    coarse = convex_program_bound(mechanism, n_freq=500, **kwargs).value
    fine = convex_program_bound(mechanism, n_freq=1000, **kwargs).value
    assert abs(coarse - fine) / fine < 0.01


def test_longer_multipliers_can_only_help():
    # Every lag a variable: the T_max = 5 multipliers are a subset of the T_max = 10 ones.
    kwargs = {"eta": 0.5, "L": 1.0, "mu": 0.05, "rho": 0.5, "n_freq": 400}
    short = convex_program_bound(independent(), multiplier_taps=5, multiplier_knots=None, **kwargs)
    long = convex_program_bound(independent(), multiplier_taps=10, multiplier_knots=None, **kwargs)
    assert long.value <= short.value * (1 + 1e-6)
    assert short.lags.tolist() == list(range(-5, 6))


@pytest.mark.parametrize("kappa", [5.0, 20.0, 50.0])
def test_dpsgd_above_nu_ftrl_above_optimized(kappa):
    eta, mu = 1.0, 1.0 / kappa
    kwargs = {"eta": eta, "L": 1.0, "mu": mu, "rho": 0.5, "n_freq": 400}
    sgd = convex_program_bound(independent(), **kwargs).value
    ftrl = convex_program_bound(nu_dpftrl(eta * mu), **kwargs).value
    opt = optimized_correlation(**kwargs, iterations=3)
    assert sgd > ftrl > opt.bound
    assert sgd > ftrl > opt.bounds[-1]


def test_optimized_bounds_are_non_increasing_and_the_beta_is_usable():
    kwargs = {"eta": 1.0, "L": 1.0, "mu": 0.02, "rho": 0.5, "n_freq": 400}
    opt = optimized_correlation(**kwargs, iterations=6, rtol=0.0)
    bounds = np.array(opt.bounds)
    assert bounds.size >= 3
    assert np.all(np.diff(bounds) <= 1e-7 * bounds[:-1])
    assert bounds[-1] < 0.95 * bounds[0]  # a real improvement over nu-DP-FTRL
    # the realised causal beta: beta_0 = 1, minimum phase (finite anytime sensitivity), and
    # its own bound is close to the grid value it was built from
    assert opt.beta[0] == 1.0
    assert np.isfinite(opt.mechanism.anytime_sensitivity_squared())
    assert opt.bound == pytest.approx(bounds[-1], rel=0.01)
    np.testing.assert_allclose(opt.result.power / opt.power, 1.0, rtol=0.05)  # both geo-mean 1
    again = convex_program_bound(opt.beta, **kwargs)  # a raw beta gives the same bound
    assert again.value == pytest.approx(opt.bound, rel=1e-4)


def test_optimized_is_dpsgd_when_gradient_descent_converges_in_one_step():
    # eta = 1 / L with L = mu: theta_{t+1} = -eta zeta_t, so E theta^2 = eta^2 sigma^2 ||beta||^2,
    # minimised over beta (with gamma^2 = ||c||^2) by beta = e_0.
    opt = optimized_correlation(1.0, 1.0, 1.0, rho=0.5, n_freq=64, n_coefficients=50)
    assert opt.bound == pytest.approx(0.5, rel=1e-6)  # L/2 * sigma^2, sigma^2 = 1
    np.testing.assert_allclose(opt.beta, np.eye(1, 50)[0], atol=1e-8)


def test_input_forms_agree():
    nu = 0.3
    kwargs = {"eta": 0.5, "L": 1.0, "mu": 0.2, "rho": 0.5, "n_freq": 256}
    mech = damped_anti_pgd(nu)  # beta = (1, -(1 - nu)), gamma^2 = 1 / (nu (2 - nu))
    from_mechanism = convex_program_bound(mech, **kwargs)
    from_beta = convex_program_bound(np.array([2.0, -2.0 * (1 - nu)]), **kwargs)  # scale-free
    spectrum = PowerSpectrum(
        lambda w: np.abs(1 - (1 - nu) * np.exp(-1j * w)) ** 2, gamma_sq=1 / (nu * (2 - nu))
    )
    from_power = convex_program_bound(spectrum, **kwargs)
    grid_quadrature = convex_program_bound(
        PowerSpectrum(spectrum.values(frequency_grid(256))), **kwargs
    )
    assert from_mechanism.gamma_sq == pytest.approx(1 / (nu * (2 - nu)), rel=1e-12)
    for other in (from_beta, from_power, grid_quadrature):
        assert other.value == pytest.approx(from_mechanism.value, rel=1e-6)
    # a long nu-DP-FTRL beta as a raw array: gamma^2 from the series matches the closed form
    beta = nu_beta(0.1, 4000)
    assert convex_program_bound(beta, **kwargs).gamma_sq == pytest.approx(
        nu_dpftrl(0.1).anytime_sensitivity_squared(), rel=1e-9
    )


def test_multiplier_basis_is_a_nonnegative_subset_of_truncated_multipliers():
    lags, basis = multiplier_basis(100, 12)
    assert lags.tolist() == list(range(-100, 101))
    assert np.all(basis >= 0)
    assert basis[:, 0].tolist() == (lags == 0).astype(float).tolist()
    assert np.all(basis[lags == 0, 1:] == 0)  # only column 0 touches lambda_0
    _, identity = multiplier_basis(4, None)
    assert identity.shape == (9, 9) and identity[4, 0] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eta": 0.0}, "eta > 0"),
        ({"eta": -0.1}, "eta > 0"),
        ({"eta": 2.5}, "eta < 2 / L"),
        ({"mu": 0.0}, "mu > 0"),
        ({"mu": -1.0}, "mu > 0"),
        ({"L": 0.05}, "L >= mu"),
        ({"n_freq": 8}, "n_freq=8 is too small"),
        ({"n_freq": 100}, "n_freq=100 is too small"),  # 2 pi / (eta mu) = 126
        ({"rho": 0.0}, "rho > 0"),
        ({"dim": 0}, "dim"),
        ({"sigma_sgd": -1.0}, "sigma_sgd >= 0"),
        ({"multiplier_taps": -1}, "multiplier_taps"),
    ],
)
def test_bad_parameters(kwargs, match):
    params = {"eta": 0.5, "L": 1.0, "mu": 0.1, **kwargs}
    with pytest.raises(ValueError, match=match):
        convex_program_bound(independent(), **params)
    with pytest.raises(ValueError, match=match):
        optimized_correlation(params.pop("eta"), params.pop("L"), params.pop("mu"), **params)


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (anti_pgd(), "infinite anytime sensitivity"),
        (optimal_cc(), "infinite anytime sensitivity"),
        (TreeAggregation(), "Toeplitz"),
        (np.array([0.0, 1.0]), "beta_0"),
        (np.array([1.0, -2.0]), "infinite anytime sensitivity"),  # zero inside the disk
        (np.array([[1.0]]), "1-D"),
        (PowerSpectrum(np.ones(5)), "frequency grid"),
        (PowerSpectrum(lambda w: np.cos(w)), "strictly positive"),
        (lambda w: np.ones_like(w), "PowerSpectrum"),
        (custom([1.0, -1.0]), "infinite anytime sensitivity"),
    ],
)
def test_bad_correlations(source, match):
    with pytest.raises(ValueError, match=match):
        convex_program_bound(source, eta=0.5, L=1.0, mu=0.1, n_freq=200)


def test_missing_cvxpy_gives_an_actionable_import_error(monkeypatch):
    convex_bound_program._PROGRAMS.clear()
    monkeypatch.setitem(sys.modules, "cvxpy", None)
    with pytest.raises(ImportError, match=r"privopt\[theory\]"):
        convex_program_bound(independent(), eta=0.5, L=1.0, mu=0.1, n_freq=200)
