"""The per-partition tasks: exact, deterministic statistics of one partition's main rows.

Every function here is pure (no randomness, no clock, no global state), so a task that the
scheduler runs twice (a lost worker, a retry) returns the same value; the noise is added on the
client afterwards (:mod:`privopt.distributed.methods`). Each starts from a partition
``(X_block, y_block)`` and its global offset, drops the rows of the private preprocessing slice
(``excluded``: sorted global indices, data-independent), and transforms the rest with the
fit's :class:`~privopt.releases.preprocess.LinearBounds`, row by row exactly as the in-memory
estimator does.

The Gram, residual and gradient kernels are fused: they walk the partition in blocks of
:data:`BLOCK_ROWS` rows, transform and clip each block into one reused cache-sized buffer and
accumulate their statistic, so a task reads its partition once and never copies it whole
(measured per 250,000 x 20 partition, one core: 23 ms for the clipped Gram against 123 ms for
transforming the partition, clipping it and multiplying; reading the file costs 40 ms).
"""

from __future__ import annotations

import numpy as np

from privopt.clipping import clip_factors, row_norms
from privopt.releases.preprocess import LinearBounds

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
    return bounds.transform(*_kept(part, offset, excluded))


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


#: rows per block of :func:`gram_moment`: a (rows, d + 2) float64 block stays in cache while it
#: is centred, clipped and multiplied (at d = 20, 8192 rows is 1.4 MB; measured best of
#: 2048 - 32768 on this machine, 2.6x faster than transforming the whole partition first)
BLOCK_ROWS = 8192
#: a row whose squared norm is provably below (1 - this) R^2 cannot be clipped by the method's
#: clip; others are checked exactly (a bound on the rounding of the derived norm, with room)
_NORM_MARGIN = 1e-9


def _kept(part, offset: int, excluded: np.ndarray):
    """The partition's (X, y) without the rows of ``excluded`` (a copy only if it has some)."""
    X, y = part
    lo, hi = np.searchsorted(excluded, [offset, offset + X.shape[0]])
    if hi > lo:
        keep = np.ones(X.shape[0], dtype=bool)
        keep[excluded[lo:hi] - offset] = False
        X, y = X[keep], y[keep]
    return X, y


def _clipped_block(X, y, bounds: LinearBounds, row_bound, target_bound, norms, out) -> None:
    """``out`` = [Z, t] of one block: ``bounds.transform`` followed by the method's clip
    (:func:`_clipped`), row by row the same arithmetic, written into a column-major buffer.

    The method's row clip is evaluated only where it can act: after the transform a row is
    ``(x', s)`` with ``||x'|| = f * n_x <= x_radius`` (``n_x`` its norm before the feature clip,
    ``f`` its factor), so ``||z||^2 = f^2 n_x^2 + s^2`` up to a few ulps. Rows where this is
    below ``(1 - _NORM_MARGIN) R^2`` get factor 1 in the in-memory code too; a block with other
    rows gets all its norms computed (:func:`row_norms`, twice as fast as the ``np.linalg.norm``
    of in-memory AdaSSP and within an ulp of it, so a factor moves by an ulp at most) and
    ``min(1, R / ||z||)`` applied if one is below 1. ``norms`` is accepted for the callers
    of :func:`_clipped` and changes nothing here.
    """
    d = X.shape[1]
    p = out.shape[1] - 1
    _, lengths = bounds.transform_block(X, out[:, :d], track_changes=False)
    if p > d:
        out[:, d] = bounds.intercept_scale
    squared = lengths * lengths + (bounds.intercept_scale**2 if p > d else 0.0)
    if np.any(squared > (1.0 - _NORM_MARGIN) * row_bound * row_bound):
        Z = out[:, :p]
        lengths = row_norms(Z)  # np.linalg.norm (AdaSSP in memory) differs in the last bit
        if np.any(lengths > row_bound):  # otherwise every factor is 1 (in memory too)
            Z *= clip_factors(lengths, row_bound)[:, None]
    t = out[:, p]
    np.subtract(y, bounds.y_center, out=t)
    np.clip(t, -bounds.y_radius, bounds.y_radius, out=t)
    np.clip(t, -target_bound, target_bound, out=t)


def _blocks(part, offset, excluded, bounds, row_bound, target_bound, norms):
    """[Z, t] of the partition's clipped main rows, one :data:`BLOCK_ROWS` block at a time,
    in one reused column-major buffer (so a consumer must finish with a block before the next:
    the fused kernels below never hold a full-size copy of the partition)."""
    X, y = _kept(part, offset, excluded)
    n, d = X.shape
    p = d + 1 if bounds.intercept_scale > 0 else d
    buffer = np.empty((min(n, BLOCK_ROWS), p + 1), order="F")
    for start in range(0, max(n, 1), BLOCK_ROWS):  # an empty partition: one empty block
        block = buffer[: min(BLOCK_ROWS, n - start)]
        stop = start + block.shape[0]
        _clipped_block(X[start:stop], y[start:stop], bounds, row_bound, target_bound, norms, block)
        yield block


def gram_moment(part, offset, excluded, bounds, row_bound, target_bound, norms="linalg"):
    """(Z^T Z, Z^T t) of the partition's clipped main rows (AdaSSP's and Newton's statistic;
    the sum over partitions is the in-memory product up to summation order).

    One fused pass over the partition in blocks of :data:`BLOCK_ROWS` rows: each block is
    transformed and clipped into one (rows, p + 1) buffer A = [Z, t] and A^T A (float64, one
    BLAS call) is accumulated, so the partition is read once and no full-size copy is made.
    """
    total = None
    for block in _blocks(part, offset, excluded, bounds, row_bound, target_bound, norms):
        product = block.T @ block
        total = product if total is None else total + product
    p = total.shape[0] - 1
    return total[:p, :p], total[:p, p].copy()


def residual_counts(part, offset, excluded, bounds, row_bound, target_bound, w, grid):
    """(#{|r_i| < c}, #{|r_i| <= c}) for every grid point c, r = Z w - t (noisy Newton's
    quantile scores are functions of these exact integer counts, which add over partitions)."""
    parts = [
        np.abs(block[:, :-1] @ w - block[:, -1])
        for block in _blocks(part, offset, excluded, bounds, row_bound, target_bound, "row")
    ]
    values = np.sort(np.concatenate(parts))
    below = np.searchsorted(values, grid, side="left").astype(np.int64)
    at_or_below = np.searchsorted(values, grid, side="right").astype(np.int64)
    return below, at_or_below


def clipped_residual_gradient(part, offset, excluded, bounds, row_bound, target_bound, w, rho):
    """sum_i z_i clip(<z_i, w> - t_i, +-rho) over the partition (noisy Newton's gradient)."""
    total = None
    for block in _blocks(part, offset, excluded, bounds, row_bound, target_bound, "row"):
        Z = block[:, :-1]
        term = Z.T @ np.clip(Z @ w - block[:, -1], -rho, rho)
        total = term if total is None else total + term
    return total


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
