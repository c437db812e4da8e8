"""Per-example l2 clipping, with the semantics every privacy proof in privopt relies on.

``clip_zeta(v) = v * min(1, zeta / ||v||)`` (Varshney et al. (2022) main text; its appendix's
``max`` is a typo,
docs/theory/linear-regression-adaptive-clipping.md item 1). The factor is computed without dividing
by zero, and the clipped norm never exceeds zeta, even in floating point (the factor is nudged down
when rounding would overshoot). Non-finite inputs are refused: a NaN gradient would escape any norm
bound.

For least squares the per-example gradient is ``r_i x_i`` with residual ``r_i = <x_i, w> - y_i``,
so its norm is ``|r_i| ||x_i||``: :func:`clip_factors` works from norms alone and linear models
never materialise the n x d gradient matrix.
"""

from __future__ import annotations

import math

import numpy as np

from privopt._validate import check_nonnegative

__all__ = ["clip_factor", "clip_factors", "clip_rows", "row_norms"]

_TINY = np.finfo(float).tiny


def row_norms(rows: np.ndarray) -> np.ndarray:
    """l2 norms of the rows (last axis) in one pass, exact also for extreme magnitudes.

    The fast path sums squares (``einsum``, no temporary copy). Rows whose sum of squares
    overflowed or lost precision to underflow are recomputed with rescaling.
    """
    rows = np.asarray(rows, dtype=float)
    squares = np.einsum("...i,...i->...", rows, rows)
    norms = np.sqrt(squares)
    suspect = ~np.isfinite(squares) | (squares < 1e-290)
    if np.any(suspect):
        bad = rows[suspect]
        scale = np.max(np.abs(bad), axis=-1, keepdims=True)
        safe = np.where(scale > 0, scale, 1.0)
        norms[suspect] = (np.linalg.norm(bad / safe, axis=-1, keepdims=True) * scale)[..., 0]
    return norms


def clip_factors(norms: np.ndarray, threshold: float) -> np.ndarray:
    """Scale factors ``min(1, threshold / norm)`` so that ``factor * norm <= threshold``.

    Norms at or below the threshold (zero and subnormal ones included) get factor exactly 1.
    """
    threshold = check_nonnegative("threshold", threshold)
    norms = np.atleast_1d(np.asarray(norms, dtype=float))
    if not np.all(np.isfinite(norms)):
        raise ValueError("Cannot clip non-finite values (NaN or inf in the gradients).")
    over = norms > threshold
    factors = np.ones_like(norms)
    factors[over] = threshold / norms[over]
    overshoot = factors * norms > threshold
    while np.any(overshoot):  # rounding pushed a clipped norm above the threshold: step down
        factors[overshoot] = np.nextafter(factors[overshoot], 0.0)
        overshoot = factors * norms > threshold
    return factors


def clip_rows(rows: np.ndarray, threshold: float) -> np.ndarray:
    """Rows of ``rows`` clipped to l2 norm ``threshold`` (a new array; the input is unchanged)."""
    rows = np.asarray(rows, dtype=float)
    if not np.all(np.isfinite(rows)):
        raise ValueError("Cannot clip non-finite values (NaN or inf in the gradients).")
    factors = clip_factors(row_norms(rows), threshold)
    return rows * factors.reshape((*rows.shape[:-1], 1))


def clip_factor(norm: float, threshold: float) -> float:
    """:func:`clip_factors` for one norm, on Python floats (the single-row training kernel).

    The same semantics: 1.0 at or below the threshold, else ``threshold / norm`` nudged down
    until ``factor * norm <= threshold`` holds in floating point.
    """
    if not math.isfinite(norm):
        raise ValueError("Cannot clip non-finite values (NaN or inf in the gradients).")
    if norm <= threshold:
        return 1.0
    factor = threshold / norm
    while factor * norm > threshold:
        factor = math.nextafter(factor, 0.0)
    return factor
