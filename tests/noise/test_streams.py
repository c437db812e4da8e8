"""Streaming generators: impulse responses, the noise law, mode equivalence, checkpoints."""

import numpy as np
import pytest
from scipy import stats

from privopt.noise import (
    DenseMechanism,
    DiagonalCovariance,
    IdentityCovariance,
    ImpulseSource,
    Restarted,
    SeededNoiseSource,
    TreeAggregation,
    anti_pgd,
    custom,
    damped_anti_pgd,
    independent,
    nu_dpftrl,
    optimal_cc,
)

STEPS = 12
TOEPLITZ = {
    "independent": independent,
    "nu-dpftrl": lambda: nu_dpftrl(0.1),
    "optimal-cc": optimal_cc,
    "anti-pgd": anti_pgd,
    "damped-anti-pgd": lambda: damped_anti_pgd(0.3),
    "custom": lambda: custom([1.0, -0.4, 0.1]),
}


def _all_mechanisms():
    out = {name: make() for name, make in TOEPLITZ.items()}
    out["tree"] = TreeAggregation()
    out["tree-honaker"] = TreeAggregation(variance_reduction=True)
    out["dense"] = DenseMechanism(nu_dpftrl(0.3).decoder_matrix(STEPS))
    out["restarted-nu"] = Restarted(nu_dpftrl(0.1), block=5)
    out["restarted-tree"] = Restarted(TreeAggregation(), block=4)
    return out


CASES = [(n, m) for n in [*TOEPLITZ, "restarted-nu"] for m in ("history", "regenerate")]
CASES += [("tree", None), ("tree-honaker", None), ("dense", None), ("restarted-tree", None)]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_impulse_response_reproduces_columns_of_b(name, mode):
    mechanism = _all_mechanisms()[name]
    options = {"mode": mode} if mode else {}
    b = mechanism.decoder_matrix(STEPS)
    indices = mechanism.source_indices(STEPS)
    assert len(indices) == b.shape[1] == len(set(indices))
    for column, index in enumerate(indices):
        stream = mechanism.noise_stream(1, 1.0, source=ImpulseSource(index), **options)
        response = np.array([stream.next()[0] for _ in range(STEPS)])
        np.testing.assert_allclose(response, b[:, column], atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", list(TOEPLITZ))
def test_history_and_regeneration_are_bit_identical(name):
    mechanism = TOEPLITZ[name]()
    a = mechanism.noise_stream(50, 2.0, seed=7, mode="history")
    b = mechanism.noise_stream(50, 2.0, seed=7, mode="regenerate")
    for _ in range(20):
        np.testing.assert_array_equal(a.next(), b.next())


@pytest.mark.parametrize("name", list(_all_mechanisms()))
def test_checkpoint_resumes_exactly(name):
    mechanism = _all_mechanisms()[name]
    stream = mechanism.noise_stream(8, 1.5, seed=3)
    for _ in range(5):
        stream.next()
    state = stream.state()
    expected = [stream.next() for _ in range(5)]
    resumed = mechanism.noise_stream(8, 1.5, seed=3)
    resumed.restore(state)
    for want in expected:
        np.testing.assert_array_equal(resumed.next(), want)
    other = mechanism.noise_stream(8, 1.5, seed=4)
    with pytest.raises(ValueError, match="seed"):
        other.restore(state)


@pytest.mark.parametrize("name", ["nu-dpftrl", "anti-pgd", "tree", "tree-honaker", "restarted-nu"])
def test_noise_law_covariance_and_ks(name):
    """Coordinates are i.i.d. copies of the T-vector (B w)_t, so N coordinates give N samples.

    Each empirical covariance entry has standard error sqrt((S_ii S_jj + S_ij^2)/N); we allow
    5 standard errors per entry (64 entries: a false alarm has probability below 1e-4).
    """
    mechanism = _all_mechanisms()[name]
    steps, n, std = 8, 40_000, 1.7
    stream = mechanism.noise_stream(n, std, seed=11)
    samples = np.array([stream.next() for _ in range(steps)])  # steps x n
    b = mechanism.decoder_matrix(steps)
    expected = std**2 * b @ b.T
    empirical = samples @ samples.T / n
    se = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / n)
    assert np.all(np.abs(empirical - expected) <= 5 * se)
    # KS on the last step's marginal: accepts the true scale, rejects 0.67x and 1.5x.
    scale = np.sqrt(expected[-1, -1])
    z = samples[-1]
    assert stats.kstest(z / scale, "norm").pvalue > 1e-3
    assert stats.kstest(z / (0.67 * scale), "norm").pvalue < 1e-6
    assert stats.kstest(z / (1.5 * scale), "norm").pvalue < 1e-6


