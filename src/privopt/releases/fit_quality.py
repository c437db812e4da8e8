"""A private estimate of a linear fit's own quality: a clipped (winsorised) R^2.

Issue 31: a private fit must never be silently worse than predicting the mean. After the fit,
with the released model (coef, intercept) fixed, one Gaussian release on the training rows (a
fixed, data-independent stride of at most QUALITY_ROWS of them, public size n) gives

    U = sum_i min(r_i^2, c^2) / c^2,      r_i = y_i - <x_i, coef> - intercept
    V = sum_i min(a_i^2, c^2) / c^2,      a_i = y_i - y_c      (y_c the bounds' target centre)
    S = sum_i clip(a_i / c, -1, 1)

each plus N(0, s^2), s = Delta / mu_q: every term lies in [0, 1] (U, V) or [-1, 1] (S), so one
record moves the vector by at most Delta = sqrt(3) under zero-out and sqrt(1 + 1 + 4) =
sqrt(6) under replace-one. The clip c = QUALITY_CLIP times the bounds' target radius (two
robust sigmas of the target for the coarse bounds, four for the full ones) is public (a
function of earlier releases). Post-processing:

    R^2_c = 1 - U / (V - S^2 / n)

is the R^2 of the winsorised losses: ``V - S^2 / n`` is exactly the sum of squares of the
clipped centred targets about their mean (the intercept-only model's loss on the same
scale), U the model's. For a fit with residuals mostly inside c it is the ordinary R^2 up to
the clipping of the target's tails, and it is in-sample: the optimism of least squares is
about p / n of the residual variance (negligible for n >> p), while the privacy noise in the
coefficients, the thing being measured, is independent of it. Its standard error from the
release noise alone, ``s sqrt(1 + (U/D)^2) / D`` with D = V - S^2/n, is reported with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.noise.rng import gaussian_noise
from privopt.releases.preprocess import LinearBounds
from privopt.training.calibrate import gaussian_release_std

__all__ = ["QUALITY_CLIP", "QUALITY_ROWS", "QUALITY_SHARE", "private_r2", "quality_holdout"]

#: share of the fit's mu^2 spent on the quality release (the method gets 1 - this, less the
#: preprocessing's share): 5% costs the method's noise 2.5%
QUALITY_SHARE = 0.05
#: the squared residuals and centred targets are clipped at QUALITY_CLIP times the target
#: radius of the bounds
QUALITY_CLIP = 0.25
#: at most this many rows (a fixed stride, public) are read: the release's noise is then
#: far below its sums, and the pass costs at most one X @ w on 10^5 rows
QUALITY_ROWS = 100_000


#: the self-calibrating methods' held-out slice: n // QUALITY_HOLDOUT_DIVISOR rows, at most
#: QUALITY_HOLDOUT_MAX (the release's noise is then a few percent of its sums), none below
#: QUALITY_HOLDOUT_MIN (the estimate would be noise)
QUALITY_HOLDOUT_DIVISOR = 20
QUALITY_HOLDOUT_MAX = 2_000
QUALITY_HOLDOUT_MIN = 100


def quality_holdout(
    n: int,
    excluded: np.ndarray,
    take: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    mu: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, dict | None]:
    """(the rows the method must not read, the quality release's arguments or None) for a
    method that calibrates itself to (epsilon, delta) (Poisson DP-SGD, DP-SSGD, DP-FTRL-Sigma),
    whose budget is not a GDP share to split.

    A secret uniform slice of min(QUALITY_HOLDOUT_MAX, n // QUALITY_HOLDOUT_DIVISOR) of the rows
    not in ``excluded`` (its size public) is held out of the fit; :func:`private_r2` then runs
    on it at the fit's full mu in its own partition "quality": the slice is disjoint from the
    method's rows and from the bounds' slice, so the releases compose in parallel and the
    claim is unchanged (McSherry 2009, parallel composition). The estimate is out of sample.
    Below QUALITY_HOLDOUT_MIN rows nothing is held out (no estimate).
    """
    m = min(QUALITY_HOLDOUT_MAX, n // QUALITY_HOLDOUT_DIVISOR)
    if m < QUALITY_HOLDOUT_MIN:
        return excluded, None
    rows = np.sort(rng.choice(np.setdiff1d(np.arange(n), excluded), m, replace=False))
    quality = {"take": lambda r: take(rows[r]), "n": m, "mu": mu, "rng": rng, "units": n}
    return np.union1d(excluded, rows).astype(np.int64), {**quality, "partition": "quality"}


def private_r2(
    coef: np.ndarray,
    intercept: float,
    bounds: LinearBounds,
    take: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    n: int,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: object = None,
    weights: np.ndarray | None = None,
) -> tuple[float, float]:
    """(R^2_c, its standard error) of the released model (module docstring), one mu-GDP
    Gaussian release recorded in ``ledger``. ``take(rows)`` returns ``(X[rows], y[rows])``.

    ``weights`` (user level): 1 / n_u for each of the n records, each user's summing to 1.
    Every record is read (no stride: a stride would keep a data-dependent part of a user's
    weight) and each term is weighted, so one user moves each sum by at most one term's bound
    and the sensitivities above hold for a whole user; the intercept-only scale then uses the
    public number of users, the weights' total."""
    stride = max(1, math.ceil(n / QUALITY_ROWS)) if weights is None else 1
    rows = np.arange(0, n, stride)
    w = np.ones(rows.size) if weights is None else np.asarray(weights, dtype=float)
    X, y = take(rows)
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    c = QUALITY_CLIP * bounds.y_radius
    low, high = bounds.feature_range().T  # the model's own prediction: clipped features
    prediction = np.clip(X, low, high) @ coef + intercept
    residual = np.nan_to_num((y - prediction) / c, nan=1.0, posinf=1.0, neginf=1.0)
    centred = (y - bounds.y_center) / c
    exact = np.array(
        [
            w @ np.minimum(residual**2, 1.0),
            w @ np.minimum(centred**2, 1.0),
            w @ np.clip(centred, -1.0, 1.0),
        ]
    )
    sensitivity = math.sqrt(3.0) if ledger.neighbouring.value == "zero-out" else math.sqrt(6.0)
    std = gaussian_release_std(sensitivity, mu)
    u, v, s = exact + gaussian_noise(rng, std, 3)
    ledger.record(
        GaussianEvent(sensitivity, std, label="private fit quality (clipped residual sums)"),
        partition=partition,
    )
    size = float(rows.size) if weights is None else float(round(w.sum()))  # N users
    spread = max(v - s * s / size, 1.0)  # at least one clipped unit: the release is noisy
    r2 = min(1.0 - u / spread, 1.0)  # U is a sum of non-negative terms
    return float(r2), float(std * math.sqrt(1.0 + (u / spread) ** 2) / spread)
