"""Which iterate a run returns: the last, the mean of all, the mean of the tail, or Wang et al.'s
(2022) mean.

With ``w_0`` the initial point and ``w_{t+1}`` the iterate produced by step t (t = 0 .. T-1):

* ``last``: ``w_T``;
* ``mean``: the mean of ``w_1 .. w_T`` (every produced iterate);
* ``tail``: the mean of the iterates produced by steps ``floor(T/2) .. T-1`` (the last
  ``T - floor(T/2)``), as Varshney et al.'s (2022) algorithms and privopt's DP-SGD do;
* ``inputs``: the mean of the iterates entering each step, ``w_0 .. w_{T-1}`` (Wang et al. 2022,
  Definition 1: the initial point included, the final one excluded).

Post-processing: no privacy cost.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AVERAGING", "Averager"]

AVERAGING = ("last", "mean", "tail", "inputs")


class Averager:
    """Accumulates the iterates a run's output needs (O(d) memory).

    Call :meth:`begin` with the initial point, :meth:`add` after every step, then
    :meth:`result` with the final iterate (kept as :attr:`last`).
    """

    def __init__(self, kind: str, steps: int, dim: int) -> None:
        if kind not in AVERAGING:
            raise ValueError(f"Expected averaging in {AVERAGING}, got {kind!r}.")
        self.kind = kind
        # produced iterates of steps start .. stop-1 enter the mean
        self.start = {"last": steps, "mean": 0, "tail": steps // 2, "inputs": 0}[kind]
        self.stop = steps - 1 if kind == "inputs" else steps
        self.count = steps if kind == "inputs" else steps - self.start
        self.total = np.zeros(dim)
        self.last: np.ndarray | None = None
        #: set by the single-row kernel: the largest projected iterate norm
        self.largest_norm = float("nan")

    def begin(self, w0: np.ndarray) -> None:
        """Record the initial point (it enters only the ``inputs`` mean)."""
        if self.kind == "inputs":
            self.total += w0

    def add(self, w: np.ndarray, step: int) -> None:
        """Record the iterate produced by ``step``."""
        if self.start <= step < self.stop:
            self.total += w

    def result(self, last: np.ndarray) -> np.ndarray:
        self.last = last
        return last if self.kind == "last" or self.count == 0 else self.total / self.count
