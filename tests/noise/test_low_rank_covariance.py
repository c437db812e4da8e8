"""The low-rank-plus-ridge Σ = (λ I + X̃^T X̃)/M of the DP-FTRL-Σ paper (Private Overparameterized
Linear Regression, anonymous submission)
(docs/theory/overparameterised-regression.md#covariance-designs, §8.1, §8.3 item 3).

Every product, norm, trace and diagonal is compared with a dense numpy computation at small d
(to 1e-10 relative: the operator's error is a few eps times cond(Σ) <= 1e3 here). The sampler is
checked statistically: for x ~ N(0, Σ) and the uncentred estimate S = X^T X / n,

    E ||S - Σ||_F^2 = ((tr Σ)^2 + ||Σ||_F^2) / n     (Var(x_i x_j) = Σ_ii Σ_jj + Σ_ij^2),

and ||S - Σ||_F^2 is a sum of d^2 terms that concentrates around its mean, so 3 times the
root-mean-square relative error is never reached by a correct sampler (it would take a
3-sigma miss of a chi-square-like sum with hundreds of degrees of freedom), while a Σ without
its ridge or scaled by 1.1 misses by > 6 RMS (asserted, so the test has power).
"""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest

from privopt.noise import DiagonalCovariance, IdentityCovariance, TreeAggregation
from privopt.noise.covariance import LowRankPlusRidgeCovariance

RTOL = 1e-10


def _public(seed: int, M: int, d: int, *, decay: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, d)) * np.arange(1, d + 1) ** (-decay / 2)


def _dense_sigma(pub: np.ndarray, ridge: float, center: bool = False) -> np.ndarray:
    X = pub - pub.mean(axis=0) if center else pub
    return (ridge * np.eye(pub.shape[1]) + X.T @ X) / pub.shape[0]


def _dense_power(sigma: np.ndarray, p: float) -> np.ndarray:
    w, v = np.linalg.eigh(sigma)
    return (v * w**p) @ v.T


def _rank_deficient() -> np.ndarray:
    pub = _public(3, 4, 15)
    return np.vstack([pub, pub[:2], 2.0 * pub[1:2]])  # M = 7 rows of rank 4


# (name, public rows, ridge, center): M < d, M > d (QR-compressed factor), rank-deficient rows,
# centred, and a small ridge (cond(Σ) ~ 300) to exercise the Woodbury cancellation.
CASES = {
    "M<d": (_public(0, 8, 20), 0.7, False),
    "M>d": (_public(1, 30, 6), 2.0, False),
    "M=d": (_public(2, 9, 9), 0.3, False),
    "rank-deficient": (_rank_deficient(), 0.5, False),
    "centred": (_public(4, 8, 20), 0.7, True),
    "small-ridge": (_public(5, 10, 25), 0.05, False),
}


@pytest.fixture(params=list(CASES), ids=list(CASES))
def case(request):
    pub, ridge, center = CASES[request.param]
    op = LowRankPlusRidgeCovariance(pub, ridge, center=center)
    return op, _dense_sigma(pub, ridge, center)


def _close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    if expected.size == 0:
        return
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    assert float(np.max(np.abs(actual - expected))) <= rtol * scale


# --- exact agreement with dense linear algebra -------------------------------------------------


def test_dense_and_products_match(case):
    op, sigma = case
    d = op.dim
    rng = np.random.default_rng(10)
    v = rng.standard_normal((7, d))
    _close(op.dense(), sigma)
    _close(op.apply(v), v @ sigma)
    _close(op.solve(v), np.linalg.solve(sigma, v.T).T)
    _close(op.sqrt_apply(v), v @ _dense_power(sigma, 0.5))
    _close(op.inv_sqrt_apply(v), v @ _dense_power(sigma, -0.5))
    # one vector behaves like one row of a batch
    _close(op.solve(v[3]), np.linalg.solve(sigma, v[3]))
    # round trips
    _close(op.solve(op.apply(v)), v)
    _close(op.sqrt_apply(op.sqrt_apply(v)), op.apply(v))
    _close(op.inv_sqrt_apply(op.sqrt_apply(v)), v)


def test_mahalanobis_norms_match(case):
    op, sigma = case
    rng = np.random.default_rng(11)
    v = rng.standard_normal((9, op.dim))
    quad = np.einsum("ij,ij->i", v, np.linalg.solve(sigma, v.T).T)
    _close(op.inv_norm_squared(v), quad)
    _close(op.inv_norm(v), np.sqrt(quad))
    assert isinstance(op.inv_norm(v[0]), float)
    assert op.inv_norm(v[0]) == pytest.approx(math.sqrt(quad[0]), rel=RTOL)
    # ||Σ^{-1/2} v||_2 is the same norm
    _close(np.linalg.norm(op.inv_sqrt_apply(v), axis=1), np.sqrt(quad))
    # higher-rank batches keep their leading shape
    assert op.inv_norm(v.reshape(3, 3, op.dim)).shape == (3, 3)