def test_tree_prefix_variance_is_popcount():
    stream = TreeAggregation().noise_stream(20_000, 1.0, seed=5)
    variances = [np.var(stream.next()) for _ in range(16)]
    expected = [bin(t + 1).count("1") for t in range(16)]
    assert expected == [TreeAggregation().prefix_variance(t) for t in range(16)]
    np.testing.assert_allclose(variances, expected, rtol=0.06)  # 6 s.e. at n = 20,000


def test_variance_reduced_tree_is_unbiased_and_never_worse():
    plain, honaker = TreeAggregation(), TreeAggregation(variance_reduction=True)
    steps = 64
    b, c = honaker.decoder_matrix(steps), honaker.encoder_matrix(steps)
    np.testing.assert_allclose(b @ c, np.tril(np.ones((steps, steps))), atol=1e-12)
    np.testing.assert_allclose(np.diag(b @ b.T), [honaker.prefix_variance(t) for t in range(steps)])
    assert all(honaker.prefix_variance(t) <= plain.prefix_variance(t) for t in range(steps))
    assert honaker.prefix_variance(1) == pytest.approx(2 / 3)  # (1 + 1/2)^-1
    assert honaker.sensitivity_squared(steps) == plain.sensitivity_squared(steps)
    assert honaker.prefix_sum_error(steps) < plain.prefix_sum_error(steps)


@pytest.mark.parametrize("name", ["nu-dpftrl", "tree"])
def test_covariance_shaping_law(name):
    """Sources are N(0, std^2 Σ): per step, Cov across coordinates scales by Σ's diagonal."""
    mechanism = _all_mechanisms()[name]
    variances = np.array([0.25, 1.0, 4.0])
    reps, std, steps = 30_000, 1.3, 6
    stream = mechanism.noise_stream(
        3 * reps, std, seed=9, covariance=DiagonalCovariance(np.tile(variances, reps))
    )
    samples = np.array([stream.next() for _ in range(steps)]).reshape(steps, reps, 3)
    b = mechanism.decoder_matrix(steps)
    for coord, var in enumerate(variances):
        x = samples[:, :, coord]
        expected = std**2 * var * b @ b.T
        empirical = x @ x.T / reps
        se = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / reps)
        assert np.all(np.abs(empirical - expected) <= 5 * se)
    identity = mechanism.noise_stream(3, std, seed=9, covariance=IdentityCovariance(3))
    plain = mechanism.noise_stream(3, std, seed=9)
    np.testing.assert_array_equal(identity.next(), plain.next())
    with pytest.raises(ValueError, match="dimension"):
        mechanism.noise_stream(4, std, seed=9, covariance=IdentityCovariance(3))


@pytest.mark.parametrize("name", list(TOEPLITZ))
def test_streaming_iterates_equal_matrix_form(name):
    """theta_{t+1} = theta_t - eta (g_t + (B w)_t) equals theta_0 - eta cumsum(B (C G + W))."""
    mechanism = TOEPLITZ[name]()
    steps, dim, eta, std = 15, 4, 0.1, 0.8
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(steps, dim))
    stream = mechanism.noise_stream(dim, std, seed=21)
    theta = np.zeros(dim)
    trajectory = []
    for t in range(steps):
        theta = theta - eta * (grads[t] + stream.next())
        trajectory.append(theta)
    source = SeededNoiseSource(21)
    w = std * np.array([source.draw((0, t), dim) for t in range(steps)])
    b, c = mechanism.decoder_matrix(steps), mechanism.encoder_matrix(steps)
    matrix_form = -eta * np.cumsum(b @ (c @ grads + w), axis=0)
    np.testing.assert_allclose(np.array(trajectory), matrix_form, atol=1e-10)


