"""Quantile-based adaptive clipping on the core (issue 20): accounting, the hook, convergence."""

import dataclasses
import math

import numpy as np
import pytest

from privopt.accounting import GaussianEvent, PoissonSampledGaussianEvent, PrivacyLedger
from privopt.noise import BLTMechanism, Restarted, independent, nu_dpftrl, optimize_blt
from privopt.training import (
    SGD,
    FixedBatches,
    GenericModel,
    PoissonSampling,
    QuantileClipping,
    TrainingPlan,
    adjusted_gradient_multiplier,
    run,
)

DELTA = 1e-6


def _blt():
    return optimize_blt(40, buffers=2)


MECHANISMS = {
    "independent": independent,
    "nu-dpftrl": lambda: nu_dpftrl(0.1),
    "blt": _blt,
    "restarted": lambda: Restarted(nu_dpftrl(0.1), 20),
}


def test_andrew_et_al_constants():
    # docs/theory/blt-and-adaptive-clipping.md item 9: z_Delta(z = 1, sigma_b = 5) = 1.005038;
    # jointly the multiplier is z
    z_delta = adjusted_gradient_multiplier(1.0, 5.0)
    assert z_delta == pytest.approx(1.005038, abs=5e-7)
    assert (z_delta**-2 + (2 * 5.0) ** -2) ** -0.5 == pytest.approx(1.0, rel=1e-14)
    with pytest.raises(ValueError, match="count release alone"):
        adjusted_gradient_multiplier(10.0, 5.0)  # z >= 2 sigma_b spends everything on counts


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("relation", ["zero-out", "replace-one"])
@pytest.mark.parametrize("epochs", [1, 2])
def test_gradients_and_counts_compose_to_the_plans_event(name, relation, epochs):
    # brute force: the two releases as separate Gaussian mechanisms, composed exactly in GDP
    # (mu^2 adds), must spend exactly the plan's event (that of a fixed unit clip)
    rule = QuantileClipping(count_noise_fraction=0.2)
    plan = TrainingPlan(
        800, FixedBatches(40, epochs), clip_norm=3.0, mechanism=MECHANISMS[name](),
        neighbouring=relation, adaptive_clipping=rule,
    ).calibrate(2.0, DELTA)  # fmt: skip
    parts = plan.component_events()
    assert len(parts) == 2 and all(isinstance(e, GaussianEvent) for e in parts)
    assert math.hypot(*(e.mu for e in parts)) == pytest.approx(plan.event().mu, rel=1e-12)
    fixed = dataclasses.replace(plan, adaptive_clipping=None, clip_norm=1.0)
    assert plan.event().mu == pytest.approx(fixed.event().mu, rel=1e-12)
    assert parts[1].sensitivity == pytest.approx(plan.relation_factor * math.sqrt(epochs) / 2)
    assert plan.gradient_noise_multiplier > plan.noise_multiplier


def test_poisson_dpsgd_is_one_sampled_gaussian_with_the_joint_multiplier():
    plan = TrainingPlan(
        5000, PoissonSampling(0.04, 50), clip_norm=1.0, adaptive_clipping=QuantileClipping()
    ).calibrate(1.0, DELTA)
    z, sigma_b = plan.noise_multiplier, plan.count_noise_std
    assert sigma_b == pytest.approx(0.05 * 200)
    joint = (plan.gradient_noise_multiplier**-2 + (2 * sigma_b) ** -2) ** -0.5
    assert joint == pytest.approx(z, rel=1e-12)
    assert isinstance(plan.event(), PoissonSampledGaussianEvent)


def _norm_model():
    # per-example gradient = the row itself: its norm is the row's norm
    return GenericModel(lambda w, X, y: X, name="rows")


@pytest.mark.parametrize("name", ["independent", "nu-dpftrl"])
def test_recorded_event_is_the_plans_and_the_clip_trace_is_public(name):
    rng = np.random.default_rng(0)
    X = rng.lognormal(0.0, 1.0, size=(400, 1)) * rng.choice([-1, 1], size=(400, 1))
    plan = TrainingPlan(
        400, FixedBatches(40, 2), clip_norm=10.0, mechanism=MECHANISMS[name](),
        adaptive_clipping=QuantileClipping(count_noise_fraction=0.2),
    ).calibrate(4.0, DELTA)  # fmt: skip
    ledger = PrivacyLedger(plan.neighbouring)
    fit = run(plan, _norm_model(), SGD(0.01), X, np.zeros(400), rng=rng, delta=DELTA,
              ledger=ledger)  # fmt: skip
    assert ledger.events == (plan.event(),)
    assert fit.report.epsilon <= 4.0
    clips = fit.trace.clip_threshold
    assert clips.shape == (20,) and clips[0] == 10.0 and clips[-1] < 10.0  # it moved down
    assert fit.info["released_counts"].shape == (20,)
    assert any("adaptive clipping" in text for text in fit.report.assumptions)
    assert fit.trace.clip_fraction is None  # the realised fractions stay private


