"""The training core's contract: the recorded event is plan.event(), the noise has the plan's
law, calibration meets the target from the safe side, and mechanisms are configuration."""

import dataclasses

import numpy as np
import pytest
from scipy.stats import kstest

from privopt.accounting import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    SampledGaussianEvent,
    dpsgd_epsilon,
    gdp_epsilon,
)
from privopt.noise import TreeAggregation, independent, nu_dpftrl, optimal_cc
from privopt.training import (
    SGD,
    CyclicPoissonSampling,
    FixedBatches,
    GenericModel,
    PoissonSampling,
    Projected,
    Rounds,
    SampledWithoutReplacement,
    SinglePass,
    TrainingPlan,
    calibrate_noise_multiplier,
    event_epsilon,
    run,
)

DELTA = 1e-6


def _zero_gradients(p):
    return GenericModel(lambda w, X, y: np.zeros((X.shape[0], p)), name="zero")


PLANS = {
    "dpsgd-poisson": lambda n: TrainingPlan(n, PoissonSampling(0.1, 12), clip_norm=2.0),
    "dpsgd-fixed": lambda n: TrainingPlan(n, FixedBatches(10, epochs=2), clip_norm=2.0),
    "nu-dpftrl": lambda n: TrainingPlan(
        n, FixedBatches(10, epochs=2), clip_norm=2.0, mechanism=nu_dpftrl(0.1)
    ),
    "tree": lambda n: TrainingPlan(n, FixedBatches(10), clip_norm=2.0, mechanism=TreeAggregation()),
    "optimal-cc-replace-one": lambda n: TrainingPlan(
        n, FixedBatches(20), clip_norm=2.0, mechanism=optimal_cc(), neighbouring="replace-one"
    ),
    "sampled": lambda n: TrainingPlan(
        n, SampledWithoutReplacement(5, 10), clip_norm=2.0, neighbouring="replace-one"
    ),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_recorded_event_is_the_plans_and_meets_the_target(name):
    n = 100
    plan = PLANS[name](n).calibrate(2.0, DELTA)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(n, 3)), rng.normal(size=n)
    ledger = PrivacyLedger(plan.neighbouring)
    fit = run(plan, "linear", SGD(0.1), X, y, rng=rng, delta=DELTA, ledger=ledger)
    assert ledger.events == (plan.event(),)
    assert fit.report.epsilon <= 2.0
    assert fit.report.epsilon == pytest.approx(2.0, rel=2e-4)  # PLD/RDP searches stop at 1e-5
    assert fit.report.neighbouring == plan.neighbouring.value
    assert "the number of records N is public" in fit.report.assumptions


def test_events_by_closed_form():
    n = 1000
    poisson = TrainingPlan(n, PoissonSampling(0.01, 500), clip_norm=3.0, noise_multiplier=1.1)
    assert poisson.event() == PoissonSampledGaussianEvent(1.1, 0.01, 500, label=poisson.label)
    assert event_epsilon(poisson.event(), 1e-5, "zero-out", "rdp") == pytest.approx(
        dpsgd_epsilon(1.1, 0.01, 500, 1e-5, "rdp"), rel=1e-12
    )
    # fixed batches, 3 epochs, independent noise: k = 3 participations of G each, replace-one 2G
    fixed = TrainingPlan(
        n, FixedBatches(100, 3), clip_norm=3.0, noise_multiplier=2.0, neighbouring="replace-one"
    )
    event = fixed.event()
    assert isinstance(event, GaussianEvent)
    assert event.sensitivity == pytest.approx(2 * 3.0 * np.sqrt(3), rel=1e-12)
    assert event.std == pytest.approx(6.0)
    assert fixed.steps == 30 and fixed.participation.min_sep == 10
    sampled = TrainingPlan(
        n, SampledWithoutReplacement(1, 50), 3.0, noise_multiplier=2.0, neighbouring="replace-one"
    )
    assert sampled.event() == SampledGaussianEvent(1.0, n, 1, 50, label=sampled.label)


def test_gaussian_calibration_is_exact_and_rounds_toward_privacy():
    plan = TrainingPlan(500, FixedBatches(50, 2), clip_norm=1.0, mechanism=nu_dpftrl(0.05))
    calibrated = plan.calibrate(1.0, DELTA)
    mu = calibrated.event().mu
    assert gdp_epsilon(mu, DELTA) <= 1.0
    assert gdp_epsilon(mu, DELTA) == pytest.approx(1.0, rel=1e-9)
    # generic path agrees with the closed form
    generic = calibrate_noise_multiplier(
        lambda s: SampledGaussianEvent(s, 1000, 1, 10), 1.0, DELTA, "replace-one"
    )
    assert event_epsilon(SampledGaussianEvent(generic, 1000, 1, 10), DELTA, "replace-one") <= 1.0


