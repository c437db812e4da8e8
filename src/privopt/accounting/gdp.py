"""Gaussian differential privacy (mu-GDP; Dong, Roth & Su 2019).

A mechanism is mu-GDP when distinguishing neighbours is no easier than distinguishing
N(0, 1) from N(mu, 1). Its exact privacy profile is (Dong et al. 2019, Cor. 2.13)::

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2).

A Gaussian mechanism with l2 sensitivity Delta and noise std sigma is exactly (Delta/sigma)-GDP,
and adaptive composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP, also exactly. This is
why privopt uses GDP, not the classical ``sqrt(2 ln(1.25/delta))`` formula, which is only proven
for eps < 1 and is violated at large eps (docs/theory/single-epoch-srgd.md#tree: at eps = 10, delta
= 1e-5 the classical
mu has a true delta of 2.27e-5).

Numerics
--------
Write ``x = eps/mu - mu/2`` and ``y = eps/mu + mu/2 = x + mu`` (so the two arguments above are
``-x`` and ``-y``). Since ``y^2/2 = x^2/2 + eps``, ``e^eps phi(y) = phi(x)`` exactly, and with
``Phi(-t) = e^{-t^2/2} erfcx(t/sqrt 2) / 2`` the profile becomes::

    delta = e^{-x^2/2} / 2 * [erfcx(x/sqrt 2) - erfcx(y/sqrt 2)]
          = e^{-x^2/2} / 2 * integral_x^y k(t) dt,     k(t) = sqrt(2/pi) - t erfcx(t/sqrt 2) > 0.

No ``e^eps`` appears, so nothing overflows and nothing cancels against eps. The former
log-space form ``Phi(-x) (1 - exp(eps + log Phi(-y) - log Phi(-x)))`` cancelled eps against
``log Phi(-y) ~ -eps``: once the float spacing of eps (2 at 1e16, 16 at 1e17) is comparable to
the true exponent (about -log mu), the exponent is noise, and from eps ~ 1e17 it reported
``delta = 0`` for mechanisms whose true delta is 1, so ``gdp_mu(1e18, 1e-10)`` returned such a
mu. What remains is evaluated to about 1e-14 relative:

* ``x`` is formed exactly (integer arithmetic on the binary fractions of eps and mu) and kept as
  a double-double, because ``e^{-x^2/2}`` amplifies an error of x by ``x^2`` (up to ~1500), and
  ``eps/mu - mu/2`` cancels to nothing near ``mu = sqrt(2 eps)`` (all of the large-eps regime);
* ``mu >= 1``: the bracket is evaluated as written; it cancels by at most a factor ``1 + x/mu``;
* ``mu < 1`` (small eps, or strong noise): the bracket would cancel catastrophically (by
  ``x/mu``, 1e9 at eps = 1e-10; the former form was 6e-7 too small there), so the integral of
  the positive ``k`` is taken by 8-point Gauss-Legendre quadrature on ``[x, x + mu]`` (k is
  entire, so on an interval shorter than 1 the rule is exact to rounding); ``k(t)`` itself
  cancels like ``t^2`` for large t, where it is computed from Laplace's continued fraction of
  the Mills ratio instead.

The result is multiplied by ``1 + 1e-12`` (:data:`DELTA_RELATIVE_ERROR`, about 80 times the
largest error, 1.2e-14, measured against mpmath over 80,000 points covering every regime), so
``gdp_delta`` is an upper bound of the true delta, and every calibration that verifies
``gdp_delta <= delta`` is right about the true delta too. Profiles below :data:`DELTA_MIN` lose
relative precision on their way to the subnormal range, so :func:`gdp_epsilon` and
:func:`gdp_mu` refuse targets below it.

Range: :func:`gdp_mu` answers every finite epsilon > 0 (mu ~ 2 sqrt 2 erfinv(delta) as eps -> 0,
mu ~ sqrt(2 eps) + Phi^{-1}(delta) for large eps, up to 1.9e154 at the largest float);
:func:`gdp_epsilon` answers every mu whose epsilon is a float, and refuses larger mu (about
1.9e154) by name.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable

import numpy as np
from scipy.optimize import brentq
from scipy.special import erfcx, erfinv, ndtr, ndtri

from privopt._validate import check_nonnegative, check_positive, check_probability

__all__ = ["DELTA_MIN", "DELTA_RELATIVE_ERROR", "compose_gdp", "gdp_delta", "gdp_epsilon", "gdp_mu"]

#: Relative inflation applied to every computed delta so that it bounds the true delta.
DELTA_RELATIVE_ERROR = 1e-12
#: Smallest delta target of :func:`gdp_epsilon` and :func:`gdp_mu` (resolved to 1e-14 relative).
DELTA_MIN = 1e-300

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)
#: Beyond this x the profile is below Phi(-40) < 1e-348: zero in double precision.
_X_MAX = 40
#: k(t) = sqrt(2/pi) - t erfcx(t/sqrt 2) loses ~log10(1 + t^2) digits; past 5 use the fraction.
_CF_FROM = 5.0


def _x_double_double(mu: float, epsilon: float) -> tuple[float, float] | None:
    """``x = eps/mu - mu/2`` as ``hi + lo`` (both exact to double-double), or None if x > 40.

    Floats are binary fractions, so ``x = (2 e_n m_d^2 - e_d m_n^2) / (2 e_d m_n m_d)`` exactly
    with the integer ratios ``eps = e_n/e_d`` and ``mu = m_n/m_d``; Python's int division rounds
    correctly. This removes the cancellation of ``eps/mu - mu/2`` near ``mu = sqrt(2 eps)`` (all
    of the large-eps regime), where the naive difference has an absolute error of order
    ``sqrt(eps) * 1e-16``.
    """
    e_n, e_d = epsilon.as_integer_ratio()
    m_n, m_d = mu.as_integer_ratio()
    num = 2 * e_n * m_d * m_d - e_d * m_n * m_n
    den = 2 * e_d * m_n * m_d
    if num > _X_MAX * den:
        return None
    hi = num / den
    h_n, h_d = hi.as_integer_ratio()
    lo = (num * h_d - h_n * den) / (den * h_d)
    return hi, lo


def _half_gaussian(hi: float, lo: float) -> float:
    """``exp(-x^2/2) / 2`` for ``x = hi + lo``, with ``hi^2`` split exactly (Dekker)."""
    if abs(hi) > _X_MAX:
        return 0.0
    square = hi * hi
    split = 134217729.0 * hi  # 2^27 + 1: Veltkamp split of hi into two 26-bit halves
    top = split - (split - hi)
    bottom = hi - top
    square_error = ((top * top - square) + 2.0 * top * bottom) + bottom * bottom
    return 0.5 * math.exp(-0.5 * square) * math.exp(-(0.5 * square_error + hi * lo))


def _k(t: np.ndarray) -> np.ndarray:
    """``k(t) = sqrt(2/pi) (1 - t M(t)) > 0`` with M the Mills ratio ``Phi(-t)/phi(t)``.

    Directly for ``t <= 5``, where it cancels at most ~30-fold (measured error < 1.1e-14).
    Beyond, Laplace's continued fraction ``M(t) = 1/(t + R)``, ``R = 1/(t + 2/(t + 3/(t + ...)))``
    gives ``1 - t M = R / (t + R)`` without cancellation: evaluated backwards from depth
    ``n = 8 + 400/t^2``, started at the fixed point ``r = (n+1)/(t + r)`` of its tail, it is
    exact to 4e-16 (measured against 60-digit arithmetic for 5 < t < 1e8).
    """
    out = _SQRT_2_OVER_PI - t * erfcx(t / _SQRT2)
    for i in np.flatnonzero(t > _CF_FROM).tolist():
        s = float(t[i])
        depth = 8 + math.ceil(400.0 / (s * s))
        r = 2.0 * (depth + 1) / (math.sqrt(s * s + 4.0 * (depth + 1)) + s)  # tail's fixed point
        for j in range(depth, 1, -1):
            r = j / (s + r)
        tail = 1.0 / (s + r)
        out[i] = _SQRT_2_OVER_PI * tail / (s + tail)
    return out


def _profile(mu: float, epsilon: float) -> float:
    """The privacy profile delta(eps) of mu-GDP to ~1e-14 relative (see the module notes)."""
    x = _x_double_double(mu, epsilon)
    if x is None:
        return 0.0
    hi, lo = x
    if mu < 1.0:
        bracket = 0.5 * mu * float(np.dot(_WEIGHTS, _k(hi + mu * (1.0 + _NODES) / 2.0)))
        return _half_gaussian(hi, lo) * bracket
    y = epsilon / mu + mu / 2.0  # a sum: no cancellation
    tail = float(erfcx(y / _SQRT2))
    if hi >= 0.0:
        return _half_gaussian(hi, lo) * (float(erfcx(hi / _SQRT2)) - tail)
    # x < 0: Phi(-x) >= 1/2 and delta >= 0.23 for mu >= 1, so the difference is well-conditioned.
    return float(ndtr(-hi)) - _half_gaussian(hi, lo) * tail


def _delta(mu: float, epsilon: float) -> float:
    """Upper bound of the mu-GDP profile: the computed value inflated by 1e-12, in [0, 1]."""
    return min(max(_profile(mu, epsilon), 0.0) * (1.0 + DELTA_RELATIVE_ERROR), 1.0)


def _check_target_delta(delta: float) -> float:
    delta = check_probability("delta", delta)
    if delta < DELTA_MIN:
        raise ValueError(
            f"Expected delta >= {DELTA_MIN:g} (smaller values approach the subnormal floats, "
            f"where the GDP profile is not resolved to relative precision), got {delta!r}."
        )
    return delta


def _float_bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _bits_float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _float_boundary(
    profile: Callable[[float], float], delta: float, good: float, bad: float
) -> float:
    """The feasible one of the two adjacent doubles between which ``profile(v) <= delta`` flips.

    ``good`` (feasible) and ``bad`` (not) are doubles >= 0. brentq on ``log(profile / delta)``
    (near-linear even where the profile spans hundreds of decades across the bracket), with a
    tolerance relative to its iterate (not to the bracket, which would resolve a tiny epsilon
    only to 1e-12 times the bracket), lands within a few ulps of the flip in ~10 evaluations;
    galloping and bisection on the bit patterns (which order like the values for doubles >= 0)
    then pin the last bit with the exact comparison. The result is deterministic and exact to
    the bit, so calibrations are as tight as the computed profile allows and agree both ways.
    """

    def feasible(v: float) -> bool:
        return profile(v) <= delta

    def log_gap(v: float) -> float:
        return math.log(max(profile(v), 1e-320)) - math.log(delta)

    lo, hi = min(good, bad), max(good, bad)
    guess = brentq(log_gap, lo, hi, xtol=5e-324, rtol=4 * sys.float_info.epsilon, maxiter=500)
    good_bits, bad_bits = _float_bits(good), _float_bits(bad)
    toward_bad = 1 if bad_bits > good_bits else -1
    probe, step = _float_bits(guess), 1
    if feasible(guess):  # gallop from the guess toward ``bad`` until infeasible (or at bad)
        good_bits = probe
        while (bad_bits - (probe + toward_bad * step)) * toward_bad > 0:
            probe += toward_bad * step
            if not feasible(_bits_float(probe)):
                bad_bits = probe
                break
            good_bits = probe
            step *= 2
    else:  # ... or toward ``good`` until feasible (or at good)
        bad_bits = probe
        while ((probe - toward_bad * step) - good_bits) * toward_bad > 0:
            probe -= toward_bad * step
            if feasible(_bits_float(probe)):
                good_bits = probe
                break
            bad_bits = probe
            step *= 2
    while abs(good_bits - bad_bits) > 1:
        mid = (good_bits + bad_bits) // 2
        if feasible(_bits_float(mid)):
            good_bits = mid
        else:
            bad_bits = mid
    return _bits_float(good_bits)


def gdp_delta(mu: float, epsilon: float) -> float:
    """Exact delta(epsilon) of a mu-GDP mechanism, rounded up by at most 1e-12 relative.

    Args:
        mu: GDP parameter, ``> 0``.
        epsilon: privacy loss, ``>= 0``.

    Returns:
        An upper bound, within 1e-12 relative, of the smallest delta such that the mechanism is
        (epsilon, delta)-DP (0.0 where that delta is below the float range, < 1e-308).

    >>> round(gdp_delta(1.0, 4.377178), 9)
    1e-05
    """
    mu = check_positive("mu", mu)
    epsilon = check_nonnegative("epsilon", epsilon)
    return _delta(mu, epsilon)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon such that a mu-GDP mechanism is (epsilon, delta)-DP, rounded up.

    The result is the smallest double with ``gdp_delta(mu, result) <= delta`` (so it is
    verified, and exact to the bit of the computed profile: the inverse of :func:`gdp_mu`,
    ``gdp_epsilon(gdp_mu(eps, delta), delta) <= eps`` up to the profile's 1e-14 rounding). The
    search starts from ``eps = mu^2/2 + mu z``, ``z = Phi^{-1}(1 - delta)``, where the first term
    ``Phi(-x)`` of the profile alone equals delta (``eps = mu^2/2`` when delta >= 1/2, where the
    profile is below 1/2). That epsilon exceeds the float range when mu is above about 1.9e154:
    such a mu has no finite epsilon to report and is refused with a ValueError naming mu.

    >>> round(gdp_epsilon(1.0, 1e-5), 6)
    4.377178
    """
    mu = check_positive("mu", mu)
    delta = _check_target_delta(delta)
    if _delta(mu, 0.0) <= delta:
        return 0.0
    # At eps = mu^2/2 + mu z (z = Phi^{-1}(1 - delta) >= 0) the first term of the profile is
    # Phi(-z) = delta, and at eps = mu^2/2 the profile is below 1/2: both are feasible. Widening
    # z by t (x = z + t) only absorbs the 1e-12 inflation of the computed profile.
    z = max(float(-ndtri(delta)), 0.0)
    step = 0.0
    upper = mu * (mu / 2.0 + z)
    while math.isfinite(upper) and _delta(mu, upper) > delta:
        step = max(2.0 * step, 1e-6 * (1.0 + z))
        upper = mu * (mu / 2.0 + z + step)
    if not math.isfinite(upper):  # the bracket overflowed: is the largest float feasible?
        upper = sys.float_info.max
    if _delta(mu, upper) > delta:
        raise ValueError(
            f"mu={mu!r} is too large: its epsilon at delta={delta:g} exceeds the floating-point "
            "range (about mu^2/2 > 1.8e308)."
        )
    return _float_boundary(lambda e: _delta(mu, e), delta, good=upper, bad=0.0)


