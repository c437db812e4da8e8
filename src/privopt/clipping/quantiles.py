"""Private quantiles by the exponential mechanism over a data-independent grid.

For values ``v_1..v_n`` (n public: privopt's relations keep N fixed), a quantile level q and a
public grid of candidates ``c_1 < ... < c_k``, the utility of a candidate is

    u(c) = -| #{i : v_i <= c} - q n |,

which moves by at most 1 when one record is replaced (or zeroed out): sensitivity Delta = 1. The
exponential mechanism (:func:`privopt.noise.selection.exponential_mechanism`) picks c with
probability proportional to ``exp(epsilon u(c) / 2)`` (OpenDP's candidate quantile, the
discrete form of Smith 2011; ``docs/theory/torch-audits-selection-dask.md`` §3.6).

Accounting. The exponential mechanism is epsilon-DP, and more: its privacy loss between any two
neighbours lies in an interval of width epsilon ("epsilon-bounded range", Durfee & Rogers 2019).
Every such pair of output laws is a post-processing of the two-point pair whose loss takes the
interval's two end values (split each outcome's mass between the ends; see
:func:`bounded_range_gdp_mu`), so its trade-off function is at least that pair's, and the pair
is mu-GDP (Dong, Roth & Su 2019) with

    mu(epsilon) = max over a in [-epsilon, 0] of  Phi^-1(1 - h_a) - Phi^-1(e^a (1 - h_a)),
    h_a = (e^-a - 1) / (e^epsilon - 1),

attained at a = -epsilon / 2: ``mu = 2 Phi^-1(e^(epsilon/2) / (1 + e^(epsilon/2)))``, about
0.627 epsilon for small epsilon (a plain epsilon-DP mechanism needs ``2 Phi^-1(e^eps/(1+e^eps))``,
twice as much). A release is recorded as the Gaussian event with that mu, which every
accountant (GDP, zCDP, RDP, PLD) composes correctly because domination in trade-off functions
implies domination of every divergence. This module knows nothing of ledgers: it returns the
epsilon and mu of each release and the caller records them.

Failure mode. A tail quantile fails when the empty part of the grid outweighs the data: roughly
when ``epsilon q n / 2`` (q the tail mass) is below the log of the ratio of the grid's empty
(log-)measure to the data's. Bounded grids and central quantiles (quartiles) avoid it at small n.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from privopt._validate import check_positive
from privopt.noise.selection import exponential_mechanism

__all__ = [
    "GRID_RATIO",
    "QuantileRelease",
    "bounded_range_epsilon",
    "bounded_range_gdp_mu",
    "counts_quantile_scores",
    "interval_quantile_scores",
    "log_grid",
    "private_interval_quantile",
    "private_quantile",
    "quantile_from_counts",
    "quantile_scores",
    "signed_log_grid",
    "value_grid",
]


#: largest epsilon / 2 handled in double precision (the tail probability e^-700 ~ 1e-304)
MAX_HALF_EPSILON = 700.0
#: mu of the largest epsilon handled; larger budgets are rounded down to it
MAX_MU = 70.0


def bounded_range_gdp_mu(epsilon: float) -> float:
    """mu such that every epsilon-bounded-range mechanism (e.g. the exponential mechanism) is
    mu-GDP: the largest mu over the two-point worst cases (module docstring), which is attained
    at a = -epsilon/2 (checked on a grid of a in the tests).

    >>> round(bounded_range_gdp_mu(0.1), 6)
    0.062663
    """
    epsilon = check_positive("epsilon", epsilon)
    if not math.isfinite(epsilon):
        raise ValueError(f"Expected a finite epsilon, got {epsilon!r}.")
    if epsilon > 2.0 * MAX_HALF_EPSILON:
        raise ValueError(f"Expected epsilon <= {2 * MAX_HALF_EPSILON:g}, got {epsilon!r}.")
    # Phi^-1(1 / (1 + e^(-eps/2))) = Phi^-1(1 - s) with s = 1 / (1 + e^(eps/2)), via isf: exact
    # in the tail, so large epsilons do not round to an infinite mu
    return float(2.0 * norm.isf(math.exp(-math.log1p(math.exp(epsilon / 2.0)))))


#: the same function, cached: a fit releases hundreds of quantiles at a few distinct epsilons
#: (scipy's isf costs ~0.1 ms a call: 0.05 s of a default fit at d = 100)
_cached_gdp_mu = functools.lru_cache(maxsize=1024)(bounded_range_gdp_mu)


@functools.lru_cache(maxsize=1024)
def bounded_range_epsilon(mu: float) -> float:
    """Largest epsilon whose exponential mechanism is mu-GDP (inverse of
    :func:`bounded_range_gdp_mu`): ``2 logit(Phi(mu / 2))``, nudged down one ulp at a time
    until the forward map is at most ``mu``."""
    mu = check_positive("mu", mu)
    if not math.isfinite(mu):
        raise ValueError(f"Expected a finite mu, got {mu!r}.")
    mu = min(mu, MAX_MU)  # a smaller epsilon is always valid (the selection is exact anyway)
    # logit(Phi(x)) = log Phi(x) - log Phi(-x), accurate in both tails
    epsilon = 2.0 * float(norm.logcdf(mu / 2.0) - norm.logsf(mu / 2.0))
    nudge = 1e-15
    while bounded_range_gdp_mu(epsilon) > mu:  # round toward privacy
        epsilon *= 1.0 - nudge
        nudge *= 2.0
    return epsilon  # cached: one fit asks for the same mu in hundreds of releases


def log_grid(low: float, high: float, ratio: float = 1.01) -> np.ndarray:
    """Positive grid ``low * ratio^k`` up to (and including a point >= ) ``high``."""
    low, high = check_positive("low", low), check_positive("high", high)
    if not (high > low and ratio > 1.0 and math.isfinite(high)):
        raise ValueError(f"Expected 0 < low < high and ratio > 1, got {low}, {high}, {ratio}.")
    count = math.ceil(math.log(high / low) / math.log(ratio)) + 1
    return low * ratio ** np.arange(count)


def signed_log_grid(low: float, high: float, ratio: float = 1.01) -> np.ndarray:
    """Symmetric grid ``-g[::-1], 0, g`` with ``g = log_grid(low, high, ratio)``."""
    g = log_grid(low, high, ratio)
    return np.concatenate([-g[::-1], [0.0], g])


def quantile_scores(sorted_values: np.ndarray, grid: np.ndarray, q: float, n: float) -> np.ndarray:
    """u(c) = -|#{v <= c} - q n| for every grid point (sensitivity 1 for a public n)."""
    counts = np.searchsorted(sorted_values, grid, side="right")
    return -np.abs(counts - q * n)


