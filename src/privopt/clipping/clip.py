"""Per-example l2 clipping, with the semantics every privacy proof in privopt relies on.

``clip_zeta(v) = v * min(1, zeta / ||v||)`` (seed 000 main text; its appendix's ``max`` is a typo,
notes/000.md §9 item 1). The factor is computed without dividing by zero, and the clipped norm
never exceeds zeta, even in floating point (the factor is nudged down when rounding would
overshoot). Non-finite inputs are refused: a NaN gradient would escape any norm bound.

For least squares the per-example gradient is ``r_i x_i`` with residual ``r_i = <x_i, w> - y_i``,
so its norm is ``|r_i| ||x_i||``: :func:`clip_factors` works from norms alone and linear models
never materialise the n x d gradient matrix.
"""

from __future__ import annotations

import numpy as np

from privopt._validate import check_nonnegative

__all__ = ["clip_factors", "clip_rows"]

_TINY = np.finfo(float).tiny


def clip_factors(norms: np.ndarray, threshold: float) -> np.ndarray:
    """Scale factors ``min(1, threshold / norm)`` so that ``factor * norm <= threshold``."""
    threshold = check_nonnegative("threshold", threshold)
    norms = np.asarray(norms, dtype=float)
    if not np.all(np.isfinite(norms)):
        raise ValueError("Cannot clip non-finite values (NaN or inf in the gradients).")
    factors = np.minimum(1.0, threshold / np.maximum(norms, _TINY))
    over = factors * norms > threshold
    if np.any(over):  # rounding pushed a clipped norm above the threshold: step down one ulp
        factors[over] = np.nextafter(factors[over], 0.0)
    return factors


def clip_rows(rows: np.ndarray, threshold: float) -> np.ndarray:
    """Rows of ``rows`` clipped to l2 norm ``threshold`` (a new array; the input is unchanged)."""
    rows = np.asarray(rows, dtype=float)
    norms = np.linalg.norm(rows, axis=-1)
    return rows * clip_factors(norms, threshold)[..., None]
