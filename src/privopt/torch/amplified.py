"""Amplified banded noise and ``mechanism="auto"`` for PyTorch runs (public choices only).

**Amplified banded matrix factorisation.** Choquette-Choo, McKenna, McMahan, Rush and Thakurta,
"(Amplified) Banded Matrix Factorization: A unified approach to private training" (NeurIPS
2023, arXiv:2306.08153), Thm 4, and Choquette-Choo et al., "Correlated Noise Provably Beats
Independent Noise for Differentially Private Learning" (ICLR 2024, arXiv:2310.06771): the N
records are split at random into L secret parts of N // L records; step t includes each record
of part t mod L independently with probability q = b / (N // L) (expected batch b); the noise is
``z G ||C||_col (B w)_t`` with C an L-banded Toeplitz encoder (its columns' largest norm
||C||_col, so the rescaled C has unit columns). A record's participations are L steps apart,
so they touch disjoint rows of C, and the run is as private as DP-SGD for ceil(T / L) steps at
rate q: :func:`privopt.noise.cyclic_poisson_event`, calibrated by the training core
(:class:`privopt.training.CyclicPoissonSampling`). L = 1 is DP-SGD; L = N // b is fixed batches
(q = 1) with banded noise: L trades amplification for correlation.

**The expected error of a calibrated plan** (what both choices below minimise). With G = 1 the
model update of step t is the noisy mean g_t + n_t / D (D the plan's public divisor, b for
every candidate here) and SGD's iterate carries the prefix sums of the noise, so the score is
the mean over t of E ||sum_{s <= t} n_s||^2 / D^2 per coordinate:

    err = (sigma_eff / D)^2 * (1 / T) sum_t ||(A B)_t||^2,

sigma_eff the plan's noise std per unit clip (z ||C||_col under cyclic Poisson, the calibrated
multiplier for fixed batches, z for DP-SGD), A the prefix-sum matrix and B = C^-1
(``mechanism.prefix_losses``, the "mean loss" of the papers; for DP-SGD B = I and the mean is
(T + 1) / 2). Each candidate is calibrated to the run's (epsilon, delta): exact GDP for fixed
batches, dp_accounting's RDP for the sampled ones (the fast accountant, used for the ranking
only; the chosen plan is then calibrated again by the run with its own accountant).
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

from privopt._validate import check_count, check_positive, check_probability
from privopt.accounting import Neighbouring
from privopt.noise import Participation, independent
from privopt.noise.registry import tuned_mechanism
from privopt.training import CyclicPoissonSampling, FixedBatches, PoissonSampling, TrainingPlan

__all__ = [
    "AUTO_CANDIDATES",
    "MAX_BANDS",
    "amplified_banded_plan",
    "choose_mechanism",
    "plan_error",
]

#: the most bands (= parts) an amplified banded plan considers: L - 1 model-sized buffers
MAX_BANDS = 64
#: what ``mechanism="auto"`` compares (the unamplified representative is BLT)
AUTO_CANDIDATES = ("dpsgd", "banded", "blt")
#: the accountant of the ranking (RDP: seconds per candidate; PLD would take tens)
_RANKING_ACCOUNTANT = "rdp"


def plan_error(plan: TrainingPlan) -> float:
    """The expected error of a calibrated ``plan`` (module docstring): the mean over steps of the
    expected squared error, per coordinate and per unit clip, of the noisy prefix sums divided
    by the plan's divisor."""
    mech, steps = plan.mechanism, plan.steps
    single = Participation.single()
    mean_rows = mech.prefix_losses(steps, single)[1] / mech.sensitivity_squared(steps, single)
    return (plan.noise_std / (plan.clip_norm * plan.divisor)) ** 2 * mean_rows


def _check_run(num_records: int, batch_size: int, epochs: int) -> tuple[int, int, int]:
    num_records = check_count("num_records", num_records)
    batch_size = check_count("batch_size", batch_size)
    epochs = check_count("epochs", epochs)
    if batch_size > num_records:
        raise ValueError(f"Expected batch_size <= the {num_records} records, got {batch_size}.")
    return num_records, batch_size, epochs


