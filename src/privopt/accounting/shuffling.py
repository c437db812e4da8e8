"""Privacy amplification by shuffling (Feldman, McMillan & Talwar 2021, "Hiding among the clones").

One-pass shuffled algorithms (DP-SSGD of Varshney et al. (2022)) apply an adaptively chosen local
randomizer to
each record once, in a uniformly random, secret order. FMT21 bound the central privacy of the
shuffled transcript.

* **Pure local randomizers** (their Theorem 3.1, closed form with explicit constants;
docs/theory/linear-regression-adaptive-clipping.md
  §4.2). For eps0-DP local randomizers, n records and delta with
  ``eps0 <= log(n / (16 log(4/delta)))``::

      a   = 8 sqrt(e^eps0 log(4/delta)) / sqrt(n) + 8 e^eps0 / n
      eps = log(1 + (1 - e^-eps0) / (1 + e^-(eps0 + log(1 + a))) * a)

* **Approximate local randomizers** (their Theorem 3.8): (eps0, delta0)-DP local randomizers give
  (eps, delta + (e^eps + 1)(1 + e^-eps0 / 2) n delta0)-DP with the same eps.

A Gaussian local randomizer with noise multiplier alpha (std / replace-one sensitivity) is
(eps0, delta0)-DP for every delta0, with eps0 = gaussian_epsilon(alpha, delta0) (exact). privopt
searches the split of delta between the shuffle bound and delta0 that minimises eps.

Outside the validity region the theorem says nothing, and privopt refuses with ``ValueError``.
Neighbouring relation: replace-one (the local-randomizer model). The permutation must be uniform
and secret; releasing the order voids the guarantee.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_count, check_positive, check_probability
from privopt.accounting._search import feasible_boundary, smallest_feasible_multiplier
from privopt.accounting.gdp import gdp_epsilon

__all__ = [
    "ShuffleGuarantee",
    "calibrate_shuffled_gaussian",
    "max_shuffled_gaussian_epsilon",
    "shuffle_amplified_epsilon",
    "shuffle_max_local_epsilon",
    "shuffled_gaussian_guarantee",
]


def shuffle_max_local_epsilon(num_records: int, delta: float) -> float:
    """Largest local eps0 for which FMT21's closed form holds: log(n / (16 log(4/delta)))."""
    num_records = check_count("num_records", num_records)
    delta = check_probability("delta", delta)
    ratio = num_records / (16.0 * math.log(4.0 / delta))
    return math.log(ratio) if ratio > 0 else -math.inf


