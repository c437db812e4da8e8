"""Gaussian differential privacy (mu-GDP; Dong, Roth & Su 2019).

A mechanism is mu-GDP when distinguishing neighbours is no easier than distinguishing
N(0, 1) from N(mu, 1). Its exact privacy profile is (Dong et al. 2019, Cor. 2.13)::

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2).

A Gaussian mechanism with l2 sensitivity Delta and noise std sigma is exactly (Delta/sigma)-GDP,
and adaptive composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP, also exactly. This is
why privopt uses GDP, not the classical ``sqrt(2 ln(1.25/delta))`` formula, which is only proven
for eps < 1 and is violated at large eps (notes/004.md §3.4: at eps = 10, delta = 1e-5 the classical
mu has a true delta of 2.27e-5).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtri

from privopt._validate import check_nonnegative, check_positive, check_probability
from privopt.accounting._search import feasible_boundary

__all__ = ["compose_gdp", "gdp_delta", "gdp_epsilon", "gdp_mu"]


def _delta(mu: float, epsilon: float) -> float:
    # delta = Phi(a) - e^eps Phi(b) = Phi(a) * (1 - exp(eps + log Phi(b) - log Phi(a))),
    # evaluated in log space so that large eps neither overflows nor cancels catastrophically.
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    log_a = float(log_ndtr(a))
    log_b = float(log_ndtr(b))
    exponent = min(epsilon + log_b - log_a, 0.0)
    return max(math.exp(log_a) * -math.expm1(exponent), 0.0)


def gdp_delta(mu: float, epsilon: float) -> float:
    """Exact delta(epsilon) of a mu-GDP mechanism.

    Args:
        mu: GDP parameter, ``> 0``.
        epsilon: privacy loss, ``>= 0``.

    Returns:
        The smallest delta such that the mechanism is (epsilon, delta)-DP.

    >>> round(gdp_delta(1.0, 4.377178), 9)
    1e-05
    """
    mu = check_positive("mu", mu)
    epsilon = check_nonnegative("epsilon", epsilon)
    return _delta(mu, epsilon)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon (to 1e-12 relative) such that a mu-GDP mechanism is (epsilon, delta)-DP.

    The returned epsilon is verified: ``gdp_delta(mu, result) <= delta``.

    >>> round(gdp_epsilon(1.0, 1e-5), 6)
    4.377178
    """
    mu = check_positive("mu", mu)
    delta = check_probability("delta", delta)
    if _delta(mu, 0.0) <= delta:
        return 0.0
    # eps = mu^2/2 + mu * z_{1-delta} makes the first term alone equal delta: feasible.
    upper = mu * mu / 2.0 + mu * float(-ndtri(delta))
    return feasible_boundary(lambda e: _delta(mu, e) - delta, good=upper, bad=0.0)


def gdp_mu(epsilon: float, delta: float) -> float:
    """Largest mu such that mu-GDP implies (epsilon, delta)-DP (rounded toward privacy).

    >>> round(gdp_mu(1.0, 1e-5), 7)
    0.2680511
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    good = epsilon / math.sqrt(2.0 * math.log(1.25 / delta))
    while _delta(good, epsilon) > delta:  # the classical mu is infeasible at large epsilon
        good /= 2.0
    return feasible_boundary(lambda m: _delta(m, epsilon) - delta, good=good, bad=2.0 * good)


def compose_gdp(*mus: float) -> float:
    """GDP parameter of the adaptive composition of mu_i-GDP mechanisms: sqrt(sum mu_i^2)."""
    values = [check_nonnegative("mu", m) for m in mus]
    return float(np.sqrt(np.sum(np.square(values)))) if values else 0.0
