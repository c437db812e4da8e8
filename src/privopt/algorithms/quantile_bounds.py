"""Private bounds from quantiles: centres, scales and radii that work from N of a few thousand.

The exponential mechanism over a data-independent grid (:mod:`privopt.clipping.quantiles`)
chooses each feature's and the target's central range and the rows' radius
(:func:`private_quantile_bounds`), or tightens loose public radii
(:func:`tighten_public_bounds`). Every release is recorded in the ledger as the Gaussian event
that dominates it; the caller chooses the partition (None: the releases share their records
with the fit, which then composes with them sequentially in exact GDP).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from privopt._validate import check_count, check_positive
from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.algorithms.preprocess import DEFAULT_SEARCH_DOMAIN, LinearBounds
from privopt.clipping import row_norms
from privopt.clipping.quantiles import (
    bounded_range_epsilon,
    log_grid,
    private_interval_quantile,
    value_grid,
)

__all__ = [
    "QUANTILE_ROWS",
    "private_quantile_bounds",
    "quantile_releases",
    "tail_level",
    "tighten_public_bounds",
]

#: at most this many rows (a secret uniform subset of public size) feed the private quantiles
QUANTILE_ROWS = 20_000
#: tail level tau of every feature's and the target's range (levels tau and 1 - tau): the
#: widest level at which each release keeps TAIL_RANKS ranks of margin (tau m eps / 2 >=
#: TAIL_RANKS, m rows, eps per release), between TAIL_LEVELS; quartiles at N of a few thousand
#: (tail levels fail there, notes §3.6), 5% / 95% at large N, where a binary feature's two
#: values are both inside the range (quartiles can land in the gap between them)
TAIL_LEVELS = (0.05, 0.25)
TAIL_RANKS = 15.0
#: centred, standardised features are clipped to +-BOX_SIGMAS (robust sigmas)
BOX_SIGMAS = 4.0
#: the centred target is clipped to +-TARGET_SIGMAS robust sigmas
TARGET_SIGMAS = 4.0
#: the row radius is the private ROW_LEVEL-quantile of the standardised row norms (a lower
#: level clips the longest rows and biases the fit: 1.8x OLS at 0.9 against 1.2x at 0.99 on
#: x ~ N(0, I_20), N = 200,000, epsilon = 1)
ROW_LEVEL = 0.99


def quantile_releases(n_features: int) -> int:
    """Number of exponential-mechanism releases of :func:`private_quantile_bounds`: a coarse
    median and two quartiles per feature and for the target, and the row radius."""
    return 3 * n_features + 4


def tail_level(m: int, mu_each: float) -> float:
    """tau for m rows and a GDP budget mu_each per release (public; see TAIL_LEVELS)."""
    tau = 2.0 * TAIL_RANKS / (m * bounded_range_epsilon(mu_each))
    return min(max(tau, TAIL_LEVELS[0]), TAIL_LEVELS[1])


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
) -> LinearBounds:
    """Private centres, scales and radii from quartiles chosen by the exponential mechanism.

    On the records ``rows`` (a secret, data-independent subset of public size m), with each
    of the ``2 d + 3`` releases mu / sqrt(2 d + 3)-GDP (so together mu-GDP, by exact GDP
    composition; each is an exponential mechanism recorded as the Gaussian event that
    dominates it, :mod:`privopt.clipping.quantiles`):

    * feature j: a coarse median, then the tau and 1 - tau quantiles a_j <= b_j
      (:func:`tail_level`: quartiles at small m eps, down to 5% / 95%) over the public grid
      :func:`~privopt.clipping.quantiles.value_grid` (atom-aware score, sensitivity 1);
      centre c_j = (a_j + b_j) / 2, scale s_j = (b_j - a_j) / (2 z_tau) (sigma units;
      s_j = 1, no box clip, when the two coincide: an atom holds their mass);
    * target: the same, centre c_y; radius ``TARGET_SIGMAS`` s_y (1 when degenerate);
    * the standardised rows z = clip((x - c) / s, +-BOX_SIGMAS) have the radius R = the private
      ``ROW_LEVEL`` quantile of ||z|| over a log grid bounded by BOX_SIGMAS sqrt(d) when every
      feature is boxed (so the search cannot fail upward).

    Without an intercept nothing is centred (the model is y = <x, w>); the scales are then
    max(|a_j|, |b_j|) / z_tau. Privacy: replace-one or zero-out (every count moves by at most
    one; m is public); the events are recorded with ``partition`` (None: they touch records
    that the main fit uses too, so they compose sequentially with it).
    """
    mu = check_positive("mu", mu)
    rows = np.asarray(rows)
    m = check_count("preprocessing rows", rows.size, minimum=2)
    n_features = X.shape[1]
    mu_each = mu / math.sqrt(quantile_releases(n_features))
    grid = value_grid()
    coarse = value_grid(ratio=1.05)
    tau = tail_level(m, mu_each)
    z_tau = float(norm.isf(tau))  # the (tau, 1 - tau) half-range of a normal law, in sigmas

    def quantile(sorted_values: np.ndarray, q: float, label: str, candidates=grid) -> float:
        release = private_interval_quantile(
            sorted_values, q, candidates, mu=mu_each, rng=rng, n=float(m)
        )
        ledger.record(
            GaussianEvent(1.0, 1.0 / release.mu, label=f"{label} (exponential mechanism)"),
            partition=partition,
        )
        return release.value

    def centre_scale(sorted_values: np.ndarray, label: str) -> tuple[float, float, bool]:
        # a coarse median first, so that the quartiles are searched on values centred near 0,
        # where the log grid is fine relative to their spread (an offset feature such as a
        # pressure of 1013 +- 6 would otherwise have almost no candidates inside its range)
        shift = 0.0
        if fit_intercept:
            shift = quantile(sorted_values, 0.5, f"private coarse median of {label}", coarse)
        centred = sorted_values - shift
        a = quantile(centred, tau, f"private {tau:.3g}-quantile of {label}")
        b = quantile(centred, 1.0 - tau, f"private {1 - tau:.3g}-quantile of {label}")
        a, b = min(a, b), max(a, b)
        if fit_intercept:
            centre, half = shift + (a + b) / 2.0, (b - a) / 2.0
        else:
            centre, half = 0.0, max(abs(a), abs(b))
        if not half > 0.0:
            return centre, 1.0, False
        return centre, half / z_tau, True

    X_rows = np.sort(np.asarray(X[rows], dtype=float), axis=0)
    stats = [centre_scale(X_rows[:, j], f"feature {j}") for j in range(n_features)]
    x_center = np.array([c for c, _, _ in stats])
    x_scale = np.array([s for _, s, _ in stats])
    boxed = np.array([b for _, _, b in stats])
    y_center, y_scale, _ = centre_scale(np.sort(np.asarray(y[rows], dtype=float)), "the target")
    ledger.assume(
        "rows and targets are centred, standardised and clipped to privately estimated "
        "quantile bounds before fitting"
    )
    staged = LinearBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=float(np.finfo(float).max),
        y_radius=TARGET_SIGMAS * y_scale,
        intercept_scale=0.0,
        source="private",
        x_scale=x_scale,
        x_box=BOX_SIGMAS,
        box_mask=None if boxed.all() else boxed,
    )
    norms = np.sort(row_norms(staged.transform(np.asarray(X[rows], dtype=float))))
    top = BOX_SIGMAS * math.sqrt(n_features) if boxed.all() else DEFAULT_SEARCH_DOMAIN
    radius_grid = log_grid(1e-3 * math.sqrt(n_features), top, 1.01)
    radius_grid[-1] = top
    radius = quantile(norms, ROW_LEVEL, "private row-norm radius", radius_grid)
    return LinearBounds(
        x_center=x_center,
        y_center=y_center,
        x_radius=radius,
        y_radius=TARGET_SIGMAS * y_scale,
        intercept_scale=radius / math.sqrt(n_features) if fit_intercept else 0.0,
        source="private",
        x_scale=x_scale,
        x_box=BOX_SIGMAS,
        box_mask=None if boxed.all() else boxed,
    )


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