def _increments(plan, p, seed):
    n = plan.num_records
    X, y = np.zeros((n, 1)), np.zeros(n)
    ws = []
    run(
        plan, _zero_gradients(p), SGD(1.0), X, y, rng=np.random.default_rng(seed), delta=DELTA,
        w0=np.zeros(p), callback=lambda info: ws.append(info.w.copy()),
    )  # fmt: skip
    return -np.diff(np.vstack([np.zeros(p), *ws]), axis=0)  # step t's noise / divisor


def test_independent_noise_has_the_plans_std():
    plan = TrainingPlan(100, FixedBatches(10), clip_norm=2.0, noise_multiplier=1.5)
    noise = _increments(plan, 5000, 0) * plan.divisor
    # 10 x 5000 iid draws: KS at the 1e-4 level; a 5% error in std would be rejected
    assert kstest(noise.ravel() / plan.noise_std, "norm").pvalue > 1e-4
    assert kstest(noise.ravel() / (1.05 * plan.noise_std), "norm").pvalue < 1e-4


@pytest.mark.parametrize("mechanism", [nu_dpftrl(0.2), TreeAggregation()])
def test_correlated_noise_has_the_mechanisms_covariance(mechanism):
    plan = TrainingPlan(80, FixedBatches(10), 1.0, noise_multiplier=1.0, mechanism=mechanism)
    p = 40_000
    noise = _increments(plan, p, 1) * plan.divisor / plan.noise_std  # (T, p): rows (B z)_t
    empirical = noise @ noise.T / p
    b = plan.mechanism.decoder_matrix(plan.steps)
    # each entry is a mean of p products with variance <= (b b^T)_ss (b b^T)_tt + ...: sd
    # below 3 / sqrt(p) = 0.015 for these matrices; 0.08 is > 5 sd
    np.testing.assert_allclose(empirical, b @ b.T, atol=0.08)


def test_swapping_independent_for_correlated_noise_is_configuration_only():
    n = 200
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 4))
    y = X @ np.ones(4)
    dpsgd = TrainingPlan(n, FixedBatches(20, epochs=3), clip_norm=5.0)
    results = {}
    for name, mechanism in [("dpsgd", independent()), ("nu", nu_dpftrl(0.1))]:
        plan = dataclasses.replace(dpsgd, mechanism=mechanism).calibrate(4.0, DELTA)
        fit = run(plan, "linear", SGD(0.05), X, y, rng=np.random.default_rng(0), delta=DELTA)
        results[name] = fit
        assert fit.report.epsilon <= 4.0
    s_ind = independent().sensitivity(30, dpsgd.participation)
    s_nu = nu_dpftrl(0.1).sensitivity(30, dpsgd.participation)
    assert results["dpsgd"].info["mechanism"] == "independent"
    assert results["nu"].report.events[0].parameters["sensitivity"] == pytest.approx(5.0 * s_nu)
    assert results["dpsgd"].report.events[0].parameters["sensitivity"] == pytest.approx(5.0 * s_ind)


