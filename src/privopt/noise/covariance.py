"""Covariance operators Σ for covariance-shaped noise N(0, std^2 Σ) (seed 003).

Mechanisms are generic in the per-step law: a stream given ``covariance=Σ`` maps each combined
standard-normal vector z to Σ^{1/2} z, so every noise source is N(0, std^2 Σ) and the correlation
across steps (B) is unchanged (the map is linear and acts per step). Operators never form a d x d
matrix unless asked to for tests (:meth:`CovarianceOperator.dense`).

Seed 003 adds a low-rank-plus-ridge Σ built from public rows; it implements this same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from privopt._validate import check_count

__all__ = ["CovarianceOperator", "DiagonalCovariance", "IdentityCovariance"]


class CovarianceOperator(ABC):
    """A symmetric positive-definite d x d matrix Σ, represented implicitly."""

    dim: int

    @abstractmethod
    def sqrt_apply(self, z: np.ndarray) -> np.ndarray:
        """R z for a square root R with R R^T = Σ (maps N(0, I) to N(0, Σ))."""

    @abstractmethod
    def apply(self, v: np.ndarray) -> np.ndarray:
        """Σ v."""

    @abstractmethod
    def solve(self, v: np.ndarray) -> np.ndarray:
        """Σ^{-1} v."""

    def inv_norm(self, v: np.ndarray) -> np.ndarray | float:
        """The Σ^{-1} norm sqrt(v^T Σ^{-1} v) (row-wise for a 2-D ``v``)."""
        v = np.asarray(v, dtype=float)
        return np.sqrt(np.sum(v * self.solve(v), axis=-1))

    def dense(self) -> np.ndarray:
        """The explicit matrix (tests and small d only)."""
        return self.apply(np.eye(self.dim))

    def _check(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if v.shape[-1] != self.dim:
            raise ValueError(f"Expected vectors of dimension {self.dim}, got {v.shape[-1]}.")
        return v


class IdentityCovariance(CovarianceOperator):
    """Σ = I_d: isotropic noise (every mechanism's default)."""

    def __init__(self, dim: int) -> None:
        self.dim = check_count("dim", dim)

    def sqrt_apply(self, z: np.ndarray) -> np.ndarray:
        return self._check(z)

    def apply(self, v: np.ndarray) -> np.ndarray:
        return self._check(v)

    def solve(self, v: np.ndarray) -> np.ndarray:
        return self._check(v)


class DiagonalCovariance(CovarianceOperator):
    """Σ = diag(variances), with every variance positive and finite (O(d) memory)."""

    def __init__(self, variances: np.ndarray) -> None:
        variances = np.asarray(variances, dtype=float)
        if variances.ndim != 1 or variances.size == 0:
            raise ValueError("Expected a non-empty 1-D array of variances.")
        if not np.all(np.isfinite(variances)) or np.any(variances <= 0):
            raise ValueError("Σ must be positive definite: every variance must be finite and > 0.")
        self.variances = variances
        self.dim = variances.size
        self._sqrt = np.sqrt(variances)

    def sqrt_apply(self, z: np.ndarray) -> np.ndarray:
        return self._check(z) * self._sqrt

    def apply(self, v: np.ndarray) -> np.ndarray:
        return self._check(v) * self.variances

    def solve(self, v: np.ndarray) -> np.ndarray:
        return self._check(v) / self.variances
