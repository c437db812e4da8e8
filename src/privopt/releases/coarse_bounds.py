"""Coarse private bounds: two quantiles per column, for budgets too small for the full ones.

:func:`~privopt.releases.quantile_bounds.private_quantile_bounds` spends ``7 d + 6`` budget
units (per feature a coarse median, two central quantiles, an outer extent and three Gaussian
counts). Each unit must keep tens of ranks of exponential-mechanism resolution (``m mu_each``,
m rows), so at small ``m mu`` (epsilon = 0.1 on 7,654 rows of the power-plant table) it either
needs more than the whole budget or leaves the fit too little. This module releases what
noisy Newton needs and nothing more, in ``2 d + 3`` units:

* per column (every feature, then the target): a **median** c on the data-independent grid
  :func:`~privopt.clipping.quantiles.value_grid` at ratio MEDIAN_GRID_RATIO (1%), and a
  **spread**, the ``level`` quantile of ``|x - c|`` on a log grid (ratio SPREAD_GRID_RATIO)
  with ``level = 1 - 2 tau`` (tau the tail level of
  :func:`~privopt.releases.quantile_bounds.tail_level`: the median absolute deviation at small
  ``m mu_each``, the 90% deviation at large). The scale is ``spread / z`` with z the normal
  law's ``(1 + level) / 2`` quantile (a robust standard deviation); features are boxed to
  +-BOX_SIGMAS scales, the target to +-COARSE_TARGET_SIGMAS. A column whose spread is the grid's
  lowest value (more than ``level`` of its rows on one value) has no scale: a feature is then
  dropped (coefficient 0), a target keeps scale 1;
* the **clip counts** of the d + 1 boxes, one Gaussian vector (l2 sensitivity sqrt(d + 1)) at
  COUNT_SHARE of mu^2: a median or spread that failed (a candidate far from the data) leaves
  most rows on one edge of its box, where a clipped value would predict through the unclipped
  coefficient (an R^2 of -2.6e7 on the power-plant table before this check). A box whose noisy
  count exceeds DROP_FRACTION m plus twice the noise std is taken as failed: its feature is
  dropped, the target's radius widened TARGET_WIDEN times (post-processing);
* the **row radius**: the private :func:`~privopt.releases.quantile_bounds.row_level`
  quantile of the standardised row norms, as in the full bounds.

What is left out against the full bounds: the outer extents and the widened boxes
(heavy-tailed features keep their +-4 robust-sigma box; features constant on more than
``level`` of the rows are dropped rather than scaled by their outer extent). With ``k``
exponential-mechanism units the budget per unit is ``mu / sqrt(k)``, so at equal resolution
per release these bounds need about ``sqrt((7 d + 6) / (2 d + 3))`` (1.8x at d = 4, 1.9x at
large d) fewer rows.

Privacy: every release is an exponential mechanism with sensitivity-1 scores on m public rows
(replace-one and zero-out alike), recorded as the Gaussian event that dominates it
(:mod:`privopt.clipping.quantiles`); the budgets of :func:`coarse_budgets` compose to mu-GDP
exactly. Each release is chosen from earlier releases only.
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
    log_grid,
    private_interval_quantile,
    value_grid,
)
from privopt.noise.rng import gaussian_noise
from privopt.releases.known_columns import KnownColumns
from privopt.releases.preprocess import LinearBounds
from privopt.releases.quantile_bounds import (
    BOX_SIGMAS,
    CLIP_COUNTS_LABEL,
    box_norm,
    release_counts,
    row_level,
    tail_level,
)
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "coarse_budgets",
    "coarse_quantile_bounds",
    "coarse_releases",
    "intercept_only_bounds",
]

#: the target is clipped to +-COARSE_TARGET_SIGMAS robust sigmas (the full bounds' 8 are
#: widened only when their clip counts say so; here the first Newton step's noise, which scales
#: with this radius, dominates). The power-plant table at epsilon = 0.1, 20 seeds, median
#: (worst) test R^2: 4 sigmas 0.848 (0.543) on 7,654 rows, 0.718 (-0.072) on 5,000; 3 sigmas
#: (with COARSE_MAX_SHARE 0.4) 0.867 (0.609) and 0.844 (-0.044); 8 sigmas 0.85 median on 12
#: seeds of 7,654 rows. A normal target loses 0.27% of its rows to the clip; a target whose
#: noisy clip count exceeds DROP_FRACTION m is widened
COARSE_TARGET_SIGMAS = 3.0
#: the target's median and spread get this share of mu^2 together (or their unit share when
#: larger): a failed target release inflates every noise of the fit
COARSE_TARGET_SHARE = 0.3
#: the row radius's share of mu^2 (or its unit share when larger)
COARSE_RADIUS_SHARE = 0.15
#: the clip counts' share of mu^2: they only need to tell a box that holds the rows from one
#: that a failed release put beside them
COUNT_SHARE = 0.1
#: a box whose noisy clip count exceeds DROP_FRACTION m plus twice the count's noise std failed:
#: the feature is dropped (coefficient 0), the target's radius widened TARGET_WIDEN times
DROP_FRACTION = 0.2
TARGET_WIDEN = 4.0
#: the row radius is at most RADIUS_CAP sqrt(d): the rows are standardised by robust sigmas
#: and boxed, so their level-quantile norm is about sqrt(d) (healthy fits of the power-plant
#: table, d = 4: 1.0 to 1.9 sqrt(d)); a release far above it failed upward towards the grid's
#: top BOX_SIGMAS sqrt(d) (its candidates above the data all score alike), and the Gram noise,
#: which grows with the radius squared, swamped the fit: radii of 2.6 to 3.9 sqrt(d) gave test
#: R^2 -0.04 to 0.45 against a median of 0.84 (5,000 rows, epsilon = 0.1, 20 seeds). A radius
#: below the truth only clips more rows (post-processing, no privacy cost). 20 seeds, median
#: (worst) test R^2, no cap / cap 2 / cap 1.5: 5,000 rows at epsilon 0.1 0.844 (-0.044) /
#: 0.844 (0.408) / 0.844 (0.413); 2,000 rows at 0.3 0.824 (0.007) / 0.838 (0.391) / 0.854
#: (0.597)
RADIUS_CAP = 1.5
#: the coarse row radius's level may drop to COARSE_ROW_LEVEL_FLOOR (the full bounds' floor is
#: 0.9) to keep its release's margin: at 0.9 the radius of the power-plant table (5,000 rows,
#: epsilon = 0.1: 6.8 ranks x epsilon of margin) came out 1.4x too high or more in 7 seeds of
#: 20, and the Gram noise grows with its square; a lower level clips a few more rows. 20 seeds,
#: median (worst) test R^2, floor 0.9 / 0.8 (with RADIUS_CAP): 5,000 rows at 0.1 0.844 (0.413)
#: / 0.854 (0.563); 2,000 rows at 0.3 0.854 (0.597) / 0.876 (0.636); 7,654 rows at 0.1 0.887
#: (0.770) / 0.888 (0.765)
COARSE_ROW_LEVEL_FLOOR = 0.8
#: grid ratio of the medians: 1% (0.2%, the default grid, has five times more candidates, and
#: at m mu_each of about 20 the ones far from the data outweighed the median: the power-plant
#: table's pressure (1013 +- 6) was centred at -4.8e8 in one seed in four at epsilon = 0.1 on
#: 5,000 rows)
MEDIAN_GRID_RATIO = 1.01
#: grid ratio of the spreads: 25% (an order of magnitude is what a box needs; 155 candidates
#: over 1e-6 .. 1e9 instead of 708 at 5%)
SPREAD_GRID_RATIO = 1.25


@dataclass(frozen=True)
class _ColumnReleases:
    """The exponential-mechanism quantiles of one column on m public rows, each recorded as the
    Gaussian event that dominates it (sensitivity-1 scores)."""

    m: int
    rng: np.random.Generator
    ledger: PrivacyLedger
    partition: object

    def quantile(self, sorted_values, q, candidates, budget, label) -> float:
        release = private_interval_quantile(
            sorted_values, q, candidates, mu=budget, rng=self.rng, n=float(self.m)
        )
        self.ledger.record(
            GaussianEvent(1.0, 1.0 / release.mu, label=f"{label} (exponential mechanism)"),
            partition=self.partition,
        )
        return release.value

    def column(
        self, values: np.ndarray, budget: float, label: str, *, centred: bool = True,
        spread_budget: float | None = None,
    ) -> tuple[float, float]:  # fmt: skip
        """(centre, robust sigma; 0 when the spread collapsed): the median at ``budget`` (0
        when not ``centred``) and the ``1 - 2 tau`` spread about it at ``spread_budget``
        (default ``budget``)."""
        spread_budget = budget if spread_budget is None else spread_budget
        level = 1.0 - 2.0 * tail_level(self.m, spread_budget)
        centre = 0.0
        if centred:
            grid = value_grid(ratio=MEDIAN_GRID_RATIO)
            centre = self.quantile(np.sort(values), 0.5, grid, budget, f"private median of {label}")
        deviation = np.sort(np.abs(values - centre))
        spreads = log_grid(GRID_RANGE[0], GRID_RANGE[1], SPREAD_GRID_RATIO)
        label = f"private {level:.3g}-spread of {label}"
        spread = self.quantile(deviation, level, spreads, spread_budget, label)
        if spread <= GRID_RANGE[0]:  # the lowest candidate: an atom holds the level
            return centre, 0.0
        return centre, spread / float(norm.ppf(0.5 + level / 2.0))


def coarse_releases(n_features: int) -> int:
    """Exponential-mechanism releases of :func:`coarse_quantile_bounds`: a median and a spread
    per feature and for the target, and the row radius: ``2 d + 3`` (the clip counts are one
    more Gaussian release at their own share, COUNT_SHARE)."""
    return 2 * n_features + 3


def coarse_budgets(
    n_features: int, mu: float, n_free: int | None = None, target_free: bool = True
) -> tuple[float, float, float, float]:
    """(mu_each, mu_target, mu_radius, mu_counts): the GDP budgets of a feature's releases, of
    each of the target's two, of the row radius and of the clip-count vector, ``2 d mu_each^2 +
    2 mu_target^2 + mu_radius^2 + mu_counts^2 = mu^2`` (mu_counts^2 = COUNT_SHARE mu^2). The
    target's releases get COARSE_TARGET_SHARE of mu^2 together and the radius
    COARSE_RADIUS_SHARE (every sensitivity of the fit depends on them), or the unit share
    mu^2 / k when larger.

    With known columns only ``n_free`` features have a median and a spread, and the target's
    two releases run only when ``target_free`` (k = 2 n_free + 2 target_free + 1); with no
    free feature the target's releases and the radius share what the counts leave."""
    n_free = n_features if n_free is None else n_free
    t = int(target_free)
    units = 2 * n_free + 2 * t + 1
    unit = mu / math.sqrt(units)
    mu_target = max(unit, mu * math.sqrt(COARSE_TARGET_SHARE / 2.0)) if t else 0.0
    mu_radius = max(unit, mu * math.sqrt(COARSE_RADIUS_SHARE))
    mu_counts = mu * math.sqrt(COUNT_SHARE)
    if n_free == 0:  # nothing else to release: the target and the radius take the rest
        scale = math.sqrt((mu * mu - mu_counts**2) / (2 * t * mu_target**2 + mu_radius**2))
        return 0.0, mu_target * scale, mu_radius * scale, mu_counts
    rest = mu * mu - 2.0 * mu_target**2 - mu_radius**2 - mu_counts**2
    return math.sqrt(rest / (2 * n_free)), mu_target, mu_radius, mu_counts


