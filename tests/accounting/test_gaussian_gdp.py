"""Exact Gaussian mechanism and mu-GDP: golden values, closed forms, round trips, bad input."""

import math

import mpmath
import pytest
from hypothesis import given
from hypothesis import strategies as st

from privopt.accounting import (
    calibrate_gaussian_sigma,
    classical_gaussian_sigma,
    compose_gdp,
    gaussian_delta,
    gaussian_epsilon,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
)


def _mp_delta(mu: float, eps: float) -> float:
    """High-precision reference of the GDP privacy profile."""
    mpmath.mp.dps = 50
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    phi = lambda x: mpmath.ncdf(x)  # noqa: E731
    return float(phi(-eps / mu + mu / 2) - mpmath.e**eps * phi(-eps / mu - mu / 2))


# Golden values: peers.md §3.2 (dp_accounting get_epsilon_gaussian / get_sigma_gaussian).
def test_golden_exact_gaussian_epsilon():
    assert gaussian_epsilon(sigma=1.0, delta=1e-5) == pytest.approx(4.377178095681137, abs=1e-6)


def test_golden_calibrate_gaussian():
    assert calibrate_gaussian_sigma(epsilon=1.0, delta=1e-5) == pytest.approx(
        3.7306316348, abs=1e-7
    )


@pytest.mark.parametrize(
    ("mu", "eps"), [(0.1, 0.0), (0.5, 1.0), (1.0, 4.377178), (2.0, 10.0), (5.0, 30.0), (20, 250)]
)
def test_gdp_delta_matches_high_precision(mu, eps):
    assert gdp_delta(mu, eps) == pytest.approx(_mp_delta(mu, eps), rel=1e-9, abs=1e-300)


def test_large_epsilon_does_not_overflow_and_stays_accurate():
    # e^eps overflows a float at eps > 709; the log-space form must not.
    value = gdp_delta(40.0, 900.0)
    assert value == pytest.approx(_mp_delta(40.0, 900.0), rel=1e-8)
    assert math.isfinite(gdp_epsilon(200.0, 1e-5))


def test_classical_formula_violates_at_large_epsilon():
    # notes/004.md §3.4: at eps=10, delta=1e-5 the classical mu has true delta 2.27e-5.
    sigma = classical_gaussian_sigma(10.0, 1e-5)
    assert gaussian_delta(sigma, 10.0) == pytest.approx(2.2654e-5, rel=1e-3)
    assert calibrate_gaussian_sigma(10.0, 1e-5) > sigma  # exact calibration adds noise there
    # ... and is very conservative at eps = 1 (true delta about 4e-8).
    assert gaussian_delta(classical_gaussian_sigma(1.0, 1e-5), 1.0) < 1e-7


def test_gdp_equals_gaussian_with_mu_ratio():
    assert gdp_epsilon(0.4, 1e-6) == pytest.approx(gaussian_epsilon(5.0, 1e-6, sensitivity=2.0))


def test_composition_of_gaussians_is_root_sum_square():
    assert compose_gdp(0.3, 0.4) == pytest.approx(0.5)
    assert compose_gdp() == 0.0


def test_zero_epsilon_when_delta_already_met():
    assert gdp_epsilon(1e-6, 0.5) == 0.0


@given(
    eps=st.floats(0.05, 50.0),
    log_delta=st.floats(-14.0, -2.0),
    sens=st.floats(0.01, 100.0),
)
def test_calibration_round_trip_never_exceeds_target(eps, log_delta, sens):
    delta = 10.0**log_delta
    sigma = calibrate_gaussian_sigma(eps, delta, sens)
    assert gaussian_delta(sigma, eps, sens) <= delta
    achieved = gaussian_epsilon(sigma, delta, sens)
    assert achieved <= eps * (1 + 1e-9)
    assert achieved == pytest.approx(eps, rel=1e-6)


@given(mu=st.floats(0.01, 30.0), log_delta=st.floats(-14.0, -2.0))
def test_epsilon_round_trip(mu, log_delta):
    delta = 10.0**log_delta
    eps = gdp_epsilon(mu, delta)
    assert gdp_delta(mu, eps) <= delta
    if eps > 0:
        assert gdp_mu(eps, delta) == pytest.approx(mu, rel=1e-6)


@given(mu=st.floats(0.01, 10.0), eps=st.floats(0.0, 20.0), factor=st.floats(1.01, 3.0))
def test_monotonicity(mu, eps, factor):
    assert gdp_delta(mu * factor, eps) >= gdp_delta(mu, eps)
    assert gdp_delta(mu, eps * factor + 0.01) <= gdp_delta(mu, eps)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: gaussian_epsilon(0.0, 1e-5), "sigma"),
        (lambda: gaussian_epsilon(-1.0, 1e-5), "sigma"),
        (lambda: gaussian_epsilon(float("nan"), 1e-5), "sigma"),
        (lambda: gaussian_epsilon(float("inf"), 1e-5), "sigma"),
        (lambda: gaussian_epsilon(1.0, 0.0), "delta"),
        (lambda: gaussian_epsilon(1.0, 1.0), "delta"),
        (lambda: gaussian_epsilon(1.0, float("nan")), "delta"),
        (lambda: gaussian_epsilon(1.0, 1e-5, sensitivity=0.0), "sensitivity"),
        (lambda: calibrate_gaussian_sigma(0.0, 1e-5), "epsilon"),
        (lambda: calibrate_gaussian_sigma(-1.0, 1e-5), "epsilon"),
        (lambda: calibrate_gaussian_sigma(float("inf"), 1e-5), "epsilon"),
        (lambda: gdp_delta(1.0, -0.5), "epsilon"),
        (lambda: gdp_mu(1.0, 1.5), "delta"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
