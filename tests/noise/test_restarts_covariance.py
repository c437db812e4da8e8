"""Restarted (block-diagonal) mechanisms and covariance operators."""

import math

import numpy as np
import pytest

from privopt.noise import (
    DiagonalCovariance,
    IdentityCovariance,
    Participation,
    Restarted,
    SensitivityUpperBoundWarning,
    TreeAggregation,
    brute_force_minsep_squared,
    nu_dpftrl,
    optimal_cc,
)


def test_restarts_single_and_anytime():
    base = optimal_cc()
    restarted = Restarted(base, block=64)
    assert restarted.sensitivity_squared(1000) == pytest.approx(base.sensitivity_squared(64))
    assert restarted.sensitivity_squared(30) == pytest.approx(base.sensitivity_squared(30))
    # restarts make optimal CC usable anytime
    assert math.isinf(base.anytime_sensitivity_squared())
    assert restarted.sensitivity_squared(None, Participation.anytime()) == pytest.approx(
        base.sensitivity_squared(64)
    )
    c = restarted.encoder_matrix(150)
    np.testing.assert_allclose(c, np.linalg.inv(restarted.decoder_matrix(150)), atol=1e-12)
    assert restarted.sensitivity_squared(150) == pytest.approx(np.max(np.sum(c**2, axis=0)))


@pytest.mark.parametrize("nu", [0.0, 0.2])
def test_restarts_minsep_exact_when_block_is_multiple_of_min_sep(nu):
    restarted = Restarted(nu_dpftrl(nu), block=6)
    c = restarted.encoder_matrix(18)
    for b, k in [(3, 3), (2, 4), (6, 3), (1, 5)]:
        exact = brute_force_minsep_squared(c, b, k)
        got = restarted.sensitivity_squared(18, Participation.multiple(b, k))
        assert got == pytest.approx(exact)


def test_restarts_minsep_bound_otherwise():
    restarted = Restarted(nu_dpftrl(0.1), block=5)
    c = restarted.encoder_matrix(17)
    with pytest.warns(SensitivityUpperBoundWarning):
        bound = restarted.sensitivity_squared(17, Participation.multiple(3, 4))
    assert bound >= brute_force_minsep_squared(c, 3, 4) - 1e-12


def test_restarted_tree_matrices():
    restarted = Restarted(TreeAggregation(), block=4)
    b, c = restarted.decoder_matrix(10), restarted.encoder_matrix(10)
    expected = np.zeros((10, 10))
    for start in range(0, 10, 4):
        stop = min(start + 4, 10)
        expected[start:stop, start:stop] = np.tril(np.ones((stop - start, stop - start)))
    np.testing.assert_array_equal(b @ c, expected)


def test_restart_validation():
    with pytest.raises(ValueError, match="block"):
        Restarted(nu_dpftrl(0.1), block=0)
    with pytest.raises(TypeError):
        Restarted("nu", block=3)  # type: ignore[arg-type]


def test_covariance_operators():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 4))
    identity = IdentityCovariance(4)
    np.testing.assert_array_equal(identity.apply(v), v)
    np.testing.assert_allclose(identity.inv_norm(v), np.linalg.norm(v, axis=1))
    diag = DiagonalCovariance(np.array([1.0, 2.0, 0.5, 4.0]))
    dense = diag.dense()
    np.testing.assert_allclose(dense, np.diag([1.0, 2.0, 0.5, 4.0]))
    r = np.diag(np.sqrt([1.0, 2.0, 0.5, 4.0]))
    np.testing.assert_allclose(diag.sqrt_apply(v), v @ r.T)
    np.testing.assert_allclose(diag.solve(diag.apply(v)), v)
    np.testing.assert_allclose(
        diag.inv_norm(v), np.sqrt(np.einsum("ij,jk,ik->i", v, np.linalg.inv(dense), v))
    )
    with pytest.raises(ValueError, match="positive definite"):
        DiagonalCovariance(np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="positive definite"):
        DiagonalCovariance(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="dimension"):
        identity.apply(np.ones(3))
    with pytest.raises(ValueError, match="dim"):
        IdentityCovariance(0)
