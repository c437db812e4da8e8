"""Centering, bounds and the intercept, without peeking at private data.

Every linear-regression method in privopt works on **bounded, roughly centred** data: rows of X
centred at ``x_center`` and clipped to l2 norm ``x_radius``, targets centred at ``y_center`` and
clipped to ``y_radius``. Those four quantities are either

* **public** (:func:`public_bounds`, from per-feature and target ranges the user knows a priori), or
* **private** (:func:`private_bounds`): estimated on a disjoint slice of the shuffled records. Each
  release uses its own disjoint chunk of that slice, so by parallel composition the preprocessing
  costs nothing beyond the fit's own budget: a record is touched by one preprocessing release or
  by the main algorithm, never both. Each release is recorded in the ledger with its chunk as the
  partition.

The intercept is learned by the main algorithm as the coefficient of a constant column (value
``intercept_scale``), so its accuracy does not depend on the rough private centres; centring only
improves conditioning. :meth:`LinearBounds.to_original` maps the fitted coefficients back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.accounting import GaussianEvent, Neighbouring, PrivacyLedger
from privopt.clipping import clip_factors, dp_stat, dp_stat_margin, row_norms
from privopt.noise.rng import gaussian_noise
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "LinearBounds",
    "SecondMoment",
    "dp_stat_minimum_rows",
    "preprocessing_rows_needed",
    "private_bounds",
    "private_second_moment",
    "public_bounds",
]

#: default public search range of the private scale estimates: values up to 2^30 (~1e9)
DEFAULT_SEARCH_DOMAIN = 2.0**30
#: number of doubling queries: resolution DEFAULT_SEARCH_DOMAIN / 2^50 ~ 1e-6
DEFAULT_SEARCH_QUERIES = 50
#: releases made by private_bounds, each on its own chunk of the preprocessing rows
PRIVATE_RELEASES = 6
#: fewest rows per chunk for the private estimates to be meaningful
MIN_CHUNK_ROWS = 200
#: each chunk holds at least this many DP-STAT margins (see preprocessing_rows_needed)
CHUNK_MARGINS = 10.0


#: rows per block of :meth:`LinearBounds.transform`
_BLOCK_ROWS = 8192


@dataclass(frozen=True)
class LinearBounds:
    """Public or privately estimated centres and radii of the data.

    Attributes:
        x_center: (d,) centre subtracted from every row.
        y_center: centre subtracted from every target.
        x_radius: l2 bound on centred rows (rows are clipped to it).
        y_radius: bound on |centred target| (targets are clipped to it).
        intercept_scale: value of the constant column that carries the intercept (0 = no
            intercept).
        source: ``"public"`` or ``"private"``.
        x_scale: (d,) per-feature divisor applied after centring (None = 1: rows keep their
            units). Standardising puts every feature on one scale, so isotropic noise hurts
            none of them more than the others.
        x_box: per-coordinate clip of the centred, scaled features (inf = none), applied
            before the row clip; one value for every feature or a (d,) array (a feature with a
            known range [low, high] has centre (low + high) / 2, scale (high - low) / 2 and box
            1: it is clipped to its range); features whose ``x_scale`` is not finite-positive
            are never box-clipped (see ``box_mask``).
        box_mask: (d,) which features the box clip applies to (None = all).
        tightened: public ranges whose radii were then tightened by private quantiles.
    """

    x_center: np.ndarray
    y_center: float
    x_radius: float
    y_radius: float
    intercept_scale: float
    source: str
    x_scale: np.ndarray | None = None
    x_box: float | np.ndarray = math.inf
    box_mask: np.ndarray | None = None
    tightened: bool = False

    @property
    def boxed(self) -> bool:
        """Whether any feature has a finite box clip."""
        return bool(np.any(np.isfinite(self.x_box)))

    @property
    def masked_box(self) -> float | np.ndarray:
        """The box of the features in ``box_mask`` (the scalar box, or its entries there)."""
        return self.x_box if np.ndim(self.x_box) == 0 else np.asarray(self.x_box)[self.box_mask]

    @property
    def row_bound(self) -> float:
        """l2 bound of a transformed row, the constant column included."""
        return math.hypot(self.x_radius, self.intercept_scale)

    def transform(self, X: np.ndarray, y: np.ndarray | None = None, rows: np.ndarray | None = None):
        """Centre, clip, and append the intercept column (new arrays; inputs untouched).

        One output array is allocated and filled block by block (each block's steps run in
        cache: at N = 10^6, d = 100 a pass over memory costs more than the arithmetic). ``rows``
        selects (and orders) the rows to transform, gathered block by block instead of copying
        ``X[rows]`` first.
        """
        X = np.asarray(X, dtype=float)
        d = X.shape[1]
        n = X.shape[0] if rows is None else len(rows)
        out = np.empty((n, d + 1 if self.intercept_scale > 0 else d))
        for start in range(0, n, _BLOCK_ROWS):
            source = (
                X[start : start + _BLOCK_ROWS]
                if rows is None
                else X[rows[start : start + _BLOCK_ROWS]]
            )
            block = source - self.x_center
            if self.x_scale is not None:
                block /= self.x_scale
            if self.boxed:
                if self.box_mask is None:
                    np.clip(block, -self.x_box, self.x_box, out=block)
                else:
                    mask, box = self.box_mask, self.masked_box
                    block[:, mask] = np.clip(block[:, mask], -box, box)
            block *= clip_factors(row_norms(block), self.x_radius)[:, None]
            out[start : start + _BLOCK_ROWS, :d] = block
        if self.intercept_scale > 0:
            out[:, d] = self.intercept_scale
        Z = out
        if y is None:
            return Z
        y = np.asarray(y, dtype=float)
        if rows is not None:
            y = y[rows]
        t = np.clip(y - self.y_center, -self.y_radius, self.y_radius)
        return Z, t

    def transform_block(
        self, X: np.ndarray, out: np.ndarray, track_changes: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``out`` (rows, d) = the feature columns of ``transform(X)`` (the intercept column
        is not written); returns (the mask of rows that the box or row clip changed, their
        norms before the row clip times its factors). Unchanged rows are exactly
        ``(x - c) / s``.

        The same arithmetic as :meth:`transform` (a factor of 1 changes nothing, so the row
        scaling touches only the rows it acts on); a row counts as box-clipped when the clip
        changed its norm (a clip that moves a value by more than about an ulp lowers it).
        ``track_changes=False`` (the Dask statistics, which need only the rows) skips the norms
        before the box clip; the mask then marks only the rows the row clip scaled.
        """
        np.subtract(X, self.x_center, out=out)
        if self.x_scale is not None:
            out /= self.x_scale
        changed = np.zeros(X.shape[0], dtype=bool)
        box = self.x_box
        if self.boxed:
            before = row_norms(out) if track_changes else None
            if self.box_mask is None:
                np.clip(out, -box, box, out=out)
            else:
                mask, box = self.box_mask, self.masked_box
                out[:, mask] = np.clip(out[:, mask], -box, box)
            lengths = row_norms(out)
            if before is not None:
                changed = lengths != before
        else:
            lengths = row_norms(out)
        factors = clip_factors(lengths, self.x_radius)
        scaled = factors < 1.0
        if np.any(scaled):
            out[scaled] *= factors[scaled, None]
            changed |= scaled
        return changed, lengths * factors

    def feature_range(self) -> np.ndarray:
        """(d, 2): per feature, the interval [c - b s, c + b s] in the caller's units to which
        :meth:`transform` box-clips it (centre c, scale s, box b), or (-inf, inf) where it does
        not (no box, a feature outside ``box_mask``, or a dropped feature: infinite scale).

        The model fitted on transformed rows is linear in the box-clipped features, so a
        prediction clips to this range first: outside it the linear form extrapolates beyond
        anything the fit saw (a feature that is an atom plus rare large values, King County's
        ``yr_renovated``, gave test R^2 of -10^4 through it). Derived from the bounds only."""
        d = self.x_center.shape[0]
        out = np.tile([-np.inf, np.inf], (d, 1))
        if not self.boxed:
            return out
        scale = np.ones(d) if self.x_scale is None else np.asarray(self.x_scale, dtype=float)
        box = np.broadcast_to(np.asarray(self.x_box, dtype=float), (d,))
        mask = np.ones(d, dtype=bool) if self.box_mask is None else np.asarray(self.box_mask)
        clipped = mask & np.isfinite(scale) & (scale > 0.0) & np.isfinite(box)
        out[clipped, 0] = self.x_center[clipped] - box[clipped] * scale[clipped]
        out[clipped, 1] = self.x_center[clipped] + box[clipped] * scale[clipped]
        return out

    def to_original(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        """(coef, intercept) in the caller's units from coefficients fitted on transformed data."""
        w = np.asarray(w, dtype=float)
        coef, w0 = (w[:-1], float(w[-1])) if self.intercept_scale > 0 else (w, 0.0)
        if self.x_scale is not None:
            coef = coef / self.x_scale
        intercept = self.y_center + w0 * self.intercept_scale - float(self.x_center @ coef)
        return np.array(coef, dtype=float), intercept

    def describe(self) -> str:
        scaled = "" if self.x_scale is None else ", standardised per feature"
        box = ""
        if np.ndim(self.x_box) > 0:  # known ranges have box 1 (their centre +- half-width)
            boxes = ", ".join(f"{b:g}" for b in sorted({float(b) for b in self.x_box}))
            box = f", clipped per feature to +-{{{boxes}}} scales (1: a known range)"
        elif math.isfinite(self.x_box):
            box = f", clipped to +-{self.x_box:g} per feature"
        tight = " (radii tightened privately)" if self.tightened else ""
        return (
            f"{self.source} bounds{tight}: rows centred{scaled}{box} and clipped to l2 norm "
            f"{self.x_radius:.4g}, targets centred and clipped to |y| <= {self.y_radius:.4g}"
        )


def public_bounds(
    feature_bounds: np.ndarray, target_bounds: tuple[float, float], fit_intercept: bool = True
) -> LinearBounds:
    """Bounds from public ranges: ``feature_bounds`` (d, 2) of [low, high], ``target_bounds``.

    Centres are the midpoints; the row radius is the l2 norm of the half-widths, the target
    radius its half-width. Values outside the ranges are clipped, so privacy never depends on
    the data respecting them.
    """
    fb = np.asarray(feature_bounds, dtype=float)
    if fb.ndim != 2 or fb.shape[1] != 2 or fb.shape[0] == 0:
        raise ValueError(f"Expected feature_bounds of shape (d, 2), got {fb.shape}.")
    if not np.all(np.isfinite(fb)) or np.any(fb[:, 1] <= fb[:, 0]):
        raise ValueError("feature_bounds must be finite with low < high for every feature.")
    lo, hi = (float(v) for v in target_bounds)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"target_bounds must be finite with low < high, got {target_bounds!r}.")
    if fit_intercept:
        x_center, y_center = fb.mean(axis=1), (lo + hi) / 2.0
    else:  # a model without intercept must not be centred: y = <x, w> exactly
        x_center, y_center = np.zeros(fb.shape[0]), 0.0
    x_radius = float(np.linalg.norm(np.maximum(fb[:, 1] - x_center, x_center - fb[:, 0])))
    return LinearBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=x_radius,
        y_radius=max(hi - y_center, y_center - lo),
        intercept_scale=x_radius / math.sqrt(fb.shape[0]) if fit_intercept else 0.0,
        source="public",
    )


