"""One calibration for every plan: the smallest noise whose recorded event meets a target.

``calibrate_noise_multiplier(event_factory, epsilon, delta, neighbouring)`` is generic over a
factory ``noise_multiplier -> PrivacyEvent`` (the design of ``dp_accounting``'s
``calibrate_dp_mechanism``), and always rounds toward more privacy: the returned multiplier is
verified on exactly the event the fit will record, through the same ledger and accountant that
write its report, and nudged upward until ``ledger.epsilon(delta) <= epsilon``.

The factory may return a tuple of events: releases composed sequentially on one data partition
(e.g. one round of Varshney et al.'s (2022) DP-AMBSSGD: DP-STAT, then the gradient step). The
target is either ``(epsilon, delta)`` or, keyword-only, ``mu`` (mu-GDP, Dong, Roth & Su 2019,
for Gaussian events only): a budget handed over as a share of a GDP mu (sequential composition
with other releases on the same rows), or zCDP's rho as ``mu = sqrt(2 rho)`` (a Gaussian
mechanism is (mu^2 / 2)-zCDP exactly, Bun & Steinke 2016, Proposition 1.6). A ``mu`` target is
verified through the ledger's own ``mu`` (``ledger.mu <= mu``).

Routes, by the event the factory builds:

* :class:`~privopt.accounting.GaussianEvent` (fixed batches with any noise mechanism, no
  amplification), or a tuple of them: exact mu-GDP, closed form ``mu = sensitivity / std``
  composed as ``sqrt(sum mu_i^2)`` (Dong, Roth & Su 2019).
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

from privopt._validate import check_nonnegative, check_positive, check_probability
from privopt.accounting import (
    ApproxDPEvent,
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

__all__ = ["calibrate_noise_multiplier", "event_epsilon", "gaussian_release_std", "split_epsilon"]

#: what an event factory returns: one event, or releases composed on one partition
Events = PrivacyEvent | tuple[PrivacyEvent, ...]

#: Relative nudge per verification step (toward more noise).
_NUDGE = 1e-12


@functools.lru_cache(maxsize=1024)
def event_epsilon(
    event: Events, delta: float, neighbouring: Neighbouring | str, accountant: str = "auto"
) -> float:
    """epsilon at ``delta`` of one event (or a tuple composed on one partition), through a
    ledger as a fit would report it (events are frozen, so the result is memoised: a PLD
    composition costs seconds)."""
    return _ledger(event, neighbouring).epsilon(delta, accountant)


def _ledger(event: Events, neighbouring: Neighbouring | str) -> PrivacyLedger:
    ledger = PrivacyLedger(neighbouring)
    for release in event if isinstance(event, tuple) else (event,):
        ledger.record(release)
    return ledger


def _gaussian_mu(event: Events) -> float | None:
    """mu of a Gaussian event or of a tuple of them composed (None if any is not Gaussian)."""
    events = event if isinstance(event, tuple) else (event,)
    if not all(isinstance(e, GaussianEvent) for e in events):
        return None
    return math.sqrt(sum(e.mu * e.mu for e in events))  # the ledger's composition


def calibrate_noise_multiplier(
    event_factory: Callable[[float], Events],
    epsilon: float | None = None,
    delta: float | None = None,
    neighbouring: Neighbouring | str = "zero-out",
    accountant: str = "auto",
    *,
    mu: float | None = None,
    rtol: float = 1e-5,
) -> float:
    """Smallest noise multiplier (to ``rtol`` relative, or exactly for Gaussian events) whose
    event is (epsilon, delta)-DP under ``neighbouring`` and ``accountant``, or mu-GDP with
    ``mu=`` (Gaussian events only); verified, so a coarser ``rtol`` (a faster search) only
    errs toward more noise.

    >>> from privopt.accounting import GaussianEvent
    >>> sigma = calibrate_noise_multiplier(
    ...     lambda s: GaussianEvent(1.0, s), 1.0, 1e-5, "zero-out")
    >>> round(sigma, 4), event_epsilon(GaussianEvent(1.0, sigma), 1e-5, "zero-out") <= 1.0
    (3.7306, True)
    >>> sigma = calibrate_noise_multiplier(lambda s: GaussianEvent(2.0, s), mu=0.5)
    >>> sigma, GaussianEvent(2.0, sigma).mu <= 0.5
    (4.0, True)
    """
    if mu is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("Give the target as (epsilon, delta) or as mu, not both.")
        return _calibrate_gdp(event_factory, check_positive("mu", mu), neighbouring)
    if epsilon is None or delta is None:
        raise ValueError("The calibration target needs epsilon and delta (or mu=).")
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    probe = event_factory(1.0)
    if isinstance(probe, tuple) and len(probe) == 1:
        probe = probe[0]  # one release: the closed routes below apply

    def excess(sigma: float) -> float:
        return event_epsilon(event_factory(sigma), delta, neighbouring, accountant) - epsilon

    probe_mu = _gaussian_mu(probe)
    if probe_mu is not None:
        # mu is proportional to 1 / sigma: mu(sigma) = probe_mu / sigma
        sigma = probe_mu / gdp_mu(epsilon, delta)
    elif isinstance(probe, PoissonSampledGaussianEvent):
        kind = "pld" if accountant == "auto" else accountant
        sigma = calibrate_dpsgd_noise(
            epsilon, delta, probe.sample_rate, probe.count, kind, rtol=rtol
        )
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
        sigma = feasible_boundary(excess, good=good, bad=good / 2.0, rtol=rtol)
    return _verified(sigma, excess)


def _calibrate_gdp(
    event_factory: Callable[[float], Events], mu: float, neighbouring: Neighbouring | str
) -> float:
    """The multiplier whose Gaussian events compose to at most mu-GDP (closed form: the
    composed mu is proportional to 1 / sigma), verified through the ledger's ``mu``."""
    probe_mu = _gaussian_mu(event_factory(1.0))
    if probe_mu is None:
        raise ValueError(
            "A GDP target (mu=) needs Gaussian events; calibrate this plan to (epsilon, delta)."
        )

    def excess(sigma: float) -> float:
        return _ledger(event_factory(sigma), neighbouring).mu - mu

    return _verified(probe_mu / mu, excess)