def coarse_quantile_bounds(
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
    """Private centres, scales and radii from two quantiles per column (module docstring).

    On the records ``rows`` (a secret, data-independent subset of public size m). Without an
    intercept nothing is centred (c = 0). The events are recorded with ``partition`` (None:
    the releases share their records with the fit, which composes with them sequentially).
    ``known`` (:class:`~privopt.releases.known_columns.KnownColumns`): a feature or target whose
    range [low, high] is known takes the centre (low + high) / 2, the scale (high - low) / 2
    and the box 1 (the target: that radius) with no release; screened (not public) ones keep
    their clip counts (a range that fails them is dropped or widened like any box).
    """
    mu = check_positive("mu", mu)
    rows = np.asarray(rows)
    m = check_count("preprocessing rows", rows.size, minimum=2)
    n_features = X.shape[1]
    known = KnownColumns.none(n_features) if known is None else known
    known = known if fit_intercept else known.about_zero()
    free, counted = ~known.mask, ~known.public
    target_free, target_counted = known.target is None, not known.target_public
    mu_each, mu_target, mu_radius, mu_counts = coarse_budgets(
        n_features, mu, int(free.sum()), target_free
    )
    releases = _ColumnReleases(m, rng, ledger, partition)
    quantile = releases.quantile

    def column(values: np.ndarray, budget: float, label: str) -> tuple[float, float]:
        return releases.column(values, budget, label, centred=fit_intercept)

    sample = np.asarray(X[rows], dtype=float)
    half = (known.high - known.low) / 2.0
    stats = [
        column(sample[:, j], mu_each, f"feature {j}") if free[j] else (known.low[j] + half[j], 0.0)
        for j in range(n_features)
    ]
    x_center = np.array([c for c, _ in stats])
    x_scale = np.array([s if s > 0.0 else np.inf for _, s in stats])
    x_scale = np.where(free, x_scale, half)
    x_box = BOX_SIGMAS if not known.any else np.where(free, BOX_SIGMAS, 1.0)
    target = np.asarray(y[rows], dtype=float)
    if target_free:
        y_center, y_scale = column(target, mu_target, "the target")
        y_scale = y_scale if y_scale > 0.0 else 1.0
        y_radius = COARSE_TARGET_SIGMAS * y_scale
    else:
        y_radius = (known.target[1] - known.target[0]) / 2.0
        y_center = known.target[0] + y_radius
    # the clip counts of the boxes (features and target that are not public): a failed median
    # or spread (a candidate far from the data) leaves most rows on one edge of the box, where
    # a clipped value would predict through the unclipped coefficient; such a feature is
    # dropped, such a target radius widened
    box = x_box * np.where(np.isfinite(x_scale), x_scale, 0.0)
    count_columns = np.flatnonzero(counted)
    counts = np.count_nonzero(
        np.abs(sample[:, count_columns] - x_center[count_columns]) > box[count_columns], axis=0
    )
    if target_counted:
        counts = np.append(counts, np.count_nonzero(np.abs(target - y_center) > y_radius))
    if counts.size:
        count_std = gaussian_release_std(math.sqrt(counts.size), mu_counts)
        noisy = release_counts(counts, count_std, rng, ledger, partition, CLIP_COUNTS_LABEL)
        limit = DROP_FRACTION * m + 2.0 * count_std
        failed = np.zeros(n_features, dtype=bool)
        failed[count_columns] = noisy[: count_columns.size] > limit
        x_scale = np.where(failed, np.inf, x_scale)
        if target_counted and noisy[-1] > limit:
            y_radius *= TARGET_WIDEN
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
    level = row_level(m, mu_radius, floor=COARSE_ROW_LEVEL_FLOOR)
    radius = quantile(
        norms, level, radius_grid, mu_radius, f"private row-norm radius ({level:.3g}-quantile)"
    )
    # a radius far above what standardised rows reach is a release that failed upward (its
    # candidates above the data all score alike): held at RADIUS_CAP sqrt(d) (post-processing)
    radius = min(radius, RADIUS_CAP * math.sqrt(n_features))
    return LinearBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=radius,
        y_radius=y_radius,
        intercept_scale=radius / math.sqrt(n_features) if fit_intercept else 0.0,
        source="private",
        x_scale=x_scale,
        x_box=x_box,
    )


