"""The per-partition tasks: exact, deterministic statistics of one partition's main rows.

Every function here is pure (no randomness, no clock, no global state), so a task that the
scheduler runs twice (a lost worker, a retry) returns the same value; the noise is added on the
client afterwards (:mod:`privopt.distributed.methods`). Each starts from a partition
``(X_block, y_block)`` and its global offset, drops the rows of the private preprocessing slice
(``excluded``: sorted global indices, data-independent), and transforms the rest with the
fit's :class:`~privopt.algorithms.preprocess.LinearBounds`, row by row exactly as the in-memory
estimator does.
"""

from __future__ import annotations

import numpy as np

from privopt.algorithms.preprocess import LinearBounds
from privopt.clipping import clip_factors, row_norms

__all__ = [
    "clipped_residual_gradient",
    "gram_moment",
    "main_rows",
    "residual_counts",
    "sgd_block",
    "sgd_gradient",
]


def main_rows(
    part: tuple[np.ndarray, np.ndarray], offset: int, excluded: np.ndarray, bounds: LinearBounds
) -> tuple[np.ndarray, np.ndarray]:
    """(Z, t): the partition's rows outside ``excluded``, transformed by ``bounds``."""
    X, y = part
    lo, hi = np.searchsorted(excluded, [offset, offset + X.shape[0]])
    if hi > lo:
        keep = np.ones(X.shape[0], dtype=bool)
        keep[excluded[lo:hi] - offset] = False
        X, y = X[keep], y[keep]
    return bounds.transform(X, y)


def _clipped(Z, t, row_bound, target_bound, norms: str):
    """Rows clipped to ``row_bound`` and targets to ``target_bound`` as the method does it
    (AdaSSP: ``np.linalg.norm``; noisy Newton: ``row_norms``, only when a row exceeds it)."""
    if norms == "linalg":
        Z = Z * clip_factors(np.linalg.norm(Z, axis=1), row_bound)[:, None]
    else:
        lengths = row_norms(Z)
        if np.any(lengths > row_bound):
            Z = Z * clip_factors(lengths, row_bound)[:, None]
    return Z, np.clip(t, -target_bound, target_bound)


def gram_moment(part, offset, excluded, bounds, row_bound, target_bound, norms="linalg"):
    """(Z^T Z, Z^T t) of the partition's clipped main rows (AdaSSP's and Newton's statistic;
    the sum over partitions is the in-memory product up to summation order)."""
    Z, t = _clipped(*main_rows(part, offset, excluded, bounds), row_bound, target_bound, norms)
    return Z.T @ Z, Z.T @ t


def residual_counts(part, offset, excluded, bounds, row_bound, target_bound, w, grid):
    """(#{|r_i| < c}, #{|r_i| <= c}) for every grid point c, r = Z w - t (noisy Newton's
    quantile scores are functions of these exact integer counts, which add over partitions)."""
    Z, t = _clipped(*main_rows(part, offset, excluded, bounds), row_bound, target_bound, "row")
    values = np.sort(np.abs(Z @ w - t))
    below = np.searchsorted(values, grid, side="left").astype(np.int64)
    at_or_below = np.searchsorted(values, grid, side="right").astype(np.int64)
    return below, at_or_below


def clipped_residual_gradient(part, offset, excluded, bounds, row_bound, target_bound, w, rho):
    """sum_i z_i clip(<z_i, w> - t_i, +-rho) over the partition (noisy Newton's gradient)."""
    Z, t = _clipped(*main_rows(part, offset, excluded, bounds), row_bound, target_bound, "row")
    return Z.T @ np.clip(Z @ w - t, -rho, rho)


def sgd_block(part, offset, excluded, bounds):
    """(Z, t, ||z_i||) of the partition's main rows, kept in cluster memory for DP-SGD."""
    Z, t = main_rows(part, offset, excluded, bounds)
    return Z, t, row_norms(Z)


def sgd_gradient(block, local: np.ndarray, w: np.ndarray, clip: float):
    """(sum_i clip_G(r_i z_i), number clipped) over the rows ``local`` of a DP-SGD block, as
    :class:`privopt.training.gradients.LinearRegressionModel` computes it."""
    Z, t, norms = block
    Zb = Z[local]
    r = Zb @ w - t[local]
    factors = clip_factors(np.abs(r) * norms[local], clip)
    return Zb.T @ (r * factors), np.int64(np.count_nonzero(factors < 1.0))
