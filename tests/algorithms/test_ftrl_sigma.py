"""DP-FTRL-Σ (seed 003, Algorithm 1): reductions, the tree's law, privacy report, utility."""

import math

import numpy as np
import pytest

from privopt.accounting import gdp_epsilon
from privopt.algorithms.ftrl_sigma import (
    calibrate_ftrl_sigma_tau,
    dp_ftrl_sigma,
    ftrl_sigma_pass,
)
from privopt.datasets import make_overparameterised_regression
from privopt.noise import LowRankPlusRidgeCovariance, PrefixSumTree, TreeAggregation


def _small(n=64, d=6, seed=0):
    return make_overparameterised_regression(n, d, r=2.0, rng=np.random.default_rng(seed))


def test_tau_zero_and_no_clipping_is_constant_step_sgd():
    data = _small()
    eta = 0.3
    run = ftrl_sigma_pass(
        data.X,
        data.y,
        tau=0.0,
        learning_rate=eta,
        threshold=lambda t, w: math.inf,
        rng=np.random.default_rng(0),
    )
    w, total = np.zeros(6), np.zeros(6)
    for x, y in zip(data.X, data.y, strict=True):
        total += w
        w = w - eta * x * (x @ w - y)
    np.testing.assert_allclose(run.average, total / 64, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(run.last, w, rtol=1e-12, atol=1e-15)
    assert not run.clipped.any()


def test_identity_sigma_with_a_fixed_threshold_is_dp_ftrl_with_the_tree_mechanism():
    """Zero data: w_{t+1} = -eta (tree prefix noise); its covariance over t is the tree's B B^T."""
    steps, tau, psi, eta = 8, 1.5, 2.0, 0.5
    X, y = np.zeros((steps, 1)), np.zeros(steps)
    samples = []
    for seed in range(4000):
        trajectory = []
        tree = PrefixSumTree(1, np.random.default_rng(seed))
        for _t in range(steps):
            trajectory.append(-eta * tree.add(np.zeros(1), tau * psi)[0])
        samples.append(trajectory)
    run = ftrl_sigma_pass(
        X, y, tau=tau, learning_rate=eta, threshold=lambda t, w: psi, rng=np.random.default_rng(0)
    )
    assert run.last.shape == (1,)
    empirical = np.cov(np.asarray(samples).T) / (eta * tau * psi) ** 2
    b = TreeAggregation().decoder_matrix(steps)
    # 4000 draws: entries of order 1-4 have standard errors ~ sqrt(2/4000) * scale, < 0.1
    np.testing.assert_allclose(empirical, b @ b.T, atol=0.2)


def test_tree_prefix_noise_has_covariance_popcount_times_sigma_squared_sigma():
    rng = np.random.default_rng(1)
    public = rng.standard_normal((3, 5)) * np.array([2.0, 1.0, 0.5, 0.3, 0.1])
    cov = LowRankPlusRidgeCovariance(public, ridge=0.5)
    std, t_check, draws = 0.7, 6, 3000  # popcount(7) = 3
    noise = []
    for seed in range(draws):
        tree = PrefixSumTree(5, np.random.default_rng(seed), cov, batch=8)
        for _ in range(t_check + 1):
            out = tree.add(np.zeros(5), std)
        noise.append(out)
    empirical = np.cov(np.asarray(noise).T)
    expected = std**2 * 3 * cov.dense()
    error = np.linalg.norm(empirical - expected) / np.linalg.norm(expected)
    assert error < 4 * math.sqrt(2.0 / draws) * 3  # Frobenius error ~ sqrt(2/n) per entry scale


def test_report_sensitivity_matches_the_levels_and_epsilon_the_target():
    data = _small(n=100)
    fit = dp_ftrl_sigma(
        data.X,
        data.y,
        epsilon=1.0,
        delta=1e-5,
        learning_rate=0.01,
        rng=np.random.default_rng(0),
        residual="fixed",
        threshold=1.0,
    )
    levels = math.ceil(math.log2(100)) + 1  # 8
    assert fit.info["levels"] == levels
    event = fit.report.events[0]
    assert event.parameters["sensitivity"] == pytest.approx(2 * math.sqrt(levels))  # replace-one
    assert fit.report.epsilon <= 1.0
    assert fit.report.epsilon == pytest.approx(
        gdp_epsilon(2 * math.sqrt(levels) / fit.info["tau"], 1e-5), rel=1e-9
    )
    # The paper's tau drops replace-one's factor 2: the report shows the epsilon it really gives
    # (exact GDP: 1.06 here; notes/003.md §3.3 quotes 1.40 through the paper's RDP conversion).
    paper = dp_ftrl_sigma(
        data.X,
        data.y,
        epsilon=1.0,
        delta=1e-5,
        learning_rate=0.01,
        rng=np.random.default_rng(0),
        residual="fixed",
        threshold=1.0,
        calibration="paper",
    )
    assert paper.report.epsilon == pytest.approx(1.060, abs=0.005) and paper.report.epsilon > 1.0
    zero_out = calibrate_ftrl_sigma_tau(1.0, 1e-5, 100, neighbouring="zero-out")
    assert zero_out == pytest.approx(fit.info["tau"] / 2, rel=1e-6)


def test_private_residual_estimates_are_charged_on_the_estimating_partition():
    data = _small(n=64, d=6)
    est_X, est_y = data.sample(6000, np.random.default_rng(5))
    fit = dp_ftrl_sigma(
        data.X,
        data.y,
        epsilon=8.0,
        delta=1e-5,
        learning_rate=0.05,
        rng=np.random.default_rng(0),
        residual="private",
        clip_constant=3.0,
        estimating_data=(est_X, est_y),
        residual_every=64,
    )
    assert fit.info["residual_calls"] == 1
    labels = {e.label: e for e in fit.report.events}
    histogram = labels["RESIDUALEST stability histograms"]
    assert histogram.parameters["count"] == 1 and histogram.partitions == 1
    assert fit.report.epsilon <= 8.0 and fit.report.num_partitions == 2
    with pytest.raises(ValueError, match="rows"):  # the message names how many are needed
        dp_ftrl_sigma(
            data.X,
            data.y,
            epsilon=1.0,
            delta=1e-5,
            learning_rate=0.05,
            rng=np.random.default_rng(0),
            residual="private",
            clip_constant=3.0,
            estimating_data=(est_X[:100], est_y[:100]),
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"public_X": np.zeros((5, 7))}, "columns"),
        ({"covariance": "bad"}, "covariance operator"),
        ({"residual": "fixed"}, "threshold"),
        ({"residual": "oracle"}, "residual"),
        ({"epsilon": 0.0}, "epsilon"),
    ],
)
def test_bad_input(kwargs, match):
    data = _small()
    args = {
        "epsilon": 1.0,
        "delta": 1e-5,
        "learning_rate": 0.01,
        "rng": np.random.default_rng(0),
        "public_X": data.public_X,
    } | kwargs
    with pytest.raises(ValueError, match=match):
        dp_ftrl_sigma(data.X, data.y, **args)
    with pytest.raises(ValueError, match=r"singular|ridge|positive"):
        LowRankPlusRidgeCovariance(data.public_X, ridge=0.0)


