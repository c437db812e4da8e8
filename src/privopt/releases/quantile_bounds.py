"""Private bounds from quantiles: centres, scales and radii that work from N of a few thousand.

The exponential mechanism over a data-independent grid (:mod:`privopt.clipping.quantiles`)
chooses each feature's and the target's central range and the rows' radius
(:func:`private_quantile_bounds`), or tightens loose public radii
(:func:`tighten_public_bounds`); Gaussian counts (how many rows lie outside a central range,
how many a box would clip) widen the boxes of heavy-tailed features and drop features whose
rare values no box derived from the quantiles would hold. Every release is recorded in the
ledger as the Gaussian event that dominates it; the caller chooses the partition (None: the
releases share their records with the fit, which then composes with them sequentially in exact
GDP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from privopt._validate import check_count, check_positive
from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.clipping import row_norms
from privopt.clipping.quantiles import (
    GRID_RANGE,
    bounded_range_epsilon,
    log_grid,
    private_interval_quantile,
    value_grid,
)
from privopt.noise.rng import gaussian_noise
from privopt.releases.known_columns import KnownColumns
from privopt.releases.preprocess import LinearBounds
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "QUANTILE_ROWS",
    "box_norm",
    "private_quantile_bounds",
    "quantile_releases",
    "release_budgets",
    "row_level",
    "tail_level",
    "tighten_public_bounds",
]

#: at most this many rows (a secret uniform subset of public size) feed the private quantiles
QUANTILE_ROWS = 20_000
#: tail level tau of every feature's and the target's range (levels tau and 1 - tau): the
#: widest level at which each release keeps TAIL_RANKS ranks of margin (tau m eps / 2 >=
#: TAIL_RANKS, m rows, eps per release), between TAIL_LEVELS; quartiles at N of a few thousand
#: (tail levels fail there, docs/theory/torch-audits-selection-dask.md#private-quantiles), 5% / 95%
#: at large N, where a binary feature's two
#: values are both inside the range (quartiles can land in the gap between them)
TAIL_LEVELS = (0.05, 0.25)
TAIL_RANKS = 15.0
#: grid ratio of the coarse median that centres each feature before its central quantiles
COARSE_GRID_RATIO = 1.05
#: a median-centred feature whose one central quantile is more than SKEW_LIMIT times farther
#: from the centre than the other has that one taken as failed (:func:`symmetric_if_failed`)
SKEW_LIMIT = 50.0
#: ratio of the grid of the central quantiles (searched on values centred by the coarse
#: median, so a relative step is a step relative to the spread): 0.2% (the default grid)
#: resolves nothing that 5% does not, and its 25 times more candidates in an empty gap (between
#: an atom at 0 and a feature's smallest non-zero value) outweigh the data at small m eps
CENTRED_GRID_RATIO = 1.05
#: centred, standardised features are clipped to +-BOX_SIGMAS (robust sigmas)
BOX_SIGMAS = 4.0
#: the centred target is clipped to +-TARGET_SIGMAS robust sigmas (then widened by the clip
#: counts). 8 (was 4): a wider target bound costs only the first Newton step's noise, while
#: clipping heavy-tailed targets (prices, pollution, counts) biased every later step (King
#: County 0.873x -> 0.894x OLS's test R^2, 3 seeds)
TARGET_SIGMAS = 8.0
#: the row radius is the private ROW_LEVEL-quantile of the standardised row norms (a lower
#: level clips the longest rows and biases the fit: 1.8x OLS at 0.9 against 1.2x at 0.99 on
#: x ~ N(0, I_20), N = 200,000, epsilon = 1). 0.97: at m eps of a few hundred the 0.99
#: release failed upward towards the grid top BOX_SIGMAS sqrt(d) (a 1% tail is a few ranks
#: of margin), inflating every sensitivity; public tables, 8 seeds: CCPP 0.974x -> 0.995x,
#: California 0.956x -> 0.965x, CASP 0.963x -> 0.970x OLS's test R^2
ROW_LEVEL = 0.97
#: the row radius's level drops below ROW_LEVEL (to ROW_LEVEL_FLOOR at the lowest) when its
#: release would have fewer than ROW_MARGIN_RANKS / epsilon ranks of margin above it: at
#: d = 50, epsilon = 0.5, m = 20,000 the 0.97-quantile failed upward (towards the grid top
#: BOX_SIGMAS sqrt(d), 3x the true radius) in 73% of draws at its old unit share, and the
#: inflated sensitivities left noisy Newton 50x to 140,000x OLS (issue 16 sweep). Measured
#: there (1,000 draws each): a margin of 9 ranks per 1/epsilon failed 28% of draws, 15 2.2%,
#: 21-23 0-0.3%, 24 and more none
ROW_MARGIN_RANKS = 25.0
ROW_LEVEL_FLOOR = 0.9
#: the releases that every sensitivity depends on get a fixed share of mu^2 (or their unit
#: share when larger): the row-norm radius RADIUS_SHARE, the target's coarse median and two
#: central quantiles (its centre and radius) TARGET_SHARE together. One of them failing
#: inflates every later noise, while a feature's failed quantile only mis-scales that feature.
#: At d = 50 their unit share was 1% of mu^2: a target quartile released 915 for a true 0.95
#: (radius 5,432) in one of five seeds. With RADIUS_SHARE the radius keeps its 0.97 level at
#: epsilon = 1 (d = 20: the paper model 1.42x -> 1.35x OLS, 5 seeds)
RADIUS_SHARE = 0.15
TARGET_SHARE = 0.1


def quantile_releases(n_features: int) -> int:
    """Budget units of :func:`private_quantile_bounds`: per feature a coarse median, two
    central quantiles and an outer extent (4 exponential-mechanism releases), for the target
    the first three, the row radius, and two Gaussian count vectors (the features' outer
    counts, ``d`` units; the features' and the target's clip counts at two widths, ``2 d +
    2`` units). The ledger receives ``4 d + 6`` events (fewer when an outer extent has too
    few rows to be released)."""
    return 7 * n_features + 6


def release_budgets(
    n_features: int,
    mu: float,
    n_free: int | None = None,
    target_free: bool = True,
    n_counted: int | None = None,
    target_counted: bool = True,
) -> tuple[float, float, float]:
    """(mu_each, mu_target, mu_radius): the GDP budgets of :func:`private_quantile_bounds`'s
    ordinary releases, of each of the target's three central releases and of the row radius,
    for mu in total: ``(k - 4) mu_each^2 + 3 mu_target^2 + mu_radius^2 = mu^2``, k =
    :func:`quantile_releases`. The target's releases get TARGET_SHARE of mu^2 together and
    the radius RADIUS_SHARE, or the unit share mu^2 / k each where that is larger.

    With known columns (:class:`~privopt.releases.known_columns.KnownColumns`) only ``n_free``
    features have quantiles, outer counts and extents (5 units each), ``n_counted`` features
    (those not public) and, when ``target_counted``, the target have clip counts (2 units
    each), and the target's three releases run only when ``target_free``: k = 5 n_free + 2
    n_counted + 2 target_counted + 3 target_free + 1 (7 d + 6 with nothing known)."""
    n_free = n_features if n_free is None else n_free
    n_counted = n_features if n_counted is None else n_counted
    units = 5 * n_free + 2 * n_counted + 2 * int(target_counted) + 3 * int(target_free) + 1
    unit = mu / math.sqrt(units)
    mu_target = max(unit, mu * math.sqrt(TARGET_SHARE / 3.0)) if target_free else 0.0
    mu_radius = max(unit, mu * math.sqrt(RADIUS_SHARE))
    rest = mu * mu - 3.0 * mu_target**2 - mu_radius**2
    others = units - 3 * int(target_free) - 1
    return (math.sqrt(rest / others) if others else 0.0), mu_target, mu_radius


def row_level(m: int, mu_radius: float, floor: float | None = None) -> float:
    """Level of the private row-norm radius on m rows at budget mu_radius: ROW_LEVEL, or lower
    (down to ``floor``, default ROW_LEVEL_FLOOR) so that its release keeps ROW_MARGIN_RANKS /
    epsilon ranks of margin, ``(1 - level) m epsilon >= ROW_MARGIN_RANKS`` (public)."""
    floor = ROW_LEVEL_FLOOR if floor is None else floor
    level = 1.0 - ROW_MARGIN_RANKS / (m * bounded_range_epsilon(mu_radius))
    return min(max(level, floor), ROW_LEVEL)


def symmetric_if_failed(
    a: float, b: float, shift: float = 0.0
) -> tuple[float, float, float | None]:
    """The central quantiles a < 0 < b of median-centred values, with the farther side replaced
    by the nearer one's mirror when it is more than SKEW_LIMIT times farther from the centre;
    the third value is the other choice's half-range (the farther side), or None.

    A release fails by landing among the grid's candidates beyond the data, which all score
    alike: far out (up to 1e9) or next to 0. At d = 50, epsilon = 0.5 about one feature in
    seven had one quartile at -53 to -681 (or +745) against a true -0.67 (+0.68), the other one
    right, and the scale 500 times too wide squashed the feature. The quartiles of a
    median-centred law are within a few times each other (log-normal with sigma = 4: 15), so a
    larger ratio means one side failed. The nearer side is kept; when it is the one that
    failed (next to 0), the box clip counts flag the feature, which then takes the other
    choice instead of being dropped (:func:`private_quantile_bounds`). A near side within the
    coarse median's rounding of the centre (at most ``COARSE_GRID_RATIO |shift|`` plus the grid's
    smallest value, ``shift`` the coarse median) is an atom at the median, as in a feature that is
    0 on most rows, and is kept. Post-processing of released values (no privacy cost)."""
    low, high = -a, b
    atom = COARSE_GRID_RATIO * abs(shift) + GRID_RANGE[0]
    if min(low, high) > atom:
        if high > SKEW_LIMIT * low:
            return a, low, high
        if low > SKEW_LIMIT * high:
            return -high, b, low
    return a, b, None


def tail_level(m: int, mu_each: float) -> float:
    """tau for m rows and a GDP budget mu_each per release (public; see TAIL_LEVELS)."""
    tau = 2.0 * TAIL_RANKS / (m * bounded_range_epsilon(mu_each))
    return min(max(tau, TAIL_LEVELS[0]), TAIL_LEVELS[1])


#: a feature's scale is at least its outer extent (the median distance to its centre of the
#: rows outside its central range, or outside its atom when that range collapsed) over
#: EXTENT_DIVISOR: 2 leaves a normal feature's scale alone (its outer median is 1.15 to 1.96
#: sigmas for tail levels 0.25 to 0.05) and gives a feature that is 0 on 90% of the rows and
#: log-normal otherwise a box of twice its non-zero median (then widened by the counts)
EXTENT_DIVISOR = 2.0
#: a feature with a central range searches its outer extent between its half-range and
#: EXTENT_CAP times it: with every candidate above the data scoring alike, an uncapped search
#: up to 1e9 failed upward (a feature squashed a million times) for about one feature in 15
#: on Student-t features at N = 8,000, d = 12, epsilon = 1
EXTENT_CAP = 20.0
#: grid ratio of the outer extents between the half-range and EXTENT_CAP times it
EXTENT_GRID_RATIO = 1.05
#: grid ratio of the outer extents of collapsed ranges (1e-6 .. 1e9): an order of magnitude is
#: what the box needs, and 155 candidates leave the median room at a few hundred outer rows
ATOM_EXTENT_GRID_RATIO = 1.25
#: the outer extent is released when its noisy row count gives the median this many ranks of
#: margin per unit of epsilon (else the feature has no outer scale: dropped if its range
#: collapsed)
MIN_OUTER_RANKS = 30.0
#: a feature's box is widened this many times when its first box clips too many rows. Twice
#: (rather than 4 times: 8 robust sigmas instead of 16 for a Student t(2) feature) keeps the
#: bulk of a widened feature's standardised values large against the Gram noise and ridge:
#: Student-t / log-normal tables of 10,000 rows, 12 seeds, median test-R^2 ratio 0.886 ->
#: 0.953 (d = 16, Pareto noise), 0.885 -> 0.964 (d = 10, log-normal noise); the seven public
#: tables within +-0.01 (benchmarks/public_tables.py)
WIDEN = 2.0
#: a box "clips too many rows" when its noisy clip count exceeds CLIP_LIMIT m plus twice the
#: count's noise std. A feature whose widened box still does is dropped from the model (scale
#: inf, coefficient 0): a clipped value predicts through the unclipped coefficient, so a box
#: far too narrow would turn rare large values into predictions off by orders of magnitude;
#: dropping the feature loses only the variance that those values explain
CLIP_LIMIT = 0.01
#: noisy Newton's first gradient step clips the centred targets at FIRST_STEP_SIGMAS released
#: robust sigmas instead of the target radius TARGET_SIGMAS sigmas (:func:`first_step_clip`).
#: Gaussian features and target, 4,000 x 12, OLS test R^2 0.086, epsilon 1, 20 seeds, median
#: (worst): 0.0676 (0.0395) -> 0.0716 (0.0437), public bounds 0.0778; 1.5 / 2 / 2.5 sigmas
#: 0.0722 / 0.0719 / 0.0718. Heavy-tailed and skewed targets (log-normal, Student-t(2)
#: noise, the test tables of tests/estimators/test_public_tables.py) and the power plant
#: within +-0.001
FIRST_STEP_SIGMAS = 3.0


@dataclass(frozen=True)
class QuantileBounds(LinearBounds):
    """:class:`~privopt.releases.preprocess.LinearBounds` released by
    :func:`private_quantile_bounds`, with ``y_scale``: the target's robust sigma as released
    (its central half-range over the normal law's, ``h_y / z_tau``), or None when the
    target's range was known (public or screened) or its central range collapsed."""

    y_scale: float | None = None


def first_step_clip(bounds: LinearBounds) -> float | None:
    """Noisy Newton's first residual clip for ``bounds`` (None: the target radius T).

    ``min(T, FIRST_STEP_SIGMAS s_y)`` for bounds from :func:`private_quantile_bounds` with a
    released target scale s_y (:class:`QuantileBounds`); None for public bounds, coarse bounds
    (whose T is already :data:`~privopt.releases.coarse_bounds.COARSE_TARGET_SIGMAS` sigmas)
    and known target ranges, whose fits are unchanged.

    Why: the first step starts from w = 0, where the residuals are the targets, so its clip
    was T = TARGET_SIGMAS s_y (8 sigmas, widened by the clip counts): room for heavy tails
    that the later steps need, since their clips come from residual quantiles and are held
    below T. The first step needs no such room: its gradient only starts the iteration,
    which converges to the fixed point of the later steps' clips, and its noise std, which
    scales with the clip, is what the later steps must correct (by a contraction factor per
    step). At 3 sigmas a normal target loses 0.27% of its rows to this clip.

    Privacy: none spent. s_y is a function of the private bounds' released target quantiles
    and T of their released clip counts, so the clip is post-processing of released values,
    fixed before noisy Newton reads the rows; the step's Gaussian release is calibrated to its
    own clip (l2 sensitivity 2 R rho_0 under replace-one, R rho_0 under zero-out, with rho_0 <=
    T), and a release whose sensitivity is chosen from earlier releases composes adaptively in
    GDP with the same parameters (Dong, Roth & Su, "Gaussian differential privacy",
    arXiv:1905.02383, Corollary 3.3: the adaptive composition of mu_i-GDP mechanisms is
    sqrt(sum mu_i^2)-GDP). The step's budget share is unchanged
    (:data:`~privopt.releases.newton.NEWTON_SHARES`), so the ledger's total is too.
    """
    if not isinstance(bounds, QuantileBounds) or bounds.y_scale is None:
        return None
    return min(bounds.y_radius, FIRST_STEP_SIGMAS * bounds.y_scale)


#: the ledger label of the boxes' clip-count vector (full and coarse bounds)
CLIP_COUNTS_LABEL = "private clip counts of the boxes"


def release_counts(counts, std, rng, ledger, partition, label) -> np.ndarray:
    """``counts`` + N(0, std^2) each, recorded as one Gaussian vector release: each count moves
    by at most 1 when one record changes, so the vector's l2 sensitivity is sqrt(len)."""
    counts = np.asarray(counts, dtype=float)
    noisy = counts + gaussian_noise(rng, std, counts.size)
    ledger.record(GaussianEvent(math.sqrt(counts.size), std, label=label), partition=partition)
    return noisy


def private_quantile_bounds(
    X: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = None,
    fit_intercept: bool = True,
    known: KnownColumns | None = None,
) -> LinearBounds:
    """Private centres, scales and radii from quantiles and counts.

    On the records ``rows`` (a secret, data-independent subset of public size m), with the
    budget split over :func:`quantile_releases` ``= 7 d + 6`` units by
    :func:`release_budgets`: the target's coarse median and central quantiles mu_target each
    (together TARGET_SHARE of mu^2), the row radius mu_radius (RADIUS_SHARE), the other 7 d + 2
    units mu_each each (together at most mu-GDP by exact GDP composition; each exponential
    mechanism is recorded as the Gaussian event that dominates it,
    :mod:`privopt.clipping.quantiles`; each release is chosen from earlier releases only):

    * feature j: a coarse median, then the tau and 1 - tau quantiles a_j <= b_j
      (:func:`tail_level`: quartiles at small m eps, down to 5% / 95%) over the public grid
      :func:`~privopt.clipping.quantiles.value_grid` (ratio CENTRED_GRID_RATIO; atom-aware
      score, sensitivity 1); centre c_j = (a_j + b_j) / 2, half-range h_j = (b_j - a_j) / 2;
    * the outer counts n_j = #{|x_j - c_j| > max(h_j, one grid cell)} (the rows outside the
      central range, or outside the atom when a_j = b_j) as one Gaussian vector (l2
      sensitivity sqrt(d): a record moves each count by at most 1, under replace-one and
      zero-out; noise std 1 / mu_each, budget d units);
    * the outer extent e_j: the median of |x_j - c_j| over those rows (exponential mechanism
      with the noisy n_j as its public size: a neighbour moves each count by at most 1), on a
      log grid from h_j to EXTENT_CAP h_j (1e-6 .. 1e9 when h_j = 0); skipped when n_j is too
      small to resolve it. Scale s_j = max(h_j / z_tau, e_j / EXTENT_DIVISOR); s_j = inf
      (the feature is dropped: coefficient 0) when both are 0;
    * the clip counts of the boxes +-BOX_SIGMAS s_j and of the boxes WIDEN times wider, and of
      the target's radius and WIDEN times it: one Gaussian vector of 2 d + 2 counts
      (sensitivity sqrt(2 d + 2), noise std 1 / mu_each, budget 2 d + 2 units). A box whose
      noisy count exceeds CLIP_LIMIT m + 2 / mu_each is widened WIDEN times; if the wide one
      does too, the feature is dropped (a clipped value would predict through the unclipped
      coefficient); the target's radius TARGET_SIGMAS s_y grows WIDEN times per count over
      the limit;
    * the target's centre and range as a feature's (at budget mu_target and its own tail level);
    * the standardised rows z = clip((x - c) / s, +-BOX_SIGMAS) have the radius R = the private
      :func:`row_level` quantile of ||z|| (ROW_LEVEL, lower when mu_radius m is small) over a log
      grid bounded by BOX_SIGMAS sqrt(d) (so the search cannot exceed the largest norm).

    Without an intercept nothing is centred (the model is y = <x, w>); the half-ranges are
    then max(|a_j|, |b_j|). Privacy: replace-one or zero-out (every count moves by at most
    one; m is public); the events are recorded with ``partition`` (None: they touch records
    that the main fit uses too, so they compose sequentially with it).

    ``known`` (:class:`~privopt.releases.known_columns.KnownColumns`): features and a target
    whose range [low, high] is known take the centre (low + high) / 2, the scale (and target
    radius) (high - low) / 2 and the box 1 with no quantile, outer count or extent; the budget
    goes to the others (:func:`release_budgets`). Screened (not public) ones keep their clip
    counts, so a range that holds too few rows is widened or dropped like any failed box.
    """
    mu = check_positive("mu", mu)
    rows = np.asarray(rows)
    m = check_count("preprocessing rows", rows.size, minimum=2)
    n_features = X.shape[1]
    known = KnownColumns.none(n_features) if known is None else known
    known = known if fit_intercept else known.about_zero()
    free, counted = ~known.mask, ~known.public
    target_free, target_counted = known.target is None, not known.target_public
    mu_each, mu_target, mu_radius = release_budgets(
        n_features, mu, int(free.sum()), target_free, int(counted.sum()), target_counted
    )
    grid = value_grid(ratio=CENTRED_GRID_RATIO)
    coarse = value_grid(ratio=COARSE_GRID_RATIO)
    extent_grid = log_grid(GRID_RANGE[0], GRID_RANGE[1], ATOM_EXTENT_GRID_RATIO)
    tau = tail_level(m, mu_each)
    z_tau = float(norm.isf(tau))  # the (tau, 1 - tau) half-range of a normal law, in sigmas

    def _release(sorted_values, q, candidates, n, label) -> float:
        release = private_interval_quantile(
            sorted_values, q, candidates, mu=mu_each, rng=rng, n=max(n, 1.0)
        )
        ledger.record(
            GaussianEvent(1.0, 1.0 / release.mu, label=f"{label} (exponential mechanism)"),
            partition=partition,
        )
        return release.value

    def quantile(
        sorted_values: np.ndarray, q: float, label: str, candidates=grid, budget=mu_each
    ) -> float:
        release = private_interval_quantile(
            sorted_values, q, candidates, mu=budget, rng=rng, n=float(m)
        )
        ledger.record(
            GaussianEvent(1.0, 1.0 / release.mu, label=f"{label} (exponential mechanism)"),
            partition=partition,
        )
        return release.value

    def centre_range(
        sorted_values: np.ndarray, label: str, budget: float = mu_each, level: float = tau
    ) -> tuple[float, float, float, float | None]:
        """(centre, half-range, tolerance, other) from the ``level`` and 1 - ``level``
        quantiles: the tolerance is the half-range, or the grid cell that an atom may sit in
        when that is wider (a collapsed range); ``other`` the half-range of the other choice
        when a side was taken as failed (:func:`symmetric_if_failed`), else None."""
        # a coarse median first, so that the quartiles are searched on values centred near 0,
        # where the log grid is fine relative to their spread (an offset feature such as a
        # pressure of 1013 +- 6 would otherwise have almost no candidates inside its range)
        shift = 0.0
        if fit_intercept:
            shift = quantile(
                sorted_values, 0.5, f"private coarse median of {label}", coarse, budget
            )
        centred = sorted_values - shift
        a = quantile(centred, level, f"private {level:.3g}-quantile of {label}", grid, budget)
        b = quantile(
            centred, 1.0 - level, f"private {1 - level:.3g}-quantile of {label}", grid, budget
        )
        a, b, other = min(a, b), max(a, b), None
        if fit_intercept:
            a, b, other = symmetric_if_failed(a, b, shift)
            centre, half = shift + (a + b) / 2.0, (b - a) / 2.0
        else:
            centre, half = 0.0, max(abs(a), abs(b))
        cell = (CENTRED_GRID_RATIO - 1.0) * max(abs(a), abs(b), 1.0 if a == b else 0.0)
        return centre, half, max(half, cell) + GRID_RANGE[0], other

    sample = np.asarray(X[rows], dtype=float)
    half_known = (known.high - known.low) / 2.0
    stats = [
        centre_range(np.sort(sample[:, j]), f"feature {j}")
        if free[j]
        else (known.low[j] + half_known[j], half_known[j], half_known[j], None)
        for j in range(n_features)
    ]
    x_center = np.array([c for c, _, _, _ in stats])
    half = np.array([h for _, h, _, _ in stats])
    tolerance = np.array([t for _, _, t, _ in stats])
    target = np.asarray(y[rows], dtype=float)
    if target_free:
        tau_y = tail_level(m, mu_target)
        y_center, y_half, _, _ = centre_range(np.sort(target), "the target", mu_target, tau_y)
        y_scale = y_half / float(norm.isf(tau_y)) if y_half > 0.0 else 1.0
        y_radius = TARGET_SIGMAS * y_scale
        y_released = y_scale if y_half > 0.0 else None
    else:
        y_radius = (known.target[1] - known.target[0]) / 2.0
        y_center = known.target[0] + y_radius
        y_released = None

    # outer extents: the median distance to the centre of the rows outside the central range
    # (outside the atom when the range collapsed), on n_outer rows released as one Gaussian
    # vector (sensitivity sqrt(d): each count moves by at most 1)
    distance = np.abs(sample - x_center)
    count_std = gaussian_release_std(1.0, mu_each)  # each count: sensitivity 1 at mu_each
    extent = np.zeros(n_features)
    columns = np.flatnonzero(free)
    if columns.size:
        outer = distance[:, columns] > tolerance[columns]
        exact = np.count_nonzero(outer, axis=0)
        n_outer = release_counts(exact, count_std, rng, ledger, partition, "private outer counts")
        for i, j in enumerate(columns):
            if n_outer[i] >= MIN_OUTER_RANKS / bounded_range_epsilon(mu_each):
                candidates = extent_grid  # a collapsed range: the whole grid
                if half[j] > 0.0:  # from the half-range up to EXTENT_CAP times it
                    candidates = log_grid(half[j], EXTENT_CAP * half[j], EXTENT_GRID_RATIO)
                extent[j] = _release(
                    np.sort(distance[outer[:, i], j]), 0.5, candidates, float(n_outer[i]),
                    f"private outer extent of feature {j}",
                )  # fmt: skip
    x_scale = np.where(free, np.maximum(half / z_tau, extent / EXTENT_DIVISOR), half)
    x_scale = np.where(x_scale > 0.0, x_scale, np.inf)
    x_box = BOX_SIGMAS if not known.any else np.where(free, BOX_SIGMAS, 1.0)

    # clip counts of the boxes and of the widened boxes (the features and target that are not
    # public), one Gaussian vector of 2 d + 2 counts
    box = x_box * np.where(np.isfinite(x_scale), x_scale, 0.0)
    y_distance = np.abs(target - y_center)
    count_columns = np.flatnonzero(counted)
    counts = [
        np.count_nonzero(distance[:, count_columns] > box[count_columns], axis=0),
        np.count_nonzero(distance[:, count_columns] > WIDEN * box[count_columns], axis=0),
    ]
    if target_counted:
        counts.append([np.count_nonzero(y_distance > y_radius)])
        counts.append([np.count_nonzero(y_distance > WIDEN * y_radius)])
    counts = np.concatenate(counts)
    if counts.size:
        noisy = release_counts(counts, count_std, rng, ledger, partition, CLIP_COUNTS_LABEL)
        limit = CLIP_LIMIT * m + 2.0 * count_std
        k = count_columns.size
        narrow = np.zeros(n_features, dtype=bool)
        wide = np.zeros(n_features, dtype=bool)
        narrow[count_columns], wide[count_columns] = noisy[:k] > limit, noisy[k : 2 * k] > limit
        x_scale = np.where(narrow & wide, np.inf, np.where(narrow, WIDEN * x_scale, x_scale))
        for j in np.flatnonzero(narrow & wide):  # a mirrored side that failed next to 0
            other = stats[j][3]
            if other is not None:
                x_scale[j] = other / z_tau
        if target_counted:  # the target is never dropped: its radius grows WIDEN (or WIDEN^2)
            y_radius *= WIDEN ** int(noisy[-2] > limit) * WIDEN ** int(noisy[-1] > limit)
    ledger.assume(
        "rows and targets are centred, standardised and clipped to privately estimated "
        "quantile bounds before fitting"
    )
    staged = LinearBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=float(np.finfo(float).max),
        y_radius=y_radius,
        intercept_scale=0.0,
        source="private",
        x_scale=x_scale,
        x_box=x_box,
    )
    norms = np.sort(row_norms(staged.transform(sample)))
    top = box_norm(x_box, n_features)
    radius_grid = log_grid(1e-3 * math.sqrt(n_features), top, 1.01)
    radius_grid[-1] = top
    level = row_level(m, mu_radius)
    radius = quantile(
        norms, level, f"private row-norm radius ({level:.3g}-quantile)", radius_grid, mu_radius
    )
    return QuantileBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=radius,
        y_radius=y_radius,
        intercept_scale=radius / math.sqrt(n_features) if fit_intercept else 0.0,
        source="private",
        x_scale=x_scale,
        x_box=x_box,
        y_scale=y_released,
    )


