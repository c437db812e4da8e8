"""DP-FTRL (Choquette-Choo et al. 2024, Algorithm 1): equivalences, privacy calibration,
participation, bad input."""

import numpy as np
import pytest

from privopt.accounting import gdp_epsilon, zcdp_epsilon, zcdp_rho
from privopt.algorithms import (
    GenericModel,
    calibrate_ftrl_noise,
    dp_ftrl,
    ftrl_participation,
    noisy_ftrl,
)
from privopt.noise import Participation, SeededNoiseSource, independent, nu_dpftrl, optimal_cc

# Tests of the clipping behaviour read the non-private clip fractions on purpose.
pytestmark = pytest.mark.filterwarnings(
    "ignore::privopt.algorithms.result.NonPrivateDiagnosticsWarning"
)


def _linear_data(n=400, p=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, X @ rng.normal(size=p) + rng.normal(size=n)


def test_independent_noise_is_dp_sgd():
    """With B = I and full batches, DP-FTRL is clipped gradient descent plus fresh noise."""
    X, y = _linear_data()
    n, p = X.shape
    clip, lr, steps = 0.5, 0.1, 6
    result = dp_ftrl(
        X,
        y,
        mechanism=independent(),
        epsilon=2.0,
        delta=1e-6,
        clip_norm=clip,
        learning_rate=lr,
        rng=np.random.default_rng(3),
        batch_size=n,
        epochs=steps,
        noise_seed=11,
    )
    sigma = result.info["noise_multiplier"]
    source = SeededNoiseSource(11)
    w = np.zeros(p)
    for t in range(steps):
        r = X @ w - y
        norms = np.abs(r) * np.linalg.norm(X, axis=1)
        factors = np.minimum(1.0, clip / norms)
        g = X.T @ (r * factors) + clip * sigma * source.draw((0, t), p)
        w = w - lr * g / n
    np.testing.assert_allclose(result.coef, w, rtol=1e-10, atol=1e-12)


def test_without_clipping_it_is_noisy_ftrl():
    X, y = _linear_data()
    mech = nu_dpftrl(0.1)
    result = dp_ftrl(
        X,
        y,
        mechanism=mech,
        epsilon=1.0,
        delta=1e-6,
        clip_norm=1e9,
        learning_rate=0.05,
        rng=np.random.default_rng(4),
        batch_size=40,
        epochs=3,
        noise_seed=5,
        diagnostics=True,
    )
    assert result.trace.clip_fraction.max() == 0.0  # the huge clip never binds
    w = noisy_ftrl(
        X,
        y,
        mechanism=mech,
        noise_std=1e9 * result.info["noise_multiplier"],
        learning_rate=0.05,
        rng=np.random.default_rng(4),
        batch_size=40,
        epochs=3,
        noise_seed=5,
    )
    np.testing.assert_allclose(result.coef, w, rtol=1e-9)


@pytest.mark.parametrize("mechanism", [independent(), nu_dpftrl(0.05), optimal_cc()])
@pytest.mark.parametrize("epochs", [1, 4])
def test_report_epsilon_is_the_accountants(mechanism, epochs):
    X, y = _linear_data(n=300)
    result = dp_ftrl(
        X,
        y,
        mechanism=mechanism,
        epsilon=1.5,
        delta=1e-5,
        clip_norm=1.0,
        learning_rate=0.05,
        rng=np.random.default_rng(0),
        batch_size=30,
        epochs=epochs,
    )
    steps, pattern = ftrl_participation(300, 30, epochs)
    s = mechanism.sensitivity(steps, pattern)
    sigma = result.info["noise_multiplier"]
    assert result.info["unit_sensitivity"] == pytest.approx(s)
    assert result.report.epsilon == pytest.approx(gdp_epsilon(s / sigma, 1e-5), rel=1e-9)
    assert result.report.epsilon <= 1.5 + 1e-9
    assert result.report.epsilon == pytest.approx(1.5, rel=1e-6)
    assert result.report.neighbouring == "zero-out"
    assert result.report.rho == pytest.approx(s**2 / (2 * sigma**2))


def test_zcdp_calibration_meets_the_target_through_rho():
    mech = nu_dpftrl(0.01)
    steps, pattern = ftrl_participation(1000, 10, 2)
    sigma, s = calibrate_ftrl_noise(mech, steps, pattern, 2.0, 1e-6, calibration="zcdp")
    assert zcdp_epsilon(s**2 / (2 * sigma**2), 1e-6) == pytest.approx(2.0, rel=1e-9)
    gdp_sigma, _ = calibrate_ftrl_noise(mech, steps, pattern, 2.0, 1e-6)
    assert gdp_sigma < sigma  # exact GDP needs less noise
    # the float64 formula sigma = s / sqrt(2 rho), at most rounded toward more noise
    rho = zcdp_rho(2.0, 1e-6)
    assert sigma >= s / np.sqrt(2.0 * rho)
    assert sigma == pytest.approx(s / np.sqrt(2.0 * rho), rel=1e-11)


def test_zcdp_fit_runs_its_plans_one_calibration():
    """dp_ftrl(calibration="zcdp") calibrates its plan once to mu = sqrt(2 rho): the run's
    multiplier is calibrate_ftrl_noise's (unit clip), and the report's rho is the target's."""
    X, y = _linear_data()
    mech = nu_dpftrl(0.05)
    fit = dp_ftrl(
        X,
        y,
        mechanism=mech,
        epsilon=1.0,
        delta=1e-6,
        clip_norm=1.0,
        learning_rate=0.05,
        batch_size=40,
        epochs=2,
        rng=np.random.default_rng(0),
        calibration="zcdp",
    )
    steps, pattern = ftrl_participation(X.shape[0], 40, 2)
    sigma, s = calibrate_ftrl_noise(mech, steps, pattern, 1.0, 1e-6, calibration="zcdp")
    assert fit.report.rho <= zcdp_rho(1.0, 1e-6)
    assert fit.report.rho == pytest.approx(s**2 / (2 * sigma**2), rel=1e-12)
    assert fit.report.epsilon <= 1.0


def test_participation_pattern_of_fixed_batches():
    assert ftrl_participation(1000, 100, 1) == (10, Participation.single())
    assert ftrl_participation(1000, 100, 5) == (50, Participation.multiple(10, 5))
    assert ftrl_participation(1050, 100, 2) == (20, Participation.multiple(10, 2))


def test_correlated_noise_trains_a_logistic_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 10))
    w = rng.normal(size=10)
    y = (X @ w + rng.logistic(size=20_000) > 0).astype(float)
    result = dp_ftrl(
        X,
        y,
        mechanism=nu_dpftrl(0.01),
        epsilon=2.0,
        delta=1e-6,
        clip_norm=1.0,
        learning_rate=0.5,
        rng=np.random.default_rng(1),
        model="logistic",
        batch_size=200,
        epochs=3,
        momentum=0.5,
    )
    accuracy = np.mean((X @ result.coef > 0) == (y > 0))
    bayes = np.mean((X @ w > 0) == (y > 0))
    assert accuracy > bayes - 0.03  # measured 0.875 against a Bayes rate of about 0.88
    assert result.trace.steps == 300


