"""Columns whose range is known: given publicly, or found two-valued by one private count vector.

The private quantile bounds (:mod:`privopt.releases.quantile_bounds`,
:mod:`privopt.releases.coarse_bounds`) choose every column's centre and scale by the exponential
mechanism over a grid of thousands of candidates. On a column that takes two values (a one-hot
or indicator column, a {-1, 1} target) a central quantile sits on an atom: one candidate scores
0 and every other one scores at most minus the rows between the level and the atom's edge, so at
the per-release budgets of a table with tens of columns (``m epsilon_each`` of about 80 on 4,000
rows at epsilon = 1) about one release in five lands far from the data. On one-hot Adult this
gave centres of 232 or 2,865 for 0/1 columns, scales of 0.003 and a target radius of 0.0016
(median test R^2 -1.38 against 0.215 with public bounds). A two-valued column needs no quantile:
its range is the box.

:class:`KnownColumns` holds the columns whose range [low, high] is known, and how:

* **public** (the user's partial ``feature_bounds`` / ``target_bounds``): no release;
* **screened** (:func:`screen_binary_columns`): one Gaussian vector of counts, for each other
  feature the rows whose value is neither 0 nor 1, and for the target the rows outside {0, 1}
  and outside {-1, 1} (then, at its own small share, a second vector of each feature's rows
  outside [0, 1]). A count moves by at most 1 between
  neighbours (replace-one or zero-out; m is public), so the vector has l2 sensitivity sqrt(k)
  for k counts. A column whose noisy count is at most ``SCREEN_LIMIT m`` plus three noise stds
  takes the range [0, 1] (the target {0, 1}, else {-1, 1}): binary, one-hot and indicator
  columns and two-valued labels. A feature found inside [0, 1] without being two-valued keeps
  its quantiles; only if the bounds then drop it does it take [0, 1] as its box
  (:func:`unit_range_fallback`). The boxes' clip counts of the bounds that follow check a
  screened range (a screened column with more rows outside its range than their limit is
  widened or dropped, as any failed box is).

  Columns merely inside [0, 1] (min-max scaled ones) are NOT given that box: a narrow
  continuous column there (0.07 +- 0.01) would be squashed 25 times (a heavy-tailed test table
  lost 0.95 -> 0.85 of OLS's R^2), and at the noise of such a count (3 stds = 4% of 9,600 rows
  at epsilon 1, d = 6) a column with 4% of its rows at 1950-2015 passed as [0, 1] and, boxed
  there, predicted at R^2 -70. Such columns keep their quantiles; where those fail (min-max
  scaled capital gain, 92% at 0, both central quantiles on the atom and too few other rows
  for its outer extent) the [0, 1] fallback keeps the feature instead of dropping it.

Both bounds functions give a known feature the centre (low + high) / 2, the scale
(high - low) / 2 and the box 1 (so it is clipped to its range, and a 0/1 column becomes +-1),
and spend their budget on the other columns only. The remaining releases' budgets therefore
depend on the screen's released result: GDP composes under such fully adaptive choices with the
same parameters as without them (Smith & Thakurta 2022, "Fully Adaptive Composition for
Gaussian Differential Privacy", arXiv:2210.17520, Theorem 1: a filter that sums the squared
mu's), and every budget split here sums to the planned mu^2 whatever the screen says.

The screen is skipped (nothing released) when its noise would be too large to tell a two-valued
column from one with a tenth of its rows elsewhere: ``3 std > SCREEN_MAX_FRACTION m`` (public).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_positive
from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.noise.rng import gaussian_noise
from privopt.releases.preprocess import LinearBounds
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "SCREEN_SHARE",
    "UNIT_SCREEN_SHARE",
    "KnownColumns",
    "screen_binary_columns",
    "screen_std",
    "unit_range_fallback",
    "unit_screen_runs",
]

#: the screen's mu^2 is this share of the private bounds' (when it runs), taken from the fit's
#: method, so that the bounds keep their planned budget
SCREEN_SHARE = 0.1
#: a column is two-valued when its noisy count of other values is at most SCREEN_LIMIT m plus
#: SCREEN_STDS noise stds: a binary column is missed in 0.13% of draws (a missed one goes
#: through the quantiles, where it fails as described above: one-hot Adult, 4,000 rows, 2
#: stds missed one column in 5 fits and cost that fit 0.21 -> 0.07 test R^2)
SCREEN_LIMIT = 0.01
SCREEN_STDS = 3.0
#: the screen runs only when SCREEN_STDS noise stds are at most this share of the m rows
SCREEN_MAX_FRACTION = 0.1
#: the [0, 1] counts' share of the bounds' mu^2 (a second release, when it runs), taken from
#: the fit's method like the screen's
UNIT_SCREEN_SHARE = 0.05
#: the value pairs tried: a feature {0, 1}; the target {0, 1}, then {-1, 1}
FEATURE_RANGE = (0.0, 1.0)
TARGET_RANGES = ((0.0, 1.0), (-1.0, 1.0))


@dataclass(frozen=True)
class KnownColumns:
    """Known ranges: ``low`` / ``high`` (d,) with NaN where unknown, ``public`` (d,) marks the
    user's; ``target`` the target's (low, high) or None, ``target_public`` whether the user's."""

    low: np.ndarray
    high: np.ndarray
    public: np.ndarray
    target: tuple[float, float] | None = None
    target_public: bool = False
    #: (d,) features the screen found inside [0, 1] without being two-valued (min-max scaled
    #: ones): the range a feature the bounds drop falls back to (:func:`unit_range_fallback`)
    unit: np.ndarray | None = None

    @classmethod
    def none(cls, n_features: int) -> KnownColumns:
        nan = np.full(n_features, np.nan)
        return cls(nan, nan.copy(), np.zeros(n_features, dtype=bool))

    def about_zero(self) -> KnownColumns:
        """The ranges widened to [-a, a], a = max(|low|, |high|): a model without intercept is
        not centred (y = <x, w> exactly), so a known range is held about 0."""
        a = np.maximum(np.abs(self.low), np.abs(self.high))
        target = None
        if self.target is not None:
            t = max(abs(self.target[0]), abs(self.target[1]))
            target = (-t, t)
        return KnownColumns(-a, a, self.public, target, self.target_public, self.unit)

    @property
    def mask(self) -> np.ndarray:
        """(d,) whether the feature's range is known."""
        return np.isfinite(self.low)

    @property
    def screened(self) -> np.ndarray:
        """(d,) features whose range the screen found (known, not public)."""
        return self.mask & ~self.public

    @property
    def any(self) -> bool:
        return bool(np.any(self.mask)) or self.target is not None

    @property
    def unit_mask(self) -> np.ndarray:
        """(d,) features found inside [0, 1] (see ``unit``)."""
        return np.zeros(self.low.shape[0], dtype=bool) if self.unit is None else self.unit

    def describe(self) -> str:
        """Which columns' ranges are known and how (indices only, never values)."""
        parts = []
        for what, mask in (
            ("public", self.public),
            ("found binary", self.screened),
            ("found inside [0, 1]", self.unit_mask),
        ):
            if np.any(mask):
                parts.append(f"features {np.flatnonzero(mask).tolist()} {what}")
        if self.target is not None:
            parts.append("the target " + ("public" if self.target_public else "found binary"))
        return "; ".join(parts) if parts else "none"


