"""What ``privopt audit`` can audit: the training core's release paths and the estimators.

Training core (white-box gradient canaries, one run, :mod:`privopt.audit.canaries`): the plans
that :func:`privopt.algorithms.dp_ftrl` and the DP-SGD paths build (fixed batches with each noise
mechanism, Poisson-sampled DP-SGD), calibrated by :meth:`TrainingPlan.calibrate` and run by
:func:`privopt.training.execute`, so the audit exercises the calibration, the loop and each
mechanism's noise stream. Estimators (one-run input canaries, d per fit, many fits pooled,
:mod:`privopt.audit.input_one_run`): every ``DPLinearRegression`` method end to end, black box
(only the released coefficients are scored). Estimator pipelines (``estimator-NAME``,
:mod:`privopt.audit.pipeline_canaries`): white-box canaries in every estimator's own releases
(each regression method with and without public bounds, ``DPSGDRegressor`` and
``DPLinearClassifier`` with gradient and output perturbation), many per fit.

A planted-bug control runs the same audit with the noise scaled by ``noise_factor`` while the
claim stays: 1/3 for the white-box audits (the selftest's bug; a halved sensitivity is the
milder 1/2); for the estimators each method's ``control_factor`` (1/3 to 1/100: an input
canary sees only the share of the budget its releases carry; measured power in TRUST.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive, check_probability
from privopt.audit.input_canaries import ESTIMATOR_AUDITS
from privopt.audit.input_one_run import ONE_RUN_ESTIMATOR_AUDITS, audit_estimator_one_run
from privopt.audit.one_run import audit_one_run
from privopt.audit.pipeline_audits import PIPELINE_AUDITS, audit_pipeline

__all__ = [
    "CORE_AUDITS",
    "ESTIMATOR_AUDITS",
    "ESTIMATOR_AUDIT_NAMES",
    "ESTIMATOR_CONTROL_FACTOR",
    "PIPELINE_AUDIT_NAMES",
    "WHITE_BOX_CONTROL_FACTOR",
    "audit_algorithm",
    "audit_names",
    "selftest",
]

WHITE_BOX_CONTROL_FACTOR = 1.0 / 3.0
ESTIMATOR_CONTROL_FACTOR = 1.0 / 10.0


@dataclass(frozen=True)
class CoreAudit:
    """A training-core plan factory ``() -> TrainingPlan`` (uncalibrated) and its description."""

    plan: Callable[[], Any]
    description: str


def _fixed(mechanism: Callable[[], Any], batch: int, epochs: int) -> Callable[[], Any]:
    def make() -> Any:
        from privopt.training import FixedBatches, TrainingPlan

        return TrainingPlan(1000, FixedBatches(batch, epochs), 1.0, mechanism=mechanism())

    return make


def _poisson() -> Any:
    from privopt.training import PoissonSampling, TrainingPlan

    return TrainingPlan(1000, PoissonSampling(0.5, 4), 1.0)


def _mechanism(name: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    def make() -> Any:
        import privopt.noise as noise

        return getattr(noise, name)(*args, **kwargs)

    return make


#: Training-core release paths, by CLI name (N = 1000 records, 1000 canaries per run).
CORE_AUDITS: dict[str, CoreAudit] = {
    "dpsgd": CoreAudit(_poisson, "DP-SGD: Poisson sampling q = 0.5, 4 steps, PLD accounting"),
    "dpsgd-fixed": CoreAudit(
        _fixed(_mechanism("independent"), 250, 2),
        "DP-SGD without amplification: fixed batches of 250, 2 epochs, independent noise",
    ),
    "ftrl-nu": CoreAudit(
        _fixed(_mechanism("nu_dpftrl", 0.2), 250, 3),
        "nu-DP-FTRL (nu = 0.2), 3 epochs, min-separation sensitivity",
    ),
    "ftrl-optimal-cc": CoreAudit(
        _fixed(_mechanism("optimal_cc"), 100, 1), "DP-FTRL, optimal continual counting, 1 epoch"
    ),
    "ftrl-tree": CoreAudit(
        _fixed(_mechanism("TreeAggregation"), 100, 1), "DP-FTRL, binary tree, 1 epoch"
    ),
    "ftrl-blt": CoreAudit(
        _fixed(_mechanism("optimize_blt", 12, min_sep=4, participations=3), 250, 3),
        "DP-FTRL, BLT optimised for 3 participations 4 steps apart",
    ),
}


#: ``privopt audit regression-METHOD``: the one-run input-canary audit of each method.
ESTIMATOR_AUDIT_NAMES: dict[str, str] = {
    f"regression-{method}": method for method in ONE_RUN_ESTIMATOR_AUDITS
}

#: ``privopt audit estimator-NAME``: white-box canaries inside each estimator's pipeline
#: (:mod:`privopt.audit.pipeline_canaries`), keyed by CLI name.
PIPELINE_AUDIT_NAMES: dict[str, str] = {f"estimator-{name}": name for name in PIPELINE_AUDITS}


def audit_names() -> tuple[str, ...]:
    """Every name ``privopt audit`` accepts (besides ``selftest``)."""
    return (*CORE_AUDITS, *ESTIMATOR_AUDIT_NAMES, *PIPELINE_AUDIT_NAMES)


def audit_algorithm(
    name: str,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    runs: int | None = None,
    canaries: int = 1000,
    confidence: float = 0.95,
    noise_factor: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Audit one algorithm or estimator method; a JSON-ready summary.

    Core paths: ``runs`` one-run audits of ``canaries`` gradient canaries each, pooled (default
    1); estimators: ``runs`` fits of d input canaries each, pooled (default: the method's
    ``fits``). ``noise_factor`` < 1 plants the bug of a control (estimators: every Gaussian
    draw scaled, :func:`privopt.audit.input_one_run.scaled_noise`).
    """
    from privopt.audit.canaries import audit_training_plan

    delta = check_probability("delta", delta)
    confidence = check_probability("confidence", confidence)
    factor = check_positive("noise_factor", noise_factor)
    if name in CORE_AUDITS:
        eps = check_positive("epsilon", 2.0 if epsilon is None else epsilon)
        plan = CORE_AUDITS[name].plan().calibrate(eps, delta)
        claimed, one_run = audit_training_plan(
            plan,
            delta=delta,
            canaries=check_count("canaries", canaries),
            runs=check_count("runs", 1 if runs is None else runs),
            rng=np.random.default_rng(seed),
            confidence=confidence,
            noise_factor=factor,
        )
        kind = f"one-run f-DP (Mahloujifar et al. 2024), {one_run.canaries} gradient canaries"
        bound = float(one_run.epsilon_lower_bound)
        details: dict[str, Any] = {"guesses": one_run.guesses, "correct": one_run.correct}
        description = CORE_AUDITS[name].description
    elif name in ESTIMATOR_AUDIT_NAMES:
        audit = ONE_RUN_ESTIMATOR_AUDITS[ESTIMATOR_AUDIT_NAMES[name]]
        claimed, one_run = audit_estimator_one_run(
            audit,
            epsilon=epsilon,
            delta=delta,
            fits=runs,
            confidence=confidence,
            noise_factor=factor,
            seed=seed,
        )
        bound = float(one_run.epsilon_lower_bound)
        kind = (
            f"one-run f-DP (Mahloujifar et al. 2024), {one_run.canaries} input canaries in "
            f"{one_run.canaries // (audit.canaries or audit.n_features)} fits"
        )
        details = {"guesses": one_run.guesses, "correct": one_run.correct}
        description = f"DPLinearRegression(method={audit.method!r}) end to end: {audit.note}"
    elif name in PIPELINE_AUDIT_NAMES:
        pipeline = PIPELINE_AUDITS[PIPELINE_AUDIT_NAMES[name]]
        claimed, one_run = audit_pipeline(
            pipeline,
            epsilon=epsilon,
            delta=delta,
            fits=runs,
            confidence=confidence,
            noise_factor=factor,
            seed=seed,
        )
        bound = float(one_run.epsilon_lower_bound)
        test = (
            "one-run (Steinke et al. 2023; amplified claim)"
            if pipeline.amplified
            else "one-run f-DP (Mahloujifar et al. 2024)"
        )
        kind = f"{test}, {one_run.canaries} white-box canaries in the estimator's releases"
        details = {"guesses": one_run.guesses, "correct": one_run.correct}
        description = pipeline.describe()
    else:
        raise ValueError(f"Expected one of {', '.join(audit_names())} or selftest, got {name!r}.")
    return {
        "algorithm": name,
        "description": description,
        "claimed_epsilon": float(claimed),
        "epsilon_lower_bound": bound,
        "confidence": confidence,
        "delta": delta,
        "audit": kind,
        "noise_factor": factor,
        "violation": bound > claimed,
        **details,
    }