def box_norm(x_box: float | np.ndarray, n_features: int) -> float:
    """The largest norm of a box-clipped standardised row: BOX_SIGMAS sqrt(d) for one box."""
    if np.ndim(x_box) == 0:
        return float(x_box) * math.sqrt(n_features)
    return float(np.sqrt(np.sum(np.square(x_box))))


#: the tightened target radius is the private TARGET_LEVEL quantile of |y - centre|
TARGET_LEVEL = 0.995


def tighten_public_bounds(
    bounds: LinearBounds,
    X: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = None,
) -> LinearBounds:
    """Public bounds with privately tightened radii (two exponential-mechanism releases).

    Loose public ranges (``|x_j| <= 5`` for standard normal features, say) give a row radius
    several times the rows' norms, and every sensitivity grows with it. On the records ``rows``
    (public size m), each release mu/sqrt(2)-GDP: the ``ROW_LEVEL`` quantile of the norms of
    the publicly clipped, centred rows over a log grid whose top is the public radius, and the
    ``TARGET_LEVEL`` quantile of the publicly clipped |y - centre| likewise. A search can only
    land below the public bound, so a failed release costs accuracy, never the guarantee.
    """
    mu_each = check_positive("mu", mu) / math.sqrt(2.0)
    rows = np.asarray(rows)
    m = check_count("preprocessing rows", rows.size, minimum=2)
    unclipped = LinearBounds(
        bounds.x_center, bounds.y_center, bounds.x_radius, bounds.y_radius, 0.0, bounds.source
    )
    Z, t = unclipped.transform(np.asarray(X[rows], float), np.asarray(y[rows], float))

    def radius(values: np.ndarray, level: float, top: float, label: str) -> float:
        grid = log_grid(1e-4 * top, top, 1.01)
        grid[-1] = top
        release = private_interval_quantile(
            np.sort(values), level, grid, mu=mu_each, rng=rng, n=float(m)
        )
        ledger.record(
            GaussianEvent(1.0, 1.0 / release.mu, label=f"{label} (exponential mechanism)"),
            partition=partition,
        )
        return release.value

    x_radius = radius(row_norms(Z), ROW_LEVEL, bounds.x_radius, "private row-norm radius")
    y_radius = radius(np.abs(t), TARGET_LEVEL, bounds.y_radius, "private target radius")
    d = X.shape[1]
    ledger.assume("public bounds tightened by private quantiles of row norms and targets")
    return LinearBounds(
        x_center=bounds.x_center,
        y_center=bounds.y_center,
        x_radius=x_radius,
        y_radius=y_radius,
        intercept_scale=x_radius / math.sqrt(d) if bounds.intercept_scale > 0 else 0.0,
        source="public",
        tightened=True,
    )
