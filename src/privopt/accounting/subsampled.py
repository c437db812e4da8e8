"""Poisson-subsampled Gaussian mechanism (DP-SGD) accounted by ``dp_accounting``.

DP-SGD with Poisson sampling at rate q, noise multiplier sigma (noise std / clip norm) and T steps
is the T-fold composition of the sampled Gaussian mechanism. Its RDP (Mironov et al. 2019) and its
privacy loss distribution (PLD; Koskela et al. 2020, Doroshenko et al. 2022) are computed by
Google's maintained ``dp_accounting`` library; privopt does not re-implement them.

The neighbouring relation is add/remove-one (equivalently zero-out, where a record's contribution
is replaced by zero). Calibration rounds toward more privacy: the returned noise multiplier is
verified to meet the target under the same accountant.
"""

from __future__ import annotations

import functools
from typing import Literal

import dp_accounting
from dp_accounting import pld, rdp

from privopt._validate import check_count, check_positive, check_probability, check_sample_rate
from privopt.accounting._search import feasible_boundary

__all__ = [
    "DEFAULT_PLD_DISCRETIZATION",
    "SubsampledAccountant",
    "calibrate_dpsgd_noise",
    "dpsgd_epsilon",
    "dpsgd_event",
    "make_dp_accounting_accountant",
]

SubsampledAccountant = Literal["pld", "rdp"]
#: dp_accounting's default PLD value discretisation; its pessimistic estimate is an upper bound.
DEFAULT_PLD_DISCRETIZATION = 1e-4


#: RDP orders for sampling without replacement (replace-one): dp_accounting's bound costs
#: O(order^2) per order, so a sparse set up to 128 keeps one evaluation near 0.3 s. Fewer orders
#: can only make epsilon larger (never an over-claim).
REPLACE_ONE_RDP_ORDERS = (
    *(1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32),
    *(40, 48, 56, 64, 80, 96, 128),
)


def make_dp_accounting_accountant(
    accountant: str,
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
    *,
    replace_one: bool = False,
) -> dp_accounting.PrivacyAccountant:
    """A fresh ``dp_accounting`` accountant of the named kind ("pld" or "rdp").

    Add/remove-one neighbours by default; ``replace_one`` for sampling without replacement
    (RDP only, with :data:`REPLACE_ONE_RDP_ORDERS`).
    """
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if replace_one:
        if accountant != "rdp":
            raise ValueError("Only the RDP accountant supports replace-one sampling events.")
        return rdp.RdpAccountant(
            orders=list(REPLACE_ONE_RDP_ORDERS),
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )
    if accountant == "pld":
        return pld.PLDAccountant(
            neighboring_relation=relation, value_discretization_interval=pld_discretization
        )
    if accountant == "rdp":
        return rdp.RdpAccountant(neighboring_relation=relation)
    raise ValueError(f"Expected accountant in ('pld', 'rdp'), got {accountant!r}.")


def dpsgd_event(noise_multiplier: float, sample_rate: float, steps: int) -> dp_accounting.DpEvent:
    """The ``dp_accounting`` event of T steps of Poisson-sampled Gaussian noise (pure function)."""
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    sample_rate = check_sample_rate("sample_rate", sample_rate)
    steps = check_count("steps", steps)
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)
        ),
        steps,
    )


def dpsgd_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: SubsampledAccountant = "pld",
) -> float:
    """epsilon at ``delta`` of DP-SGD (Poisson sampling, add/remove-one neighbours).

    >>> round(dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, accountant="rdp"), 5)
    2.10137
    """
    event = dpsgd_event(noise_multiplier, sample_rate, steps)
    delta = check_probability("delta", delta)
    acc = make_dp_accounting_accountant(accountant)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=512)
def calibrate_dpsgd_noise(
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: SubsampledAccountant = "pld",
    rtol: float = 1e-5,
) -> float:
    """Smallest noise multiplier (to ``rtol``) for which DP-SGD is (epsilon, delta)-DP.

    The result is verified under the same accountant, so rounding errs toward more noise. It is
    a pure function of public parameters and costs seconds (PLD), so results are memoised.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    sample_rate = check_sample_rate("sample_rate", sample_rate)
    steps = check_count("steps", steps)

    def excess_at(discretization: float):
        def excess(sigma: float) -> float:
            acc = make_dp_accounting_accountant(accountant, discretization)
            acc.compose(dpsgd_event(sigma, sample_rate, steps))
            return float(acc.get_epsilon(delta)) - epsilon

        return excess

    fine = excess_at(DEFAULT_PLD_DISCRETIZATION)
    coarse = excess_at(10 * DEFAULT_PLD_DISCRETIZATION) if accountant == "pld" else fine
    good = 1.0
    while coarse(good) > 0:
        good *= 2.0
        if good > 1e6:
            raise ValueError("No noise multiplier below 1e6 reaches the target epsilon.")
    good = feasible_boundary(coarse, good=good, bad=good / 2.0, rtol=1e-3)
    if coarse is fine:
        return feasible_boundary(fine, good=good, bad=good / 2.0, rtol=rtol)
    # Coarse-to-fine: the coarse (pessimistic) PLD brackets the answer within a few tenths of a
    # percent; the fine search then only has to cover that bracket.
    while fine(good) > 0:  # the coarse estimate is normally the more pessimistic; guard anyway
        good *= 1.01
    return feasible_boundary(fine, good=good, bad=good * 0.99, rtol=rtol)
