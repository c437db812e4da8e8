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

Every choice depends on (N, b, E) only, which are public (N is public under the zero-out and
replace-one relations privopt uses), so it costs no privacy. A :class:`~privopt.noise.Mechanism`
instance may be given instead of a name (fixed batches). The plan's event then comes from
:meth:`privopt.training.TrainingPlan.event`; the calibration is
:meth:`privopt.training.TrainingPlan.calibrate`.
"""

from __future__ import annotations

from typing import Any

from privopt.accounting import Neighbouring
from privopt.noise import (
    Mechanism,
    Participation,
    independent,
    nu_dpftrl,
    optimal_cc,
    optimize_blt,
    tune_nu,
)
from privopt.noise.tuning import participation_pattern, tree_restart_candidates
from privopt.training import FixedBatches, PoissonSampling, TrainingPlan

__all__ = ["MECHANISMS", "build_plan"]

MECHANISMS = ("dpsgd", "blt", "nu-dpftrl", "optimal-cc", "tree", "banded")


def _tree(steps: int, participation: Participation) -> tuple[Mechanism, dict[str, Any]]:
    _, epochs_per_block, mech = min(
        tree_restart_candidates(steps, participation), key=lambda item: item[0]
    )
    return mech, {"restart_every_epochs": epochs_per_block}


def _banded(steps: int, participation: Participation) -> tuple[Mechanism, dict[str, Any]]:
    """L by ``choose_bands`` (at most the min-separation: exact sensitivity), then Toeplitz
    coefficients optimised for the run's pattern on the mean error."""
    from privopt.noise.banded import choose_bands, optimize_banded_toeplitz

    pattern = participation_pattern(participation)
    bands = choose_bands(steps, **pattern, error="mean").bands
    mech = optimize_banded_toeplitz(steps, bands, **pattern, error="mean")
    return mech, {"bands": bands, "coefficients": mech.coefficients.tolist()}


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
    if mechanism not in MECHANISMS:
        raise ValueError(f"Expected mechanism in {MECHANISMS} or a Mechanism, got {mechanism!r}.")
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
    info: dict[str, Any] = {"mechanism": mechanism}
    if mechanism == "blt":
        mech = optimize_blt(steps, error="mean", **participation_pattern(participation))
        info.update(buf_decay=mech.buf_decay.tolist(), output_scale=mech.output_scale.tolist())
    elif mechanism == "nu-dpftrl":
        nu = tune_nu(steps, **participation_pattern(participation)).nu
        mech = nu_dpftrl(nu)
        info["nu"] = nu
    elif mechanism == "optimal-cc":
        mech = optimal_cc()
    elif mechanism == "tree":
        mech, extra = _tree(steps, participation)
        info.update(extra)
    else:
        mech, extra = _banded(steps, participation)
        info.update(extra)
    plan = TrainingPlan(
        num_records,
        batches,
        clip_norm,
        mechanism=mech,
        neighbouring=relation,
        label=f"{mechanism} steps",
    )
    return plan, info
