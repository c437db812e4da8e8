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
import logging
from typing import Literal

import dp_accounting
from dp_accounting import pld, rdp

from privopt._validate import check_count, check_positive, check_probability, check_sample_rate
from privopt.accounting._search import feasible_boundary, smallest_feasible_multiplier

__all__ = [
    "DEFAULT_PLD_DISCRETIZATION",
    "SubsampledAccountant",
    "calibrate_dpsgd_noise",
    "dp_accounting_epsilon",
    "dpsgd_epsilon",
    "dpsgd_event",
    "make_dp_accounting_accountant",
]

SubsampledAccountant = Literal["pld", "rdp"]


class _ExcludedOrderNotice(logging.Filter):
    """Drops dp_accounting's "failed to converge ... Excluding this order" notices.

    An RDP order whose series does not converge is left out of the minimum over orders, so the
    reported epsilon stays an upper bound; the notice is not actionable and printed dozens of
    lines per fit at small noise. Every other absl record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "Excluding this order" not in record.getMessage()


logging.getLogger("absl").addFilter(_ExcludedOrderNotice())
#: dp_accounting's default PLD value discretisation; its pessimistic estimate is an upper bound.
DEFAULT_PLD_DISCRETIZATION = 1e-4


#: Above this RDP epsilon the RDP bound is reported instead of the PLD's. The PLD's grid spans the
#: privacy-loss range at a fixed step, so for weak guarantees (tiny noise) it needs time and
#: memory without bound (sigma = 0.001 at q = 0.5 asked for 38 GiB); the RDP bound is valid (an
#: upper bound) and at such epsilons the PLD's refinement protects nobody.
PLD_TRACTABLE_EPSILON = 20.0
#: Smallest noise multiplier accounted: below it sigma^2 underflows in the accountants' formulas
#: (dp_accounting's RDP then drops every order and reports epsilon 0 for a noiseless release).
MIN_NOISE_MULTIPLIER = 1e-50
#: Noise multipliers above this are accounted at this value: epsilon only grows as the noise
#: shrinks, so the result is a valid upper bound (about 1e-100 at any delta), and sigma^2 stays
#: in floating-point range (dp_accounting's RDP overflows near sigma = 1e154).
MAX_NOISE_MULTIPLIER = 1e50

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


def check_noise_multiplier(noise_multiplier: float, name: str = "noise_multiplier") -> float:
    """A positive, finite noise multiplier that the accountants can represent: a value below
    :data:`MIN_NOISE_MULTIPLIER` (a practically noiseless release) is refused, one above
    :data:`MAX_NOISE_MULTIPLIER` is lowered to it (more privacy loss: a valid upper bound)."""
    value = check_positive(name, noise_multiplier)
    if value < MIN_NOISE_MULTIPLIER:
        raise ValueError(
            f"{name} = {value!r} is below {MIN_NOISE_MULTIPLIER:g}: the release is practically "
            "noiseless and its privacy loss cannot be accounted in floating point."
        )
    return min(value, MAX_NOISE_MULTIPLIER)


def dp_accounting_epsilon(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: str = "pld",
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
    *,
    replace_one: bool = False,
) -> float:
    """epsilon at ``delta`` of a ``dp_accounting`` event, in bounded time and memory.

    With ``accountant="pld"`` the RDP bound is computed first (milliseconds); when it exceeds
    :data:`PLD_TRACTABLE_EPSILON` it is returned (a valid upper bound) instead of building a PLD
    whose grid would grow with the privacy-loss range.
    """
    delta = check_probability("delta", delta)
    if accountant == "pld" and not replace_one:
        bound = make_dp_accounting_accountant("rdp")
        bound.compose(event)
        epsilon = float(bound.get_epsilon(delta))
        if epsilon > PLD_TRACTABLE_EPSILON:
            return epsilon
    acc = make_dp_accounting_accountant(accountant, pld_discretization, replace_one=replace_one)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def dpsgd_event(noise_multiplier: float, sample_rate: float, steps: int) -> dp_accounting.DpEvent:
    """The ``dp_accounting`` event of T steps of Poisson-sampled Gaussian noise (pure function)."""
    noise_multiplier = check_noise_multiplier(noise_multiplier)
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
    return dp_accounting_epsilon(event, delta, accountant)


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
            event = dpsgd_event(sigma, sample_rate, steps)
            return dp_accounting_epsilon(event, delta, accountant, discretization) - epsilon

        return excess

    fine = excess_at(DEFAULT_PLD_DISCRETIZATION)
    coarse = excess_at(10 * DEFAULT_PLD_DISCRETIZATION) if accountant == "pld" else fine
    good = smallest_feasible_multiplier(coarse, limit_exponent=6, rtol=1e-3)
    if coarse is fine:
        return feasible_boundary(fine, good=good, bad=good / 2.0, rtol=rtol)
    # Coarse-to-fine: the coarse (pessimistic) PLD brackets the answer within a few tenths of a
    # percent; the fine search then only has to cover that bracket.
    while fine(good) > 0:  # the coarse estimate is normally the more pessimistic; guard anyway
        good *= 1.01
    return feasible_boundary(fine, good=good, bad=good * 0.99, rtol=rtol)
