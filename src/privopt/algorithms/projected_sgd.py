"""Projected SGD with uniform sampling and an averaged iterate (seed 002, Definition 1).

    w_1 = 0
    for t = 1..T:  i_t ~ Unif{1..n} (independently, with replacement), batch size 1
                   w_{t+1} = Proj_W(w_t - eta (g(w_t; z_{i_t}) + b_t))
    output  w_bar = (1/T) sum_{t=1}^T w_t     (includes w_1 = 0, excludes w_{T+1})

with Proj_W the projection onto the ball of radius R (the identity on R^d) and b_t = 0 for
DP-SGD-Output or b_t ~ N(0, sigma^2 I_d) for DP-SGD-Gradient (seed 002 Algorithms 1 and 2). Every
bound of the paper (the Chernoff visit count of Theorem 7, the sampling rate 1/n of Theorem 11)
assumes exactly this sampling, so no shuffling, epochs or batches are offered here.

The loop is sequential by nature; for linear models each step costs O(d). Indices and noise are
drawn in chunks, and the per-step work is a dot product, a scalar derivative and an axpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_nonnegative, check_positive
from privopt.losses import LinearLoss
from privopt.noise.rng import gaussian_noise

__all__ = ["SGDRun", "projected_sgd"]

_CHUNK = 4096


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
        noise_std: sigma of the Gaussian added to each stochastic gradient (0: none).
        noise_rng: separate generator for the gradient noise (default: ``rng``).
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
    noise_rng = noise_rng or rng
    if y.shape != (n,):
        raise ValueError(f"Expected y of shape ({n},), got {y.shape}.")
    loss.derivative(np.zeros(n), y)  # validates every label once (e.g. {-1, +1})
    derivative = loss._derivative  # validated above; float scalars on the hot path
    w = np.zeros(d)
    total = np.zeros(d)
    visits = np.zeros(n, dtype=np.int64)
    max_norm = 0.0
    for start in range(0, steps, _CHUNK):
        size = min(_CHUNK, steps - start)
        chunk = indices[start : start + size] if indices is not None else rng.integers(0, n, size)
        np.add.at(visits, chunk, 1)
        noise = gaussian_noise(noise_rng, eta * noise_std, (size, d)) if noise_std > 0 else None
        for k, i in enumerate(chunk.tolist()):
            total += w  # w_t enters the average before the update (w_1 = 0 included)
            x = X[i]
            w -= (eta * derivative(x @ w, y[i])) * x
            if noise is not None:
                w -= noise[k]
            if radius is not None:
                norm = math.sqrt(w @ w)
                if norm > radius:
                    w *= radius / norm
                max_norm = max(max_norm, min(norm, radius))
    if radius is None:
        max_norm = float("nan")  # not tracked on R^d (no projection)
    return SGDRun(average=total / steps, last=w, visits=visits, max_norm=max_norm)