def test_designed_sigma_beats_identity_at_d_2000_n_1000_r_2():
    """The issue's utility check, median over 7 seeds (epsilon = 4, eta = 0.002, public
    residual estimates on 500 fresh rows, M = N public unlabeled rows).

    Measured medians: designed 0.0797, identity 0.0827 (null risk 0.33; the theory's rates tie
    at r = 2). At epsilon = 1 the medians are 0.148 vs 0.165 at eta = 0.001; eta = 0.003
    diverges for both (the noise fed back through psi_t = C l_t grows as eta tau C).
    """
    risks = {"identity": [], "designed": []}
    for seed in range(7):
        data = make_overparameterised_regression(1000, 2000, r=2.0, rng=np.random.default_rng(seed))
        est = data.sample(500, np.random.default_rng(100 + seed))
        for design in risks:
            cov = None
            if design == "designed":
                cov = LowRankPlusRidgeCovariance.from_public_data(
                    data.public_X, n_samples=1000, step_size=0.002
                )
            fit = dp_ftrl_sigma(
                data.X,
                data.y,
                epsilon=4.0,
                delta=1e-5,
                learning_rate=0.002,
                rng=np.random.default_rng(seed),
                covariance=cov,
                public_X=data.public_X,
                residual="public",
                estimating_data=est,
                residual_every=10,
            )
            risks[design].append(data.excess_risk(fit.coef))
    assert np.median(risks["designed"]) < np.median(risks["identity"]) < data.null_risk
