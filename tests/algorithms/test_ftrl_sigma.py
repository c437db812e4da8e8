"""DP-FTRL-Σ (Private Overparameterized Linear Regression, anonymous submission, Algorithm 1):
reductions, the tree's law, privacy report, utility, and the
issue-12 checks (threshold validation, safe residual default, exact clipping, diagnostics)."""

import math

import numpy as np
import pytest

from privopt.accounting import gdp_epsilon
from privopt.algorithms.ftrl_sigma import (
    calibrate_ftrl_sigma_tau,
    dp_ftrl_sigma,
    ftrl_sigma_pass,
)
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.clipping.residual_estimate import per_call_budget, rows_needed
from privopt.datasets import make_overparameterised_regression
from privopt.noise import LowRankPlusRidgeCovariance, PrefixSumTree, TreeAggregation
from privopt.training.gradients import SigmaNormLinearModel, clip_coefficients


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
    # floor(log2 100) + 1 = 7 levels hold a complete node containing step 0 (the most any leaf
    # belongs to); the note's ceil(log2 T) + 1 = 8 counted a level whose node never completes
    levels = math.floor(math.log2(100)) + 1
    assert fit.info["levels"] == levels
    event = fit.report.events[0]
    assert event.parameters["sensitivity"] == pytest.approx(2 * math.sqrt(levels))  # replace-one
    assert fit.report.epsilon <= 1.0
    assert fit.report.epsilon == pytest.approx(
        gdp_epsilon(2 * math.sqrt(levels) / fit.info["tau"], 1e-5), rel=1e-9
    )
    # The paper's tau drops replace-one's factor 2: the report shows the epsilon it really gives
    # (exact GDP: 1.06 here; docs/theory/overparameterised-regression.md#tree-sensitivity-fix quotes
    # 1.40 through the paper's RDP conversion).
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