def test_norm_of_vectors_in_the_public_span_is_accurate():
    """v in span(X̃) with a small ridge: the Woodbury subtraction cancels, the result must not."""
    pub = _public(6, 6, 40)
    ridge = 1e-3
    op = LowRankPlusRidgeCovariance(pub, ridge)
    sigma = _dense_sigma(pub, ridge)
    assert op.condition_number == pytest.approx(np.linalg.cond(sigma), rel=1e-8)
    assert op.condition_number > 1e3
    v = np.random.default_rng(12).standard_normal((5, 6)) @ pub
    w, basis = np.linalg.eigh(sigma)
    expected = np.sum((v @ basis) ** 2 / w, axis=1)  # dense, eigenbasis form
    np.testing.assert_allclose(op.inv_norm_squared(v), expected, rtol=1e-9)


def test_traces_and_diagonals_match(case):
    op, sigma = case
    h = np.random.default_rng(13).uniform(0.1, 2.0, op.dim)
    inv = np.linalg.inv(sigma)
    assert op.trace() == pytest.approx(np.trace(sigma), rel=RTOL)
    _close(op.diagonal(), np.diag(sigma))
    _close(op.inv_diagonal(), np.diag(inv))
    assert op.trace_with(h) == pytest.approx(np.trace(sigma @ np.diag(h)), rel=RTOL)
    assert op.inv_trace_with(h) == pytest.approx(np.trace(inv @ np.diag(h)), rel=RTOL)
    eig = np.linalg.eigvalsh(sigma)[::-1]
    _close(op.leading_eigenvalues, eig[: op.rank])
    _close(eig[op.rank :], np.full(op.dim - op.rank, op.scale))


def test_trace_formula_and_attributes():
    pub = _public(7, 8, 20)
    op = LowRankPlusRidgeCovariance(pub, 0.7)
    assert (op.dim, op.n_public, op.rank, op.ridge) == (20, 8, 8, 0.7)
    assert op.scale == pytest.approx(0.7 / 8)
    assert op.trace() == pytest.approx((20 * 0.7 + np.sum(pub**2)) / 8, rel=1e-13)
    # the caller's array is copied: mutating it does not change Σ
    before = op.dense()
    pub[:] = 0.0
    np.testing.assert_array_equal(op.dense(), before)


def test_from_public_data_uses_the_papers_ridge():
    """λ = M/(Nη) (Cor. 4.5, docs/theory/overparameterised-regression.md#covariance-designs): Σ =
    I/(Nη) + X̃^T X̃/M."""
    pub = _public(8, 12, 30)
    n, eta = 10, 0.05
    op = LowRankPlusRidgeCovariance.from_public_data(pub, n_samples=n, step_size=eta)
    assert op.ridge == pytest.approx(12 / (n * eta))
    assert op.scale == pytest.approx(1 / (n * eta))
    _close(op.dense(), np.eye(30) / (n * eta) + pub.T @ pub / 12)
    direct = LowRankPlusRidgeCovariance.from_public_data(pub, ridge=3.0, center=True)
    _close(direct.dense(), _dense_sigma(pub, 3.0, center=True))


# --- sampling ----------------------------------------------------------------------------------


def _frobenius_check(samples: np.ndarray, sigma: np.ndarray) -> tuple[float, float]:
    n = samples.shape[0]
    empirical = samples.T @ samples / n
    rel = np.linalg.norm(empirical - sigma) / np.linalg.norm(sigma)
    rms = math.sqrt((np.trace(sigma) ** 2 + np.sum(sigma**2)) / n) / np.linalg.norm(sigma)
    return float(rel), float(rms)


