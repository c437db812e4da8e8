"""Which iterate a run returns: the last, the mean of all, or the mean of the tail.

``tail`` averages the iterates after steps ``floor(T/2) .. T-1`` (the last ``T - floor(T/2)``),
as seed 000's algorithms and privopt's DP-SGD do. Post-processing: no privacy cost.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AVERAGING", "Averager"]

AVERAGING = ("last", "mean", "tail")


class Averager:
    """Accumulates the iterates a run's output needs (O(d) memory)."""

    def __init__(self, kind: str, steps: int, dim: int) -> None:
        if kind not in AVERAGING:
            raise ValueError(f"Expected averaging in {AVERAGING}, got {kind!r}.")
        self.kind = kind
        self.start = {"last": steps, "mean": 0, "tail": steps // 2}[kind]
        self.count = steps - self.start
        self.total = np.zeros(dim)

    def add(self, w: np.ndarray, step: int) -> None:
        """Record the iterate produced by ``step``."""
        if step >= self.start:
            self.total += w

    def result(self, last: np.ndarray) -> np.ndarray:
        return last if self.kind == "last" or self.count == 0 else self.total / self.count
