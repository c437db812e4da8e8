"""Update rules as small ``init`` / ``update`` pairs (the optax shape): post-processing only.

An update receives the privatised direction of a step (the noisy clipped sum divided by the
public batch size) and returns the next parameters and its own small state. Nothing here reads
private data, so every rule is post-processing of the plan's privacy event.

* :class:`SGD`: heavy-ball momentum ``m_t = beta m_{t-1} + g~_t``, ``w_{t+1} = w_t - lr_t m_t``,
  with an optional data-independent regulariser gradient added to ``g~_t`` (DP-FTRL's prefix
  form with momentum is exactly this recursion on the noisy prefix sums).
* :class:`Projected`: any rule followed by the Euclidean projection onto the ball B(0, R)
  (Wang et al.'s (2022) projected SGD).
* :class:`LinearCoupling`: Accelerated-DP-SRGD's linear coupling (Choquette-Choo, Ganesh & Thakurta
2025, Algorithm 1): the
  iterates z, y and the query point x, driven by the noisy prefix sum of the steps' directions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from privopt._validate import check_count, check_finite, check_positive

__all__ = ["SGD", "LinearCoupling", "Projected", "UpdateRule", "project_ball"]


class UpdateRule(Protocol):
    """``init(w0) -> state``; ``update(w, direction, state, step) -> (w_next, state)``."""

    def init(self, w0: np.ndarray) -> Any: ...

    def update(
        self, w: np.ndarray, direction: np.ndarray, state: Any, step: int
    ) -> tuple[np.ndarray, Any]: ...


@dataclass(frozen=True)
class SGD:
    """SGD with heavy-ball momentum in [0, 1) and a constant or scheduled learning rate."""

    learning_rate: float | Callable[[int], float]
    momentum: float = 0.0
    regularizer_grad: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        momentum = check_finite("momentum", self.momentum)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Expected momentum in [0, 1), got {self.momentum!r}.")
        object.__setattr__(self, "momentum", momentum)
        if not callable(self.learning_rate):
            object.__setattr__(
                self, "learning_rate", check_positive("learning_rate", self.learning_rate)
            )

    def rate(self, step: int) -> float:
        if not callable(self.learning_rate):
            return self.learning_rate  # validated once, in __post_init__
        return check_positive("learning rate", self.learning_rate(step))

    def init(self, w0: np.ndarray) -> np.ndarray:
        return np.zeros_like(w0)

    def update(
        self, w: np.ndarray, direction: np.ndarray, state: np.ndarray, step: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.regularizer_grad is not None:
            direction = direction + self.regularizer_grad(w)
        velocity = self.momentum * state + direction if self.momentum else direction
        return w - self.rate(step) * velocity, velocity


@dataclass(frozen=True)
class Projected:
    """``inner`` followed by the projection onto the l2 ball of radius ``radius``."""

    inner: Any
    radius: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius", check_positive("radius", self.radius))

    def init(self, w0: np.ndarray) -> Any:
        return self.inner.init(w0)

    def update(self, w, direction, state, step):
        w, state = self.inner.update(w, direction, state, step)
        return project_ball(w, self.radius), state


def project_ball(w: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto the l2 ball B(0, radius) (``w`` itself when inside)."""
    norm = float(np.linalg.norm(w))
    return w if norm <= radius else w * (radius / norm)


@dataclass(frozen=True)
class LinearCoupling:
    r"""Accelerated-DP-SRGD's linear coupling (Choquette-Choo, Ganesh & Thakurta 2025, Algorithm 1;
    docs/theory/single-epoch-srgd.md#prefix-noise).

    Step t (``eta_t = t + 1``, ``tau_{t+1} = 2 / (t + 3)``) receives the privatised direction
    ``g~_t = (sum_d clip(Delta_t(d)) + n_t) / B``, accumulates the noisy prefix sum itself and
    moves the query point ``x_t = w``::

        S^_t    = S^_{t-1} + g~_t                     (recursive: the tree's noisy prefix sum)
        z_{t+1} = Pi_C(z_t - s S^_t / beta)           = Pi_C(z_t - (eta_t/beta) nabla_t + b_t)
        y_{t+1} = Pi_C(x_t - S^_t / (eta_t beta))     = Pi_C(x_t - nabla_t/beta + b_t/eta_t)
        x_{t+1} = (1 - tau_{t+1}) y_{t+1} + tau_{t+1} z_{t+1}

    with ``C = B(0, R)`` and s = ``z_step_scale``. With a prefix-sum mechanism run as per-step
    increments (:func:`privopt.noise.as_step_noise`), the n_t sum to the tree's prefix noise,
    so ``S^_t`` is the tree's noisy prefix sum and ``b_t = -zeta_t / beta``. With
    ``recursive=False`` (Theorem 15's independent variant) ``g~_t`` is the noisy batch gradient
    itself: ``z_{t+1} = Pi_C(z_t - s eta_t g~_t / beta)``, ``y_{t+1} = Pi_C(x_t - g~_t / beta)``.

    Algorithm 1 outputs ``y_T`` and never queries ``x_T``, so the rule's last iterate (step
    ``steps - 1``) is ``y_T``: the loop's final ``w`` is the algorithm's output. ``observer``
    (post-processing) is called after every step with ``(t, S^_t or g~_t, x_{t+1}, y_{t+1},
    z_{t+1})``. State: ``(z, y, S^)``. Post-processing only: no privacy cost.
    """

    beta: float
    radius: float
    steps: int
    z_step_scale: float = 1.0
    recursive: bool = True
    observer: Callable[[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None] | None = None

    def __post_init__(self) -> None:
        for name in ("beta", "radius", "z_step_scale"):
            object.__setattr__(self, name, check_positive(name, getattr(self, name)))
        object.__setattr__(self, "steps", check_count("steps", self.steps))

    def init(self, w0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return w0.copy(), w0.copy(), np.zeros_like(w0)  # z_0 = x_0, y_0 (unused), S^_{-1} = 0

    def update(self, w, direction, state, step):
        z, _, prefix = state
        eta, beta, scale = float(step + 1), self.beta, self.z_step_scale
        if self.recursive:
            prefix = prefix + direction  # S^_t = eta_t nabla_t + noise
            released = prefix
            z_new = project_ball(z - scale * released / beta, self.radius)
            y_new = project_ball(w - released / (eta * beta), self.radius)
        else:
            released = direction  # the noisy batch gradient nabla^_t
            z_new = project_ball(z - scale * eta * released / beta, self.radius)
            y_new = project_ball(w - released / beta, self.radius)
        tau = 2.0 / (step + 3.0)
        x_new = (1.0 - tau) * y_new + tau * z_new
        if self.observer is not None:
            self.observer(step, released, x_new, y_new, z_new)
        return (y_new if step == self.steps - 1 else x_new), (z_new, y_new, prefix)