def screen_std(n_counts: int, mu: float) -> float:
    """Noise std of the screen's count vector of ``n_counts`` entries at GDP budget ``mu``."""
    return gaussian_release_std(math.sqrt(n_counts), mu)


def screen_counts(known: KnownColumns) -> int:
    """Entries of the screen's count vector: one per feature whose range is not known, two for
    a target that is not."""
    return int(np.count_nonzero(~known.mask)) + (2 if known.target is None else 0)


def _precise(k: int, m: int, mu: float) -> bool:
    """Whether a vector of k counts at budget mu tells SCREEN_MAX_FRACTION m apart (public)."""
    return k > 0 and SCREEN_STDS * screen_std(k, mu) <= SCREEN_MAX_FRACTION * m


def screen_runs(known: KnownColumns, m: int, mu: float) -> bool:
    """Whether :func:`screen_binary_columns` releases anything (public quantities only)."""
    return _precise(screen_counts(known), m, mu)


def unit_screen_runs(known: KnownColumns, m: int, mu_unit: float) -> bool:
    """Whether the [0, 1] counts are released at budget ``mu_unit`` (public quantities only)."""
    return _precise(int(np.count_nonzero(~known.mask)), m, mu_unit)


def noisy_counts(counts: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """The screen's Gaussian release: ``counts`` plus N(0, std^2) noise each (the one place the
    screen draws noise, which :mod:`privopt.audit.pipeline_bounds` taps)."""
    return counts + gaussian_noise(rng, std, counts.size)


def screen_binary_columns(
    X: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray,
    *,
    known: KnownColumns,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = None,
    mu_unit: float | None = None,
) -> KnownColumns:
    """``known`` with the two-valued columns found among the others: features {0, 1}, the
    target {0, 1} or {-1, 1} (module docstring); with ``mu_unit`` also the other features
    found inside [0, 1] (``unit``: a dropped feature's fallback range).

    One Gaussian release of k counts (l2 sensitivity sqrt(k), mu-GDP), recorded in ``ledger``;
    nothing is released when :func:`screen_runs` is False (``known`` is returned as given).
    The [0, 1] counts are a second Gaussian vector (one count per feature whose range is not
    known, l2 sensitivity sqrt(d_free), mu_unit-GDP, after the first and from the same
    stream), released when :func:`unit_screen_runs` says it is precise enough; the binary
    counts are the same release with or without it."""
    mu = check_positive("mu", mu)
    rows = np.asarray(rows)
    m = rows.size
    if not screen_runs(known, m, mu):
        return known
    free = np.flatnonzero(~known.mask)
    sample = np.asarray(X[rows][:, free], dtype=float)
    low, high = FEATURE_RANGE
    counts = [np.count_nonzero((sample != low) & (sample != high), axis=0)]
    if known.target is None:
        target = np.asarray(y[rows], dtype=float)
        counts.append([np.count_nonzero((target != a) & (target != b)) for a, b in TARGET_RANGES])
    inside = _screened(np.concatenate(counts), m, mu, rng, ledger, partition, "binary-column")
    lows, highs = known.low.copy(), known.high.copy()
    binary = inside[: free.size]
    lows[free[binary]], highs[free[binary]] = FEATURE_RANGE
    target = known.target
    if known.target is None:  # {0, 1} first
        target = next(
            (r for r, ok in zip(TARGET_RANGES, inside[free.size :], strict=True) if ok), None
        )
    unit = known.unit_mask.copy()
    if mu_unit is not None and unit_screen_runs(known, m, mu_unit):
        outside = np.count_nonzero((sample < low) | (sample > high), axis=0)
        bounded = _screened(outside, m, mu_unit, rng, ledger, partition, "[0, 1]")
        unit[free[bounded & ~binary]] = True
    return KnownColumns(lows, highs, known.public, target, known.target_public, unit)


def _screened(counts, m, mu, rng, ledger, partition, what) -> np.ndarray:
    """One Gaussian release of ``counts`` (l2 sensitivity sqrt(k)) at mu, recorded; which noisy
    counts are at most SCREEN_LIMIT m plus SCREEN_STDS noise stds."""
    counts = np.asarray(counts, dtype=float)
    std = screen_std(counts.size, mu)
    noisy = noisy_counts(counts, std, rng)
    ledger.record(
        GaussianEvent(math.sqrt(counts.size), std, label=f"private {what} screen counts"),
        partition=partition,
    )
    return noisy <= SCREEN_LIMIT * m + SCREEN_STDS * std


def unit_range_fallback(
    bounds: LinearBounds, known: KnownColumns, fit_intercept: bool = True
) -> LinearBounds:
    """``bounds`` with each feature they dropped (infinite scale: its central range collapsed
    on an atom and its outer extent could not be released, or its box failed its clip count)
    that the screen found inside [0, 1] boxed to that range instead: centre 0.5, scale 0.5,
    box 1 (without an intercept [-1, 1] about 0: centre 0, scale 1). Post-processing of
    released values; the row clip of ``bounds`` still bounds every transformed row, so every
    sensitivity of the fit holds. Why: a min-max scaled column that is 0 on most rows (Adult's
    capital gain, 92% zeros) was dropped, and it carries a tenth of the table's R^2 (one-hot
    Adult, 15,000 x 25 at epsilon 1: 0.84x -> 1.00x of the fit with public bounds, measured
    with the exact [0, 1] test)."""
    d = bounds.x_center.shape[0]
    restore = known.unit_mask & ~np.isfinite(np.asarray(bounds.x_scale, dtype=float))
    if not np.any(restore):
        return bounds
    centre, scale = np.array(bounds.x_center, dtype=float), np.array(bounds.x_scale, dtype=float)
    box = np.array(np.broadcast_to(np.asarray(bounds.x_box, dtype=float), (d,)))
    centre[restore] = 0.5 if fit_intercept else 0.0
    scale[restore] = 0.5 if fit_intercept else 1.0
    box[restore] = 1.0
    return dataclasses.replace(bounds, x_center=centre, x_scale=scale, x_box=box)
