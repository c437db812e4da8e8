"""One calibration for every plan: the smallest noise whose recorded event meets a target.

``calibrate_noise_multiplier(event_factory, epsilon, delta, neighbouring)`` is generic over a
factory ``noise_multiplier -> PrivacyEvent`` (the design of ``dp_accounting``'s
``calibrate_dp_mechanism``), and always rounds toward more privacy: the returned multiplier is
verified on exactly the event the fit will record, through the same ledger and accountant that
write its report, and nudged upward until ``ledger.epsilon(delta) <= epsilon``.

Routes, by the event the factory builds:

* :class:`~privopt.accounting.GaussianEvent` (fixed batches with any noise mechanism, no
  amplification): exact mu-GDP, closed form ``mu = sensitivity / std`` (Dong, Roth & Su 2019).
* :class:`~privopt.accounting.PoissonSampledGaussianEvent` (DP-SGD): ``dp_accounting``'s PLD (or
  RDP) through :func:`privopt.accounting.calibrate_dpsgd_noise`, memoised.
* :class:`~privopt.accounting.ShuffledGaussianEvent` (one shuffled pass, Varshney et al.'s (2022)
DP-SSGD):
  FMT21's amplification by shuffling through
  :func:`privopt.accounting.calibrate_shuffled_gaussian` (refused above the bound's validity
  region), memoised.
* anything else (e.g. sampling without replacement, replace-one RDP): a bracketing search on
  the ledger's epsilon (:func:`privopt.accounting._search.feasible_boundary`).

The factory must be linear in the multiplier for the closed routes (the event's own noise
multiplier or std is a fixed multiple of the plan's: ``factory(s)`` = ``factory(1)`` scaled by
s), as every plan's event is.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from privopt._validate import check_positive, check_probability
from privopt.accounting import (
    GaussianEvent,
    Neighbouring,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    PrivacyLedger,
    ShuffledGaussianEvent,
    calibrate_dpsgd_noise,
    calibrate_shuffled_gaussian,
    gdp_mu,
)
from privopt.accounting._search import feasible_boundary

__all__ = ["calibrate_noise_multiplier", "event_epsilon"]

#: Relative nudge per verification step (toward more noise).
_NUDGE = 1e-12


@functools.lru_cache(maxsize=1024)
def event_epsilon(
    event: PrivacyEvent, delta: float, neighbouring: Neighbouring | str, accountant: str = "auto"
) -> float:
    """epsilon at ``delta`` of one event, through a ledger as a fit would report it (events are
    frozen, so the result is memoised: a PLD composition costs seconds)."""
    ledger = PrivacyLedger(neighbouring)
    ledger.record(event)
    return ledger.epsilon(delta, accountant)


def calibrate_noise_multiplier(
    event_factory: Callable[[float], PrivacyEvent],
    epsilon: float,
    delta: float,
    neighbouring: Neighbouring | str,
    accountant: str = "auto",
) -> float:
    """Smallest noise multiplier (to about 1e-5 relative, or exactly for Gaussian events) whose
    event is (epsilon, delta)-DP under ``neighbouring`` and ``accountant``; verified.

    >>> from privopt.accounting import GaussianEvent
    >>> sigma = calibrate_noise_multiplier(
    ...     lambda s: GaussianEvent(1.0, s), 1.0, 1e-5, "zero-out")
    >>> round(sigma, 4), event_epsilon(GaussianEvent(1.0, sigma), 1e-5, "zero-out") <= 1.0
    (3.7306, True)
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    probe = event_factory(1.0)

    def excess(sigma: float) -> float:
        return event_epsilon(event_factory(sigma), delta, neighbouring, accountant) - epsilon

    if isinstance(probe, GaussianEvent):
        # mu is proportional to 1 / sigma: mu(sigma) = probe.mu / sigma
        sigma = probe.mu / gdp_mu(epsilon, delta)
    elif isinstance(probe, PoissonSampledGaussianEvent):
        kind = "pld" if accountant == "auto" else accountant
        sigma = calibrate_dpsgd_noise(epsilon, delta, probe.sample_rate, probe.count, kind)
    elif isinstance(probe, ShuffledGaussianEvent):
        # the event's multiplier is probe.noise_multiplier * sigma
        alpha = calibrate_shuffled_gaussian(epsilon, probe.num_records, delta)
        sigma = alpha / probe.noise_multiplier
    else:
        good = 1.0
        while excess(good) > 0:
            good *= 2.0
            if good > 1e12:
                raise ValueError("No noise multiplier below 1e12 reaches the target epsilon.")
        sigma = feasible_boundary(excess, good=good, bad=good / 2.0, rtol=1e-5)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"Calibration produced an invalid noise multiplier {sigma!r}.")
    nudge = _NUDGE
    while excess(sigma) > 0:  # round toward privacy on the event actually recorded
        sigma *= 1.0 + nudge
        nudge *= 2.0  # a discretised accountant may need more than one ulp-sized step
    return float(sigma)