@dataclass(frozen=True)
class QuantileRelease:
    """One private quantile: the chosen candidate, its epsilon and its GDP mu."""

    value: float
    q: float
    epsilon: float
    mu: float


def private_quantile(
    values: np.ndarray,
    q: float,
    grid: np.ndarray,
    *,
    mu: float,
    rng: np.random.Generator,
    n: float | None = None,
    sorted_input: bool = False,
) -> QuantileRelease:
    """The q-quantile of ``values`` chosen from ``grid`` by a mu-GDP exponential mechanism.

    Args:
        values: the private values (one per record).
        q: quantile level in (0, 1).
        grid: sorted, finite, data-independent candidates.
        mu: GDP budget of this release (its epsilon is :func:`bounded_range_epsilon` of mu).
        rng: source of the selection noise.
        n: the public number of records (default: ``values.size``, public when N is).
        sorted_input: ``values`` are already sorted ascending.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"Expected q in (0, 1), got {q!r}.")
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("Expected a non-empty 1-D array of finite values.")
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)):
        raise ValueError("Expected a non-empty 1-D grid of finite candidates.")
    if np.any(np.diff(grid) <= 0):
        raise ValueError("Expected a strictly increasing grid.")
    epsilon = bounded_range_epsilon(mu)
    ordered = values if sorted_input else np.sort(values)
    size = float(values.size if n is None else check_positive("n", n))
    scores = quantile_scores(ordered, grid, q, size)
    index = exponential_mechanism(rng, scores, epsilon, 1.0)
    return QuantileRelease(float(grid[index]), q, epsilon, _cached_gdp_mu(epsilon))


#: public grid of :func:`value_grid`: magnitudes 1e-6 .. 1e9 at 0.2% spacing, both signs, and
#: every integer in [-1000, 1000] (so that atoms of counts, codes and 0/1 features are
#: candidates themselves)
GRID_RANGE = (1e-6, 1e9)
GRID_RATIO = 1.002
GRID_INTEGERS = 1000


def value_grid(ratio: float = GRID_RATIO) -> np.ndarray:
    """The data-independent candidate grid for quantiles of raw values (any units)."""
    grid = signed_log_grid(*GRID_RANGE, ratio)
    integers = np.arange(-GRID_INTEGERS, GRID_INTEGERS + 1, dtype=float)
    return np.unique(np.concatenate([grid, integers]))


def interval_quantile_scores(
    sorted_values: np.ndarray, grid: np.ndarray, q: float, n: float
) -> np.ndarray:
    """u(c) = -max(#{v < c} - q n, q n - #{v <= c}, 0) (with #{v < c} lowered to the count at
    the previous grid point, :func:`counts_quantile_scores`): zero on every c that is a
    q-quantile, atoms included (a value held by many records is the quantile of every level its mass
    covers). Each count moves by at most 1 between neighbours, so the sensitivity is 1."""
    below = np.searchsorted(sorted_values, grid, side="left")
    at_or_below = np.searchsorted(sorted_values, grid, side="right")
    return counts_quantile_scores(below, at_or_below, q, n)


def counts_quantile_scores(
    below: np.ndarray, at_or_below: np.ndarray, q: float, n: float
) -> np.ndarray:
    """:func:`interval_quantile_scores` from the exact counts (#{v < c}, #{v <= c}) on the grid
    (summed across partitions by :mod:`privopt.distributed`).

    Candidate c_k stands for the grid cell (c_{k-1}, c_k]: its lower count is
    min(#{v < c_k}, #{v <= c_{k-1}}) (= #{v <= c_{k-1}} for exact counts), so an atom that
    falls between two grid points (a year 2011 after subtracting a coarse median of 1990.4)
    is the quantile of its cell's upper end, one grid step above it, instead of leaving every
    candidate below it tied (a uniform draw down to the grid's far end). Each count moves by
    at most 1 between neighbours, and so does the minimum: sensitivity 1."""
    target = q * n
    below = np.asarray(below, dtype=float)
    at_or_below = np.asarray(at_or_below, dtype=float)
    previous = np.concatenate(([0.0], at_or_below[:-1]))
    below = np.minimum(below, previous)
    return -np.maximum(np.maximum(below - target, target - at_or_below), 0.0)


def quantile_from_counts(
    below: np.ndarray,
    at_or_below: np.ndarray,
    q: float,
    grid: np.ndarray,
    *,
    mu: float,
    rng: np.random.Generator,
    n: float,
) -> QuantileRelease:
    """The mu-GDP exponential mechanism on :func:`counts_quantile_scores`: the one place where a
    private interval quantile is drawn."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"Expected q in (0, 1), got {q!r}.")
    epsilon = bounded_range_epsilon(mu)
    scores = counts_quantile_scores(below, at_or_below, q, n)
    index = exponential_mechanism(rng, scores, epsilon, 1.0)
    return QuantileRelease(float(grid[index]), q, epsilon, _cached_gdp_mu(epsilon))


def private_interval_quantile(
    sorted_values: np.ndarray,
    q: float,
    grid: np.ndarray,
    *,
    mu: float,
    rng: np.random.Generator,
    n: float,
) -> QuantileRelease:
    """:func:`private_quantile` with the atom-aware score :func:`interval_quantile_scores`, for
    values already sorted (the caller sorts each column once)."""
    below = np.searchsorted(sorted_values, grid, side="left")
    at_or_below = np.searchsorted(sorted_values, grid, side="right")
    return quantile_from_counts(below, at_or_below, q, grid, mu=mu, rng=rng, n=n)
