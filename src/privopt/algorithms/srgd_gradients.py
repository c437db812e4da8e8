r"""Per-example gradients of Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025): the
oracle and one step's increment.

The gradient oracle is a privopt :class:`~privopt.losses.LinearLoss` (its constants L and M on
the ball are the defaults) or a generic ``grad_fn(w, X, y) -> (b, p)``. Step t's clipped
increment is ``Delta_t = (1/B) sum_{d in B_t} clip(eta_t grad f(x_t, d) - eta_{t-1} grad
f(x_{t-1}, d))`` (:func:`srgd_increment`).
"""

from __future__ import annotations

import math

import numpy as np

from privopt._validate import check_count, check_design
from privopt.losses import LinearLoss, get_loss
from privopt.training.recursive import GradFn, RecursiveGradient

__all__ = ["GradFn", "srgd_increment"]


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
    ``clip / B``. The sum is the training core's SRG oracle
    (:meth:`privopt.training.recursive.RecursiveGradient.difference_sum`).

    Returns:
        (Delta_t, fraction of the rows clipped, largest unclipped per-example norm).
    """
    t = check_count("t", t, minimum=0)
    clip = clip_first if t == 0 else clip_difference
    if clip is None:
        raise ValueError("clip_difference is required for t >= 1.")
    oracle = RecursiveGradient(gradient, first_clip=clip_first)
    total, fraction, largest = oracle.difference_sum(x, x_prev, t, X, y, clip)
    return total / batch_size, fraction, largest