def preprocessing_rows_needed(mu: float, search_queries: int = DEFAULT_SEARCH_QUERIES) -> int:
    """Fewest rows :func:`private_bounds` accepts at GDP budget ``mu``.

    Each of the six chunks must hold at least ``MIN_CHUNK_ROWS`` rows and at least
    ``CHUNK_MARGINS`` = 10 times DP-STAT's margin Gamma (alpha = 1/mu). DP-STAT stops once the
    noisy count reaches s - Gamma, so it locates roughly the (1 - 2 Gamma / s) quantile: with
    s = 10 Gamma that is at least the 80% quantile before the doubling grid rounds it up. With
    fewer rows (we measured s = 4 Gamma) the bounds fall near the median, clipping attenuates the
    fit badly (hundreds of times OLS's excess risk at N = 20,000), and public bounds are the
    right tool.
    """
    margin = dp_stat_margin(1.0 / check_positive("mu", mu), search_queries)
    return PRIVATE_RELEASES * max(MIN_CHUNK_ROWS, math.ceil(CHUNK_MARGINS * margin))


def check_feature_bounds(feature_bounds, n_features: int) -> np.ndarray:
    """Public per-feature ranges as an (n_features, 2) array of finite (low, high), low < high;
    a single (low, high) pair applies to every feature."""
    fb = np.asarray(feature_bounds, dtype=float)
    if fb.shape == (2,):
        fb = np.tile(fb, (n_features, 1))
    if fb.shape != (n_features, 2):
        raise ValueError(
            f"feature_bounds must be a (low, high) pair or have shape ({n_features}, 2); got "
            f"shape {fb.shape}."
        )
    if not np.all(np.isfinite(fb)) or np.any(fb[:, 1] <= fb[:, 0]):
        raise ValueError("feature_bounds must be finite with low < high for every feature.")
    return fb


