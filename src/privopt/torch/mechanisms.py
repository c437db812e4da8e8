"""Training plans for PyTorch runs, by mechanism name (public, data-independent choices).

=============  ==========================================  ======================================
name           batches                                     noise (privopt.noise)
=============  ==========================================  ======================================
``dpsgd``      Poisson sampling, rate q = b / N, ceil(E/q)  independent; amplified (PLD/RDP)
               steps
``blt``        fixed batches of b, cycled in the same      ``optimize_blt`` for the run's
               order every epoch (k = E participations,     min-separation pattern (mean error)
               min-separation S = N // b)
``nu-dpftrl``  fixed batches (as above)                    nu-DP-FTRL, nu = ``tune_nu`` for the
                                                           pattern
``optimal-cc`` fixed batches                               optimal continual counting (nu = 0)
``tree``       fixed batches                               Honaker tree increments, restarted
                                                           every m epochs (m by objective (3))
``banded``     fixed batches                               banded Toeplitz C, L <= S bands by
                                                           ``choose_bands``, coefficients by
                                                           ``optimize_banded_toeplitz``
=============  ==========================================  ======================================

The names and the tuning are :mod:`privopt.noise.registry`'s (one spelling each, shared with
the CLI and the reproductions). Every choice depends on (N, b, E) only, which are public (N is
public under the zero-out and replace-one relations privopt uses), so it costs no privacy. A
:class:`~privopt.noise.Mechanism` instance may be given instead of a name (fixed batches).
The plan's event then comes from :meth:`privopt.training.TrainingPlan.event`; the calibration
is :meth:`privopt.training.TrainingPlan.calibrate`.
"""

from __future__ import annotations

import math
from typing import Any

from privopt.accounting import GaussianEvent, Neighbouring, PoissonSampledGaussianEvent
from privopt.noise import Mechanism, Participation, independent
from privopt.noise.registry import MECHANISM_NAMES, canonical_mechanism, tuned_mechanism
from privopt.training import FixedBatches, PoissonSampling, TrainingPlan

__all__ = ["MECHANISMS", "build_plan", "event_after"]

MECHANISMS = MECHANISM_NAMES


def build_plan(
    mechanism: str | Mechanism,
    num_records: int,
    *,
    batch_size: int,
    epochs: int,
    clip_norm: float,
    neighbouring: Neighbouring | str = "zero-out",
) -> tuple[TrainingPlan, dict[str, Any]]:
    """The (uncalibrated) plan of a run and the public choices made for it (see the table)."""
    relation = Neighbouring.parse(neighbouring)
    if isinstance(mechanism, Mechanism):
        batches = FixedBatches(batch_size, epochs)
        return TrainingPlan(
            num_records, batches, clip_norm, mechanism=mechanism, neighbouring=relation
        ), {"mechanism": mechanism.name}
    try:
        mechanism = canonical_mechanism(mechanism, stacklevel=2)
    except ValueError:
        raise ValueError(
            f"Expected mechanism in {MECHANISMS} or a Mechanism, got {mechanism!r}."
        ) from None
    if mechanism == "dpsgd":
        batches = PoissonSampling.from_epochs(num_records, epochs=epochs, expected_batch=batch_size)
        plan = TrainingPlan(
            num_records,
            batches,
            clip_norm,
            mechanism=independent(),
            neighbouring=relation,
            label="dp-sgd steps",
        )
        return plan, {"mechanism": "dpsgd", "sample_rate": batches.sample_rate}
    batches = FixedBatches(batch_size, epochs)
    steps, participation = batches.steps(num_records), batches.participation(num_records)
    mech, choices = tuned_mechanism(mechanism, steps, participation)
    info: dict[str, Any] = {"mechanism": mechanism, **choices}
    info.pop("restart_objective", None)
    plan = TrainingPlan(
        num_records,
        batches,
        clip_norm,
        mechanism=mech,
        neighbouring=relation,
        label=f"{mechanism} steps",
    )
    return plan, info


def event_after(plan: TrainingPlan, t: int, per_epoch: int):
    """The event of the first ``t`` steps of a calibrated ``plan`` (``per_epoch`` batches an
    epoch): a post-processing of the leading t x t block of the mechanism, so it costs the
    epsilon of that truncated plan (the whole plan's event for t >= its steps)."""
    if t >= plan.steps:
        return plan.event()
    if isinstance(plan.batches, PoissonSampling):
        return PoissonSampledGaussianEvent(
            plan.noise_multiplier, plan.batches.sample_rate, count=t, label=plan.label
        )
    pattern = (
        Participation.single()
        if t <= per_epoch
        else Participation.multiple(per_epoch, math.ceil(t / per_epoch))
    )
    unit = plan.mechanism.sensitivity(t, pattern)
    return GaussianEvent(plan.relation_factor * plan.clip_norm * unit, plan.noise_std)