@pytest.mark.parametrize("name", ["M<d", "M>d", "rank-deficient"])
def test_samples_have_covariance_sigma(name):
    pub, ridge, center = CASES[name]
    op = LowRankPlusRidgeCovariance(pub, ridge, center=center)
    sigma = op.dense()
    n = 200_000
    rng = np.random.default_rng(20)
    samples = op.sample(rng, n)
    assert samples.shape == (n, op.dim)
    rel, rms = _frobenius_check(samples, sigma)
    assert rel < 3 * rms, (rel, rms)
    # mean zero: each coordinate within 5 standard errors sqrt(Σ_ii / n)
    z = samples.mean(axis=0) / np.sqrt(np.diag(sigma) / n)
    assert np.max(np.abs(z)) < 5
    # power: a Σ without its ridge, or scaled by 1.1, misses by more than twice the tolerance
    without_ridge = sigma - op.scale * np.eye(op.dim)
    for wrong in (without_ridge, 1.1 * sigma):
        miss = np.linalg.norm(samples.T @ samples / n - wrong) / np.linalg.norm(sigma)
        assert miss > 6 * rms
    # the streams' path: Σ^{1/2} z with z ~ N(0, I_d) has the same covariance
    rel, rms = _frobenius_check(op.sqrt_apply(rng.standard_normal((n, op.dim))), sigma)
    assert rel < 3 * rms, (rel, rms)


def test_sample_is_the_stated_formula():
    """For M <= d a draw is (√λ g + X̃^T h)/√M with g drawn first, then h ~ N(0, I_M)."""
    pub = _public(21, 8, 20)
    op = LowRankPlusRidgeCovariance(pub, 0.7)
    got = op.sample(np.random.default_rng(5), 4)
    rng = np.random.default_rng(5)
    g = rng.standard_normal((4, 20))
    h = rng.standard_normal((4, 8))
    np.testing.assert_allclose(got, (math.sqrt(0.7) * g + h @ pub) / math.sqrt(8), rtol=1e-13)
    one = op.sample(np.random.default_rng(6))
    rng = np.random.default_rng(6)
    g, h = rng.standard_normal(20), rng.standard_normal(8)
    assert one.shape == (20,)
    np.testing.assert_allclose(one, (math.sqrt(0.7) * g + pub.T @ h) / math.sqrt(8), rtol=1e-13)


def test_noise_stream_shapes_with_the_low_rank_operator():
    """privopt.noise streams apply Σ^{1/2} per step: shaped = std Σ^{1/2} (unshaped / std)."""
    op = LowRankPlusRidgeCovariance(_public(22, 5, 12), 0.4)
    mech = TreeAggregation()
    plain = mech.noise_stream(12, 2.0, seed=7)
    shaped = mech.noise_stream(12, 2.0, seed=7, covariance=op)
    for _ in range(5):
        base = plain.next()
        np.testing.assert_allclose(shaped.next(), op.sqrt_apply(base), rtol=1e-12, atol=1e-14)


# --- memory and time at d = 1e5 ----------------------------------------------------------------


def _memory_and_time(d: int, M: int) -> tuple[int, float]:
    pub = _public(30, M, d)
    v = np.random.default_rng(31).standard_normal((32, d))
    tracemalloc.start()
    try:
        start = time.perf_counter()
        op = LowRankPlusRidgeCovariance.from_public_data(pub, n_samples=1000, step_size=0.01)
        op.solve(v)
        op.inv_norm(v)
        op.inv_norm(v[0])
        op.sqrt_apply(v[0])
        op.inv_sqrt_apply(v[:4])
        op.sample(np.random.default_rng(0), 8)
        op.diagonal()
        op.trace()
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, elapsed


def test_no_d_by_d_allocation_small():
    d, M = 20_000, 100
    peak, elapsed = _memory_and_time(d, M)
    # one scaled copy of the public rows (d M floats) plus O(k d) work arrays
    assert peak < 3 * d * M * 8, peak / (d * M * 8)
    assert elapsed < 60


@pytest.mark.slow
def test_no_d_by_d_allocation_at_d_1e5_m_500():
    """d = 1e5, M = 500: a d x d array would be 80 GB; the operator peaks near 1.3 d M floats."""
    d, M = 100_000, 500
    peak, elapsed = _memory_and_time(d, M)
    assert peak < 3 * d * M * 8, peak / (d * M * 8)
    assert elapsed < 120  # ~4 s single-threaded; loose for shared CI machines


# --- identity and diagonal offer the same operations -------------------------------------------


