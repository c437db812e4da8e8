"""Root finding that always rounds toward more privacy.

Calibration asks for the boundary of a monotone feasibility region: the smallest noise, or the
largest rho or mu, whose privacy loss stays within a target. A numerical root is only accurate
to a tolerance, and on the wrong side of the boundary it would over-claim privacy. Every
calibration in privopt therefore goes through :func:`feasible_boundary`, which returns a point
that is verified to be feasible.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy.optimize import brentq

__all__ = ["feasible_boundary", "smallest_feasible_multiplier"]


def _expand(g: Callable[[float], float], good: float, bad: float, limit: float) -> float:
    """Move ``bad`` away from ``good`` until ``g(bad) > 0``.

    When both points are positive (noise scales, rho, mu) the bracket grows by ratios, so it
    never leaves the positive axis (a search toward 0 halves instead of stepping past 0).
    """
    positive = good > 0 and bad > 0
    ratio = bad / good if positive else 0.0
    step = bad - good
    while g(bad) <= 0:
        if positive:
            ratio = ratio * ratio  # 1/2 -> 1/4 -> 1/16 ... or 2 -> 4 -> 16 ...
            bad = good * ratio
            if bad < 1.0 / limit or bad > limit:
                raise ValueError(
                    "Could not bracket the calibration boundary; the target is not attainable "
                    "with these parameters."
                )
            continue
        step *= 2.0
        bad = good + step
        if abs(bad) > limit:
            raise ValueError(
                f"Could not bracket the calibration boundary below {limit:g}; "
                "the target is not attainable with these parameters."
            )
    return bad


def feasible_boundary(
    g: Callable[[float], float],
    good: float,
    bad: float,
    *,
    rtol: float = 1e-12,
    limit: float = 1e12,
) -> float:
    """Return ``x`` near the root of a monotone ``g`` with ``g(x) <= 0`` guaranteed.

    Args:
        g: constraint function; ``g(x) <= 0`` means ``x`` is feasible (private enough). It must be
            monotone between ``good`` and ``bad``.
        good: a feasible point, ``g(good) <= 0``.
        bad: an initial guess on the infeasible side; it is pushed further away if it is
            feasible too.
        rtol: relative tolerance of the root.
        limit: give up (``ValueError``) when the bracket would pass this magnitude.

    Returns:
        A feasible point within about ``rtol`` (relative) of the boundary.
    """
    if g(good) > 0:
        raise ValueError("feasible_boundary: the starting point is not feasible.")
    bad = _expand(g, good, bad, limit)
    lo, hi = min(good, bad), max(good, bad)
    xtol = max(rtol * max(abs(lo), abs(hi)), 1e-300)
    root = brentq(g, lo, hi, xtol=xtol, rtol=max(rtol, 4 * 2.220446049250313e-16), maxiter=500)
    # Step from the root toward the feasible side until feasibility is verified.
    direction = math.copysign(1.0, good - bad)
    step = xtol
    x = root
    while g(x) > 0:
        x = root + direction * step
        step *= 2.0
        if (x - good) * direction > 0:  # passed the known-good point: use it
            return good
    return x


def smallest_feasible_multiplier(
    excess: Callable[[float], float], *, limit_exponent: int, rtol: float
) -> float:
    """The smallest noise multiplier (to ``rtol``, verified) with ``excess(sigma) <= 0``.

    ``excess`` (epsilon at sigma minus the target) decreases in sigma. The search doubles sigma
    from 1 until it is feasible, then bisects the last doubling with :func:`feasible_boundary`;
    past ``10 ** limit_exponent`` it gives up with a ValueError (the target is unattainable).
    """
    good = 1.0
    while excess(good) > 0:
        good *= 2.0
        if good > 10.0**limit_exponent:
            raise ValueError(
                f"No noise multiplier below 1e{limit_exponent} reaches the target epsilon."
            )
    return feasible_boundary(excess, good=good, bad=good / 2.0, rtol=rtol)
