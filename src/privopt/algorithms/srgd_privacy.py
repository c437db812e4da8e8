r"""Privacy of Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025): tree sensitivity, exact
noise, ledger records.

Zero-out neighbours, the paper's relation; replace-one doubles every sensitivity.

Clipping is always on, so the guarantee holds for **any** loss (convex or not) and any data,
with no high-probability event: zeroing one record changes only the Delta_t of its batch, by at
most ``c_t / B`` (``c_0 = clip_first``, ``c_t = clip_difference``), because Delta_t is divided by
the fixed B. The tree releases every complete node sum plus N(0, sigma^2 I) (Lemma 8); leaf t
lies in ``m_t`` complete nodes (``m_0 = floor(log2 T) + 1``, the most), so the release is a
Gaussian mechanism of l2 sensitivity ``s = max_t c_t sqrt(m_t) / B``, i.e. exactly
``(s / sigma)``-GDP, also under adaptivity (each node, given the earlier releases, is a Gaussian
release whose sensitivity is c_t / B or 0). Every iterate is post-processing of the released
nodes. sigma is the smallest std with ``gdp_delta(s / sigma, epsilon) <= delta`` (exact mu-GDP;
all of delta goes to the Gaussian, since nothing holds only with high probability). The paper
converts with ``mu = eps / sqrt(2 ln(1.25/delta))`` (Lemma 8) or ``sqrt(2 ln(2.5/delta))`` (Cor.
9/13), which is invalid for large epsilon (docs/theory/single-epoch-srgd.md#tree); those values are
returned in
``info`` for comparison only. Independent variant: each step is a Gaussian release of
sensitivity ``clip_first / B`` on a disjoint batch, so the fit is ``(clip_first / (B sigma))``-GDP
by parallel composition. The batch assignment (a uniform permutation) is data-independent and
no amplification is claimed, so exposing it (``info["batch_assignment"]``) costs no privacy.

On the training core this is :class:`SRGDAnalysis`, the analysis of the run's
:class:`~privopt.training.TrainingPlan` (:func:`srgd_plan`): the event is rebuilt from the plan's
fields (steps, B, clip, relation, mechanism, noise multiplier), so what the ledger records is
``plan.event()`` and the one calibration (``plan.calibrate``) is verified on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from privopt._validate import check_count
from privopt.accounting import (
    GaussianEvent,
    Neighbouring,
    PrivacyLedger,
    PrivacyReport,
    classical_gaussian_sigma,
)
from privopt.noise import TreeAggregation, TreeIncrements, independent
from privopt.training import TrainingPlan
from privopt.training.recursive import SinglePass

if TYPE_CHECKING:
    from privopt.algorithms.srgd_parameters import SRGDParameters

__all__ = ["SRGDAnalysis", "srgd_plan", "tree_leaf_levels"]

#: Sensitivity factor of each neighbouring relation the analysis covers.
NEIGHBOURING = {"zero-out": 1.0, "replace-one": 2.0}


def tree_leaf_levels(steps: int) -> np.ndarray:
    """``m_t``: the number of complete binary-tree nodes containing step t, for t < T.

    Node (k, j) covers steps [j 2^k, (j + 1) 2^k) and is complete when (j + 1) 2^k <= T, so
    leaf t is in one node per level k with ``((t >> k) + 1) << k <= T``. These are the column
    norms squared of :meth:`privopt.noise.TreeAggregation.encoder_matrix`; ``m_0 =
    floor(log2 T) + 1`` is the largest, and for T >= 2 leaf 1 attains it too.
    """
    steps = check_count("steps", steps)
    t = np.arange(steps)
    out = np.zeros(steps, dtype=int)
    for k in range(steps.bit_length()):
        out += (((t >> k) + 1) << k) <= steps
    return out


def release_unit_sensitivity(steps: int, clip_first: float, clip_difference: float | None) -> float:
    """``max_t c_t sqrt(m_t)`` (recursive: the tree, c_0 = clip_first, c_t = clip_difference)
    or ``clip_first`` (independent: ``clip_difference`` None), before the relation's factor and
    the division by B."""
    if clip_difference is None:
        return clip_first
    m = tree_leaf_levels(steps)
    clips = np.full(steps, clip_difference)
    clips[0] = clip_first
    return float(np.max(clips * np.sqrt(m)))


@dataclass(frozen=True)
class SRGDAnalysis:
    """SRGD's privacy as a :class:`~privopt.training.TrainingPlan` analysis (module docstring).

    The event is rebuilt from the plan's fields: T = ``plan.steps`` single-participation fixed
    batches of B = ``plan.divisor`` records, c_t = ``plan.clip_norm`` for t >= 1 and
    ``first_clip`` at t = 0 (recursive; None: the independent variant, every clip the plan's),
    the relation's factor f, and the noise the loop draws (std ``multiplier G`` on each step's
    clipped sum, i.e. ``multiplier G / B`` on the batch mean)::

        GaussianEvent(f max_t c_t sqrt(m_t) / B, multiplier G / B)

    in batch-mean units (the released node sums divided by the public B: post-processing). The
    plan's mechanism must be the tree's increments (recursive) or independent noise, on one
    pass of disjoint batches: anything else is refused when the event is built.
    """

    first_clip: float | None

    def event(self, plan: Any, multiplier: float) -> GaussianEvent:
        recursive = self.first_clip is not None
        mechanism = plan.mechanism
        expected = (
            isinstance(mechanism, TreeIncrements) if recursive else mechanism.name == "independent"
        )
        participation = plan.participation
        if not expected or participation is None or participation.kind != "single":
            raise ValueError(
                "SRGD's analysis covers one pass of disjoint batches with the tree's increments "
                f"(recursive) or independent noise (independent); got {mechanism.name} with "
                f"{plan.batches.name}."
            )
        steps, divisor = plan.steps, plan.divisor
        if self.first_clip is not None:  # recursive: c_0 = first_clip, c_t = the plan's clip
            unit = release_unit_sensitivity(steps, self.first_clip, plan.clip_norm)
        else:
            unit = release_unit_sensitivity(steps, plan.clip_norm, None)
        label = (
            "binary-tree node sums of clipped SRG increments (Lemma 8)"
            if recursive
            else "independent Gaussian batch gradients (disjoint batches, parallel composition)"
        )
        sensitivity = plan.relation_factor * unit / divisor
        return GaussianEvent(sensitivity, multiplier * plan.clip_norm / divisor, label=label)

    def assumptions(self, plan: Any) -> list[str]:
        """The report's clipping and sensitivity lines (the plan's generic ones would name
        one clip for every step)."""
        if self.first_clip is not None:
            clips = (
                f"per-example first gradients (step 0) clipped to l2 norm {self.first_clip:g}, "
                f"per-example weighted gradient differences (steps >= 1) to {plan.clip_norm:g}"
            )
        else:
            clips = f"per-example gradients clipped to l2 norm {plan.clip_norm:g}"
        event = self.event(plan, 1.0)
        return [
            clips,
            f"privacy analysed by SRGDAnalysis ({event.label}): l2 sensitivity of the batch-mean "
            f"release {event.sensitivity:.6g} = {plan.relation_factor:g} max_t c_t sqrt(m_t) / B, "
            "with m_t the tree nodes holding step t",
        ]


class NoiseCalibration(NamedTuple):
    """The release's sensitivity and the paper's sigmas (for comparison with the exact noise,
    which :meth:`~privopt.training.TrainingPlan.calibrate` sets on :func:`srgd_plan`)."""

    levels: int
    sensitivity: float
    classical_sigma: float
    paper_budget_sigma: float
    corollary_sigma: float | None


def calibrate_noise(
    *,
    variant: str,
    setting: str,
    neighbouring: str,
    epsilon: float,
    delta: float,
    batch_size: int,
    steps: int,
    clip_first: float,
    clip_difference: float | None,
) -> NoiseCalibration:
    """Sensitivity ``max_t c_t sqrt(m_t) / B`` (recursive) or ``clip_first / B`` (independent)
    and the sigmas of the paper's conversions (the exact sigma is the plan's calibration)."""
    factor = NEIGHBOURING[neighbouring]
    recursive = variant == "recursive"
    unit = release_unit_sensitivity(steps, clip_first, clip_difference if recursive else None)
    levels = int(tree_leaf_levels(steps)[0]) if recursive else 1
    sensitivity = factor * unit / batch_size
    classical = classical_gaussian_sigma(epsilon, delta, sensitivity)
    paper_budget = sensitivity * math.sqrt(2.0 * math.log(2.5 / delta)) / epsilon
    corollary = None
    if variant == "recursive" and steps > 1:
        clip_max = max(clip_first, clip_difference or 0.0)
        root = math.sqrt(math.log2(steps) * math.log(2.5 / delta))
        scale = 2.0 * math.sqrt(2.0) if setting == "general" else 1.0
        corollary = factor * scale * clip_max * root / (epsilon * batch_size)
    return NoiseCalibration(levels, sensitivity, classical, paper_budget, corollary)


def srgd_plan(params: SRGDParameters) -> TrainingPlan:
    """The plan of a run with these parameters: one pass of T disjoint batches of B, clip
    ``clip_difference`` (``clip_first`` for the independent variant), the binary tree (as
    per-step increments) or independent noise, and SRGD's analysis (``clip_first`` at t = 0);
    uncalibrated until :func:`~privopt.algorithms.srgd_parameters` has calibrated it once
    (``params.noise_multiplier``).
    """
    recursive = params.variant == "recursive"
    return TrainingPlan(
        params.n,
        SinglePass(params.batch_size, num_steps=params.steps),
        clip_norm=params.clip_difference if recursive else params.clip_first,  # type: ignore[arg-type]
        mechanism=TreeAggregation() if recursive else independent(),
        neighbouring=Neighbouring(params.neighbouring),
        noise_multiplier=params.noise_multiplier,
        label="Accelerated-DP-SRGD",
        analysis=SRGDAnalysis(params.clip_first if recursive else None),
    )


def check_ledger(ledger: PrivacyLedger | None) -> PrivacyLedger:
    """The ledger to record into (a new zero-out one for None); refuses add/remove neighbours."""
    if ledger is None:
        return PrivacyLedger(Neighbouring.ZERO_OUT)
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"Expected a PrivacyLedger, got {type(ledger).__name__}.")
    if ledger.neighbouring.value not in NEIGHBOURING:
        raise ValueError(
            f"Accelerated-DP-SRGD is analysed under zero-out (or replace-one) neighbours; got a "
            f"{ledger.neighbouring.value!r} ledger. Adding or removing a record would shift the "
            "fixed batches and change n, on which B and T depend."
        )
    return ledger


def record_assumptions(ledger: PrivacyLedger, params: SRGDParameters) -> None:
    """The assumptions the fit's guarantee rests on (its one Gaussian event is the plan's,
    recorded by the training core)."""
    recursive = params.variant == "recursive"
    clips = f"first gradients clipped to {params.clip_first:.6g}"
    if params.clip_difference is not None:
        clips += (
            f", weighted differences eta_t g(x_t) - eta_(t-1) g(x_(t-1)) clipped to "
            f"{params.clip_difference:.6g}"
        )
    if recursive:
        sensitivity_text = (
            f"sensitivity {params.sensitivity:.6g} = max_t clip_t sqrt(m_t) / B over the "
            f"{params.levels} tree levels (Lemma 8); every iterate is post-processing of "
            "the released node sums"
        )
    else:
        sensitivity_text = (
            f"sensitivity {params.sensitivity:.6g} = clip_first / B per disjoint batch; "
            "every iterate is post-processing of the noisy batch gradients"
        )
    for text in (
        f"per-example {clips} (privacy holds for any loss, convex or not)",
        f"single epoch: each record in exactly one of T = {params.steps} disjoint batches of "
        f"B = {params.batch_size} (data-independent permutation; {params.unused_records} "
        "records dropped)",
        "batch means divided by the fixed B (zero-out: a zeroed record contributes 0)",
        sensitivity_text,
        "B, T, beta, radius and clipping thresholds chosen independently of the data",
        "noise calibrated by exact mu-GDP (not the classical sqrt(2 ln(1.25/delta)) formula)",
    ):
        ledger.assume(text)


def non_private_report(delta: float, neighbouring: str) -> PrivacyReport:
    """The report of a ``noise=False`` run: epsilon = inf, nothing released privately."""
    relation = Neighbouring(neighbouring)
    return PrivacyReport(
        epsilon=math.inf,
        delta=delta,
        rho=None,
        mu=None,
        accountant="none",
        accountant_description="no privacy: noise=False (testing the optimiser only)",
        neighbouring=relation.value,
        neighbouring_description=relation.description,
        composition="none (nothing private was released)",
        num_partitions=0,
        events=(),
        assumptions=("NON-PRIVATE run: noise disabled (noise=False); no guarantee at all",),
    )