def test_averaging_and_projection():
    n, p = 50, 3
    plan = TrainingPlan(n, FixedBatches(5), 1.0, noise_multiplier=1.0)
    X, y = np.zeros((n, 1)), np.zeros(n)

    def kwargs():  # the same secret batches and noise for every run
        return dict(rng=np.random.default_rng(0), delta=DELTA, w0=np.zeros(p))

    ws = []
    last = run(
        plan, _zero_gradients(p), SGD(1.0), X, y, callback=lambda i: ws.append(i.w), **kwargs()
    )
    np.testing.assert_allclose(last.coef, ws[-1])
    tail = run(plan, _zero_gradients(p), SGD(1.0), X, y, averaging="tail", **kwargs())
    np.testing.assert_allclose(tail.coef, np.mean(ws[5:], axis=0))
    mean = run(plan, _zero_gradients(p), SGD(1.0), X, y, averaging="mean", **kwargs())
    np.testing.assert_allclose(mean.coef, np.mean(ws, axis=0))
    ball = run(plan, _zero_gradients(p), Projected(SGD(1.0), 0.01), X, y, **kwargs())
    assert np.linalg.norm(ball.coef) <= 0.01 + 1e-15


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: TrainingPlan(10, FixedBatches(2), 1.0, neighbouring="add-remove"), "N private"),
        (
            lambda: TrainingPlan(10, PoissonSampling(0.5, 3), 1.0, mechanism=nu_dpftrl(0.1)),
            "amplification",
        ),
        (
            lambda: TrainingPlan(10, PoissonSampling(0.5, 3), 1.0, neighbouring="replace-one"),
            "zero-out",
        ),
        (lambda: TrainingPlan(10, FixedBatches(2), -1.0), "clip_norm"),
        (lambda: TrainingPlan(10, FixedBatches(2), float("nan")), "clip_norm"),
        (lambda: TrainingPlan(10, FixedBatches(2), 1.0, noise_multiplier=0.0), "noise_mult"),
        (lambda: TrainingPlan(10, FixedBatches(20), 1.0, noise_multiplier=1.0).steps, "larger"),
    ],
)
def test_invalid_plans_are_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: PoissonSampling(0.0, 3), "sample_rate"),
        (lambda: PoissonSampling(0.5, 0), "steps"),
        (lambda: CyclicPoissonSampling(0, 0.5, 3), "groups"),
        (lambda: CyclicPoissonSampling(4, 0.5, 3).part_size(3), "groups=4 is larger than the 3"),
        (lambda: FixedBatches(2, epochs=0), "epochs"),
        (lambda: FixedBatches(5).per_epoch(3), "batch_size=5 is larger than the 3 records"),
        (lambda: SampledWithoutReplacement(0, 3), "sample_size"),
        (lambda: Rounds(0, 2), "num_rounds"),
        (lambda: Rounds(2, 2, stat_size=-1), "stat_size"),
        (lambda: SinglePass(2, num_steps=0), "num_steps"),
    ],
)
def test_invalid_batch_strategies_name_the_field(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_checked_fields_are_replaced_by_their_checked_values():
    assert type(FixedBatches(np.int64(4)).batch_size) is int
    assert Rounds(3, 2).stat_size == 0 and CyclicPoissonSampling(2, 0.5, 3).groups == 2


def test_run_refuses_before_reading_data():
    class Untouchable(np.ndarray):
        def __getitem__(self, item):
            raise AssertionError("data read")

    X = np.zeros((10, 2)).view(Untouchable)
    y = np.zeros(10)
    plan = TrainingPlan(10, FixedBatches(2), 1.0)  # not calibrated
    with pytest.raises(ValueError, match="calibrate"):
        run(plan, "linear", SGD(0.1), X, y, rng=np.random.default_rng(0), delta=DELTA)
    calibrated = plan.calibrate(1.0, DELTA)
    with pytest.raises(ValueError, match="replace-one"):
        run(
            calibrated, "linear", SGD(0.1), X, y, rng=np.random.default_rng(0), delta=DELTA,
            ledger=PrivacyLedger("replace-one"),
        )  # fmt: skip


def test_algorithms_on_the_core_record_their_plans_event():
    from privopt.algorithms import dp_ftrl
    from privopt.algorithms.baselines import dpsgd_linear

    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 3)) / 2
    y = (X @ np.ones(3) > 0).astype(float)
    fit = dp_ftrl(
        X, y, mechanism=nu_dpftrl(0.1), epsilon=1.0, delta=DELTA, clip_norm=1.0,
        learning_rate=0.1, rng=np.random.default_rng(0), model="logistic", batch_size=40,
        epochs=2,
    )  # fmt: skip
    plan = fit.info["plan"]
    assert plan.participation.min_sep == 10 and plan.mechanism.name == "nu-dpftrl(nu=0.1)"
    assert fit.report.events[0].parameters == {
        k: v for k, v in vars(plan.event()).items() if k != "label"
    }
    ledger = PrivacyLedger("zero-out")
    _, _, info = dpsgd_linear(
        X, X @ np.ones(3), row_bound=2.0, target_bound=3.0, epsilon=1.0, delta=DELTA,
        rng=np.random.default_rng(0), ledger=ledger, epochs=1, sample_rate=0.1,
    )  # fmt: skip
    assert ledger.events == (info["plan"].event(),)


def test_run_refuses_mismatched_targets():
    plan = TrainingPlan(10, FixedBatches(2), 1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="y has shape"):
        run(plan, "linear", SGD(0.1), np.zeros((10, 2)), np.zeros(9),
            rng=np.random.default_rng(0), delta=DELTA)  # fmt: skip


@pytest.mark.parametrize("accounting", ["paper", "rdp"])
def test_gradient_perturbation_records_its_plans_event(accounting):
    from privopt.accounting import RenyiGuaranteeEvent
    from privopt.algorithms import dp_sgd_gradient

    rng = np.random.default_rng(6)
    X = rng.normal(size=(2000, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.ones(3) > 0, 1.0, -1.0)
    ledger = PrivacyLedger("replace-one")
    fit = dp_sgd_gradient(
        X, y, "hinge", epsilon=2.0, delta=DELTA, x_bound=1.0, radius=2.0, eta=0.05,
        steps=500, rng=np.random.default_rng(0), accounting=accounting, ledger=ledger,
    )  # fmt: skip
    plan = fit.info["plan"]
    assert ledger.events == (plan.event(),)
    assert plan.noise_std == pytest.approx(fit.info["sigma"], rel=1e-15)
    assert plan.batches.rows_per_step == 1 and plan.steps == 500
    expected = RenyiGuaranteeEvent if accounting == "paper" else SampledGaussianEvent
    assert isinstance(plan.event(), expected)
    if accounting == "paper":  # Theorem 11's guarantee, beta epsilon, rebuilt from the plan
        assert plan.event().value == pytest.approx(fit.info["paper_beta"] * 2.0, rel=1e-9)
    assert fit.report.epsilon <= 2.0
