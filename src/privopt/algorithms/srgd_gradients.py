r"""Per-example gradients of Accelerated-DP-SRGD (seed 004): the oracle and one step's increment.

The gradient oracle is a privopt :class:`~privopt.losses.LinearLoss` (its constants L and M on
the ball are the defaults) or a generic ``grad_fn(w, X, y) -> (b, p)``. Step t's clipped
increment is ``Delta_t = (1/B) sum_{d in B_t} clip(eta_t grad f(x_t, d) - eta_{t-1} grad
f(x_{t-1}, d))`` (:func:`srgd_increment`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from privopt._validate import check_count, check_design
from privopt.clipping import clip_factors, row_norms
from privopt.losses import LinearLoss, get_loss

__all__ = ["srgd_increment"]

GradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def resolve_problem(X, y, loss_or_grad_fn, x_bound, y_bound, radius, lipschitz, smoothness, dim):
    """(gradient, X, y, p, L, M, description) for a privopt loss or a generic grad_fn."""
    if isinstance(loss_or_grad_fn, str | LinearLoss):
        loss = get_loss(loss_or_grad_fn)
        if x_bound is None:
            raise ValueError(
                f"The {loss.name} loss needs the public bound x_bound on ||x|| (its constants are "
                "suprema over the data domain)."
            )
        X, y = loss.check_data(X, y, x_bound, y_bound)
        if dim is not None and check_count("dim", dim) != X.shape[1]:
            raise ValueError(f"dim={dim} differs from the {X.shape[1]} features of a linear loss.")
        if lipschitz is None:
            lipschitz = loss.lipschitz(x_bound, y_bound, radius)
            lipschitz = lipschitz if math.isfinite(lipschitz) else None  # e.g. no y_bound
        if smoothness is None:
            holder = loss.holder(x_bound, y_bound)
            smoothness = holder.L if holder.alpha == 1.0 else None
        return loss, X, y, X.shape[1], lipschitz, smoothness, f"{loss.name} loss"
    if not callable(loss_or_grad_fn):
        raise ValueError(
            "Expected a loss name, a privopt LinearLoss or a per-example gradient function "
            f"grad_fn(w, X, y) -> (b, p), got {loss_or_grad_fn!r}."
        )
    X, y = check_design(X, y)
    p = X.shape[1] if dim is None else check_count("dim", dim)
    return loss_or_grad_fn, X, y, p, lipschitz, smoothness, "generic per-example gradient"


def _gradients(gradient: LinearLoss | GradFn, w: np.ndarray, X: np.ndarray, y: np.ndarray):
    grads = np.asarray(gradient(w, X, y), dtype=float)  # type: ignore[operator]
    if grads.shape != (X.shape[0], w.shape[0]):
        raise ValueError(
            f"grad_fn must return one gradient row per example, shape {(X.shape[0], w.shape[0])}, "
            f"got {grads.shape}."
        )
    return grads


def srgd_increment(
    gradient: LinearLoss | GradFn,
    x: np.ndarray,
    x_prev: np.ndarray | None,
    t: int,
    X: np.ndarray,
    y: np.ndarray,
    *,
    clip_first: float,
    clip_difference: float | None,
    batch_size: int,
) -> tuple[np.ndarray, float, float]:
    r"""Step t's clipped batch increment ``Delta_t`` and diagnostics.

    ``Delta_t = (1/B) sum_d clip(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d))`` with
    ``eta_t = t + 1`` (``eta_{-1} = 0``: at t = 0 the plain gradient clipped to ``clip_first``;
    the independent variant calls it with t = 0 at every step). B is the
    fixed batch size, never the number of rows, so zeroing a record changes Delta_t by at most
    ``clip / B``. A :class:`~privopt.losses.LinearLoss` never forms the (b, d) gradient matrix:
    its per-example difference is ``(eta_t phi'(z_t) - eta_{t-1} phi'(z_{t-1})) x``.

    Returns:
        (Delta_t, fraction of the rows clipped, largest unclipped per-example norm).
    """
    t = check_count("t", t, minimum=0)
    first = t == 0
    if not first and x_prev is None:
        raise ValueError("x_prev (the previous iterate) is required for t >= 1.")
    clip = clip_first if first else clip_difference
    if clip is None:
        raise ValueError("clip_difference is required for t >= 1.")
    eta = float(t + 1)
    if isinstance(gradient, LinearLoss):
        coefficient = gradient.derivative(X @ x, y)
        if not first:
            previous = gradient.derivative(X @ x_prev, y)
            coefficient = eta * (coefficient - previous) + previous
        norms = np.abs(coefficient) * row_norms(X)
        factors = clip_factors(norms, clip)
        total = X.T @ (coefficient * factors)
    else:
        rows = _gradients(gradient, x, X, y)
        if not first:
            previous = _gradients(gradient, x_prev, X, y)
            rows = eta * (rows - previous) + previous
        norms = row_norms(rows)
        factors = clip_factors(norms, clip)
        total = rows.T @ factors
    fraction = float(np.mean(factors < 1.0)) if norms.size else 0.0
    largest = float(norms.max()) if norms.size else 0.0
    return total / batch_size, fraction, largest
