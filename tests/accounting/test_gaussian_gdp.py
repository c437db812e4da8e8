"""Exact Gaussian mechanism and mu-GDP: golden values, closed forms, round trips, bad input."""

import itertools
import math
import sys

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erfinv, ndtri

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
from privopt.accounting.gdp import DELTA_MIN, DELTA_RELATIVE_ERROR


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
    # docs/theory/single-epoch-srgd.md#tree: at eps=10, delta=1e-5 the classical mu has true delta
    # 2.27e-5.
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
        (lambda: gdp_mu(math.inf, 1e-5), "epsilon"),
        (lambda: gdp_mu(0.0, 1e-5), "epsilon"),
        (lambda: gdp_mu(1.0, 1e-320), "delta"),
        (lambda: gdp_epsilon(1.0, 1e-320), "delta"),
        (lambda: gdp_epsilon(1e155, 1e-5), "mu"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- the profile at every scale: exact reference, large and tiny epsilon ------------------------


def _mp_upper_tail(t: mpmath.mpf) -> mpmath.mpf:
    """Phi(-t); far out (mpmath's erfc fails near t ~ 1e155) by the Mills ratio series, which
    for t > 1e6 is exact to 1e-46: Phi(-t) = phi(t) (1 - 1/t^2 + 3/t^4 - 15/t^6) / t."""
    if t < 1e6:
        return mpmath.ncdf(-t)
    return mpmath.npdf(t) * (1 - 1 / t**2 + 3 / t**4 - 15 / t**6) / t


def _mp_profile(mu: float, eps: float) -> mpmath.mpf:
    """The GDP profile of the exact float inputs, with enough digits for every cancellation.

    ``-eps/mu + mu/2`` cancels by ~log10(eps) digits near mu = sqrt(2 eps), and the two terms of
    the profile cancel by ~log10(1 + eps/mu^2) digits when mu is small.
    """
    digits = 40 + 2 * math.log10(1.0 + eps) + 2 * math.log10(1.0 + 1.0 / mu)  # >= the above
    with mpmath.workdps(int(digits)):
        m, e = mpmath.mpf(mu), mpmath.mpf(eps)
        x, y = e / m - m / 2, e / m + m / 2
        if y < 1e6:
            return +(_mp_upper_tail(x) - mpmath.exp(e) * _mp_upper_tail(y))
        # e^eps phi(y) = phi(x) since y^2 = x^2 + 2 eps: no e^eps (a 1e300-digit exponent)
        return +(_mp_upper_tail(x) - mpmath.npdf(x) * _mp_upper_tail(y) / mpmath.npdf(y))


@settings(max_examples=300, deadline=None)
@given(
    log_mu=st.floats(-12.0, 8.0),
    x=st.floats(-0.5, 38.0),
    log_eps=st.floats(-300.0, 300.0),
    tiny=st.booleans(),
)
def test_gdp_delta_is_a_tight_upper_bound_in_every_regime(log_mu, x, log_eps, tiny):
    # x = eps/mu - mu/2 places the point anywhere on the profile, from delta ~ 1e-300 to ~1;
    # `tiny` instead draws eps on its own (tiny eps: the small-mu, large-cancellation regime).
    mu = 10.0**log_mu
    eps = 10.0**log_eps if tiny else max(mu * (max(x, -0.5 * mu) + mu / 2), 0.0)
    exact = _mp_profile(mu, eps)
    got = gdp_delta(mu, eps)
    if exact >= DELTA_MIN:
        assert exact <= got <= exact * (1 + 2 * DELTA_RELATIVE_ERROR)  # never an over-claim
    else:  # below the resolved range (subnormal or zero in double precision)
        assert got < 2 * DELTA_MIN


def test_the_old_log_space_profile_failure_at_large_epsilon_is_gone():
    # The former exponent eps + log Phi(b) - log Phi(a) cancelled eps against log Phi(b) ~ -eps
    # and was noise from eps ~ 1e17 (float spacing 16): at eps = 1e18 gdp_mu returned
    # mu = 1414213584.01 > sqrt(2 eps), whose true delta is 1, not 1e-10.
    mu = gdp_mu(1e18, 1e-10)
    assert mu < math.sqrt(2e18)
    assert float(_mp_profile(mu, 1e18)) <= 1e-10
    assert gdp_delta(1414213584.0119152, 1e18) == 1.0


_GRID = 10.0 ** np.arange(-300.0, 308.5, 0.5)


@pytest.mark.parametrize("delta", [1e-300, 1e-10, 1e-5, 0.3])
def test_gdp_mu_is_monotone_and_verified_from_1e_minus_300_to_the_largest_float(delta):
    mus = [gdp_mu(float(eps), delta) for eps in [*_GRID, sys.float_info.max]]
    for eps, mu in zip([*_GRID, sys.float_info.max], mus, strict=True):
        assert 0.0 < mu < math.inf
        assert gdp_delta(mu, eps) <= delta  # verified at every point
        assert gdp_epsilon(mu, delta) <= eps * (1 + 1e-9) + 1e-15  # the inverse agrees
    # Non-decreasing in epsilon. Where epsilon moves the profile by less than its ~1e-14
    # relative rounding (the plateau at tiny epsilon, where mu is the answer at eps = 0), the
    # largest feasible double may move by an ulp either way; allow 4 ulps, nothing more.
    for earlier, later in itertools.pairwise(mus):
        assert later >= earlier * (1 - 4 * 2.0**-52)
    # ... and it does grow, like sqrt(2 eps) at large epsilon: 10 decades of eps, 5 of mu
    assert mus[-2] / mus[-22] == pytest.approx(1e5, rel=1e-6)


@pytest.mark.parametrize("delta", [1e-300, 1e-10, 1e-5, 0.3])
@pytest.mark.parametrize(
    "eps", [1e-300, 1e-30, 1e-10, 1e-3, 1.0, 30.0, 1e10, 1e15, 1e16, 1e17, 1e18, 1e32, 1e300]
)
def test_gdp_mu_meets_delta_in_exact_arithmetic(eps, delta):
    mu = gdp_mu(eps, delta)
    exact = _mp_profile(mu, eps)
    assert exact <= delta
    # ... and tight: the 1e-12 margin of the computed profile costs far less than 1e-9 of mu
    assert _mp_profile(mu * (1 + 1e-9), eps) > delta


@pytest.mark.parametrize("delta", [1e-300, 1e-10, 1e-5, 0.3])
@pytest.mark.parametrize("eps", [1e10, 1e15, 1e16, 1e17, 1e32, 1e300, sys.float_info.max])
def test_gdp_mu_at_large_epsilon_is_sqrt_2eps_shifted_by_the_delta_quantile(eps, delta):
    # delta <= Phi(mu/2 - eps/mu), so mu_1 = z + sqrt(z^2 + 2 eps), z = Phi^{-1}(delta), is
    # feasible; the rest of the profile, e^eps Phi(-y) = phi(x) M(y) ~ Phi(-x) x/y, moves the
    # boundary above it by only ~1/mu^2 relative. Above eps ~ 1e32, z is a few float spacings of
    # mu (2 near 1.4e16), and mu is sqrt(2 eps) to the last digit.
    z = float(ndtri(delta))
    expected = float(mpmath.mpf(z) + mpmath.sqrt(mpmath.mpf(z) ** 2 + 2 * mpmath.mpf(eps)))
    mu = gdp_mu(eps, delta)
    assert mu >= expected * (1 - 1e-15)
    assert mu == pytest.approx(expected, rel=1e-9)
    assert gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-9)


