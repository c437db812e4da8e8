"""Well-specified logistic regression on the unit sphere, with its exact population risk.

Choquette-Choo, Ganesh & Thakurta's (2025) synthetic problem: x uniform on the unit sphere of R^d,
``P(y = +1 | x) =
sigmoid(<w_star, x>)``. The population optimum is w_star, and the excess risk of any w is computed
by a two-dimensional quadrature (exponentially convergent), so experiments measure it without
Monte-Carlo error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_positive

__all__ = ["SyntheticLogistic"]


@dataclass(frozen=True)
class SyntheticLogistic:
    """Well-specified logistic regression: x uniform on the unit sphere of R^d,
    ``P(y = +1 | x) = sigmoid(<w_star, x>)``. The population optimum is w_star (analytic)."""

    w_star: np.ndarray
    quadrature_nodes: int = 96

    @classmethod
    def make(cls, d: int = 20, w_norm: float = 3.0, seed: int = 0) -> SyntheticLogistic:
        d = check_count("d", d, minimum=3)
        direction = np.random.default_rng(seed).normal(size=d)
        return cls(check_positive("w_norm", w_norm) * direction / np.linalg.norm(direction))

    @property
    def dim(self) -> int:
        return int(self.w_star.size)

    def sample(self, n: int, seed: int | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(X, y): n i.i.d. rows, ``||x|| = 1``, y in {-1, +1}."""
        from scipy.special import expit

        rng = np.random.default_rng(seed)
        X = rng.normal(size=(check_count("n", n), self.dim))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        y = np.where(rng.random(n) < expit(X @ self.w_star), 1.0, -1.0)
        return X, y

    def _nodes(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(s, t, weight) of the quadrature for E g(<e1, x>, <e2, x>), e1 ⟂ e2 unit vectors.

        (s, t) has density proportional to (1 - s^2 - t^2)^((d - 4) / 2) on the unit disc; with
        u = s^2 + t^2 that is u ~ Beta(1, (d - 2) / 2) times a uniform angle. Gauss–Jacobi in
        u (weight (1 - u)^((d - 4) / 2)) and the trapezoid rule in the angle (exact for
        trigonometric polynomials) converge exponentially for the smooth integrands used here.
        """
        from scipy.special import roots_jacobi

        roots, weights = roots_jacobi(count, (self.dim - 4) / 2.0, 0.0)
        u = (roots + 1.0) / 2.0
        angle = 2.0 * np.pi * np.arange(2 * count) / (2 * count)
        r = np.sqrt(u)[:, None]
        s = (r * np.cos(angle)[None, :]).ravel()
        t = (r * np.sin(angle)[None, :]).ravel()
        w = np.repeat(weights / weights.sum(), angle.size) / angle.size
        return s, t, w

    def excess_risk(self, w: np.ndarray, nodes: int | None = None) -> float:
        """``F(w) - F(w_star)`` by quadrature (never negative: it is an expected KL)."""
        from scipy.special import expit

        w = np.asarray(w, dtype=float)
        norm_star = float(np.linalg.norm(self.w_star))
        e1 = self.w_star / norm_star
        a = float(w @ e1)
        b = float(np.linalg.norm(w - a * e1))
        s, t, weight = self._nodes(self.quadrature_nodes if nodes is None else nodes)
        z_star, z = norm_star * s, a * s + b * t
        p = expit(z_star)
        # E_y loss = softplus(z) - p z; subtract the same at w_star
        gap = (np.logaddexp(0.0, z) - p * z) - (np.logaddexp(0.0, z_star) - p * z_star)
        return max(0.0, float(weight @ gap))

    def excess_risk_monte_carlo(self, w: np.ndarray, size: int, seed: int) -> tuple[float, float]:
        """(mean, standard error) of the excess risk on ``size`` fresh points (cross-check)."""
        from scipy.special import expit

        X, _ = self.sample(size, seed)
        z_star, z = X @ self.w_star, X @ np.asarray(w, dtype=float)
        p = expit(z_star)
        gap = (np.logaddexp(0.0, z) - p * z) - (np.logaddexp(0.0, z_star) - p * z_star)
        return float(gap.mean()), float(gap.std(ddof=1) / math.sqrt(size))