def dp_stat_minimum_rows(mu: float) -> int:
    """Fewest records N for which :func:`preprocessing_share` accepts DP-STAT's private
    preprocessing at budget mu: twice 1.05 times :func:`preprocessing_rows_needed` (public)."""
    return int(2 * 1.05 * preprocessing_rows_needed(mu))


def preprocessing_share(n: int, mu: float, fraction: float, hint: str) -> float:
    """Probability of a record going to private preprocessing (public: N and mu only).

    At least 1.05 times :func:`preprocessing_rows_needed` rows in expectation (5% slack for the
    random chunk sizes) and at least ``fraction``; refuses, naming the rows needed and ``hint``,
    when N is below twice that (:func:`dp_stat_minimum_rows`).
    """
    if n < dp_stat_minimum_rows(mu):
        raise ValueError(
            f"Too few rows: private preprocessing (no public bounds given) needs at least "
            f"{dp_stat_minimum_rows(mu)} rows, {n} are available. {hint}"
        )
    return max(1.05 * preprocessing_rows_needed(mu) / n, fraction)


def private_bounds_by_label(
    X: np.ndarray,
    y: np.ndarray,
    label: np.ndarray,
    share: float,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    fit_intercept: bool = True,
) -> LinearBounds:
    """:func:`private_bounds` on the records whose secret uniform ``label`` is below ``share``,
    split into PRIVATE_RELEASES chunks of equal probability (public expected sizes).

    A chunk holds Bin(N, width) records. The means divide by the expected size N width; DP-STAT
    aims at the realised size (see :func:`private_bounds`), not at the expected one, which the
    realised count misses about half the time (issue 12 item 6: with the expected size, 10% of
    the bounds at epsilon = 8 near the minimum N were the whole search domain)."""
    width = share / PRIVATE_RELEASES
    chunks = [
        np.flatnonzero((label >= j * width) & (label < (j + 1) * width))
        for j in range(PRIVATE_RELEASES)
    ]
    return private_bounds(
        X,
        y,
        chunks=chunks,
        expected_rows=width * X.shape[0],
        mu=mu,
        rng=rng,
        ledger=ledger,
        fit_intercept=fit_intercept,
    )


