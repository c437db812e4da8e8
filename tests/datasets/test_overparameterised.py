"""The over-parameterised regression generator of the DP-FTRL-Σ paper (Private Overparameterized
Linear Regression, anonymous submission)
(docs/theory/overparameterised-regression.md#synthetic-data) and its oracle.

Statistical checks use fixed seeds; their tolerances are set as if the seed were arbitrary, at
5 standard errors of a Monte Carlo mean (standard error estimated from the same sample). A 5-SE
two-sided miss of a normal estimate has probability 6e-7 per entry, so a correct generator
passes for essentially every seed, while a wrong moment (a missing square root on λ, a factor 2
in the noise variance) is off by hundreds of SEs at n = 200,000.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from privopt.datasets.overparameterised import (
    EXP_FLOOR,
    OverparameterisedData,
    make_overparameterised_regression,
    spectrum_eigenvalues,
)

N_BIG = 200_000


def _data(seed: int = 0, **kwargs) -> OverparameterisedData:
    kwargs.setdefault("n_samples", 100)
    kwargs.setdefault("n_features", 300)
    return make_overparameterised_regression(rng=np.random.default_rng(seed), **kwargs)


def _assert_within_se(samples: np.ndarray, expected: np.ndarray, k: float = 5.0) -> None:
    n = samples.shape[0]
    mean = samples.mean(axis=0)
    se = samples.std(axis=0) / math.sqrt(n)
    # zero-variance entries (Rademacher x_i^2 = λ_i) must match to rounding
    miss = np.abs(mean - expected) - k * se - 1e-12 * np.abs(expected)
    assert np.all(miss <= 0), f"max |z| = {np.max(np.abs(mean - expected) / se):.2f} > {k}"


def _second_moments(X: np.ndarray) -> np.ndarray:
    """Per-row products x_i x_j for i <= j, shape (n, d(d+1)/2)."""
    i, j = np.triu_indices(X.shape[1])
    return X[:, i] * X[:, j]


# --- spectrum and ground truth (exact) ---------------------------------------------------------


@pytest.mark.parametrize("r", [1.5, 2.0, 3.0])
def test_polynomial_spectrum(r):
    data = _data(n_features=50, r=r)
    np.testing.assert_array_equal(data.eigenvalues, np.arange(1, 51, dtype=float) ** -r)
    assert data.eigenvalues[0] == 1.0
    assert data.r == r and data.spectrum == "polynomial"
    assert data.trace_H < sum(k**-r for k in range(1, 10_000)) + 1e-3  # < zeta(r)


def test_exponential_spectrum_and_floor():
    data = _data(n_features=800, spectrum="exponential")
    i = np.arange(1, 801, dtype=float)
    assert data.r is None
    np.testing.assert_allclose(data.eigenvalues[:690], np.exp(-i[:690]), rtol=1e-15)
    assert data.eigenvalues[-1] == EXP_FLOOR  # e^{-800} would underflow to a denormal/0
    assert np.all(data.eigenvalues >= EXP_FLOOR)
    # docs/theory/overparameterised-regression.md#assumptions
    assert data.trace_H == pytest.approx(1 / (math.e - 1), rel=1e-12)


def test_default_r_is_two():
    np.testing.assert_array_equal(spectrum_eigenvalues(4), [1.0, 0.25, 1 / 9, 1 / 16])


@pytest.mark.parametrize("B", [0.0, 1.0, 2.5])
def test_theta_star(B):
    d = 40
    powerlaw = _data(n_features=d, theta_norm=B)
    expected = B * (1 / np.arange(1, d + 1)) / np.linalg.norm(1 / np.arange(1, d + 1))
    np.testing.assert_allclose(powerlaw.theta_star, expected, rtol=1e-14)
    assert powerlaw.theta_norm == pytest.approx(B)
    e1 = _data(n_features=d, theta="e1", theta_norm=B)
    np.testing.assert_array_equal(e1.theta_star, np.eye(d)[0] * B)
    iso = _data(n_features=d, theta="isotropic", theta_norm=B)
    assert np.linalg.norm(iso.theta_star) == pytest.approx(B)
    assert np.count_nonzero(iso.theta_star) == (d if B > 0 else 0)


@pytest.mark.parametrize(("d", "r", "level"), [(400, 2.0, 0.330), (4096, 3.0, 0.315)])
def test_reference_levels(d, r, level):
    """L(0) - L* = ½ θ*ᵀHθ*: docs/theory/overparameterised-regression.md#experiments reports 0.330
    (r = 2, d = 400), 0.315 (r = 3,
    d = 4096) for the power-law θ* with B = 1 (3 digits, the first one rounded up)."""
    data = _data(n_samples=2, n_features=d, r=r, n_public=0)
    assert data.null_risk == pytest.approx(data.excess_risk(np.zeros(d)), rel=1e-14)
    assert data.null_risk == pytest.approx(level, abs=1e-3)  # we get 0.3295 and 0.3152
    assert data.bayes_risk == pytest.approx(0.5 * 0.25)


# --- the law of the rows -----------------------------------------------------------------------


@pytest.mark.parametrize("x_law", ["gaussian", "rademacher"])
@pytest.mark.parametrize("spectrum", ["polynomial", "exponential"])
def test_covariance_of_x_is_diag_lambda(x_law, spectrum):
    d = 5
    data = _data(n_samples=N_BIG, n_features=d, n_public=N_BIG, spectrum=spectrum, x_law=x_law)
    expected = np.diag(data.eigenvalues)[np.triu_indices(d)]
    for X in (data.X, data.public_X):  # public rows have the same law
        _assert_within_se(X, np.zeros(d))
        if x_law == "rademacher":  # x_i^2 = λ_i exactly
            np.testing.assert_allclose(X**2, np.broadcast_to(data.eigenvalues, X.shape))
        _assert_within_se(_second_moments(X), expected)


def test_public_rows_are_independent_of_training_rows():
    d = 4
    data = _data(n_samples=N_BIG, n_features=d, n_public=N_BIG)
    cross = (data.X[:, :, None] * data.public_X[:, None, :]).reshape(N_BIG, d * d)
    _assert_within_se(cross, np.zeros(d * d))


@pytest.mark.parametrize("noise_std", [0.0, 0.5])
def test_labels(noise_std):
    data = _data(n_samples=N_BIG, n_features=6, noise_std=noise_std, n_public=0)
    noise = data.y - data.X @ data.theta_star
    if noise_std == 0.0:
        np.testing.assert_allclose(noise, 0.0, atol=1e-12)
        return
    _assert_within_se(noise[:, None], np.zeros(1))
    _assert_within_se(noise[:, None] ** 2, np.array([noise_std**2]))
    _assert_within_se(noise[:, None] * data.X, np.zeros(6))  # uncorrelated with x


def test_excess_risk_matches_population_loss():
    """½E[(y - xᵀθ)²] - ½σ² on fresh rows equals the oracle: checks the ½ convention."""
    data = _data(n_features=8, noise_std=0.5, n_public=0)
    theta = np.random.default_rng(1).standard_normal(8) * 0.3
    X, y = data.sample(N_BIG, np.random.default_rng(2))
    excess = 0.5 * (y - X @ theta) ** 2 - 0.5 * (y - X @ data.theta_star) ** 2
    _assert_within_se(excess[:, None], np.array([data.excess_risk(theta)]))


def test_sample_and_sample_unlabeled_follow_the_law():
    data = _data(n_features=5, n_public=0)
    X, y = data.sample(N_BIG, np.random.default_rng(3))
    assert X.shape == (N_BIG, 5) and y.shape == (N_BIG,)
    expected = np.diag(data.eigenvalues)[np.triu_indices(5)]
    _assert_within_se(_second_moments(X), expected)
    _assert_within_se((y - X @ data.theta_star)[:, None] ** 2, np.array([0.25]))
    U = data.sample_unlabeled(N_BIG, np.random.default_rng(4))
    _assert_within_se(_second_moments(U), expected)


# --- oracle ------------------------------------------------------------------------------------


def test_excess_risk_exact():
    data = _data(n_features=30)
    assert data.excess_risk(data.theta_star) == 0.0
    rng = np.random.default_rng(5)
    thetas = rng.standard_normal((4, 30))
    H = np.diag(data.eigenvalues)
    dense = [0.5 * (t - data.theta_star) @ H @ (t - data.theta_star) for t in thetas]
    np.testing.assert_allclose(data.excess_risk(thetas), dense, rtol=1e-13)
    assert data.excess_risk(thetas[0]) == pytest.approx(dense[0], rel=1e-13)
    assert isinstance(data.excess_risk(thetas[0]), float)


def test_large_d_never_forms_d_by_d():
    """d = 1e5: memory stays O((N + M) d), the oracle is O(d)."""
    n, m, d = 20, 20, 100_000
    tracemalloc.start()
    try:
        data = _data(n_samples=n, n_features=d, n_public=m)
        risk = data.excess_risk(np.zeros(d))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * (n + m + 4) * d * 8, peak / ((n + m) * d * 8)
    assert risk == pytest.approx(data.null_risk)
    assert data.X.shape == (n, d) and data.public_X.shape == (m, d)


# --- house style -------------------------------------------------------------------------------


def test_defaults_read_only_and_reproducible():
    data = _data(n_samples=30, n_features=60)
    assert data.n_public == data.n_samples == 30  # M = N by default (Cor. 4.5 needs M >= N)
    assert (data.n_features, data.noise_std, data.x_law) == (60, 0.5, "gaussian")
    for array in (data.X, data.y, data.public_X, data.eigenvalues, data.theta_star):
        assert not array.flags.writeable
    again = _data(n_samples=30, n_features=60)
    np.testing.assert_array_equal(data.X, again.X)
    np.testing.assert_array_equal(data.public_X, again.public_X)
    quiet = _data(n_samples=30, n_features=60, noise_std=0.0)  # noise drawn anyway
    np.testing.assert_array_equal(data.X, quiet.X)
    np.testing.assert_array_equal(data.public_X, quiet.public_X)
    none = _data(n_samples=30, n_features=60, n_public=0)
    assert none.public_X.shape == (0, 60)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("r", [1.0, 0.5, -2.0])
def test_polynomial_needs_r_above_one(r):
    with pytest.raises(ValueError, match=r"r > 1"):
        _data(r=r)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_features": 0}, "n_features"),
        ({"n_samples": 0}, "n_samples"),
        ({"n_samples": 2.5}, "n_samples"),
        ({"n_public": -1}, "n_public"),
        ({"r": float("nan")}, "r"),
        ({"spectrum": "exponential", "r": 2.0}, "polynomial"),
        ({"spectrum": "cubic"}, "spectrum"),
        ({"theta": "random"}, "theta"),
        ({"theta_norm": -1.0}, "theta_norm"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"noise_std": float("inf")}, "noise_std"),
        ({"x_law": "laplace"}, "x_law"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _data(**kwargs)


def test_bad_rng_and_oracle_input():
    with pytest.raises(ValueError, match="Generator"):
        make_overparameterised_regression(5, 10, rng=None)
    data = _data(n_features=10)
    with pytest.raises(ValueError, match="shape"):
        data.excess_risk(np.zeros(9))
    with pytest.raises(ValueError, match="shape"):
        data.excess_risk(np.zeros((2, 3, 10)))
    with pytest.raises(ValueError, match="finite"):
        data.excess_risk(np.full(10, np.nan))
    with pytest.raises(ValueError, match="n"):
        data.sample(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="Generator"):
        data.sample_unlabeled(3, 0)