def _verified(sigma: float, excess: Callable[[float], float]) -> float:
    """``sigma`` nudged upward until ``excess(sigma) <= 0`` (the target met on the event the
    fit records)."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"Calibration produced an invalid noise multiplier {sigma!r}.")
    nudge = _NUDGE
    while excess(sigma) > 0:  # round toward privacy on the event actually recorded
        sigma *= 1.0 + nudge
        nudge *= 2.0  # a discretised accountant may need more than one ulp-sized step
    return float(sigma)


def split_epsilon(epsilon: float, delta: float, count: int, delta_each: float) -> float:
    """The largest epsilon_c such that ``count`` (epsilon_c, delta_each)-DP releases compose to
    at most (epsilon, delta): ``ApproxDPEvent(epsilon_c, delta_each, count).composed_epsilon(
    delta) <= epsilon``, the function a report evaluates (e.g. a private grid search's fits,
    one per candidate). The library's one verified search
    (:func:`privopt.accounting._search.feasible_boundary`, to 1e-12 relative, rounded toward
    privacy).

    >>> eps_c = split_epsilon(1.0, 1e-5, 4, 1e-6)  # basic composition is the best of 4 here
    >>> round(eps_c, 9), ApproxDPEvent(eps_c, 1e-6, count=4).composed_epsilon(1e-5) <= 1.0
    (0.25, True)
    """
    epsilon = check_positive("epsilon", epsilon)

    def excess(eps: float) -> float:
        return ApproxDPEvent(eps, delta_each, count=count).composed_epsilon(delta) - epsilon

    low = epsilon / count / 2.0
    if excess(low) > 0:
        raise ValueError(f"No per-release epsilon found for {count} releases at {epsilon}.")
    return feasible_boundary(excess, good=low, bad=epsilon, rtol=1e-12)


def gaussian_release_std(sensitivity: float, mu: float) -> float:
    """The noise std of one Gaussian release of l2 ``sensitivity`` that spends a GDP budget
    share ``mu``: the one-shot releases (AdaSSP's three, noisy Newton's Gram matrix and
    gradients, private means, second moments, counts and label histograms, the quality
    release) calibrate here, through :func:`calibrate_noise_multiplier` on the
    :class:`~privopt.accounting.GaussianEvent` they record. The closed form is
    ``sensitivity / mu`` (Dong, Roth & Su 2019, Theorem 2.7: the Gaussian mechanism is
    (sensitivity / std)-GDP), verified through a ledger's ``mu`` and rounded toward more noise.
    A zero sensitivity (a release that does not depend on the data) needs no noise: 0.

    >>> gaussian_release_std(2.0, 0.5), gaussian_release_std(0.0, 0.5)
    (4.0, 0.0)
    """
    sensitivity = check_nonnegative("sensitivity", sensitivity)
    mu = check_positive("mu", mu)
    if sensitivity == 0.0:
        return 0.0
    return calibrate_noise_multiplier(lambda std: GaussianEvent(sensitivity, std), mu=mu)
