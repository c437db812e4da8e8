"""Correlated-noise mechanisms: golden values (docs/theory/correlated-noise.md#catalogue, §3.4,
§6.4), bad input."""

import math
import warnings

import numpy as np
import pytest

from privopt.noise import (
    DenseMechanism,
    Participation,
    SensitivityUpperBoundWarning,
    TreeAggregation,
    anti_pgd,
    brute_force_minsep_squared,
    custom,
    damped_anti_pgd,
    independent,
    inverse_coefficients,
    mean_estimation_optimal,
    nu_beta,
    nu_c,
    nu_dpftrl,
    optimal_cc,
)

ANYTIME = Participation.anytime()


def test_nu_coefficients_golden():
    np.testing.assert_allclose(nu_beta(0.1, 4), [1, -0.45, -0.10125, -0.0455625], rtol=1e-14)
    np.testing.assert_allclose(nu_c(0.1, 4), [1, 0.45, 0.30375, 0.2278125], rtol=1e-14)


@pytest.mark.parametrize("nu", [0.0, 0.01, 0.3, 0.9])
def test_nu_coefficient_identities(nu):
    n = 4000
    beta, c = nu_beta(nu, n), nu_c(nu, n)
    np.testing.assert_allclose(np.convolve(beta, c)[:n], np.eye(n)[0], atol=1e-14)
    # c positive and non-increasing, beta_t < 0 for t >= 1 (until they underflow to 0)
    assert np.all(c[:50] > 0) and np.all(c >= 0) and np.all(np.diff(c) <= 0)
    assert np.all(beta[1:50] < 0) and np.all(beta[1:] <= 0)
    if nu > 0:  # the series converge geometrically: sum beta = sqrt(nu), ||beta||_1 = 2 - sqrt(nu)
        assert beta.sum() == pytest.approx(math.sqrt(nu), abs=1e-9)
        assert np.abs(beta).sum() == pytest.approx(2 - math.sqrt(nu), abs=1e-9)


def test_nu_one_is_dpsgd():
    mech = nu_dpftrl(1.0)
    np.testing.assert_array_equal(mech.decoder_matrix(6), np.eye(6))
    assert mech.sensitivity_squared(100) == 1.0
    assert mech.sensitivity_squared(None, ANYTIME) == 1.0


@pytest.mark.parametrize(
    ("nu", "expected"), [(0.01, 2.1368782611), (0.1, 1.4518426734), (0.5, 1.0731820071)]
)
def test_anytime_sensitivity_closed_form(nu, expected):
    mech = nu_dpftrl(nu)
    assert mech.sensitivity_squared(None, ANYTIME) == pytest.approx(expected, abs=1e-9)
    # The finite-T value increases to the limit.
    finite = [mech.sensitivity_squared(t) for t in (10, 100, 1000)]
    limit = mech.sensitivity_squared(None, ANYTIME)
    assert finite[0] < finite[1] <= finite[2] <= limit + 1e-12


def test_optimal_cc_golden_and_needs_horizon():
    assert optimal_cc().sensitivity_squared(1024) == pytest.approx(3.2725541503, abs=1e-9)
    assert optimal_cc().sensitivity_squared(10**6) == pytest.approx(5.46389, abs=1e-5)
    assert optimal_cc().anytime_sensitivity_squared() == math.inf
    with pytest.raises(ValueError, match="infinite anytime sensitivity"):
        optimal_cc().sensitivity_squared(None, ANYTIME)
    with pytest.raises(ValueError, match="steps"):
        optimal_cc().sensitivity_squared(None)


@pytest.mark.parametrize(("nu", "expected"), [(0.0, 1.6590313), (0.1, 1.2049243)])
def test_dense_inverse_column_norms_equal_closed_form(nu, expected):
    mech = nu_dpftrl(nu)
    dense_c = np.linalg.inv(mech.decoder_matrix(200))
    assert np.max(np.linalg.norm(dense_c, axis=0)) == pytest.approx(expected, abs=1e-7)
    assert mech.sensitivity(200) == pytest.approx(expected, abs=1e-7)
    np.testing.assert_allclose(mech.encoder_matrix(200), dense_c, atol=1e-12)


@pytest.mark.parametrize(("nu", "expected"), [(0.0, 78.5927), (0.05, 19.6000), (0.3, 11.7525)])
def test_minsep_golden(nu, expected):
    got = nu_dpftrl(nu).sensitivity_squared(200, Participation.multiple(20, 10))
    assert got == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("nu", [0.0, 0.05, 0.3, 1.0])
def test_minsep_equals_brute_force(nu):
    mech = nu_dpftrl(nu)
    c = mech.encoder_matrix(14)
    for b, k in [(3, 3), (4, 2), (4, 4), (1, 2), (6, 3)]:
        exact = brute_force_minsep_squared(c, b, k)
        assert mech.sensitivity_squared(14, Participation.multiple(b, k)) == pytest.approx(exact)


def test_anti_pgd_and_damped():
    for t in (1, 7, 50):
        assert anti_pgd().sensitivity_squared(t) == pytest.approx(t)
    assert anti_pgd().anytime_sensitivity_squared() == math.inf
    with pytest.raises(ValueError, match="infinite anytime"):
        anti_pgd().sensitivity(None, ANYTIME)
    for nu in (0.05, 0.2, 0.7):
        expected = 1 / (nu * (2 - nu))
        assert damped_anti_pgd(nu).sensitivity_squared(None, ANYTIME) == pytest.approx(expected)
        np.testing.assert_allclose(damped_anti_pgd(nu).c(6), (1 - nu) ** np.arange(6))


