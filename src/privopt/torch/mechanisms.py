"""Training plans for PyTorch runs, by mechanism name (public, data-independent choices).

================  ==========================================  ===================================
name              batches                                     noise (privopt.noise)
================  ==========================================  ===================================
``dpsgd``         Poisson sampling, rate q = b / N,           independent; amplified (PLD/RDP)
                  ceil(E/q) steps
``banded``        cyclic Poisson: L secret parts of N // L,   banded Toeplitz C with L bands,
                  step t samples part t mod L at rate         noise scaled by C's largest column
                  q = b / (N // L), E (N // b) steps          norm; amplified
                                                              (``cyclic_poisson_event``); L of
                                                              least expected error at (eps,
                                                              delta) (:mod:`.amplified`)
``banded-fixed``  fixed batches of b, cycled in the same      banded Toeplitz C, L <= S bands by
                  order every epoch (k = E participations,    ``choose_bands``, coefficients by
                  min-separation S = N // b)                  ``optimize_banded_toeplitz``
``blt``           fixed batches (as above)                    ``optimize_blt`` for the run's
                                                              min-separation pattern (mean error)
``nu-dpftrl``     fixed batches                               nu-DP-FTRL, nu = ``tune_nu``
``optimal-cc``    fixed batches                               optimal continual counting (nu = 0)
``tree``          fixed batches                               Honaker tree increments, restarted
                                                              every m epochs (m by objective (3))
``auto``          the candidate of least expected error at    (``dpsgd``, ``banded`` or ``blt``;
                  (N, b, E, epsilon, delta)                   :func:`.amplified.choose_mechanism`)
================  ==========================================  ===================================

``banded`` and ``auto`` choose from the run's target (epsilon, delta), which the trainer passes;
called without them, ``banded`` is the fixed-batch plan of ``banded-fixed`` (its choices say
``sampling="fixed"``) and ``auto`` is refused. The names and the tuning of the fixed-batch
mechanisms are :mod:`privopt.noise.registry`'s (shared with the CLI and the reproductions).
Every choice depends on (N, b, E, epsilon, delta) only, which are public (N is public under the
zero-out and replace-one relations privopt uses), so it costs no privacy. A
:class:`~privopt.noise.Mechanism` instance may be given instead of a name (fixed batches). The
plan's event then comes from :meth:`privopt.training.TrainingPlan.event`; the calibration is
:meth:`privopt.training.TrainingPlan.calibrate`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from privopt.accounting import GaussianEvent, Neighbouring
from privopt.noise import Mechanism, Participation, independent
from privopt.noise.registry import MECHANISM_NAMES, canonical_mechanism, tuned_mechanism
from privopt.torch.amplified import amplified_banded_plan, choose_mechanism
from privopt.training import CyclicPoissonSampling, FixedBatches, PoissonSampling, TrainingPlan

__all__ = ["MECHANISMS", "RUN_MECHANISMS", "build_plan", "event_after"]

#: the registry's names (one spelling each, shared with the CLI and the reproductions)
MECHANISMS = MECHANISM_NAMES
#: the names a PyTorch run accepts: the registry's, the fixed-batch banded plan, and "auto"
RUN_MECHANISMS = (*MECHANISM_NAMES, "banded-fixed", "auto")


def _name(mechanism: str) -> str:
    key = mechanism.strip().lower().replace("_", "-") if isinstance(mechanism, str) else None
    if key in ("banded-fixed", "auto"):
        return key
    try:
        return canonical_mechanism(mechanism, stacklevel=3)
    except ValueError:
        raise ValueError(
            f"Expected mechanism in {RUN_MECHANISMS} or a Mechanism, got {mechanism!r}."
        ) from None


def build_plan(
    mechanism: str | Mechanism,
    num_records: int,
    *,
    batch_size: int,
    epochs: int,
    clip_norm: float,
    neighbouring: Neighbouring | str = "zero-out",
    epsilon: float | None = None,
    delta: float | None = None,
) -> tuple[TrainingPlan, dict[str, Any]]:
    """The (uncalibrated) plan of a run and the public choices made for it (see the table).

    ``epsilon`` and ``delta`` (the run's target, public) let ``"banded"`` pick its number of
    bands for cyclic Poisson sampling and ``"auto"`` its mechanism; the plan is then calibrated
    to them by the caller. ``choices["sampling"]`` names the batches: ``"poisson"``,
    ``"cyclic-poisson"`` or ``"fixed"``.
    """
    relation = Neighbouring.parse(neighbouring)
    if isinstance(mechanism, Mechanism):
        batches = FixedBatches(batch_size, epochs)
        return TrainingPlan(
            num_records, batches, clip_norm, mechanism=mechanism, neighbouring=relation
        ), {"mechanism": mechanism.name}
    name = _name(mechanism)
    target = epsilon is not None and delta is not None
    info: dict[str, Any] = {}
    if name == "auto":
        if not target:
            raise ValueError(
                "mechanism='auto' chooses from the run's target epsilon and delta: pass both "
                "to build_plan (PrivateTrainer and make_private do)."
            )
        name, errors = choose_mechanism(
            num_records, batch_size=batch_size, epochs=epochs, epsilon=epsilon,
            delta=delta, neighbouring=relation,
        )  # fmt: skip
        info = {"requested": "auto", "auto_expected_error": errors}
    if name == "banded" and target:
        plan, choices = amplified_banded_plan(
            num_records, batch_size=batch_size, epochs=epochs, clip_norm=clip_norm,
            epsilon=epsilon, delta=delta, neighbouring=relation,
        )  # fmt: skip
        return plan, {**choices, **info}
    if name == "dpsgd":
        batches = PoissonSampling.from_epochs(num_records, epochs=epochs, expected_batch=batch_size)
        plan = TrainingPlan(
            num_records,
            batches,
            clip_norm,
            mechanism=independent(),
            neighbouring=relation,
            label="dp-sgd steps",
        )
        return plan, {
            "mechanism": "dpsgd", "sampling": "poisson", "sample_rate": batches.sample_rate, **info
        }  # fmt: skip
    tuned = "banded" if name == "banded-fixed" else name
    batches = FixedBatches(batch_size, epochs)
    steps, participation = batches.steps(num_records), batches.participation(num_records)
    mech, choices = tuned_mechanism(tuned, steps, participation)
    choices.pop("restart_objective", None)
    plan = TrainingPlan(
        num_records,
        batches,
        clip_norm,
        mechanism=mech,
        neighbouring=relation,
        label=f"{tuned} steps",
    )
    return plan, {"mechanism": name, **choices, "sampling": "fixed", **info}


def event_after(plan: TrainingPlan, t: int, per_epoch: int):
    """The event of the first ``t`` steps of a calibrated ``plan`` (``per_epoch`` batches an
    epoch): a post-processing of the leading t x t block of the mechanism, so it costs the
    epsilon of that truncated plan (the whole plan's event for t >= its steps).

    Sampled plans: the same plan with t steps at the same multiplier (Poisson: t sampled
    steps; cyclic Poisson: ``cyclic_poisson_event`` for t steps, ceil(t / L) sampled steps; the
    noise already drawn is scaled by the whole C's largest column norm, at least that of its
    leading block, so the prefix is at least as private as that event says)."""
    if t >= plan.steps:
        return plan.event()
    if isinstance(plan.batches, (PoissonSampling, CyclicPoissonSampling)):
        truncated = dataclasses.replace(plan.batches, num_steps=t)
        return dataclasses.replace(plan, batches=truncated).event()
    pattern = (
        Participation.single()
        if t <= per_epoch
        else Participation.multiple(per_epoch, -(-t // per_epoch))
    )
    unit = plan.mechanism.sensitivity(t, pattern)
    return GaussianEvent(plan.relation_factor * plan.clip_norm * unit, plan.noise_std)