def test_generic_gradient_path_matches_the_closed_form():
    X, y = _linear_data()
    generic = GenericModel(lambda w, Xb, yb: (Xb @ w - yb)[:, None] * Xb)
    kwargs = dict(
        mechanism=nu_dpftrl(0.2),
        epsilon=1.0,
        delta=1e-6,
        clip_norm=0.7,
        learning_rate=0.05,
        batch_size=50,
        epochs=2,
        noise_seed=3,
    )
    a = dp_ftrl(X, y, rng=np.random.default_rng(2), model="linear", **kwargs)
    b = dp_ftrl(X, y, rng=np.random.default_rng(2), model=generic, **kwargs)
    np.testing.assert_allclose(a.coef, b.coef, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "poisson"}, "model"),
        ({"momentum": 1.0}, "momentum"),
        ({"batch_size": 10_000}, "batch_size"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"w0": np.zeros(3)}, "w0"),
        ({"learning_rate": lambda t: -1.0}, "learning rate"),
        ({"calibration": "rdp"}, "calibration"),
    ],
)
def test_bad_input(kwargs, match):
    X, y = _linear_data()
    args = dict(
        mechanism=nu_dpftrl(0.1),
        epsilon=1.0,
        delta=1e-6,
        clip_norm=1.0,
        learning_rate=0.1,
        rng=np.random.default_rng(0),
        batch_size=40,
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dp_ftrl(X, y, **args)


def test_non_finite_data_is_refused():
    X, y = _linear_data()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        dp_ftrl(
            X,
            y,
            mechanism=independent(),
            epsilon=1.0,
            delta=1e-6,
            clip_norm=1.0,
            learning_rate=0.1,
            rng=np.random.default_rng(0),
        )


def test_tree_mechanism_adds_prefix_noise_to_the_iterate_not_per_step():
    """With zero gradients, theta_T = -lr * (prefix noise at T - 1) / b: one node at T = 8.

    Adding the tree's prefix noise at every step would give sum_t popcount(t + 1) = 13 times
    the variance. A generic model whose parameter count (50) differs from X's width (2).
    """
    from privopt.algorithms.ftrl import GenericModel
    from privopt.noise import TreeAggregation

    model = GenericModel(grad_fn=lambda w, X, y: np.zeros((X.shape[0], w.size)))
    X, y = np.ones((8, 2)), np.zeros(8)
    finals, stds = [], []
    for seed in range(60):
        fit = dp_ftrl(
            X,
            y,
            mechanism=TreeAggregation(),
            epsilon=2.0,
            delta=1e-5,
            clip_norm=1.0,
            learning_rate=1.0,
            rng=np.random.default_rng(seed),
            model=model,
            w0=np.zeros(50),
        )
        finals.append(fit.coef)
        stds.append(fit.info["noise_multiplier"])
    ratio = np.var(np.concatenate(finals)) / stds[0] ** 2
    # 3000 N(0, 1) draws: the variance estimate has relative sd ~ sqrt(2/3000) = 2.6%
    assert ratio == pytest.approx(1.0, rel=0.12)
