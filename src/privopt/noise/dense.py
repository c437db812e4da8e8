"""A mechanism given by an explicit lower-triangular B (small T, tests, imported factorisations)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from privopt.noise._checks import check_within_horizon
from privopt.noise.base import Mechanism, NoiseSource, NoiseStream, Participation, accumulate
from privopt.noise.sensitivity import dense_minsep_upper_bound_squared

__all__ = ["DenseMechanism"]


class DenseMechanism(Mechanism):
    """Explicit T x T lower-triangular, invertible B; C = B^{-1} by triangular solve.

    Only horizons ``steps <= T`` are defined. Because B is lower-triangular, the top-left block of
    C is the inverse of the top-left block of B, so shorter horizons use leading blocks.
    """

    name = "dense"

    def __init__(self, decoder: np.ndarray) -> None:
        b = np.asarray(decoder, dtype=float)
        if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] == 0:
            raise ValueError(f"Expected a square, non-empty B, got shape {b.shape}.")
        if not np.all(np.isfinite(b)):
            raise ValueError("Expected a finite B.")
        if np.any(np.triu(b, 1) != 0.0):
            raise ValueError("B must be lower-triangular (causal noise).")
        if np.any(np.diag(b) == 0.0):
            raise ValueError("B must be invertible (non-zero diagonal).")
        self._b = b
        self._c = solve_triangular(b, np.eye(b.shape[0]), lower=True)
        self.horizon = b.shape[0]

    def _check(self, steps: int) -> int:
        return check_within_horizon(steps, self.horizon, "B")

    def decoder_matrix(self, steps: int) -> np.ndarray:
        steps = self._check(steps)
        return self._b[:steps, :steps].copy()

    def encoder_matrix(self, steps: int) -> np.ndarray:
        steps = self._check(steps)
        return self._c[:steps, :steps].copy()

    def anytime_sensitivity_squared(self) -> float:
        raise ValueError("A dense B has a finite horizon: anytime use is undefined.")

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        c = self.encoder_matrix(steps)
        if participation.kind == "single":
            return float(np.max(np.sum(c**2, axis=0)))
        return dense_minsep_upper_bound_squared(
            c,
            participation.min_sep,  # type: ignore[arg-type]
            participation.participations,  # type: ignore[arg-type]
        )

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return [(0, tau) for tau in range(self._check(steps))]

    def _make_stream(self, dim, std, source, covariance, **options: Any):
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return DenseStream(self, dim, std, source, covariance)


class DenseStream(NoiseStream):
    """Row t of B applied to the stored source vectors (O(t d) memory)."""

    def __init__(
        self, mechanism: DenseMechanism, dim: int, std: float, source: NoiseSource, covariance=None
    ) -> None:
        super().__init__(dim, std, source, covariance)
        self.mechanism = mechanism
        self._history: list[np.ndarray] = []

    def _combine(self, t: int) -> np.ndarray:
        if t >= self.mechanism.horizon:
            raise ValueError(f"Stream exhausted: B has horizon {self.mechanism.horizon}.")
        self._history.append(self.source.draw((0, t), self.dim))
        row = self.mechanism._b[t]
        return accumulate(((row[k], self._history[k]) for k in range(t + 1)), self.dim)

    def _buffers(self) -> dict[str, Any]:
        return {"history": [h.copy() for h in self._history]}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._history = [np.asarray(h, dtype=float).copy() for h in state["history"]]
