"""Zero-concentrated differential privacy (rho-zCDP; Bun & Steinke 2016).

A mechanism is rho-zCDP when its Rényi divergence of every order alpha > 1 between neighbours is at
most rho * alpha. Facts used throughout privopt:

* Gaussian mechanism, l2 sensitivity Delta, noise std sigma: rho = Delta^2 / (2 sigma^2)
  (Bun & Steinke 2016, Prop. 1.6).
* Composition is additive: rho = sum_i rho_i (also under adaptivity).
* Conversion to (epsilon, delta)-DP, two ways:

  - ``"tight"`` (Canonne, Kamath & Steinke 2020, Prop. 12; the conversion of
  docs/theory/correlated-noise.md#zcdp-conversion)::

        eps(rho, delta) = inf_{alpha > 1}  rho alpha + log(1/(alpha delta))/(alpha - 1)
                                           + log(1 - 1/alpha)

  - ``"bun-steinke"`` (Bun & Steinke 2016, Prop. 1.3): eps = rho + 2 sqrt(rho log(1/delta)).

  Any alpha gives a valid bound, so an imperfect minimisation can only be conservative.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_nonnegative, check_positive, check_probability
from privopt.accounting._search import feasible_boundary

__all__ = ["ZCDPConversion", "compose_rho", "gaussian_rho", "zcdp_epsilon", "zcdp_rho"]

ZCDPConversion = Literal["tight", "bun-steinke"]
_CONVERSIONS = ("tight", "bun-steinke")


def gaussian_rho(sensitivity: float, std: float) -> float:
    """rho of the Gaussian mechanism: Delta^2 / (2 sigma^2)."""
    sensitivity = check_nonnegative("sensitivity", sensitivity)
    std = check_positive("std", std)
    ratio = sensitivity / std  # ratio * ratio overflows to inf, never raises
    return ratio * ratio / 2.0


def compose_rho(*rhos: float) -> float:
    """rho of the (adaptive) composition of rho_i-zCDP mechanisms: the sum."""
    return float(sum(check_nonnegative("rho", r) for r in rhos))


def _tight_objective(log_alpha_minus_one: float, rho: float, log_inv_delta: float) -> float:
    # alpha - 1 = exp(x) kept apart from alpha: near alpha = 1 (huge rho) 1 + exp(x) rounds to 1
    alpha_minus_one = math.exp(log_alpha_minus_one)
    log_alpha = math.log1p(alpha_minus_one)
    return (
        rho * (1.0 + alpha_minus_one)
        + (log_inv_delta - log_alpha) / alpha_minus_one
        + (log_alpha_minus_one - log_alpha)  # log(1 - 1/alpha)
    )


def _tight_epsilon(rho: float, delta: float) -> float:
    log_inv_delta = -math.log(delta)
    # The Bun–Steinke optimum alpha* = 1 + sqrt(log(1/delta)/rho) is a good centre for the search.
    centre = 0.5 * math.log(log_inv_delta / rho)
    grid = centre + np.linspace(-8.0, 8.0, 65)
    values = [_tight_objective(x, rho, log_inv_delta) for x in grid]
    best = int(np.argmin(values))
    lo = grid[max(best - 1, 0)]
    hi = grid[min(best + 1, len(grid) - 1)]
    res = minimize_scalar(
        _tight_objective,
        bounds=(lo, hi),
        args=(rho, log_inv_delta),
        method="bounded",
        options={"xatol": 1e-12},
    )
    value = min(float(res.fun), values[best])
    return max(value, 0.0)


def _bun_steinke_epsilon(rho: float, delta: float) -> float:
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def _epsilon(rho: float, delta: float, conversion: str) -> float:
    if rho == 0.0:
        return 0.0
    if conversion == "tight":
        return _tight_epsilon(rho, delta)
    return _bun_steinke_epsilon(rho, delta)


def _check_conversion(conversion: str) -> str:
    if conversion not in _CONVERSIONS:
        raise ValueError(f"Expected conversion in {_CONVERSIONS}, got {conversion!r}.")
    return conversion


def zcdp_epsilon(rho: float, delta: float, conversion: ZCDPConversion = "tight") -> float:
    """epsilon at ``delta`` implied by rho-zCDP.

    >>> round(zcdp_epsilon(1.0, 1e-5), 4)
    7.0772
    >>> round(zcdp_epsilon(1.0, 1e-5, conversion="bun-steinke"), 4)
    7.7861
    """
    rho = check_nonnegative("rho", rho)
    delta = check_probability("delta", delta)
    return _epsilon(rho, delta, _check_conversion(conversion))


def zcdp_rho(epsilon: float, delta: float, conversion: ZCDPConversion = "tight") -> float:
    """Largest rho whose conversion gives at most ``epsilon`` at ``delta`` (rounded down).

    The result is verified: ``zcdp_epsilon(result, delta, conversion) <= epsilon``.

    >>> round(zcdp_rho(8.0, 1e-5), 6)
    1.229715
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    conversion = _check_conversion(conversion)
    if conversion == "bun-steinke":
        # Closed form: sqrt(rho) = sqrt(log(1/delta) + eps) - sqrt(log(1/delta)).
        log_inv = math.log(1.0 / delta)
        guess = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    else:
        guess = epsilon**2 / (4.0 * math.log(1.0 / delta))

    def excess(r: float) -> float:
        return _epsilon(r, delta, conversion) - epsilon

    good = guess
    while excess(good) > 0:
        good /= 2.0
    return feasible_boundary(excess, good=good, bad=2.0 * good + 1e-12, rtol=1e-12)
