"""DP-SSGD (Varshney et al. 2022, Algorithm 1): one shuffled pass of single-example clipped noisy
SGD.

::

    permute the records uniformly and secretly; w_0 = 0
    for t = 0 .. N-1:
        w_{t+1} = w_t - eta ( clip_zeta(z_t (<z_t, w_t> - t_t)) + 2 zeta alpha g_t ),  g_t ~ N(0, I)
    return the average of the last N - floor(N/2) iterates

Privacy (replace-one, docs/theory/linear-regression-adaptive-clipping.md#ssgd-privacy). Each step is
a Gaussian local randomizer of its one
record: sensitivity 2 eta zeta, noise std 2 eta zeta alpha, so it is (eps0, delta0)-DP with eps0
the exact Gaussian epsilon at delta0. The shuffled transcript is amplified by Feldman, McMillan &
Talwar (2021): :func:`privopt.accounting.shuffled_gaussian_guarantee`, whose closed form holds
only for eps0 <= log(N / (16 log(4/delta))). The theorem's constants replace the paper's
unspecified c1, c2, c3. :func:`ssgd_plan` builds the uncalibrated plan with this analysis;
``plan.calibrate(epsilon, delta)`` (the training core's one calibration, through
:func:`privopt.accounting.calibrate_shuffled_gaussian`) finds the smallest alpha meeting a target
epsilon and refuses targets outside the validity region. The permutation must stay secret.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_design, check_positive, check_probability
from privopt.accounting import PrivacyLedger, ShuffledGaussianEvent, max_shuffled_gaussian_epsilon
from privopt.algorithms.result import FitTrace
from privopt.training import SGD, FixedBatches, TrainingPlan, execute, shuffled_pass

__all__ = [
    "ShuffleAnalysis",
    "calibrate_ssgd_noise",
    "dp_ssgd",
    "max_ssgd_epsilon",
    "practical_learning_rate",
    "run_ssgd_plan",
    "ssgd_plan",
]


def ssgd_plan(
    n: int,
    clip: float,
    neighbouring: str = "replace-one",
    noise_multiplier: float | None = None,
) -> TrainingPlan:
    """Algorithm 1 as a plan of the training core, uncalibrated unless ``noise_multiplier``
    (alpha) is given: one shuffled pass of single records (``shuffled_pass(1)``), clip
    ``clip`` = zeta, the plan's multiplier 2 alpha (noise std 2 zeta alpha on each clipped
    gradient), accounted by :class:`ShuffleAnalysis`. ``plan.calibrate(epsilon, delta)``
    finds the smallest alpha by FMT21
    (:func:`privopt.accounting.calibrate_shuffled_gaussian`, through the training core's one
    calibration)."""
    return TrainingPlan(
        check_count("N", n, minimum=2),
        shuffled_pass(1),  # a secret permutation, one record per step
        check_positive("clip", clip),
        noise_multiplier=(
            None
            if noise_multiplier is None
            else 2.0 * check_positive("noise_multiplier", noise_multiplier)
        ),
        neighbouring=neighbouring,
        analysis=ShuffleAnalysis(),
        label="shuffled single-example steps",
    )


def max_ssgd_epsilon(n: int, delta: float) -> float:
    """Largest central epsilon the FMT21 closed form can certify for n records
    (:func:`privopt.accounting.max_shuffled_gaussian_epsilon`)."""
    return max_shuffled_gaussian_epsilon(check_count("n", n), delta)


def calibrate_ssgd_noise(epsilon: float, n: int, delta: float) -> float:
    """Smallest noise multiplier alpha (to 1e-6 relative) certifying (epsilon, delta) by FMT21:
    half the multiplier of ``ssgd_plan(n, 1).calibrate(epsilon, delta)`` (alpha does not depend
    on the clip).

    Raises ``ValueError`` when epsilon is above what the closed form can certify for n records
    (:func:`max_ssgd_epsilon`).
    """
    epsilon = check_positive("epsilon", epsilon)
    n = check_count("n", n)
    delta = check_probability("delta", delta)
    plan = ssgd_plan(n, 1.0).calibrate(epsilon, delta)
    return plan.noise_multiplier / 2.0


def practical_learning_rate(row_bound: float, dim: int, noise_multiplier: float) -> float:
    """eta = min(1 / (2 R^2), 1 / (R^2 d alpha^2)).

    Theorem 6's step size without its polylog factors and proof constants (c1 = 1/13440 makes
    the literal value ~1e-13 at N = 10^5, i.e. no progress): the first term is Lemma 8's
    stability condition, the second keeps the stationary privacy noise eta zeta^2 alpha^2 d / mu
    of order zeta^2 / R^2.
    """
    r2 = check_positive("row_bound", row_bound) ** 2
    alpha = check_positive("noise_multiplier", noise_multiplier)
    return min(1.0 / (2.0 * r2), 1.0 / (r2 * check_count("dim", dim) * alpha**2))


@dataclass(frozen=True)
class ShuffleAnalysis:
    """FMT21 amplification by shuffling as a plan analysis (one shuffled pass, one record per
    step): each step is a Gaussian local randomizer with noise multiplier alpha = s / 2 on the
    replace-one sensitivity 2G (the plan's noise std is s G), recorded as
    ``ShuffledGaussianEvent(alpha, N)``; built from the plan's own fields."""

    def event(self, plan: TrainingPlan, multiplier: float) -> ShuffledGaussianEvent:
        batches = plan.batches
        if (
            not isinstance(batches, FixedBatches)
            or batches.rows_per_step != 1
            or batches.epochs != 1
        ):
            raise ValueError("The shuffling analysis covers one shuffled pass of single records.")
        return ShuffledGaussianEvent(
            multiplier / 2.0, plan.num_records, label="shuffled single-example steps"
        )


def dp_ssgd(
    Z: np.ndarray,
    t: np.ndarray,
    *,
    noise_multiplier: float,
    clip: float,
    learning_rate: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = "main",
    diagnostics: bool = False,
) -> tuple[np.ndarray, FitTrace, dict]:
    """Run DP-SSGD at a given noise multiplier alpha on bounded data; record the shuffled pass
    in ``ledger`` (replace-one): :func:`run_ssgd_plan` on ``ssgd_plan(N, clip, relation,
    noise_multiplier)``. A caller with a target epsilon calibrates the plan instead
    (``ssgd_plan(N, clip).calibrate(epsilon, delta)``) and runs it with :func:`run_ssgd_plan`.
    """
    _check_relation(ledger)
    Z, t = check_design(Z, t, "Z", "t")
    plan = ssgd_plan(Z.shape[0], clip, ledger.neighbouring, noise_multiplier=noise_multiplier)
    return run_ssgd_plan(
        plan,
        Z,
        t,
        learning_rate=learning_rate,
        rng=rng,
        ledger=ledger,
        partition=partition,
        diagnostics=diagnostics,
    )


def _check_relation(ledger: PrivacyLedger) -> None:
    if ledger.neighbouring.value not in ("replace-one", "zero-out"):
        raise ValueError(
            "DP-SSGD is accounted under replace-one neighbours (shuffle model; valid under "
            f"zero-out too); got a {ledger.neighbouring.value!r} ledger."
        )


def run_ssgd_plan(
    plan: TrainingPlan,
    Z: np.ndarray,
    t: np.ndarray,
    *,
    learning_rate: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = "main",
    diagnostics: bool = False,
) -> tuple[np.ndarray, FitTrace, dict]:
    """Run a calibrated DP-SSGD plan (:func:`ssgd_plan`) on bounded data; record the shuffled
    pass in ``ledger``.

    Algorithm 1 on the training core: clip zeta, noise std 2 zeta alpha on each clipped
    gradient (the plan's multiplier 2 alpha), SGD at ``learning_rate`` and the tail average,
    accounted by :class:`ShuffleAnalysis`. ``partition`` names the records this pass touches
    (all of ``Z``), so that releases on other, disjoint records (private preprocessing)
    compose in parallel with it.

    The trace summarises the N steps in chunks of about N/100 steps (one entry per chunk) so that
    it stays small: clip threshold, per-step noise std on w (2 eta zeta alpha), and (only with
    ``diagnostics=True``, a non-private release recorded in the report) the fraction clipped in
    the chunk.
    """
    _check_relation(ledger)
    if not isinstance(plan.analysis, ShuffleAnalysis):
        raise ValueError("run_ssgd_plan runs the plans of ssgd_plan (the shuffling analysis).")
    if plan.neighbouring is not ledger.neighbouring:
        raise ValueError(
            f"The plan is accounted under {plan.neighbouring.value!r}, the ledger under "
            f"{ledger.neighbouring.value!r}."
        )
    eta = check_positive("learning_rate", learning_rate)
    Z, t = check_design(Z, t, "Z", "t")
    n = Z.shape[0]
    if n != plan.num_records:
        raise ValueError(f"The plan is for N={plan.num_records} rows; got {n}.")
    alpha, zeta = plan.noise_multiplier / 2.0, plan.clip_norm
    w, steps_trace, info = execute(
        plan,
        "linear",
        SGD(eta),
        Z,
        t,
        rng=rng,
        averaging="tail",
        ledger=ledger,
        partition=partition,
        diagnostics=diagnostics,  # the per-step flags: warned and disclosed there if asked
    )
    chunks = np.array_split(np.arange(n), min(100, n))
    flags = steps_trace.clip_fraction
    trace = FitTrace(
        clip_threshold=np.full(len(chunks), zeta),
        clip_fraction=None if flags is None else np.array([flags[c].mean() for c in chunks]),
        noise_std=np.full(len(chunks), 2.0 * eta * zeta * alpha),  # eta times the plan's std
    )
    info = {"noise_multiplier": alpha, "clip": zeta, "learning_rate": eta, "steps": n}
    return w, trace, info