def test_stream_arguments_are_validated():
    mech = nu_dpftrl(0.1)
    with pytest.raises(ValueError, match="dim"):
        mech.noise_stream(0, 1.0, seed=1)
    with pytest.raises(ValueError, match="std"):
        mech.noise_stream(3, -1.0, seed=1)
    with pytest.raises(ValueError, match="exactly one"):
        mech.noise_stream(3, 1.0)
    with pytest.raises(ValueError, match="exactly one"):
        mech.noise_stream(3, 1.0, rng=np.random.default_rng(0), seed=1)
    with pytest.raises(ValueError, match="mode"):
        mech.noise_stream(3, 1.0, seed=1, mode="cached")
    dense = DenseMechanism(np.eye(2)).noise_stream(1, 1.0, seed=1)
    dense.next()
    dense.next()
    with pytest.raises(ValueError, match="horizon"):
        dense.next()


def test_rng_draws_the_seed_and_secure_mode_uses_the_os():
    mech = nu_dpftrl(0.1)
    a = mech.noise_stream(5, 1.0, rng=np.random.default_rng(123))
    b = mech.noise_stream(5, 1.0, rng=np.random.default_rng(123))
    np.testing.assert_array_equal(a.next(), b.next())
    s1, s2 = mech.noise_stream(5, 1.0, secure=True), mech.noise_stream(5, 1.0, secure=True)
    assert s1.source.seed != s2.source.seed
    assert not np.array_equal(s1.next(), s2.next())
    with pytest.raises(ValueError, match="exactly one"):
        mech.noise_stream(5, 1.0, seed=1, secure=True)
    with pytest.raises(ValueError, match="seed"):
        SeededNoiseSource(-1)


@pytest.mark.parametrize(
    ("make", "block_rows"), [(lambda: nu_dpftrl(0.1), 3), (lambda: custom([1.0, -0.4, 0.1]), 2)]
)
def test_blocked_history_product_is_exact_and_bit_identical_across_modes(make, block_rows):
    # the history sum is one BLAS product per block of sources; force several blocks (and, for a
    # finite support, a window that starts inside a block) and compare with the dense B z
    mechanism = make()
    dim, steps = 7, 20
    streams = {}
    for mode in ("history", "regenerate"):
        streams[mode] = mechanism.noise_stream(dim, 1.0, seed=5, mode=mode)
        streams[mode].block_rows = block_rows
    got = {mode: np.array([s.next() for _ in range(steps)]) for mode, s in streams.items()}
    np.testing.assert_array_equal(got["history"], got["regenerate"])
    z = np.array([streams["history"].source.draw((0, t), dim) for t in range(steps)])
    np.testing.assert_allclose(got["history"], mechanism.decoder_matrix(steps) @ z, atol=1e-12)
    state = streams["history"].state()
    window = mechanism.support or steps
    assert len(state["history"]) == window
    resumed = mechanism.noise_stream(dim, 1.0, seed=5, mode="history")
    resumed.block_rows = block_rows
    resumed.restore(state)
    np.testing.assert_array_equal(resumed.next(), streams["regenerate"].next())


@pytest.mark.parametrize("factory", [independent, lambda: nu_dpftrl(0.2)])
@pytest.mark.parametrize("dim", [3, 20_000])  # many sources per block, and one
def test_next_many_equals_repeated_next(factory, dim):
    a = factory().noise_stream(dim, 0.7, seed=5)
    b = factory().noise_stream(dim, 0.7, seed=5)
    first = np.stack([a.next() for _ in range(7)])
    np.testing.assert_array_equal(b.next_many(7), first)  # crosses no block or several
    np.testing.assert_array_equal(b.next_many(3000 if dim == 3 else 2)[-1], (
        [a.next() for _ in range(3000 if dim == 3 else 2)][-1]))  # fmt: skip
    assert a.step == b.step
