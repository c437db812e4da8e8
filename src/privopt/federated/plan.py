"""The plan of a federated run: a :class:`~privopt.training.TrainingPlan` over users.

User-level privacy reuses the training core unchanged, with the user as the record: the plan's
``num_records`` is the number of users N, a batch is a cohort of users, and ``clip_norm`` bounds
a user's whole model delta (all its records, all its local steps). A neighbouring data set
replaces every record of one user by a null user whose delta is zero (user-level zero-out), or
by another user (user-level replace-one). The plan's event is then exactly the record-level
event of the same plan over users, and it is calibrated once, by the core's calibration.

===============  ==========================================  =====================================
mechanism        cohorts (:mod:`privopt.training.batching`)  noise and accounting
===============  ==========================================  =====================================
``dpsgd``        Poisson over users, rate q = b / N,         independent (DP-FedAvg, McMahan et
                 ceil(E / q) rounds                          al. 2018, ICLR); amplified (PLD/RDP)
``blt``,         fixed cohorts of b users from a secret      the registry's mechanism tuned to the
``banded``,      permutation, cycled in the same order      pattern (k = E participations,
``nu-dpftrl``,   every pass (E passes over the users)        min-separation N // b); one Gaussian
``optimal-cc``,                                              mechanism C G + W with the
``tree``                                                     min-separation sensitivity
===============  ==========================================  =====================================

``sampling="cyclic-poisson"`` amplifies ``banded`` noise: P secret fixed parts of the users,
round t samples part t mod P by Poisson (``groups=P``; see :func:`federated_plan`).
``sampling="fixed"`` runs independent noise on fixed cohorts too (unamplified DP-FedAvg). The
choices depend on (N, b, E) only, which are public, so they cost no privacy. This is the
protocol of Choquette-Choo et al. (2024), "Correlated Noise Provably Beats Independent Noise
for Differentially Private Learning" (ICLR 2024, arXiv:2310.06771), Section 4 and Appendix G.2:
DP-FTRL on client updates ("generalized gradients", Reddi et al. 2020), user updates clipped
to l2 norm 1, server momentum, correlated noise with multiple participations. DP-FedAvg is
McMahan, Ramage, Talwar and Zhang (2018), "Learning Differentially Private Recurrent Language
Models" (ICLR 2018); zero-out neighbours are Kairouz et al. (2021), "Practical and Private
(Deep) Learning without Sampling or Shuffling" (ICML 2021), with the user as the unit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from privopt._validate import check_count, check_positive
from privopt.accounting import Neighbouring, PrivacyUnit
from privopt.noise import Mechanism, Participation, independent
from privopt.noise.registry import MECHANISM_NAMES, canonical_mechanism, tuned_mechanism
from privopt.training import (
    CyclicPoissonSampling,
    FixedBatches,
    PoissonSampling,
    QuantileClipping,
    TrainingPlan,
)

__all__ = [
    "PRIVACY_UNIT",
    "federated_plan",
    "user_level_assumptions",
    "user_level_relation",
]

#: the privacy unit of every federated run
PRIVACY_UNIT = PrivacyUnit.USER.value
_SAMPLING = ("auto", "poisson", "fixed", "cyclic-poisson")


def federated_plan(
    mechanism: str | Mechanism,
    num_users: int,
    *,
    cohort_size: int,
    epochs: int,
    clip_norm: float,
    neighbouring: Neighbouring | str = "zero-out",
    sampling: str = "auto",
    groups: int | None = None,
    adaptive_clipping: QuantileClipping | None = None,
) -> tuple[TrainingPlan, dict[str, Any]]:
    """The uncalibrated plan over ``num_users`` users and the public choices made (module
    table); calibrate it with ``plan.calibrate(epsilon, delta)``.

    Args:
        mechanism: a name of :data:`privopt.noise.registry.MECHANISM_NAMES` or a
            :class:`~privopt.noise.Mechanism` (fixed cohorts).
        cohort_size: b, users per round (the expected cohort under Poisson sampling).
        epochs: E, passes over the users (participations of each user with fixed cohorts).
        clip_norm: G, the l2 bound of each user's model delta.
        neighbouring: user-level ``"zero-out"`` or ``"replace-one"``.
        sampling: ``"auto"`` (Poisson for ``dpsgd``, fixed cohorts otherwise), ``"poisson"``
            (``dpsgd`` only), ``"fixed"``, or ``"cyclic-poisson"`` (``banded`` only, with
            ``groups``: amplified banded noise, below).
        groups: with ``"cyclic-poisson"``, the number P of secret fixed parts of the users;
            round t samples each user of part t mod P with probability
            q = min(1, b / (N // P)), over the same E N // b rounds as fixed cohorts; the banded
            mechanism is tuned for min-separation P (so L <= P bands) and the run is accounted
            as ceil(T / P) Poisson-sampled Gaussian steps (Choquette-Choo, McMahan, Rush and
            Thakurta 2023, "Amplified Banded Matrix Factorization", Thm 4;
            :func:`privopt.noise.cyclic_poisson_event`). P = N // b is fixed cohorts with
            q = 1; smaller P amplifies more with fewer bands.
        adaptive_clipping: a :class:`~privopt.training.QuantileClipping` rule: the bound on a
            user's delta then follows a target quantile of the users' delta norms, learnt from a
            noisy count of the cohort's unclipped users released every round (Andrew, Thakkar,
            McMahan and Ramaswamy 2021, "Differentially Private Learning with Adaptive
            Clipping", NeurIPS 2021, Algorithm 1 with the user as the unit); ``clip_norm`` is
            the initial bound. The gradient noise multiplier is raised so that the deltas and
            the counts together spend exactly the event of a fixed clip
            (:attr:`~privopt.training.TrainingPlan.gradient_noise_multiplier`), so the
            calibration and the report are those of fixed clipping. Poisson sampling and fixed
            cohorts only (cyclic Poisson is refused by the plan).
    """
    plan, choices = _plan(mechanism, num_users, cohort_size, epochs, clip_norm, neighbouring,
                          sampling, groups)  # fmt: skip
    if adaptive_clipping is None:
        return plan, choices
    if not isinstance(adaptive_clipping, QuantileClipping):
        raise ValueError(
            "Expected adaptive_clipping to be a QuantileClipping, got "
            f"{type(adaptive_clipping).__name__}."
        )
    if isinstance(plan.batches, CyclicPoissonSampling):
        raise ValueError(
            "adaptive_clipping is analysed for Poisson sampling and fixed cohorts, not for "
            "sampling='cyclic-poisson'; use a fixed clip_norm or sampling='fixed'."
        )
    plan = dataclasses.replace(plan, adaptive_clipping=adaptive_clipping)
    return plan, {**choices, "adaptive_clipping": adaptive_clipping.describe()}


def _plan(mechanism, num_users, cohort_size, epochs, clip_norm, neighbouring, sampling, groups):
    """:func:`federated_plan` without adaptive clipping (its Args)."""
    num_users = check_count("num_users", num_users)
    cohort_size = check_count("cohort_size", cohort_size)
    epochs = check_count("epochs", epochs)
    clip_norm = check_positive("clip_norm", clip_norm)
    relation = Neighbouring.parse(neighbouring)
    if relation is Neighbouring.ADD_REMOVE:
        raise ValueError(
            "neighbouring='add-remove' makes the number of users private, but a federated plan "
            "uses it (rounds, sampling rate, divisor); use 'zero-out' or 'replace-one'."
        )
    if sampling not in _SAMPLING:
        raise ValueError(f"Expected sampling in {_SAMPLING}, got {sampling!r}.")
    if cohort_size > num_users:
        raise ValueError(f"cohort_size={cohort_size} is larger than the {num_users} users.")
    if isinstance(mechanism, Mechanism):
        name, mech, choices = mechanism.name, mechanism, {}
        if sampling == "poisson":
            raise ValueError("sampling='poisson' is analysed for mechanism='dpsgd' only.")
    else:
        try:
            name = canonical_mechanism(mechanism, stacklevel=2)
        except ValueError:
            raise ValueError(
                f"Expected mechanism in {MECHANISM_NAMES} or a Mechanism, got {mechanism!r}."
            ) from None
        if sampling == "poisson" and name != "dpsgd":
            raise ValueError(
                f"sampling='poisson' is analysed for mechanism='dpsgd' only, got {name!r}: "
                "amplification by sampling is not analysed for correlated noise here."
            )
        mech, choices = independent(), {}
    label = f"federated rounds ({name}, user-level)"
    if name == "dpsgd" and sampling in ("auto", "poisson"):
        batches = PoissonSampling.from_epochs(num_users, epochs=epochs, expected_batch=cohort_size)
        plan = TrainingPlan(
            num_users, batches, clip_norm, mechanism=independent(), neighbouring=relation,
            label=label,
        )  # fmt: skip
        return plan, {"mechanism": name, "sampling": "poisson", "rate": batches.sample_rate}
    if sampling == "cyclic-poisson":
        return _cyclic_plan(mechanism, name, num_users, cohort_size, epochs, clip_norm,
                            relation, groups, label)  # fmt: skip
    if groups is not None:
        raise ValueError("groups applies to sampling='cyclic-poisson' only.")
    batches = FixedBatches(cohort_size, epochs)
    if not isinstance(mechanism, Mechanism) and name != "dpsgd":
        steps, pattern = batches.steps(num_users), batches.participation(num_users)
        mech, choices = tuned_mechanism(name, steps, pattern)
        choices.pop("restart_objective", None)
    plan = TrainingPlan(
        num_users, batches, clip_norm, mechanism=mech, neighbouring=relation, label=label
    )
    return plan, {"mechanism": name, "sampling": "fixed", **choices}


def _cyclic_plan(mechanism, name, users, cohort, epochs, clip_norm, relation, groups, label):
    """Amplified banded noise over users (``sampling="cyclic-poisson"``; the Args above)."""
    if groups is None:
        raise ValueError("sampling='cyclic-poisson' needs groups (the number of user parts).")
    groups = check_count("groups", groups)
    if groups > users // cohort:
        raise ValueError(
            f"groups={groups} leaves parts of {users // groups} users, fewer than the cohort of "
            f"{cohort}; use groups <= N // cohort_size = {users // cohort}."
        )
    if not isinstance(mechanism, Mechanism) and name != "banded":
        raise ValueError(
            f"sampling='cyclic-poisson' is analysed for banded mechanisms, got {name!r}."
        )
    steps = epochs * (users // cohort)
    rate = min(1.0, cohort / (users // groups))
    choices: dict[str, Any] = {}
    if not isinstance(mechanism, Mechanism):
        pattern = Participation.multiple(groups, math.ceil(steps / groups))
        mechanism, choices = tuned_mechanism("banded", steps, pattern)
    batches = CyclicPoissonSampling(groups, rate, steps)
    plan = TrainingPlan(
        users, batches, clip_norm, mechanism=mechanism, neighbouring=relation, label=label
    )  # the strategy refuses more bands than groups, and replace-one
    return plan, {"mechanism": name, "sampling": "cyclic-poisson", "groups": groups,
                  "rate": rate, **choices}  # fmt: skip


def user_level_relation(neighbouring: Neighbouring) -> tuple[str, str]:
    """The user-level relation's name and description (``"user-level zero-out"``, ...), as the
    accounting's :class:`~privopt.accounting.events.PrivacyUnit` words it."""
    return PrivacyUnit.USER.relation_name(neighbouring), PrivacyUnit.USER.relation_description(
        neighbouring
    )


def user_level_assumptions(plan: TrainingPlan, local_steps: int) -> list[str]:
    """What a federated run's claim relies on, in words, from the plan's public fields."""
    n = plan.num_records
    bound = f"{plan.clip_norm:g}"
    if plan.adaptive_clipping is not None:
        bound = f"kappa_t (adaptive, initially {plan.clip_norm:g})"
    out = [
        f"privacy unit: the user; {n} users (public); a record's user id is public "
        "structure and every record has one",
        f"each user's model delta after {local_steps} local step(s) on all of its records, from "
        f"the server model, clipped to l2 norm {bound}: a user's whole contribution "
        "to a round, whatever its number of records (a delta with a non-finite value, or one "
        "zeroed by the l-infinity guard, contributes zero)",
        "cohorts over users: " + plan.batches.describe(n).replace("records", "users"),
        "the server adds noise to the sum of the cohort's clipped deltas only; client "
        "training, its batching and its order are inside the clipped delta",
    ]
    if isinstance(plan.batches, CyclicPoissonSampling):
        out.append(
            f"banded noise {plan.mechanism.name} amplified by cyclic Poisson sampling over "
            f"users: accounted as ceil(T / {plan.batches.groups}) Poisson-sampled Gaussian "
            "steps with the noise scaled by C's largest column norm (Choquette-Choo et al. "
            "2023, Amplified Banded Matrix Factorization, Thm 4)"
        )
    if plan.adaptive_clipping is not None:
        out.append(
            plan.adaptive_clipping.describe().replace("gradient norms", "users' delta norms")
            + "; each round releases the noisy count of the cohort's users whose delta the "
            "clip left unchanged (sensitivity 1/2 per user after centring), and the deltas' "
            "noise multiplier is raised so that both releases together spend the event of a "
            "fixed clip (Andrew et al. 2021, with the user as the unit)"
        )
    if plan.batches.accounts_correlated_noise:
        out.append(
            f"correlated noise {plan.mechanism.name}: sensitivity {plan.sensitivity:.6g} = "
            f"{plan.relation_factor:g} G x the mechanism's unit sensitivity for each user's "
            "participation pattern"
        )
    return out