def _cyclic_plan(n, b, epochs, bands, clip_norm, relation, label) -> tuple[TrainingPlan, dict]:
    """L = ``bands`` parts, q = b / (N // L), T = E (N // b) steps; the banded Toeplitz C
    optimised for the amplified objective: single-participation sensitivity (the largest
    column norm, which scales the noise) times the mean error."""
    steps = epochs * (n // b)
    rate = min(1.0, b / (n // bands))
    mech, choices = tuned_mechanism("banded", steps, Participation.single(), bands=bands)
    batches = CyclicPoissonSampling(bands, rate, steps)
    plan = TrainingPlan(
        n, batches, clip_norm, mechanism=mech, neighbouring=relation, label=label
    )  # the strategy refuses more bands than parts, and any relation but zero-out
    info = {"sampling": "cyclic-poisson", "groups": bands, "sample_rate": rate, **choices}
    return plan, info


def _band_grid(n: int, b: int, epochs: int) -> list[int]:
    """L = 2, 4, 8, ... up to min(N // b (parts of at least b records), T, MAX_BANDS)."""
    cap = min(n // b, epochs * (n // b), MAX_BANDS)
    return [2**j for j in range(1, int(math.log2(cap)) + 1)] if cap >= 2 else []


def _ranked(plan: TrainingPlan, epsilon: float, delta: float) -> tuple[float, TrainingPlan]:
    calibrated = plan.calibrate(epsilon, delta, _RANKING_ACCOUNTANT)
    return plan_error(calibrated), calibrated


def amplified_banded_plan(
    num_records: int,
    *,
    batch_size: int,
    epochs: int,
    clip_norm: float,
    epsilon: float,
    delta: float,
    neighbouring: Neighbouring | str = "zero-out",
    label: str = "banded steps",
) -> tuple[TrainingPlan, dict[str, Any]]:
    """The uncalibrated cyclic-Poisson banded plan with the number of bands L (= parts) of
    least expected error at (epsilon, delta) among L = 2, 4, ..., min(N // b, T, 64)
    (:func:`plan_error`; module docstring), and the public choices made.

    Refused in one line: fewer than two parts of ``batch_size`` records (N // b < 2), and
    replace-one neighbours (the amplification is analysed for zero-out / add-remove)."""
    plan, info = _amplified(
        *_check_run(num_records, batch_size, epochs), check_positive("clip_norm", clip_norm),
        check_positive("epsilon", epsilon), check_probability("delta", delta),
        Neighbouring.parse(neighbouring), label,
    )  # fmt: skip
    return plan, copy.deepcopy(info)  # the cached choices stay as they were


@functools.lru_cache(maxsize=64)
def _amplified(n, b, epochs, clip_norm, epsilon, delta, relation, label):
    if relation is not Neighbouring.ZERO_OUT:
        raise ValueError(
            "mechanism='banded' samples by cyclic Poisson, analysed under zero-out neighbours; "
            "use neighbouring='zero-out' or mechanism='banded-fixed'."
        )
    grid = _band_grid(n, b, epochs)
    if not grid:
        raise ValueError(
            f"mechanism='banded' needs at least 2 parts of batch_size={b} records for its bands, "
            f"but the {n} records make N // batch_size = {n // b}; use a smaller batch_size "
            "(or mechanism='dpsgd')."
        )
    scored = {}
    for bands in grid:
        plan, info = _cyclic_plan(n, b, epochs, bands, clip_norm, relation, label)
        scored[bands] = (_ranked(plan, epsilon, delta)[0], plan, info)
    best = min(scored, key=lambda L: (scored[L][0], L))
    _, plan, info = scored[best]
    errors = {f"banded(L={L})": value[0] for L, value in scored.items()}
    return plan, {"mechanism": "banded", **info, "expected_error": errors}


def choose_mechanism(
    num_records: int,
    *,
    batch_size: int,
    epochs: int,
    epsilon: float,
    delta: float,
    neighbouring: Neighbouring | str = "zero-out",
) -> tuple[str, dict[str, float]]:
    """The rule of ``mechanism="auto"``: the candidate of least expected error at the run's
    (epsilon, delta) (:func:`plan_error`, each calibrated), from public inputs only (N, b, E,
    epsilon, delta, the relation), so the choice costs no privacy. Returns the name and every
    candidate's error.

    Candidates (:data:`AUTO_CANDIDATES`): ``"dpsgd"`` (Poisson sampling at q = b / N,
    ceil(E / q) steps, independent noise), ``"banded"`` (cyclic Poisson, the best L of
    :func:`amplified_banded_plan`) and ``"blt"`` (fixed batches cycled E times, BLT tuned to the
    min-separation pattern, no amplification). Ties go to the earlier candidate. Under
    replace-one neighbours only ``"blt"`` is analysed (sampling is accounted under zero-out),
    so it is chosen.
    """
    n, b, epochs = _check_run(num_records, batch_size, epochs)
    eps, delta = check_positive("epsilon", epsilon), check_probability("delta", delta)
    name, errors = _choose(n, b, epochs, eps, delta, Neighbouring.parse(neighbouring))
    return name, dict(errors)


@functools.lru_cache(maxsize=64)
def _choose(n, b, epochs, epsilon, delta, relation) -> tuple[str, dict[str, float]]:
    if relation is not Neighbouring.ZERO_OUT:
        return "blt", {}
    errors: dict[str, float] = {}
    sgd = PoissonSampling.from_epochs(n, epochs=epochs, expected_batch=b)
    errors["dpsgd"] = _ranked(
        TrainingPlan(n, sgd, 1.0, mechanism=independent(), neighbouring=relation), epsilon, delta
    )[0]
    if _band_grid(n, b, epochs):
        _, info = _amplified(n, b, epochs, 1.0, epsilon, delta, relation, "banded steps")
        errors["banded"] = min(info["expected_error"].values())
    fixed = FixedBatches(b, epochs)
    steps, pattern = fixed.steps(n), fixed.participation(n)
    mech, _ = tuned_mechanism("blt", steps, pattern)
    errors["blt"] = _ranked(
        TrainingPlan(n, fixed, 1.0, mechanism=mech, neighbouring=relation), epsilon, delta
    )[0]
    best = min(AUTO_CANDIDATES, key=lambda name: errors.get(name, math.inf))
    return best, errors