def test_designed_sigma_is_not_worse_than_identity_at_d_2000_n_1000_r_2():
    """The issue's utility check, median over 7 seeds (epsilon = 4, eta = 0.002, public
    residual estimates on 500 fresh rows, M = N public unlabeled rows).

    At r = 2 the theory's rates tie, and so do the measurements: over 20 seeds the paired
    difference designed - identity is +0.0003 +- 0.0003 (designed better in 9 of 20; at
    epsilon = 1, eta = 0.001: -0.0001 +- 0.0012 over 16 seeds, 11 of 16). An earlier version
    asserted a strict win on 7 seeds (0.0797 vs 0.0827), which one noise realisation gave and
    another (0.0868 vs 0.0866) does not. What holds is non-inferiority: the designed Σ's median
    is within 5% of the identity's (the 7-seed medians' spread is about 2%), and both are far
    below the null risk. eta = 0.003 diverges for both (the noise fed back through
    psi_t = C l_t grows as eta tau C). The designed Σ's gains are in BENCHMARKS.md (N = 2048).
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
    designed, identity = np.median(risks["designed"]), np.median(risks["identity"])
    assert designed < 1.05 * identity and max(designed, identity) < 0.35 * data.null_risk


# -- issue 12: thresholds, residual defaults, clipping, diagnostics --------------------------------


def _fit_args(data, **kwargs):
    return {
        "epsilon": 1.0,
        "delta": 1e-5,
        "learning_rate": 0.01,
        "rng": np.random.default_rng(0),
    } | kwargs


def _default_path_data(n_train=64, d=2, seed=3):
    """Enough rows for the default private residual estimate (one call): M + n_train rows.

    Returns (X, y, M): with ``estimating_rows=M`` the secret split keeps n_train rows to train.
    """
    eps_call, delta_call = per_call_budget(1.0, 1e-5, 1)
    m = rows_needed("private", horizon=n_train, epsilon=eps_call, delta=delta_call)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m + n_train, d))
    y = X @ np.linspace(1.0, 0.5, d) + 0.5 * rng.standard_normal(m + n_train)
    return X, y, m


BAD_POSITIVE = [-1.0, 0.0, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", BAD_POSITIVE)
def test_fixed_threshold_must_be_finite_and_positive(value):
    """A negative psi zeroed the node noise (max(0, psi)), NaN disabled the clipping, +inf gave
    NaN; every one of them used to report epsilon = 1."""
    data = _small()
    with pytest.raises(ValueError, match="threshold"):
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, residual="fixed", threshold=value))


@pytest.mark.parametrize("value", BAD_POSITIVE)
def test_clip_constant_must_be_finite_and_positive(value):
    data = _small()
    est = data.sample(200, np.random.default_rng(1))
    with pytest.raises(ValueError, match="clip_constant"):
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=value, estimating_data=est))


def test_clip_constant_derived_from_public_rows_must_be_positive():
    data = _small()
    est = data.sample(200, np.random.default_rng(1))
    with pytest.raises(ValueError, match="clip_constant"):
        dp_ftrl_sigma(
            data.X,
            data.y,
            **_fit_args(data, public_X=np.zeros((5, data.X.shape[1])), estimating_data=est),
        )


@pytest.mark.parametrize("value", BAD_POSITIVE)
def test_residual_fallback_must_be_finite_and_positive(value):
    data = _small()
    with pytest.raises(ValueError, match="residual_fallback"):
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=3.0, residual_fallback=value))


@pytest.mark.parametrize("value", BAD_POSITIVE)
def test_learning_rate_must_be_finite_and_positive(value):
    data = _small()
    with pytest.raises(ValueError, match="learning_rate"):
        dp_ftrl_sigma(
            data.X,
            data.y,
            **_fit_args(data, residual="fixed", threshold=1.0, learning_rate=value),
        )
    with pytest.raises(ValueError, match="learning_rate"):
        ftrl_sigma_pass(
            data.X,
            data.y,
            tau=1.0,
            learning_rate=value,
            threshold=lambda t, w: 1.0,
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize("tau", [-1.0, math.nan, math.inf])
def test_pass_refuses_a_bad_tau(tau):
    data = _small()
    with pytest.raises(ValueError, match="tau"):
        ftrl_sigma_pass(
            data.X,
            data.y,
            tau=tau,
            learning_rate=0.1,
            threshold=lambda t, w: 1.0,
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize("bad", [math.nan, 0.0, -1.0, -math.inf, math.inf])
def test_pass_refuses_a_threshold_rule_that_removes_the_noise_or_the_clipping(bad):
    """A rule returning a bad psi at a late step (t = 5) is refused there, before the step's
    gradient reaches the tree: +inf is refused with tau > 0 (it is the tau = 0 SGD reduction
    only, test_tau_zero_and_no_clipping_is_constant_step_sgd)."""
    data = _small()
    seen = []

    def rule(t, w):
        seen.append(t)
        return bad if t == 5 else 1.0

    with pytest.raises(ValueError, match="psi"):
        ftrl_sigma_pass(
            data.X, data.y, tau=2.0, learning_rate=0.1, threshold=rule, rng=np.random.default_rng(0)
        )
    assert seen == list(range(6))


def test_pass_with_tau_zero_may_clip_a_finite_threshold():
    data = _small()
    run = ftrl_sigma_pass(
        data.X,
        data.y,
        tau=0.0,
        learning_rate=0.1,
        threshold=lambda t, w: 0.5,  # clipping without noise: fine, nothing private is claimed
        rng=np.random.default_rng(0),
    )
    assert np.all(run.thresholds == 0.5) and run.clipped.any()


def test_explicit_public_residual_without_estimating_data_is_refused():
    data = _small()
    with pytest.raises(ValueError, match="estimating_data") as info:
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=3.0, residual="public"))
    assert "residual" in str(info.value)


def test_default_without_estimating_data_charges_private_residual_estimates():
    X, y, m = _default_path_data()
    fit = dp_ftrl_sigma(
        X, y, **_fit_args(None, clip_constant=3.0, residual_every=64, estimating_rows=m)
    )
    assert fit.info["residual"] == "private"
    assert fit.info["training_rows"] == 64 and fit.info["estimating_rows"] == m
    assert fit.info["residual_calls"] == 1
    approx = [e for e in fit.report.events if e.mechanism == "approximate-dp"]
    assert [e.label for e in approx] == ["RESIDUALEST stability histograms"]
    assert approx[0].parameters["count"] == 1 and approx[0].partitions == 1
    assert fit.report.num_partitions == 2 and fit.report.epsilon <= 1.0
    assert any("secret random split" in a for a in fit.report.assumptions)
    assert not any("public" in a and "estimating" in a for a in fit.report.assumptions)


def test_default_split_is_half_and_too_few_rows_are_refused_before_the_data_are_read():
    data = _small(n=256, d=2)
    with pytest.raises(ValueError, match=r"estimating rows.*secret split.*gives 128"):
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=3.0))
    with pytest.raises(ValueError, match="estimating_rows"):
        dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=3.0, estimating_rows=256))
    with pytest.raises(ValueError, match="estimating_rows"):  # no split with estimating_data
        dp_ftrl_sigma(
            data.X,
            data.y,
            **_fit_args(
                data,
                clip_constant=3.0,
                estimating_data=data.sample(100, np.random.default_rng(1)),
                estimating_rows=10,
            ),
        )


def test_default_with_estimating_data_is_public_and_the_report_says_so():
    data = _small()
    est = data.sample(300, np.random.default_rng(1))
    fit = dp_ftrl_sigma(data.X, data.y, **_fit_args(data, clip_constant=3.0, estimating_data=est))
    assert fit.info["residual"] == "public" and fit.info["training_rows"] == data.X.shape[0]
    assert not [e for e in fit.report.events if e.mechanism == "approximate-dp"]
    assert any("estimating_data rows are public" in a for a in fit.report.assumptions)
    explicit = dp_ftrl_sigma(
        data.X,
        data.y,
        **_fit_args(data, clip_constant=3.0, estimating_data=est, residual="public"),
    )
    np.testing.assert_array_equal(explicit.coef, fit.coef)


def test_clip_coefficient_never_overshoots_on_adversarial_values():
    """Triples where the hand-written factor psi / norm overshoots psi by rounding: the clipped
    Mahalanobis norm |c| ||x||_{Σ^-1} (as the core's Σ^-1-norm model computes it, through
    privopt.clipping's factors) is <= psi exactly."""
    rng = np.random.default_rng(0)
    residual = rng.standard_normal(20000) * 10.0 ** rng.uniform(-3, 6, 20000)
    inv_norm = 10.0 ** rng.uniform(-3, 3, 20000)
    psi = np.abs(residual) * inv_norm * rng.uniform(0.01, 0.999, 20000)
    naive = np.abs(residual * (psi / (np.abs(residual) * inv_norm))) * inv_norm
    adversarial = np.flatnonzero(naive > psi)
    assert adversarial.size > 100  # the naive factor overshoots on a few % of draws
    for i in adversarial:
        c, clipped = clip_coefficients(residual[i : i + 1], inv_norm[i : i + 1], float(psi[i]))
        c, clipped = float(c[0]), bool(clipped[0])
        assert clipped and abs(c) * inv_norm[i] <= psi[i]
        assert math.copysign(1.0, c) == math.copysign(1.0, residual[i])
        assert abs(c) * inv_norm[i] == pytest.approx(psi[i], rel=1e-14)  # still a clip to psi
    # vectorised, the same guarantee at once
    r_all, n_all = residual[adversarial], inv_norm[adversarial]
    c_all, clipped_all = clip_coefficients(r_all, n_all, 1.0)
    np.testing.assert_array_equal(clipped_all, np.abs(r_all) * n_all > 1.0)
    assert np.all(np.abs(c_all) * n_all <= 1.0)
    np.testing.assert_array_equal(c_all[~clipped_all], r_all[~clipped_all])
    c, clipped = clip_coefficients(np.array([-2.0]), np.array([0.5]), 1.0)
    assert (c[0], clipped[0]) == (-2.0, False)  # at the threshold: unchanged
    with pytest.raises(ValueError, match="non-finite"):
        clip_coefficients(np.array([math.inf]), np.array([1.0]), 1.0)


def test_clipped_gradients_in_a_run_stay_within_psi_in_the_sigma_norm(monkeypatch):
    """Wrap the Σ^-1-norm model to see every clipped gradient of a run with a non-identity Σ (an
    l2 clip would fail). An independent Mahalanobis norm of the float vector differs from the
    scalar |c| ||x||_{Σ^-1} by rounding only: 1e-12 relative
    (docs/theory/overparameterised-regression.md#implementation item 2)."""
    data = _small(n=64, d=5)
    cov = LowRankPlusRidgeCovariance(data.public_X, ridge=0.05)
    added = []
    real = SigmaNormLinearModel.batch_gradient_sum

    def recording(self, *args, **kwargs):
        total, fraction = real(self, *args, **kwargs)
        added.append(np.array(total))
        return total, fraction

    monkeypatch.setattr(SigmaNormLinearModel, "batch_gradient_sum", recording)
    psi = 0.3
    run = ftrl_sigma_pass(
        data.X * 7.0,
        data.y * 7.0,
        tau=1.0,
        learning_rate=0.01,
        threshold=lambda t, w: psi,
        covariance=cov,
        rng=np.random.default_rng(0),
    )
    assert len(added) == 64 and run.clipped.mean() > 0.5
    norms = np.asarray(cov.inv_norm(np.asarray(added)), dtype=float)
    assert np.all(norms <= psi * (1 + 1e-12))
    np.testing.assert_allclose(norms[run.clipped], psi, rtol=1e-12)


def test_per_record_diagnostics_are_released_only_on_request():
    data = _small()
    args = _fit_args(data, residual="fixed", threshold=0.5)
    fit = dp_ftrl_sigma(data.X, data.y, **args)
    assert fit.trace.clip_fraction is None and "clipped_fraction" not in fit.info
    assert fit.trace.clip_threshold.shape == fit.trace.noise_std.shape == (data.X.shape[0],)
    assert "clip_fraction" not in fit.trace.to_dict()
    assert not fit.report.non_private_releases
    with pytest.warns(NonPrivateDiagnosticsWarning, match="clip_fraction"):
        shown = dp_ftrl_sigma(
            data.X, data.y, **(args | {"diagnostics": True, "rng": np.random.default_rng(0)})
        )
    assert shown.trace.clip_fraction.shape == (data.X.shape[0],)
    assert set(np.unique(shown.trace.clip_fraction)) <= {0.0, 1.0}
    assert shown.info["clipped_fraction"] == pytest.approx(shown.trace.clip_fraction.mean())
    assert any("clip_fraction" in r for r in shown.report.non_private_releases)
    np.testing.assert_array_equal(shown.coef, fit.coef)  # same run, only the release differs


def test_the_last_row_given_reaches_the_output_through_the_secret_order():
    """TRUST.md's open question: with every other record null, a canary given as the last row
    moved the released coefficients by exactly 0 at any epsilon. Algorithm 1's output averages
    w_0 .. w_{N-1}, and the gradient of step N-1 reaches only w_N: the rows were used in the
    order given, so the last row given never influenced the output (a utility bug; privacy
    was never at stake). The pass now reads the rows in a secret uniform order (FixedBatches(1),
    the permutation being the fit's first draw), so the canary at secret position pos moves the
    average by eta z (N - 1 - pos) / N (its step w -> w + eta z lasts N - 1 - pos iterates)."""
    n, eta = 400, 0.1 / math.sqrt(400)
    z = np.full(2, 1 / math.sqrt(2))
    without_X, without_y = np.zeros((n, 2)), np.zeros(n)
    with_X, with_y = without_X.copy(), without_y.copy()
    with_X[-1], with_y[-1] = z, 1.0
    args = dict(
        epsilon=1e6, delta=1e-5, learning_rate=eta, residual="fixed", threshold=1.0,
        neighbouring="zero-out",
    )  # fmt: skip
    for seed in range(5):
        coef = dp_ftrl_sigma(with_X, with_y, rng=np.random.default_rng(seed), **args).coef
        base = dp_ftrl_sigma(without_X, without_y, rng=np.random.default_rng(seed), **args).coef
        position = int(np.flatnonzero(np.random.default_rng(seed).permutation(n) == n - 1)[0])
        # the canary's residual is -1 + <z, w_pos>, w_pos pure noise (measured relative effect
        # up to 1e-5 at this epsilon); later noise cancels in the difference (same seed)
        np.testing.assert_allclose(coef - base, eta * z * (n - 1 - position) / n, rtol=1e-3)


def test_estimator_canary_changes_the_coefficients():
    """The black-box form of the check (TRUST.md): DPLinearRegression(method="ftrl-sigma") at
    epsilon 1e6, public bounds [-1, 1], null base rows and a corner canary given last. One SGD
    step moves the coefficients by about 2.5e-3 (eta = 0.1 / sqrt(N) = 0.005 times |z_i| 0.707
    scaled back by 1 / sqrt(2)), times (N - 1 - pos) / N at the canary's secret position:
    measured median 1.2e-3 over seeds 0-9; it was exactly 0 before the secret order."""
    from privopt.estimators import DPLinearRegression

    n = 400
    X, y = np.zeros((n, 2)), np.zeros(n)
    X_c, y_c = X.copy(), y.copy()
    X_c[-1], y_c[-1] = 1.0, 1.0
    moved = []
    for seed in range(5):
        kw = dict(
            epsilon=1e6, delta=1e-5, method="ftrl-sigma", fit_intercept=False,
            feature_bounds=(-1.0, 1.0), target_bounds=(-1.0, 1.0), random_state=seed,
        )  # fmt: skip
        with_canary = DPLinearRegression(**kw).fit(X_c, y_c).coef_
        without = DPLinearRegression(**kw).fit(X, y).coef_
        moved.append(float(np.max(np.abs(with_canary - without))))
    assert np.median(moved) > 5e-4 and max(moved) < 2.6e-3
