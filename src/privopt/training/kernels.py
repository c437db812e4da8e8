"""The single-row kernel: the loop of :func:`privopt.training.iterate` for one record per step.

Seed 002's projected SGD (one uniformly sampled record per step, tens of thousands of steps) and
seed 000's one-record steps spend most of their time in per-step overhead when run through the
generic batch path (index arrays, a matrix-vector product over a one-row matrix, array clipping):
about 30 us per step against about 6 us for a scalar loop. This kernel is the same iteration on
Python floats for the models whose per-example gradient is ``r(<x, w>, y) x``::

    r      = residual(<x_i, w_t>, y_i)                          model.scalar_residual
    f      = min(1, G / (|r| ||x_i||))                          privopt.clipping.clip_factor
    w_t+1  = Proj_R(w_t - (lr / divisor) (f r x_i + noise_t))   SGD (no momentum), projected

It is used only where it computes exactly what the generic path computes (a test compares the
two on the same batches and noise to 1e-12), so it changes speed, never the mechanism: the
batches come from the same schedule, the noise from the same stream, the clipping has the same
semantics, and the plan's event is recorded by the same caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from privopt.clipping.clip import clip_factor
from privopt.noise import NoiseStream
from privopt.training.averaging import Averager
from privopt.training.gradients import GradientModel
from privopt.training.updates import SGD, Projected

__all__ = ["single_row_iterate", "single_row_rule"]

#: steps of noise the kernel takes from its stream at a time (fresh rows, updated in place)
_NOISE_CHUNK = 256


def single_row_rule(model: GradientModel, update: Any) -> tuple[float, float | None] | None:
    """(learning rate, projection radius or None) when the kernel applies, else None.

    It applies to models with a scalar residual and to constant-rate SGD without momentum or
    regulariser, optionally projected onto a ball.
    """
    if not hasattr(model, "scalar_residual"):
        return None
    radius = None
    if isinstance(update, Projected):
        update, radius = update.inner, update.radius
    if (
        type(update) is not SGD
        or update.momentum
        or update.regularizer_grad is not None
        or callable(update.learning_rate)
    ):
        return None
    return float(update.learning_rate), radius


def single_row_iterate(
    model: GradientModel,
    X: np.ndarray,
    y: np.ndarray,
    schedule: Iterable[np.ndarray],
    steps: int,
    stream: NoiseStream | None,
    clip: float | None,
    divisor: float,
    rule: tuple[float, float | None],
    averager: Averager,
    w: np.ndarray,
    norms: np.ndarray,
    callback: Callable[[int, np.ndarray], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's loop; arguments as in :func:`privopt.training.iterate` (``norms``: the
    rows' l2 norms from ``model.prepare``). ``stream=None`` adds no noise (a non-private
    analysis object such as seed 002's plain projected SGD). Returns (averaged output,
    per-step clip flags); the final iterate is kept as ``averager.last`` and the largest
    projected norm ``min(||w_t||, R)`` as ``averager.largest_norm`` (NaN without projection).
    """
    rate, radius = rule
    scale = rate / divisor
    residual = model.scalar_residual  # type: ignore[attr-defined]
    fractions = np.zeros(steps)
    w = np.array(w, dtype=float)
    averager.begin(w)
    total, start, stop = averager.total, averager.start, averager.stop  # inlined averager.add
    largest = 0.0
    chunk, used = None, 0
    for step, batch in enumerate(schedule):
        noise = None
        if stream is not None:  # the stream's noise, drawn _NOISE_CHUNK steps at a time
            if chunk is None or used == len(chunk):
                chunk, used = stream.next_many(min(_NOISE_CHUNK, steps - step)), 0
            noise, used = chunk[used], used + 1
        if len(batch):
            i = int(batch[0])
            x = X[i]
            r = residual(float(x @ w), y[i])
            if clip is not None:
                factor = clip_factor(abs(r) * float(norms[i]), clip)
                if factor < 1.0:
                    fractions[step] = 1.0
                r *= factor
            if noise is None:
                w -= (scale * r) * x
            else:
                noise += r * x
                noise *= scale
                w -= noise
        elif noise is not None:
            noise *= scale
            w -= noise
        if radius is not None:
            norm = math.sqrt(w @ w)
            if norm > radius:
                w *= radius / norm
                norm = radius
            if norm > largest:
                largest = norm
        if start <= step < stop:
            total += w
        if callback is not None:
            callback(step, w)
    averager.largest_norm = largest if radius is not None else float("nan")
    return averager.result(w), fractions