def gdp_mu(epsilon: float, delta: float) -> float:
    """Largest mu such that mu-GDP implies (epsilon, delta)-DP (rounded toward privacy).

    The result is the largest double with ``gdp_delta(result, epsilon) <= delta`` (so it is
    verified, and an upper bound of the true delta by the module notes). It is non-decreasing in
    epsilon, except that where epsilon moves the profile by less than its ~1e-14 relative
    rounding (the plateau at tiny epsilon, where mu is the answer at eps = 0) the largest
    feasible double may move by an ulp or two either way. Every finite epsilon > 0 has a
    meaningful answer, so there is no cap:

    * the search starts at ``max(mu_0, mu_1)``, both provably feasible: ``mu_0 = 2 sqrt 2
      erfinv(delta)`` is feasible at eps = 0 (``delta(0) = erf(mu / (2 sqrt 2))``) and so at every
      eps; ``mu_1 = z + sqrt(z^2 + 2 eps)``, ``z = Phi^{-1}(delta)``, makes the first term
      ``Phi(mu/2 - eps/mu)`` of the profile equal delta;
    * tiny epsilon (down to 5e-324) gives mu ~ mu_0, the answer at eps = 0;
    * large epsilon gives mu ~ mu_1 ~ sqrt(2 eps) + z (the rest of the profile moves it by
      ~1/mu^2 relative): above eps ~ 1e32 the correction z is a few float spacings of mu, and
      the result is sqrt(2 eps) to the last representable digit (up to 1.9e154 at the largest
      float epsilon), still verified.

    >>> round(gdp_mu(1.0, 1e-5), 7)
    0.2680511
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = _check_target_delta(delta)

    def profile(m: float) -> float:
        return _delta(m, epsilon)

    z = float(ndtri(delta))
    s = math.hypot(z, _SQRT2 * math.sqrt(epsilon))  # sqrt(z^2 + 2 eps) without overflow
    mu_1 = epsilon / ((s - z) / 2.0) if z < 0 else z + s  # rationalised: no cancellation
    good = max(2.0 * _SQRT2 * float(erfinv(delta)), mu_1)
    while profile(good) > delta:  # only the 1e-12 inflation can make the bounds infeasible
        good /= 2.0
    bad = 2.0 * good
    while profile(bad) <= delta:
        bad *= 2.0
        if not math.isfinite(bad):  # impossible for delta < 1; a guard, not a code path
            raise ValueError(f"Could not bracket mu for epsilon={epsilon!r}, delta={delta!r}.")
    return _float_boundary(profile, delta, good=good, bad=bad)


def compose_gdp(*mus: float) -> float:
    """GDP parameter of the adaptive composition of mu_i-GDP mechanisms: sqrt(sum mu_i^2)."""
    values = [check_nonnegative("mu", m) for m in mus]
    return float(np.sqrt(np.sum(np.square(values)))) if values else 0.0