def private_bounds(
    X: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray | None = None,
    *,
    chunks: list[np.ndarray] | None = None,
    expected_rows: float | None = None,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    fit_intercept: bool = True,
    search_domain: float = DEFAULT_SEARCH_DOMAIN,
    search_queries: int = DEFAULT_SEARCH_QUERIES,
) -> LinearBounds:
    """Private centres and radii from the records ``rows`` (disjoint from the main fit's).

    Six releases, each on its own disjoint chunk of ``rows`` and each mu-GDP: DP-STAT of the row
    norms, the noisy mean of rows clipped to that norm, the same two for |y|, then DP-STAT of the
    centred row norms and of the centred |y| (without an intercept only the last two: the data
    are not centred). Under replace-one neighbours a clipped mean over m
    rows has sensitivity 2 R / m; DP-STAT has sensitivity 1 per count.

    Args:
        X, y: the full private data (only ``rows`` are read).
        rows: indices of the preprocessing records (at least
            :func:`preprocessing_rows_needed` of them), split into six fixed-size chunks; or
        chunks, expected_rows: six index arrays assigned by independent draws and the public
            expected size of each (the divisor of the means). DP-STAT aims at each chunk's
            realised size: the assignment is independent of the data, so under replace-one or
            zero-out neighbours (N fixed, the only relations privopt uses) the sizes are
            independent of the data too, and conditioning on them leaves every release's
            guarantee intact. Under add/remove a realised size would reveal membership, so an
            add/remove ledger is refused.
        mu: GDP budget of each release (each touches a disjoint chunk).
        rng: randomness for the noise.
        ledger: where the releases are recorded (partition = ``("preprocess", chunk)``).
        search_domain, search_queries: public range and resolution of the DP-STAT searches.
    """
    mu = check_positive("mu", mu)
    needed = preprocessing_rows_needed(mu, search_queries)
    if chunks is None:
        if rows is None:
            raise ValueError("Give the preprocessing rows, or chunks with expected_rows.")
        rows = np.asarray(rows)
        available = rows.size
        chunks = np.array_split(rows, PRIVATE_RELEASES)
        per_chunk = None  # fixed-size chunks: their sizes are public
    else:
        if len(chunks) != PRIVATE_RELEASES or expected_rows is None:
            raise ValueError(
                f"Give {PRIVATE_RELEASES} chunks and their public expected_rows per chunk."
            )
        per_chunk = check_positive("expected_rows", expected_rows)
        if ledger.neighbouring is Neighbouring.ADD_REMOVE:
            raise ValueError(
                "Private bounds on randomly assigned chunks use the chunks' realised sizes, "
                "which add/remove neighbours would reveal; use a replace-one or zero-out ledger "
                "(N public)."
            )
        available = int(per_chunk * PRIVATE_RELEASES)
    if available < needed:
        raise ValueError(
            f"Private preprocessing needs at least {needed} rows at this privacy level "
            f"(mu = {mu:.3g}), got {available}: give public feature and target bounds instead, "
            "or more data."
        )
    # DP-STAT is 1/(2 alpha^2)-zCDP and, as K Gaussian counts of std alpha sqrt(K), 1/alpha-GDP.
    alpha = gaussian_release_std(1.0, mu)

    def approx_max(values: np.ndarray, chunk: int, label: str) -> float:
        result = dp_stat(
            values,
            domain=search_domain,
            noise_multiplier=alpha,
            rng=rng,
            queries=search_queries,
        )
        ledger.record(
            GaussianEvent(1.0, result.count_std, count=result.queries, label=label),
            partition=("preprocess", chunk),
        )
        return result.gamma

    def noisy_mean(values: np.ndarray, bound: float, chunk: int, label: str) -> np.ndarray:
        # Divide by a public size: the realised size of a randomly assigned chunk must not
        # enter the release. A sum of values with norm <= bound over a public divisor m has
        # sensitivity 2 bound / m under replace-one and bound / m under add/remove.
        m = values.shape[0] if per_chunk is None else per_chunk
        sensitivity = 2.0 * bound / m
        std = gaussian_release_std(sensitivity, mu)
        ledger.record(GaussianEvent(sensitivity, std, label=label), partition=("preprocess", chunk))
        return values.sum(axis=0) / m + gaussian_noise(rng, std, values.shape[1:])

    if fit_intercept:
        x0, y0 = np.asarray(X[chunks[0]], float), np.asarray(y[chunks[2]], float)
        r_x = approx_max(np.linalg.norm(x0, axis=1), 0, "private row-norm bound")
        x1 = np.asarray(X[chunks[1]], float)
        x1 = x1 * clip_factors(np.linalg.norm(x1, axis=1), r_x)[:, None]
        x_center = noisy_mean(x1, r_x, 1, "private feature means")
        r_y = approx_max(np.abs(y0), 2, "private target bound")
        y1 = np.clip(np.asarray(y[chunks[3]], float), -r_y, r_y)
        y_center = float(noisy_mean(y1, r_y, 3, "private target mean"))
    else:  # no intercept: the model is y = <x, w>, so the data are not centred
        x_center, y_center = np.zeros(X.shape[1]), 0.0
    x_radius = approx_max(
        np.linalg.norm(np.asarray(X[chunks[4]], float) - x_center, axis=1),
        4,
        "private centred row-norm bound",
    )
    y_radius = approx_max(
        np.abs(np.asarray(y[chunks[5]], float) - y_center), 5, "private centred target bound"
    )
    d = X.shape[1]
    ledger.assume(
        "rows and targets are centred and clipped to privately estimated bounds before fitting"
    )
    return LinearBounds(
        x_center=np.asarray(x_center, dtype=float),
        y_center=y_center,
        x_radius=float(x_radius),
        y_radius=float(y_radius),
        intercept_scale=float(x_radius) / math.sqrt(d) if fit_intercept else 0.0,
        source="private",
    )


