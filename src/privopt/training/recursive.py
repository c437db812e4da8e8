r"""The stochastic recursive gradient (SRG) oracle of Choquette-Choo, Ganesh & Thakurta (2025) as a
gradient model of the core.

Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta, Algorithm 1;
docs/theory/single-epoch-srgd.md#algorithm) evaluates
every record of step t's batch at the current and at the previous query point, and clips the
per-example *weighted difference*::

    Delta_t(d) = clip_{c_t}(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d)),   eta_t = t + 1

with ``eta_{-1} = 0``: at t = 0 it is the plain gradient, clipped to ``first_clip`` (c_0); for
t >= 1 the difference is clipped to the loop's clip G_t (the plan's ``clip_norm``, c_t). Each
record is read at the one step of its batch only (2 gradients per record, 1 at t = 0). The
difference is formed as ``eta_t (g_t - g_{t-1}) + g_{t-1}`` to avoid cancellation, and a
:class:`~privopt.losses.LinearLoss` never forms the (b, p) gradient matrix: its difference is
``(eta_t phi'(z_t) - eta_{t-1} phi'(z_{t-1})) x`` with norm ``|.| ||x||``. All clipping goes
through :mod:`privopt.clipping` (clipped norms never exceed c_t, even in floating point).

Privacy: zeroing one record changes only its step's clipped sum, by at most c_t (c_t / B after
the loop's divisor B); the plan's analysis (``privopt.algorithms.srgd_privacy.SRGDAnalysis``)
turns the per-step clips into the tree's sensitivity. The previous query point is public (a
post-processing of earlier releases), so keeping it costs nothing.

:class:`~privopt.training.batching.SinglePass` (the paper's single epoch for a given (B, T),
the first T of the ``N // B`` disjoint batches) is a batch strategy and lives in
:mod:`privopt.training.batching`; it stays importable from here. :class:`RecursiveGradient` is
the oracle; its per-run state (step counter, previous point, single-epoch instrumentation) is a
:class:`RecursiveLog` created by :meth:`prepare`, i.e. once per fit, and read by the caller
afterwards (``visits``, ``assignment``, ``evaluations``, the clip fractions and largest norms:
non-private diagnostics).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privopt._validate import check_positive
from privopt.clipping import clip_factors, row_norms
from privopt.losses import LinearLoss
from privopt.training.batching import SinglePass  # re-exported: its home moved to batching
from privopt.training.gradients import GenericModel

__all__ = ["RecursiveGradient", "RecursiveLog", "SinglePass"]

GradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _gradients(gradient: GradFn, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    grads = np.asarray(gradient(w, X, y), dtype=float)
    if grads.shape != (X.shape[0], w.shape[0]):
        raise ValueError(
            f"grad_fn must return one gradient row per example, shape {(X.shape[0], w.shape[0])}, "
            f"got {grads.shape}."
        )
    return grads


@dataclass(eq=False)
class RecursiveLog:
    """One run of the oracle: the step counter, the previous query point and what was read.

    ``assignment[i]`` is the step that read record i (-1: never read), ``visits[i]`` how many
    steps read it, ``evaluations`` the per-example gradients computed; ``fractions`` and
    ``largest`` (per step) are non-private diagnostics; ``last_sum`` is the last step's clipped
    sum (never released by itself: the loop adds the mechanism's noise to it).
    """

    step: int = 0
    previous: np.ndarray | None = None
    assignment: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    visits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    evaluations: int = 0
    fractions: list[float] = field(default_factory=list)
    largest: list[float] = field(default_factory=list)
    last_sum: np.ndarray | None = None

    def start(self, records: int) -> RecursiveLog:
        self.step, self.previous, self.evaluations, self.last_sum = 0, None, 0, None
        self.assignment = np.full(records, -1, dtype=int)
        self.visits = np.zeros(records, dtype=int)
        self.fractions, self.largest = [], []
        return self


@dataclass(frozen=True, eq=False)
class RecursiveGradient(GenericModel):
    """The SRG oracle (module docstring) for a privopt ``LinearLoss`` or a ``grad_fn(w, X, y)``.

    Args:
        grad_fn: the loss (closed-form differences) or the per-example gradient function.
        first_clip: c_0, the clip of the first step's plain gradients (the later steps use the
            loop's clip, the plan's ``clip_norm``).
        recursive: False gives Theorem 15's independent variant: the plain clipped gradient at
            the current point on every step (c_0 = the loop's clip there too).
        log: the per-run state (reset by :meth:`prepare`).
    """

    grad_fn: Any = None
    name: str = "stochastic recursive gradient"
    first_clip: float = math.inf
    recursive: bool = True
    log: RecursiveLog = field(default_factory=RecursiveLog, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.grad_fn, LinearLoss) or callable(self.grad_fn)):
            raise ValueError(f"Expected a LinearLoss or a grad_fn, got {self.grad_fn!r}.")
        object.__setattr__(self, "first_clip", check_positive("first_clip", self.first_clip))

    def difference_sum(
        self,
        x: np.ndarray,
        x_prev: np.ndarray | None,
        t: int,
        X: np.ndarray,
        y: np.ndarray,
        clip: float,
    ) -> tuple[np.ndarray, float, float]:
        r"""``sum_d clip_c(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d))`` over the rows.

        ``eta_t = t + 1``; at t = 0 (``eta_{-1} = 0``) the plain gradients, and ``x_prev`` is
        unused.

        Returns:
            (the clipped sum, fraction of the rows clipped, largest unclipped per-example norm).
        """
        first = t == 0
        if not first and x_prev is None:
            raise ValueError("The previous query point x_prev is required for t >= 1.")
        eta = float(t + 1)
        gradient = self.grad_fn
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
                previous = _gradients(gradient, x_prev, X, y)  # type: ignore[arg-type]
                rows = eta * (rows - previous) + previous
            norms = row_norms(rows)
            factors = clip_factors(norms, clip)
            total = rows.T @ factors
        fraction = float(np.mean(factors < 1.0)) if norms.size else 0.0
        largest = float(norms.max()) if norms.size else 0.0
        return total, fraction, largest

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> RecursiveLog:
        return self.log.start(X.shape[0])

    def clipped_gradient_sum(self, w, X, y, clip):
        """The next step's clipped sum over every row of (X, y)."""
        return self.batch_gradient_sum(w, X, y, np.arange(X.shape[0]), clip, self.log)

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        run = self.log if prepared is None else prepared
        t = run.step if self.recursive else 0  # the independent estimate restarts every step
        c = self.first_clip if t == 0 else clip
        if c is None:
            raise ValueError("The SRG oracle always clips: the loop's clip is required.")
        total, fraction, largest = self.difference_sum(w, run.previous, t, X[batch], y[batch], c)
        run.assignment[batch] = run.step
        run.visits[batch] += 1
        run.evaluations += len(batch) if t == 0 else 2 * len(batch)
        run.fractions.append(fraction)
        run.largest.append(largest)
        run.previous, run.last_sum = w, total  # x_{t-1} of the next step: public
        run.step += 1
        return total, fraction
