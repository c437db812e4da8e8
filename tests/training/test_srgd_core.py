"""Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025) on the training core: the contract
and its pieces.

The recorded event is the plan's ``event()`` (rebuilt by SRGD's analysis from the plan's fields),
the noise the loop adds has the plan's std (statistical), the tree's per-step increments sum to
its prefix noise, the linear coupling is Algorithm 1's update, the SRG oracle clips the first
step at ``clip_first`` and later differences at the plan's clip, and the algorithm *is* the core's
``plan -> run`` with these pieces.
"""

import math
import warnings

import numpy as np
import pytest
from scipy.stats import kstest

from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.algorithms.srgd import (
    SRGDWarning,
    accelerated_dp_srgd,
    srgd_parameters,
)
from privopt.algorithms.srgd_privacy import SRGDAnalysis, srgd_plan
from privopt.losses import get_loss
from privopt.noise import TreeAggregation, as_step_noise, nu_dpftrl
from privopt.training import FixedBatches, TrainingPlan, run
from privopt.training.recursive import RecursiveGradient, SinglePass
from privopt.training.updates import LinearCoupling

DELTA = 1e-6


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return X, np.where(rng.random(n) < 0.5, 1.0, -1.0)


@pytest.mark.parametrize("variant", ["recursive", "independent"])
@pytest.mark.parametrize("relation", ["zero-out", "replace-one"])
def test_recorded_event_is_the_plans_event(variant, relation):
    X, y = _data(2000, 4)
    common = dict(epsilon=1.5, delta=DELTA, radius=2.0, batch_size=40, steps=30)
    ledger = PrivacyLedger(relation)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SRGDWarning)
        fit = accelerated_dp_srgd(X, y, "logistic", x_bound=1.0, rng=np.random.default_rng(0),
                                  ledger=ledger, variant=variant, **common)  # fmt: skip
        L, M = fit.info["lipschitz"], fit.info["smoothness"]  # the logistic loss's on the ball
        params = srgd_parameters(2000, 4, lipschitz=L, smoothness=M, variant=variant,
                                 neighbouring=relation, **common)  # fmt: skip
    plan = srgd_plan(params).calibrate(1.5, DELTA)
    event = plan.event()
    assert ledger.events == (event,)
    assert isinstance(event, GaussianEvent)
    # built from the plan's fields: the loop's std on the batch mean, the tree's sensitivity
    assert event.std == plan.noise_std / plan.divisor
    assert plan.divisor == 40 and plan.steps == 30
    unit = max(params.clip_first, params.clip_difference or 0.0) * math.sqrt(5)  # T = 30: m_0 = 5
    if variant == "independent":
        unit = params.clip_first
    factor = 2.0 if relation == "replace-one" else 1.0
    assert event.sensitivity == pytest.approx(factor * unit / 40, rel=1e-15)
    assert (fit.info["sigma"], fit.info["sensitivity"]) == (event.std, event.sensitivity)
    assert fit.report.epsilon <= 1.5
    assert fit.report.epsilon == pytest.approx(1.5, rel=1e-9)


@pytest.mark.parametrize("variant", ["recursive", "independent"])
def test_noise_added_has_the_plans_std(variant):
    """Zero gradients and a huge ball: what the rule receives is the noise alone.

    Recursive: B S^_t / (sigma G) is the tree's prefix noise at unit node std, variance
    popcount(t + 1); independent: B g~_t / (sigma G) is N(0, 1). With p = 40,000 iid coordinates
    the variance estimate has relative sd sqrt(2 / p) = 0.71%; the 4% tolerance is 5.6 sd.
    The KS test (alpha 1e-6) checks the shape of step 0's coordinates.
    """
    p, B, T = 40_000, 3, 8
    params = srgd_parameters(B * T, p, 1.0, DELTA, 1e12, batch_size=B, steps=T, beta=1.0,
                             clip_first=1.0, clip_difference=2.0, variant=variant)  # fmt: skip
    plan = srgd_plan(params).calibrate(1.0, DELTA)
    released = []
    accelerated_dp_srgd(
        np.zeros((B * T, 1)), np.zeros(B * T), lambda w, X, y: np.zeros((X.shape[0], w.size)),
        epsilon=1.0, delta=DELTA, radius=1e12, rng=np.random.default_rng(4), batch_size=B,
        steps=T, beta=1.0, clip_first=1.0, clip_difference=2.0, dim=p, variant=variant,
        callback=lambda step: released.append(step.released.copy()),
    )  # fmt: skip
    unit = B * np.array(released) / plan.noise_std  # (T, p)
    expected = (
        np.array([bin(t + 1).count("1") for t in range(T)]) if variant == "recursive" else 1.0
    )
    assert np.allclose(unit.var(axis=1), expected, rtol=0.04)
    assert kstest(unit[0], "norm").pvalue > 1e-6
    assert plan.noise_std == plan.noise_multiplier * plan.clip_norm