@dataclass(frozen=True)
class SecondMoment:
    """Spectral summary of a privately released second-moment matrix H = E[z z^T].

    Attributes:
        eigenvalues: eigenvalues of the (symmetrised, noisy) estimate, ascending, floored at
            ``floor`` so that they are positive.
        floor: the smallest eigenvalue allowed (a public fraction of the largest).
    """

    eigenvalues: np.ndarray
    floor: float

    @property
    def h_norm(self) -> float:
        return float(self.eigenvalues[-1])

    @property
    def trace(self) -> float:
        return float(np.sum(self.eigenvalues))

    @property
    def kappa(self) -> float:
        return float(self.eigenvalues[-1] / self.eigenvalues[0])

    @property
    def row_norm_sq(self) -> float:
        """R_x^2 = Tr H + 2 ||H||, exact for Gaussian rows
        (docs/theory/linear-regression-adaptive-clipping.md#synthetic-data)."""
        return self.trace + 2.0 * self.h_norm


def private_second_moment(
    Z: np.ndarray,
    rows: np.ndarray,
    *,
    row_bound: float,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = ("preprocess", "second moment"),
    floor_ratio: float = 1e-3,
    expected_rows: float | None = None,
) -> SecondMoment:
    """mu-GDP release of (1/m) sum_{i in rows} z_i z_i^T for rows clipped to ``row_bound``.

    Under replace-one neighbours the matrix changes by (a a^T - b b^T)/m, whose Frobenius norm is
    sqrt(||a||^4 + ||b||^4 - 2 (a.b)^2)/m <= sqrt(2) R^2 / m. The noise is a symmetric Gaussian
    matrix: the upper triangle (diagonal included) is released with that l2 sensitivity (each
    off-diagonal pair counted once, which can only lower the norm) and mirrored.
    """
    mu = check_positive("mu", mu)
    row_bound = check_positive("row_bound", row_bound)
    rows = np.asarray(rows)
    check_count("second-moment rows", rows.size, minimum=1)
    m = check_positive("expected_rows", expected_rows) if expected_rows else rows.size
    if m < MIN_CHUNK_ROWS:
        raise ValueError(f"The private second moment needs at least {MIN_CHUNK_ROWS} rows.")
    zc = np.asarray(Z[rows], dtype=float)
    zc = zc * clip_factors(np.linalg.norm(zc, axis=1), row_bound)[:, None]
    sensitivity = math.sqrt(2.0) * row_bound**2 / m
    std = gaussian_release_std(sensitivity, mu)
    ledger.record(
        GaussianEvent(sensitivity, std, label="private second moment"), partition=partition
    )
    p = zc.shape[1]
    noise = np.triu(gaussian_noise(rng, std, (p, p)))
    noise = noise + np.triu(noise, 1).T
    estimate = zc.T @ zc / m + noise
    eigenvalues = np.linalg.eigvalsh((estimate + estimate.T) / 2.0)
    floor = max(float(eigenvalues[-1]) * floor_ratio, np.finfo(float).tiny)
    return SecondMoment(np.maximum(eigenvalues, floor), floor)
