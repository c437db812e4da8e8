"""Projected SGD with uniform sampling and an averaged iterate (Wang et al. 2022, Definition 1).

    w_1 = 0
    for t = 1..T:  i_t ~ Unif{1..n} (independently, with replacement), batch size 1
                   w_{t+1} = Proj_W(w_t - eta (g(w_t; z_{i_t}) + b_t))
    output  w_bar = (1/T) sum_{t=1}^T w_t     (includes w_1 = 0, excludes w_{T+1})

with Proj_W the projection onto the ball of radius R (the identity on R^d) and b_t = 0 for
DP-SGD-Output or b_t ~ N(0, sigma^2 I_d) for DP-SGD-Gradient (Wang et al. (2022) Algorithms 1 and
2). Every
bound of the paper (the Chernoff visit count of Theorem 7, the sampling rate 1/n of Theorem 11)
assumes exactly this sampling, so no shuffling, epochs or batches are offered here.

This is the training core's single-row kernel (:mod:`privopt.training.kernels`) with one
uniformly sampled record per step: the same loop DP-SGD-Gradient runs through
:func:`privopt.training.run`, here without a privacy event (DP-SGD-Output's stability analysis
is about this plain SGD; the privacy comes from the output noise). Indices are drawn in blocks
of 4096 by :class:`privopt.training.SampledWithoutReplacement` (one record per step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_nonnegative, check_positive
from privopt.losses import LinearLoss
from privopt.noise import independent
from privopt.training import SGD, LossModel, Projected, SampledWithoutReplacement
from privopt.training.averaging import Averager
from privopt.training.kernels import single_row_iterate, single_row_rule

__all__ = ["SGDRun", "projected_sgd"]


@dataclass(frozen=True)
class SGDRun:
    """Result of :func:`projected_sgd`.

    Attributes:
        average: w_bar, the mean of w_1..w_T.
        last: w_{T+1}.
        visits: how many times each record was sampled (length n), for instrumentation.
        max_norm: the largest ||w_t|| seen (stays <= radius on a ball).
    """

    average: np.ndarray
    last: np.ndarray
    visits: np.ndarray
    max_norm: float


def projected_sgd(
    X: np.ndarray,
    y: np.ndarray,
    loss: LinearLoss,
    *,
    eta: float,
    steps: int,
    rng: np.random.Generator,
    radius: float | None = None,
    noise_std: float = 0.0,
    noise_rng: np.random.Generator | None = None,
    indices: np.ndarray | None = None,
) -> SGDRun:
    """Run projected SGD (batch size 1, uniform sampling with replacement) and average.

    Args:
        X, y: the data (already validated against the loss's public bounds by the caller).
        loss: a :class:`privopt.losses.LinearLoss`; its (deterministic) subgradient is used.
        eta: constant step size.
        steps: T.
        rng: draws the index sequence i_1..i_T.
        radius: R of the ball W = B(0, R); None for W = R^d.
        noise_std: sigma of the Gaussian added to each stochastic gradient (0: none); the noise
            comes from the independent mechanism's stream (:mod:`privopt.noise`).
        noise_rng: separate generator for the gradient noise's key (default: ``rng``).
        indices: a fixed index sequence (length T) instead of drawing one; used to couple two
            runs on neighbouring datasets (stability tests).
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    n, d = X.shape
    eta = check_positive("eta", eta)
    steps = check_count("steps", steps)
    noise_std = check_nonnegative("noise_std", noise_std)
    if radius is not None:
        radius = check_positive("radius", radius)
    if indices is not None:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.shape != (steps,) or indices.min() < 0 or indices.max() >= n:
            raise ValueError(f"indices must be {steps} integers in [0, {n}).")
    if y.shape != (n,):
        raise ValueError(f"Expected y of shape ({n},), got {y.shape}.")
    if indices is None:
        schedule = SampledWithoutReplacement(1, steps).schedule(n, rng)
        indices = np.concatenate(list(schedule)).astype(np.int64)
    model = LossModel(loss)
    norms = model.prepare(X, y)  # validates every label once (e.g. {-1, +1})
    stream = (
        independent().noise_stream(d, noise_std, rng=noise_rng or rng) if noise_std > 0 else None
    )
    update = SGD(eta) if radius is None else Projected(SGD(eta), radius)
    averager = Averager("inputs", steps, d)
    average, _ = single_row_iterate(
        model,
        X,
        y,
        indices.reshape(-1, 1),
        steps,
        stream,
        None,
        1.0,
        single_row_rule(model, update),
        averager,
        np.zeros(d),
        norms,
    )
    visits = np.bincount(indices, minlength=n)
    return SGDRun(
        average=average, last=averager.last, visits=visits, max_norm=averager.largest_norm
    )