def test_tree_increments_sum_to_the_prefix_noise():
    """as_step_noise(tree)'s per-step noise, accumulated, is the tree's prefix noise zeta_t
    (what the pre-core loop added to the exact prefix), to rounding."""
    tree = TreeAggregation()
    prefix = tree.noise_stream(50, 1.7, seed=123)
    steps = as_step_noise(tree).noise_stream(50, 1.7, seed=123)
    total = np.zeros(50)
    for _ in range(37):
        total = total + steps.next()
        assert np.allclose(total, prefix.next(), rtol=0, atol=1e-12)


def test_linear_coupling_is_algorithm_1():
    rng = np.random.default_rng(0)
    beta, R, T, p = 2.0, 1.5, 5, 3
    directions = rng.normal(size=(T, p))
    seen = []
    rule = LinearCoupling(beta, R, T, observer=lambda *args: seen.append(args))
    w, state = np.zeros(p), rule.init(np.zeros(p))
    for t in range(T):
        w, state = rule.update(w, directions[t], state, t)

    def proj(v):
        return v if np.linalg.norm(v) <= R else v * R / np.linalg.norm(v)

    x, z, y, S = np.zeros(p), np.zeros(p), None, np.zeros(p)
    for t in range(T):
        S = S + directions[t]
        z, y = proj(z - S / beta), proj(x - S / ((t + 1) * beta))
        tau = 2.0 / (t + 3)
        x = (1 - tau) * y + tau * z
        assert np.allclose(seen[t][1], S) and np.allclose(seen[t][2], x)
    assert np.allclose(w, y)  # the last iterate is the output y_T, not x_T
    assert not np.allclose(w, x)
    assert np.allclose(state[0], z) and np.allclose(state[2], S)


def test_oracle_clips_first_step_at_clip_first_then_at_the_loops_clip():
    """Against a direct computation: per-example gradient matrices at x_t and x_{t-1}, the
    weighted difference eta_t g_t - eta_{t-1} g_{t-1}, each row scaled to norm <= c_t."""
    X, y = _data(64, 5, seed=2)
    loss = get_loss("logistic")
    oracle = RecursiveGradient(loss, first_clip=0.05)
    log = oracle.prepare(X, y)
    rng = np.random.default_rng(1)
    points = [rng.normal(size=5) * 3 for _ in range(3)]
    batches = [np.arange(0, 8), np.arange(8, 16), np.arange(16, 24)]
    for t, (w, rows) in enumerate(zip(points, batches, strict=True)):
        total, fraction = oracle.batch_gradient_sum(w, X, y, rows, 0.3, log)
        diff = (t + 1) * loss.gradients(w, X[rows], y[rows])
        if t:
            diff -= t * loss.gradients(points[t - 1], X[rows], y[rows])
        c = 0.05 if t == 0 else 0.3
        norms = np.linalg.norm(diff, axis=1)
        expected = (diff * np.minimum(1.0, c / norms)[:, None]).sum(axis=0)
        assert np.allclose(total, expected, rtol=1e-12, atol=1e-14)
        assert fraction == np.mean(norms > c) and 0 < fraction
    assert np.array_equal(log.assignment[:24], np.repeat([0, 1, 2], 8))
    assert log.evaluations == 8 + 16 + 16 and log.visits.sum() == 24
    independent = RecursiveGradient(loss, first_clip=0.05, recursive=False)
    run_log = independent.prepare(X, y)
    for w, rows in zip(points, batches, strict=True):  # plain gradients, every step
        total, _ = independent.batch_gradient_sum(w, X, y, rows, 0.05, run_log)
        g = loss.gradients(w, X[rows], y[rows])
        g *= np.minimum(1.0, 0.05 / np.linalg.norm(g, axis=1))[:, None]
        assert np.allclose(total, g.sum(axis=0), rtol=1e-12, atol=1e-14)
    assert run_log.evaluations == 24