def selftest(
    *, epsilon: float = 2.0, delta: float = 1e-5, canaries: int = 2000, seed: int = 0
) -> dict[str, dict[str, float]]:
    """The auditor on a correct Gaussian mechanism and on one with a third of its noise.

    m canaries, each the sensitivity-1 signal of its own Gaussian release
    ``x_i = 1[canary i in] + N(0, sigma^2)`` (noise from :func:`privopt.noise.gaussian_noise`,
    sigma exact for (epsilon, delta): the training core's one calibration of the release's
    ``GaussianEvent(1, sigma)``, verified through a zero-out ledger, as every one-shot
    release is calibrated); the broken mechanism uses sigma / 3 while claiming the same
    epsilon. One-run f-DP audit at 95%: the correct bound stays below the claim (it is a
    lower bound), the broken one must exceed it.
    """
    from privopt.accounting import GaussianEvent
    from privopt.noise import gaussian_noise
    from privopt.training import calibrate_noise_multiplier

    m = check_count("canaries", canaries)
    rng = np.random.default_rng(seed)
    # a canary's signal 1[canary in] has sensitivity 1 under zero-out (its presence)
    sigma = calibrate_noise_multiplier(lambda s: GaussianEvent(1.0, s), epsilon, delta, "zero-out")
    out: dict[str, dict[str, float]] = {}
    for label, std in (("correct", sigma), ("broken", sigma / 3.0)):
        included = rng.random(m) < 0.5
        scores = included + gaussian_noise(rng, std, m)
        result = audit_one_run(scores, included, delta=delta)
        out[label] = {
            "claimed_epsilon": float(epsilon),
            "epsilon_lower_bound": result.epsilon_lower_bound,
            "confidence": result.confidence,
            "noise_std": float(std),
        }
    return out
