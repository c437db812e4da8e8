"""The single-row kernel: the loop of :func:`privopt.training.iterate` for one record per step.

Wang et al.'s (2022) projected SGD (one uniformly sampled record per step, tens of thousands of
steps) and
Varshney et al.'s (2022) one-record steps spend most of their time in per-step overhead when run
through the
generic batch path (index arrays, a matrix-vector product over a one-row matrix, array clipping):
about 30 us per step. This kernel is the same iteration for the models whose per-example
gradient is ``r(<x, w>, y) x``, with scalars as Python floats and two or three BLAS level-1 calls
per step on blocks gathered once per chunk of steps (about 2 us per step at d = 20)::

    r      = residual(<x_i, w_t>, y_i)                          model.scalar_residual (ddot)
    f      = min(1, G / (|r| ||x_i||))                          privopt.clipping.clip_factor
    w_t+1  = Proj_R(w_t - (lr f r / divisor) x_i - (lr / divisor) noise_t)     daxpy, daxpy

It is used only where it computes what the generic path computes, up to the order of the
floating-point operations (the generic loop forms ``(f r x_i + noise_t) / divisor`` before the
step; a test compares the two on the same batches and noise to 1e-12), so it changes speed,
never the mechanism: the batches come from the same schedule, the noise from the same stream
(the same values, drawn ``next_many`` at a time), the clipping has the same semantics, and the
plan's event is recorded by the same caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import numpy as np
from scipy.linalg.blas import daxpy as _axpy
from scipy.linalg.blas import ddot as _dot

from privopt.clipping.clip import clip_factor
from privopt.noise import NoiseStream
from privopt.training.averaging import Averager
from privopt.training.gradients import GradientModel
from privopt.training.updates import SGD, Projected

__all__ = ["single_row_iterate", "single_row_rule"]

#: steps the kernel takes at a time (batches gathered, noise drawn with next_many and scaled),
#: fewer for wide models so that a chunk's rows and noise stay within _CHUNK_FLOATS each
_CHUNK = 256
_CHUNK_FLOATS = 2**18


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
    analysis object such as Wang et al.'s (2022) plain projected SGD). Returns (averaged output,
    per-step clip flags); the final iterate is kept as ``averager.last`` and the largest
    projected norm ``min(||w_t||, R)`` as ``averager.largest_norm`` (NaN without projection).

    Steps are taken a chunk at a time: the chunk's rows are gathered into one contiguous block
    (labels and norms as floats), its noise is drawn with one ``stream.next_many`` and scaled
    by lr / divisor once, and each step is then BLAS level-1 calls at offsets into those
    blocks (``ddot`` for <x_i, w>, ``daxpy`` for the gradient and the noise, ``ddot`` for the
    projection's norm), updating ``w`` in place without allocating.
    """
    rate, radius = rule
    scale = rate / divisor
    residual = model.scalar_residual  # type: ignore[attr-defined]
    fractions = np.zeros(steps)
    w = np.array(w, dtype=float)  # contiguous float64: the BLAS calls update it in place
    dim = w.shape[0]
    averager.begin(w)
    total, start, stop = averager.total, averager.start, averager.stop  # inlined averager.add
    largest = 0.0
    batches, chunk_steps = iter(schedule), max(1, min(_CHUNK, _CHUNK_FLOATS // max(dim, 1)))
    step = 0
    while chunk := list(islice(batches, chunk_steps)):
        count = len(chunk)
        rows, labels, sizes = _gather(X, y, norms if clip is not None else None, chunk)
        noise = None if stream is None else np.ravel(stream.next_many(count)) * scale
        offset = 0
        for j in range(count):
            label = labels[j]
            if label is not None:  # the step's record (None: an empty batch, noise only)
                r = residual(_dot(rows, w, dim, offset), label)
                if clip is not None:
                    norm = abs(r) * sizes[j]
                    if not norm <= clip:  # clipped, or non-finite (refused by clip_factor)
                        r *= clip_factor(norm, clip)
                        fractions[step] = 1.0
                w = _axpy(rows, w, dim, -(scale * r), offset)
            if noise is not None:
                w = _axpy(noise, w, dim, -1.0, offset)
            if radius is not None:
                norm = math.sqrt(_dot(w, w))
                if norm > radius:
                    w *= radius / norm
                    norm = radius
                if norm > largest:
                    largest = norm
            if start <= step < stop:
                total += w
            if callback is not None:
                callback(step, w)
            offset += dim
            step += 1
    averager.largest_norm = largest if radius is not None else float("nan")
    return averager.result(w), fractions


def _gather(
    X: np.ndarray, y: np.ndarray, norms: np.ndarray | None, chunk: list[np.ndarray]
) -> tuple[np.ndarray, list[Any], list[float]]:
    """A chunk's rows as one flat contiguous block (row j at offset j d), their labels and
    norms as Python floats (no norms when ``norms`` is None); an empty batch gets the label
    None (a noise-only step) and a placeholder row."""
    sizes = set(map(len, chunk))
    if not sizes <= {0, 1}:
        raise ValueError("The single-row kernel takes batches of at most one row.")
    if sizes == {1}:
        index = np.concatenate(chunk).astype(np.intp, copy=False)
        labels: list[Any] = y[index].tolist()
    else:
        index = np.array([b[0] if len(b) else 0 for b in chunk], dtype=np.intp)
        labels = [y[i].item() if len(b) else None for i, b in zip(index, chunk, strict=True)]
    rows = np.ascontiguousarray(X[index], dtype=float).reshape(-1)
    return rows, labels, [] if norms is None else norms[index].tolist()