@pytest.mark.parametrize("delta", [1e-300, 1e-10, 1e-5, 0.3])
@pytest.mark.parametrize("eps", [5e-324, 1e-300, 1e-100])
def test_gdp_mu_at_tiny_epsilon_is_the_zero_epsilon_answer(eps, delta):
    # delta(0) = Phi(mu/2) - Phi(-mu/2) = erf(mu / (2 sqrt 2)): mu_0 = 2 sqrt(2) erfinv(delta)
    mu = gdp_mu(eps, delta)
    assert mu == pytest.approx(2 * math.sqrt(2) * float(erfinv(delta)), rel=1e-11)
    assert _mp_profile(mu, eps) <= delta


def test_gdp_epsilon_range_and_refusals():
    assert DELTA_MIN == 1e-300
    # the largest mu with a float epsilon, and its epsilon
    mu_max = gdp_mu(sys.float_info.max, 1e-10)
    assert gdp_epsilon(mu_max, 1e-10) == pytest.approx(sys.float_info.max, rel=1e-12)
    with pytest.raises(ValueError, match="mu=1e\\+155 is too large"):
        gdp_epsilon(1e155, 1e-10)
    # tiny mu: nothing to pay at any delta it already meets
    assert gdp_epsilon(1e-300, 1e-300) == 0.0