def test_mean_estimation_optimal_is_nu_eta():
    np.testing.assert_allclose(mean_estimation_optimal(0.05).beta(50), nu_beta(0.05, 50))


def test_custom_inverse_by_recursion_matches_dense():
    beta = [1.0, -0.5, 0.2, 0.1]
    mech = custom(beta)
    np.testing.assert_allclose(
        mech.encoder_matrix(30), np.linalg.inv(mech.decoder_matrix(30)), atol=1e-12
    )
    np.testing.assert_allclose(inverse_coefficients(np.array(beta), 30), mech.c(30))
    # anytime: the series of ||c||^2 against a long partial sum
    assert mech.sensitivity_squared(None, ANYTIME) == pytest.approx(
        np.sum(mech.c(5000) ** 2), rel=1e-12
    )


def test_custom_mixed_sign_minsep_is_a_warned_upper_bound():
    mech = custom([1.0, 0.9])  # c alternates in sign
    c = mech.encoder_matrix(12)
    with pytest.warns(SensitivityUpperBoundWarning):
        bound = mech.sensitivity_squared(12, Participation.multiple(3, 3))
    assert bound >= brute_force_minsep_squared(c, 3, 3) - 1e-12


def test_independent():
    mech = independent()
    assert mech.sensitivity_squared(100) == 1.0
    assert mech.sensitivity_squared(100, Participation.multiple(10, 5)) == 5.0
    with pytest.raises(ValueError, match="steps"):  # 5 participations 30 apart need > 120 steps
        mech.sensitivity_squared(100, Participation.multiple(30, 5))


def test_tree_matrices_and_sensitivity():
    tree = TreeAggregation()
    for steps in (1, 5, 13, 16):
        b, c = tree.decoder_matrix(steps), tree.encoder_matrix(steps)
        np.testing.assert_array_equal(b @ c, np.tril(np.ones((steps, steps))))
        np.testing.assert_array_equal(b.sum(axis=1), [bin(t + 1).count("1") for t in range(steps)])
        assert tree.sensitivity_squared(steps) == np.max(np.sum(c**2, axis=0))
    assert tree.sensitivity_squared(1024) == 11
    assert tree.anytime_sensitivity_squared() == math.inf
    with pytest.raises(ValueError, match="infinite anytime"):
        tree.sensitivity_squared(None, ANYTIME)
    c = tree.encoder_matrix(16)
    with pytest.warns(SensitivityUpperBoundWarning):
        bound = tree.sensitivity_squared(16, Participation.multiple(4, 3))
    assert bound >= brute_force_minsep_squared(c, 4, 3)


def test_dense_mechanism():
    b = nu_dpftrl(0.2).decoder_matrix(20)
    dense = DenseMechanism(b)
    assert dense.sensitivity_squared(20) == pytest.approx(nu_dpftrl(0.2).sensitivity_squared(20))
    assert dense.sensitivity_squared(7) == pytest.approx(nu_dpftrl(0.2).sensitivity_squared(7))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SensitivityUpperBoundWarning)
        bound = dense.sensitivity_squared(20, Participation.multiple(5, 3))
    assert bound >= nu_dpftrl(0.2).sensitivity_squared(20, Participation.multiple(5, 3)) - 1e-12


def test_prefix_sum_error_matches_toeplitz_formula():
    mech = nu_dpftrl(0.1)
    steps = 64
    tilde_b = np.cumsum(mech.beta(steps))
    frob = np.sum((steps - np.arange(steps)) * tilde_b**2)
    assert mech.prefix_sum_error(steps) == pytest.approx(mech.sensitivity_squared(steps) * frob)
    # correlated noise beats independent noise on the prefix-sum objective
    assert mech.prefix_sum_error(steps) < independent().prefix_sum_error(steps)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: nu_dpftrl(-0.1), "nu"),
        (lambda: nu_dpftrl(1.5), "nu"),
        (lambda: nu_dpftrl(float("nan")), "nu"),
        (lambda: custom([0.0, 1.0]), "beta_0"),
        (lambda: custom([]), "beta"),
        (lambda: custom([1.0, float("inf")]), "finite"),
        (lambda: DenseMechanism(np.triu(np.ones((3, 3)))), "lower-triangular"),
        (lambda: DenseMechanism(np.zeros((3, 3))), "invertible"),
        (lambda: DenseMechanism(np.eye(3)).sensitivity_squared(None, ANYTIME), "anytime"),
        (lambda: DenseMechanism(np.eye(3)).sensitivity_squared(4), "horizon"),
        (lambda: optimal_cc().sensitivity_squared(0), "steps"),
        (lambda: Participation.multiple(0, 3), "min_sep"),
        (lambda: Participation.multiple(3, 0), "participations"),
        (lambda: Participation("twice"), "kind"),
        (lambda: Participation("single", min_sep=2), "multiple"),
        (lambda: nu_dpftrl(0.1).sensitivity_squared(10, Participation.multiple(5, 3)), "steps"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
