"""The exact (analytic) Gaussian mechanism (Balle & Wang 2018, Theorem 8).

Adding N(0, sigma^2 I) to a query of l2 sensitivity Delta is (epsilon, delta)-DP exactly when::

    delta >= Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta),

which is the mu-GDP profile with mu = Delta / sigma (see :mod:`privopt.accounting.gdp`). This
module answers the three questions a user asks of a single Gaussian release (its delta, its
epsilon, the noise a target needs) and keeps the classical Dwork–Roth calibration only as a
reference: it is proven for eps < 1 only and under-noises at large eps
(docs/theory/non-smooth-sgd.md#pitfalls and
docs/theory/single-epoch-srgd.md#tree).
"""

from __future__ import annotations

import math

from privopt._validate import check_positive, check_probability
from privopt.accounting.gdp import gdp_delta, gdp_epsilon, gdp_mu

__all__ = [
    "calibrate_gaussian_sigma",
    "classical_gaussian_sigma",
    "gaussian_delta",
    "gaussian_epsilon",
]


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact delta at ``epsilon`` of the Gaussian mechanism with noise std ``sigma``."""
    sigma = check_positive("sigma", sigma)
    sensitivity = check_positive("sensitivity", sensitivity)
    return gdp_delta(sensitivity / sigma, epsilon)


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact epsilon at ``delta`` of the Gaussian mechanism (root of the privacy profile).

    >>> round(gaussian_epsilon(sigma=1.0, delta=1e-5), 6)
    4.377178
    """
    sigma = check_positive("sigma", sigma)
    sensitivity = check_positive("sensitivity", sensitivity)
    return gdp_epsilon(sensitivity / sigma, delta)


def calibrate_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std making the Gaussian mechanism (epsilon, delta)-DP, rounded up.

    The result is verified: ``gaussian_delta(result, epsilon, sensitivity) <= delta``.

    >>> round(calibrate_gaussian_sigma(epsilon=1.0, delta=1e-5), 7)
    3.7306316
    """
    sensitivity = check_positive("sensitivity", sensitivity)
    sigma = sensitivity / gdp_mu(epsilon, delta)
    while gdp_delta(sensitivity / sigma, epsilon) > delta:  # guard the division's rounding
        sigma = math.nextafter(sigma, math.inf)
    return sigma


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Dwork–Roth calibration ``Delta sqrt(2 ln(1.25/delta)) / eps``; for comparison only.

    It is proven only for ``epsilon < 1``; above that it can violate (epsilon, delta)-DP. privopt
    never uses it to calibrate; it is exposed so reports and tests can show the difference.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
