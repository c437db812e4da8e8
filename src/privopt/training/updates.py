"""Update rules as small ``init`` / ``update`` pairs (the optax shape): post-processing only.

An update receives the privatised direction of a step (the noisy clipped sum divided by the
public batch size) and returns the next parameters and its own small state. Nothing here reads
private data, so every rule is post-processing of the plan's privacy event.

* :class:`SGD`: heavy-ball momentum ``m_t = beta m_{t-1} + g~_t``, ``w_{t+1} = w_t - lr_t m_t``,
  with an optional data-independent regulariser gradient added to ``g~_t`` (DP-FTRL's prefix
  form with momentum is exactly this recursion on the noisy prefix sums).
* :class:`Projected`: any rule followed by the Euclidean projection onto the ball B(0, R)
  (seed 002's projected SGD).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from privopt._validate import check_finite, check_positive

__all__ = ["SGD", "Projected", "UpdateRule"]


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
        norm = float(np.linalg.norm(w))
        if norm > self.radius:
            w = w * (self.radius / norm)
        return w, state