@pytest.mark.parametrize(
    "op",
    [IdentityCovariance(6), DiagonalCovariance(np.array([1.0, 2.0, 0.5, 4.0, 0.1, 3.0]))],
    ids=["identity", "diagonal"],
)
def test_identity_and_diagonal_new_operations(op):
    sigma = op.dense()
    rng = np.random.default_rng(40)
    v = rng.standard_normal((5, 6))
    h = rng.uniform(0.1, 2.0, 6)
    _close(op.inv_sqrt_apply(v), v @ _dense_power(sigma, -0.5))
    quad = np.einsum("ij,ij->i", v, np.linalg.solve(sigma, v.T).T)
    _close(op.inv_norm_squared(v), quad)
    _close(op.inv_norm(v), np.sqrt(quad))
    _close(op.solve(v), np.linalg.solve(sigma, v.T).T)
    _close(op.diagonal(), np.diag(sigma))
    _close(op.inv_diagonal(), np.diag(np.linalg.inv(sigma)))
    assert op.trace() == pytest.approx(np.trace(sigma))
    assert op.trace_with(h) == pytest.approx(np.trace(sigma @ np.diag(h)))
    assert op.inv_trace_with(h) == pytest.approx(np.trace(np.linalg.solve(sigma, np.diag(h))))
    samples = op.sample(np.random.default_rng(41), 100_000)
    rel, rms = _frobenius_check(samples, sigma)
    assert rel < 3 * rms
    assert op.sample(np.random.default_rng(41)).shape == (6,)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ridge", [0.0, -1.0, float("nan"), float("inf")])
def test_ridge_must_be_positive(ridge):
    with pytest.raises(ValueError, match="positive definite") as info:
        LowRankPlusRidgeCovariance(_public(50, 4, 10), ridge)
    assert "singular" in str(info.value)  # M = 4 < d = 10
    assert "ridge (lambda) > 0" in str(info.value)


@pytest.mark.parametrize("ridge", ["1", None, True])
def test_ridge_must_be_a_number(ridge):
    with pytest.raises(ValueError, match="real number"):
        LowRankPlusRidgeCovariance(_public(50, 4, 10), ridge)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rows_are_refused(bad):
    pub = _public(51, 6, 10)
    pub[2, 3] = bad
    pub[4, 0] = bad
    with pytest.raises(ValueError, match=r"non-finite values .* in 2 row\(s\): 2, 4"):
        LowRankPlusRidgeCovariance(pub, 1.0)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"M = 0"):
        LowRankPlusRidgeCovariance(np.zeros((0, 5)), 1.0)
    with pytest.raises(ValueError, match=r"d = 0"):
        LowRankPlusRidgeCovariance(np.zeros((3, 0)), 1.0)
    with pytest.raises(ValueError, match=r"shape \(M, d\)"):
        LowRankPlusRidgeCovariance(np.ones(5), 1.0)
    with pytest.raises(ValueError, match="center"):
        LowRankPlusRidgeCovariance(np.ones((2, 5)), 1.0, center="yes")
    op = LowRankPlusRidgeCovariance(_public(52, 4, 10), 1.0)
    for method in ("apply", "solve", "sqrt_apply", "inv_sqrt_apply", "inv_norm"):
        with pytest.raises(ValueError, match="dimension 10, got 9"):
            getattr(op, method)(np.ones(9))
        with pytest.raises(ValueError, match="dimension 10, got 11"):
            getattr(op, method)(np.ones((3, 11)))
        with pytest.raises(ValueError, match="scalar"):
            getattr(op, method)(1.0)
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        op.inv_trace_with(np.ones(9))
    with pytest.raises(ValueError, match="finite"):
        op.trace_with(np.full(10, np.nan))
    with pytest.raises(ValueError, match="Generator"):
        op.sample(None)
    with pytest.raises(ValueError, match="size"):
        op.sample(np.random.default_rng(0), 0)
    with pytest.raises(ValueError, match=r"9000 x 9000"):
        LowRankPlusRidgeCovariance(np.ones((1, 9000)), 1.0).dense()


def test_from_public_data_arguments():
    pub = _public(53, 4, 10)
    with pytest.raises(ValueError, match="not both"):
        LowRankPlusRidgeCovariance.from_public_data(pub, ridge=1.0, n_samples=10, step_size=0.1)
    with pytest.raises(ValueError, match="both n_samples"):
        LowRankPlusRidgeCovariance.from_public_data(pub, n_samples=10)
    with pytest.raises(ValueError, match="both n_samples"):
        LowRankPlusRidgeCovariance.from_public_data(pub)
    with pytest.raises(ValueError, match="n_samples"):
        LowRankPlusRidgeCovariance.from_public_data(pub, n_samples=0, step_size=0.1)
    with pytest.raises(ValueError, match="step_size"):
        LowRankPlusRidgeCovariance.from_public_data(pub, n_samples=10, step_size=0.0)
    with pytest.raises(ValueError, match="M = 0"):
        LowRankPlusRidgeCovariance.from_public_data(np.zeros((0, 3)), n_samples=5, step_size=1.0)