#: shares of mu^2 of the intercept-only model's three releases: the target's median, its
#: spread (the clip of the mean and of the quality release) and the clipped mean
INTERCEPT_ONLY_SHARES = (0.4, 0.2, 0.4)


def intercept_only_bounds(
    y: np.ndarray,
    rows: np.ndarray,
    n_features: int,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = None,
    target: tuple[float, float] | None = None,
) -> LinearBounds:
    """The intercept-only model's releases, for rows too few for any feature's bounds.

    On the m records ``rows`` (public size), in mu-GDP (shares INTERCEPT_ONLY_SHARES of mu^2):
    the target's private median c and spread (as in :func:`coarse_quantile_bounds`), the radius
    T = COARSE_TARGET_SIGMAS robust sigmas, and the Gaussian mean of ``clip(y - c, -T, T)`` over
    the public m (sensitivity T / m under zero-out, 2 T / m under replace-one). The returned
    bounds centre the target at ``c`` plus that mean and drop every feature (infinite scale:
    coefficient 0), so that the model fitted on them with w = 0 is the intercept-only model
    (its intercept the centre); the feature columns are never read. A known target range
    ``target`` = (low, high) gives c and T ((low + high) / 2, (high - low) / 2) with no
    release, and the mean takes all of mu.
    """
    mu = check_positive("mu", mu)
    rows = np.asarray(rows)
    m = check_count("preprocessing rows", rows.size, minimum=2)
    values = np.asarray(y[rows], dtype=float)
    if target is not None:
        centre, radius, mu_mean = (target[0] + target[1]) / 2.0, (target[1] - target[0]) / 2.0, mu
    else:
        mu_median, mu_spread, mu_mean = (mu * math.sqrt(s) for s in INTERCEPT_ONLY_SHARES)
        releases = _ColumnReleases(m, rng, ledger, partition)
        centre, scale = releases.column(values, mu_median, "the target", spread_budget=mu_spread)
        radius = COARSE_TARGET_SIGMAS * (scale if scale > 0.0 else 1.0)
    sensitivity = ledger.neighbouring.contribution_factor * radius / m
    std = gaussian_release_std(sensitivity, mu_mean)
    ledger.record(
        GaussianEvent(sensitivity, std, label="private clipped mean of the target"),
        partition=partition,
    )
    mean = float(np.clip(values - centre, -radius, radius).sum() / m + gaussian_noise(rng, std))
    return LinearBounds(
        x_center=np.zeros(n_features),
        y_center=centre + mean,
        x_radius=1.0,
        y_radius=radius,
        intercept_scale=1.0,
        source="private",
        x_scale=np.full(n_features, np.inf),
    )