def test_quantile_one_and_noiseless_counts_equal_fixed_clipping_at_the_max_norm():
    # the internal hook (never a user option): counts released without noise
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    top = float(np.linalg.norm(X, axis=1).max())
    rule = QuantileClipping(target_quantile=1.0, count_noise_fraction=0.5, _count_noise=False)
    adaptive = TrainingPlan(200, FixedBatches(20, 2), top, adaptive_clipping=rule,
                            noise_multiplier=2.0)  # fmt: skip
    fixed = TrainingPlan(
        200, FixedBatches(20, 2), top, noise_multiplier=adaptive.gradient_noise_multiplier
    )
    fits = [
        run(
            p,
            _norm_model(),
            SGD(0.05),
            X,
            np.zeros(200),
            rng=np.random.default_rng(7),
            delta=DELTA,
            noise_seed=99,
        )
        for p in (adaptive, fixed)
    ]
    np.testing.assert_array_equal(fits[0].trace.clip_threshold, np.full(20, top))
    np.testing.assert_allclose(fits[0].coef, fits[1].coef, rtol=1e-12, atol=1e-12)


def test_noiseless_geometric_rule_converges_to_the_target_quantile():
    rng = np.random.default_rng(2)
    n = 4000
    norms = rng.lognormal(mean=0.5, sigma=0.8, size=n)  # median e^0.5
    X = np.zeros((n, 2))
    X[:, 0] = norms
    for gamma in (0.5, 0.9):
        rule = QuantileClipping(target_quantile=gamma, learning_rate=0.05, _count_noise=False)
        plan = TrainingPlan(n, FixedBatches(100, 25), 50.0, adaptive_clipping=rule,
                            noise_multiplier=1.0)  # fmt: skip
        fit = run(plan, _norm_model(), SGD(1e-9), X, np.zeros(n), rng=rng, delta=DELTA)
        tail = fit.trace.clip_threshold[-200:].mean()
        assert tail == pytest.approx(np.quantile(norms, gamma), rel=0.05)


def test_invalid_adaptive_plans_are_refused():
    from privopt.training import SampledWithoutReplacement

    with pytest.raises(ValueError, match="Poisson sampling and fixed batches"):
        TrainingPlan(100, SampledWithoutReplacement(1, 10), 1.0, neighbouring="replace-one",
                     adaptive_clipping=QuantileClipping())  # fmt: skip
    with pytest.raises(ValueError, match="target_quantile"):
        QuantileClipping(target_quantile=1.5)
    with pytest.raises(ValueError, match="learning_rate"):
        QuantileClipping(learning_rate=float("nan"))
    with pytest.raises(ValueError, match="count_noise_fraction"):
        QuantileClipping(count_noise_fraction=-0.1)
    plan = TrainingPlan(100, FixedBatches(10), 1.0, adaptive_clipping=QuantileClipping(),
                        noise_multiplier=20.0)  # fmt: skip
    with pytest.raises(ValueError, match="count release alone"):
        plan.gradient_noise_multiplier  # noqa: B018  (sigma_b = 0.5 < z / 2)


def test_blt_mechanism_is_accepted_by_adaptive_plans():
    rule = QuantileClipping(adopt_every=10, count_noise_fraction=0.5)
    plan = TrainingPlan(800, FixedBatches(20), 1.0, mechanism=_blt(), adaptive_clipping=rule)
    assert isinstance(plan.mechanism, BLTMechanism)
    assert plan.calibrate(1.0, DELTA).gradient_noise_multiplier > 0


def test_dpsgd_linear_takes_adaptive_clipping():
    from privopt.algorithms.baselines import dpsgd_linear

    rng = np.random.default_rng(4)
    Z = rng.normal(size=(20_000, 4)) / 2
    t = np.clip(Z @ np.full(4, 0.5) + 0.1 * rng.normal(size=20_000), -3, 3)
    ledger = PrivacyLedger("zero-out")
    w, trace, info = dpsgd_linear(
        Z, t, row_bound=4.0, target_bound=3.0, epsilon=2.0, delta=DELTA,
        rng=np.random.default_rng(0), ledger=ledger, epochs=2, clip_norm=50.0,
        adaptive_clipping=QuantileClipping(),
    )  # fmt: skip
    plan = info["plan"]
    assert ledger.events == (plan.event(),) and ledger.epsilon(DELTA) <= 2.0
    assert trace.clip_threshold[0] == 50.0 and trace.clip_threshold[-1] < 5.0
    assert np.linalg.norm(w - 0.5) < 0.5  # it still learns (non-private OLS: all 0.5)