def _closed_form(local_epsilon: float, n: int, delta: float) -> float:
    a = 8.0 * math.sqrt(math.exp(local_epsilon) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(local_epsilon) / n
    e = math.log1p(a + c)
    b = -math.expm1(-local_epsilon)
    d = 1.0 + math.exp(-local_epsilon - e)
    return math.log1p(b / d * (a + c))


def _check_region(local_epsilon: float, n: int, delta: float) -> None:
    bound = shuffle_max_local_epsilon(n, delta)
    if local_epsilon > bound:
        raise ValueError(
            f"Shuffling amplification (FMT21) needs local epsilon0 <= log(n/(16 log(4/delta))) "
            f"= {bound:.4g} for n={n}, delta={delta:g}; got epsilon0={local_epsilon:.4g}. "
            "Use more noise or more records."
        )


def shuffle_amplified_epsilon(local_epsilon: float, num_records: int, delta: float) -> float:
    """Central epsilon of n shuffled eps0-DP local randomizers (FMT21 Thm 3.1 closed form).

    Raises ``ValueError`` outside the validity region ``eps0 <= log(n/(16 log(4/delta)))``.

    >>> round(shuffle_amplified_epsilon(0.5, 100_000, 1e-6), 4)
    0.0319
    """
    local_epsilon = check_positive("local_epsilon", local_epsilon)
    num_records = check_count("num_records", num_records)
    delta = check_probability("delta", delta)
    _check_region(local_epsilon, num_records, delta)
    return _closed_form(local_epsilon, num_records, delta)


@dataclass(frozen=True)
class ShuffleGuarantee:
    """The (epsilon, delta) of a shuffled Gaussian protocol and how delta was split.

    Attributes:
        epsilon: central epsilon after amplification.
        delta: total delta = delta_shuffle + (e^eps + 1)(1 + e^-eps0/2) n delta0.
        local_epsilon: eps0 of each Gaussian local randomizer at ``local_delta``.
        local_delta: delta0 of each local randomizer.
        shuffle_delta: the delta given to the pure-eps0 shuffle bound.
    """

    epsilon: float
    delta: float
    local_epsilon: float
    local_delta: float
    shuffle_delta: float


def _approximate_dp_blowup(
    epsilon: float, local_epsilon: float, n: int, local_delta: float
) -> float:
    """FMT21 Thm 3.8: the delta added by (eps0, delta0)-DP local randomizers."""
    return (math.exp(epsilon) + 1.0) * (1.0 + math.exp(-local_epsilon) / 2.0) * n * local_delta


def _guarantee_for(
    local_delta: float, noise_multiplier: float, n: int, delta: float
) -> ShuffleGuarantee | None:
    local_epsilon = gdp_epsilon(1.0 / noise_multiplier, local_delta)
    if local_epsilon <= 0.0:
        return None
    # The approximate-DP term depends on eps, which depends on the shuffle delta: iterate the
    # (monotone) fixed point a few times from the optimistic side and verify at the end.
    shuffle_delta = delta / 2.0
    for _ in range(50):
        if shuffle_delta <= 0 or local_epsilon > shuffle_max_local_epsilon(n, shuffle_delta):
            return None
        eps = _closed_form(local_epsilon, n, shuffle_delta)
        new_shuffle_delta = delta - _approximate_dp_blowup(eps, local_epsilon, n, local_delta)
        if abs(new_shuffle_delta - shuffle_delta) <= 1e-9 * delta:
            break
        shuffle_delta = new_shuffle_delta
    if shuffle_delta <= 0 or local_epsilon > shuffle_max_local_epsilon(n, shuffle_delta):
        return None
    eps = _closed_form(local_epsilon, n, shuffle_delta)
    total = shuffle_delta + _approximate_dp_blowup(eps, local_epsilon, n, local_delta)
    if total > delta * (1.0 + 1e-12):
        return None
    return ShuffleGuarantee(eps, total, local_epsilon, local_delta, shuffle_delta)


def shuffled_gaussian_guarantee(
    noise_multiplier: float, num_records: int, delta: float
) -> ShuffleGuarantee:
    """Best FMT21 guarantee for n shuffled Gaussian local randomizers at total ``delta``.

    Args:
        noise_multiplier: noise std divided by the replace-one l2 sensitivity of one step.
        num_records: n, the number of records (one local randomizer each).
        delta: the total delta of the guarantee.

    Raises:
        ValueError: when no split of delta puts eps0 inside the theorem's validity region.
    """
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    n = check_count("num_records", num_records)
    delta = check_probability("delta", delta)
    # delta0 must be well below delta / n for the blow-up term to fit in the budget.
    log_hi = math.log(delta / (4.0 * n))
    grid = np.linspace(log_hi - 60.0, log_hi, 121)
    best: ShuffleGuarantee | None = None
    for log_d0 in grid:
        g = _guarantee_for(math.exp(log_d0), noise_multiplier, n, delta)
        if g is not None and (best is None or g.epsilon < best.epsilon):
            best = g
    if best is None:
        smallest_eps0 = gdp_epsilon(1.0 / noise_multiplier, math.exp(log_hi))
        raise ValueError(
            "Shuffling amplification (FMT21) does not apply: with noise_multiplier="
            f"{noise_multiplier:g} the local epsilon0 is at least {smallest_eps0:.4g}, above the "
            f"validity bound log(n/(16 log(4/delta))) = "
            f"{shuffle_max_local_epsilon(n, delta / 2):.4g} for n={n}. Increase the noise "
            "multiplier or the number of records."
        )

    def objective(log_d0: float) -> float:
        g = _guarantee_for(math.exp(log_d0), noise_multiplier, n, delta)
        return g.epsilon if g is not None else 1e300  # finite, so the line search stays defined

    centre = math.log(best.local_delta)
    res = minimize_scalar(
        objective, bounds=(centre - 0.5, min(centre + 0.5, log_hi)), method="bounded"
    )
    refined = _guarantee_for(math.exp(float(res.x)), noise_multiplier, n, delta)
    if refined is not None and refined.epsilon < best.epsilon:
        best = refined
    return best


#: noise multipliers above this are treated as "no usable amplification regime"
_MAX_ALPHA = 1e6


def _epsilon_or_inf(alpha: float, n: int, delta: float) -> float:
    try:
        return shuffled_gaussian_guarantee(alpha, n, delta).epsilon
    except ValueError:
        return math.inf


def max_shuffled_gaussian_epsilon(num_records: int, delta: float) -> float:
    """Largest central epsilon FMT21's closed form can certify for n shuffled Gaussian local
    randomizers (at the validity edge of the noise multiplier, found by the verified search;
    0.0 when no multiplier up to 1e6 is valid)."""
    n = check_count("num_records", num_records)
    delta = check_probability("delta", delta)
    # The smallest valid alpha gives the largest certifiable epsilon.
    hi = 1.0
    while math.isinf(_epsilon_or_inf(hi, n, delta)):
        hi *= 2.0
        if hi > _MAX_ALPHA:
            return 0.0
    # the validity edge of alpha (a step from invalid to valid), verified on the valid side
    alpha = feasible_boundary(
        lambda a: -1.0 if math.isfinite(_epsilon_or_inf(a, n, delta)) else 1.0,
        good=hi,
        bad=hi / 2.0,
    )
    return _epsilon_or_inf(alpha, n, delta)


@functools.lru_cache(maxsize=256)
def calibrate_shuffled_gaussian(epsilon: float, num_records: int, delta: float) -> float:
    """Smallest noise multiplier alpha (std over the replace-one sensitivity of one step; to
    1e-6 relative, verified) whose n shuffled Gaussian local randomizers are (epsilon, delta)-DP
    by FMT21 (:func:`shuffled_gaussian_guarantee`).

    The calibration route of :class:`~privopt.accounting.ShuffledGaussianEvent` in
    :func:`privopt.training.calibrate_noise_multiplier`. Raises ``ValueError`` when epsilon is
    above what the closed form can certify for n records. A pure function of public inputs that
    costs seconds (about 80 evaluations of the shuffling bound, each an inner search), so
    results are memoised.
    """
    epsilon = check_positive("epsilon", epsilon)
    n = check_count("n", num_records)
    delta = check_probability("delta", delta)
    ceiling = max_shuffled_gaussian_epsilon(n, delta)
    if epsilon > ceiling:
        raise ValueError(
            f"Amplification by shuffling cannot certify epsilon={epsilon:g} with N={n}, "
            f"delta={delta:g}: the bound (FMT21) is valid only up to epsilon={ceiling:.4g} here "
            "(local epsilon0 <= log(N / (16 log(4/delta)))). Use a smaller epsilon or more data."
        )
    return smallest_feasible_multiplier(
        lambda a: _epsilon_or_inf(a, n, delta) - epsilon, limit_exponent=6, rtol=1e-6
    )