def test_single_pass_is_the_shuffled_pass_cut_at_T():
    n, B = 103, 10
    full = list(FixedBatches(B).schedule(n, np.random.default_rng(5)))
    cut = list(SinglePass(B, num_steps=4).schedule(n, np.random.default_rng(5)))
    assert len(full) == 10 and len(cut) == 4
    assert all(np.array_equal(a, b) for a, b in zip(full, cut, strict=False))
    assert SinglePass(B, num_steps=4).steps(n) == 4 and SinglePass(B).steps(n) == 10


def test_single_pass_is_a_batch_strategy_still_importable_from_recursive():
    from privopt import training
    from privopt.training import batching, recursive

    assert recursive.SinglePass is batching.SinglePass is training.SinglePass is SinglePass
    assert SinglePass.__module__ == "privopt.training.batching"


def test_the_algorithm_is_the_cores_plan_run():
    """accelerated_dp_srgd equals privopt.training.run with its plan, oracle and rule."""
    X, y = _data(900, 4, seed=3)
    fit = accelerated_dp_srgd(
        X,
        y,
        "logistic",
        epsilon=1.0,
        delta=DELTA,
        radius=2.0,
        x_bound=1.0,
        setting="interior",
        rng=np.random.default_rng(9),
    )
    L, M = fit.info["lipschitz"], fit.info["smoothness"]  # the logistic loss's on the ball
    params = srgd_parameters(900, 4, 1.0, DELTA, 2.0, L, M, "interior")
    plan = srgd_plan(params).calibrate(1.0, DELTA)
    oracle = RecursiveGradient(get_loss("logistic"), first_clip=params.clip_first)
    rule = LinearCoupling(params.beta, 2.0, params.steps)
    core = run(plan, oracle, rule, X, y, rng=np.random.default_rng(9), delta=DELTA, w0=np.zeros(4))
    assert np.array_equal(core.coef, fit.coef)
    assert core.report.epsilon == fit.report.epsilon


def test_analysis_refuses_what_it_does_not_cover():
    analysis = SRGDAnalysis(first_clip=1.0)
    plan = TrainingPlan(100, FixedBatches(10), clip_norm=1.0, mechanism=nu_dpftrl(0.1),
                        noise_multiplier=1.0, analysis=analysis)  # fmt: skip
    with pytest.raises(ValueError, match="SRGD's analysis covers"):
        plan.event()
    epochs = TrainingPlan(100, FixedBatches(10, epochs=2), clip_norm=1.0,
                          mechanism=TreeAggregation(), noise_multiplier=1.0,
                          analysis=analysis)  # fmt: skip
    with pytest.raises(ValueError, match="SRGD's analysis covers"):
        epochs.event()


def test_the_report_states_both_clip_levels_and_the_tree_sensitivity():
    """The plan's generic line would name one clip for every step, understating the first
    step's clip when clip_first > clip_difference; SRGDAnalysis states its own lines."""
    import warnings

    from privopt.algorithms import accelerated_dp_srgd

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (4096, 3)) / 2
    y = np.clip(X @ [0.3, -0.2, 0.1], -1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = accelerated_dp_srgd(
            X, y, "squared", epsilon=1.0, delta=1e-6, radius=2.0, x_bound=1.0, y_bound=1.0,
            rng=rng, clip_first=5.0, clip_difference=2.0,
        )  # fmt: skip
    text = "\n".join(fit.report.assumptions)
    assert "first gradients (step 0) clipped to l2 norm 5" in text
    assert "differences (steps >= 1) to 2" in text
    assert "per-example gradients clipped to l2 norm 2" not in text
    sensitivity = fit.report.events[0].parameters["sensitivity"]
    assert f"{sensitivity:.6g}" in text
