r"""Residual losses for regression: ``φ(z, y) = ψ(z - y)`` with ψ even, convex and ψ(0) = 0.

With the residual ``r = z - y``:

* ``φ'(z, y) = ψ'(z - y)`` and ``|φ'(z, y) - φ'(z', y)| = |ψ'(r) - ψ'(r')|`` with
  ``|r - r'| = |z - z'|``: the Hölder modulus of φ' in z is that of ψ', whatever y;
* ψ and |ψ'| are nondecreasing in |r|, and over ``|z| <= s``, ``|y| <= B_y`` the residual ranges
  over ``[-(s + B_y), s + B_y]``, so ``sup φ = ψ(s + B_y)`` and ``sup |φ'| = |ψ'(s + B_y)|``.
  Without a bound on |y| (``y_bound=None``) these are taken at ``B_y = inf``.

Constants (docs/theory/non-smooth-sgd.md; B_x = x_bound, B_y = y_bound, R = radius, t = B_x R +
B_y):

* least squares ``r^2 / 2`` (the paper's ``r^2`` halved): α = 1, L_φ = 1, L = B_x^2,
  G = B_x t, M = B_x B_y, M_0 = B_y^2 / 2; not Lipschitz on R^d.
* q-norm ``|r|^q``, q in [1, 2]: α = q - 1, L_φ = q 2^(2-q), L = q 2^(2-q) B_x^q,
  G = q B_x t^(q-1), M = q B_x B_y^(q-1), M_0 = B_y^q.
* absolute ``|r|`` (q = 1): α = 0, L_φ = 2, L = 2 B_x, G = M = B_x on any domain, M_0 = B_y.
* Huber with parameter δ: α = 1, L_φ = 1, L = B_x^2, G = B_x min(δ, t) <= δ B_x on any domain,
  M = B_x min(δ, B_y), M_0 = huber_δ(B_y) <= B_y^2 / 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privopt._validate import check_positive
from privopt.losses._checks import check_exponent, check_y_bound
from privopt.losses.base import HolderConstants, PsiLoss

__all__ = ["AbsoluteLoss", "HuberLoss", "QNormLoss", "ResidualLoss", "SquaredLoss"]


@dataclass(frozen=True)
class ResidualLoss(PsiLoss):
    r"""A regression loss ``φ(z, y) = ψ(z - y)``, ψ even, convex, minimal (= 0) at 0.

    :meth:`psi` and :meth:`dpsi` take residuals ``r = z - y`` (ψ'(0) = 0, the minimum-norm
    subgradient at a kink); ``φ'(z, y) = ψ'(z - y)``; over ``|z| <= s``, ``|y| <= B_y`` ψ and
    |ψ'| are largest at the residual ``s + B_y``.
    """

    task: str = field(default="regression", init=False, repr=False)

    def _argument(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return z - y

    def _extreme_argument(self, z_bound: float, y_bound: float) -> float:
        return z_bound + y_bound

    def _derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.dpsi(z - y)

    def _labels(self, y: np.ndarray) -> np.ndarray:
        return y

    def _y_bound(self, y_bound: float | None) -> float:
        return check_y_bound(y_bound)


@dataclass(frozen=True)
class SquaredLoss(ResidualLoss):
    r"""Least squares ``(z - y)^2 / 2``; derivative ``z - y``.

    α = 1, L_φ = 1, so L = B_x^2; ``G = B_x (B_x R + B_y)`` is finite only on a bounded domain
    with bounded targets (docs/theory/non-smooth-sgd.md, least squares row, ½-scaled: L = B_x^2,
    M = B_y B_x, M_0 = B_y^2 / 2).
    """

    name: str = field(default="squared", init=False, repr=False)

    def psi(self, r: np.ndarray) -> np.ndarray:
        """ψ(r) = r^2 / 2."""
        return 0.5 * r * r

    def dpsi(self, r: np.ndarray) -> np.ndarray:
        """ψ'(r) = r."""
        return r

    def phi_holder(self) -> HolderConstants:
        """α = 1, L_φ = 1 (φ'' = 1)."""
        return HolderConstants(alpha=1.0, L=1.0)


@dataclass(frozen=True)
class QNormLoss(ResidualLoss):
    r"""q-norm regression ``|y - z|^q`` for q in [1, 2]; derivative ``q sign(r) |r|^(q-1)``.

    Hölder: α = q - 1 and L_φ = q 2^(2-q) (docs/theory/non-smooth-sgd.md): with p = q - 1, residuals
    of the same sign give ``|a^p - b^p| <= |a - b|^p`` (subadditivity of t^p); opposite signs give
    ``a^p + b^p <= 2^(1-p) (a + b)^p`` (concavity), attained at ``r' = -r``. So L_φ = 2 for both
    q = 1 (the sign jumps by 2) and q = 2 (φ'' = 2). q < 1 (non-convex) and q > 2 (φ' not
    Hölder) raise ValueError.
    """

    q: float
    name: str = field(default="qnorm", init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", check_exponent(self.q, "q-norm regression"))

    def psi(self, r: np.ndarray) -> np.ndarray:
        """ψ(r) = |r|^q."""
        return np.abs(r) ** self.q

    def dpsi(self, r: np.ndarray) -> np.ndarray:
        """ψ'(r) = q sign(r) |r|^(q-1), with sign(0) = 0."""
        # sign(0) = 0 is the minimum-norm subgradient at the kink of q = 1 (and exact for q > 1).
        return self.q * np.sign(r) * np.abs(r) ** (self.q - 1.0)

    def phi_holder(self) -> HolderConstants:
        """α = q - 1, L_φ = q 2^(2-q) (docs/theory/non-smooth-sgd.md, "q-norm regression" row)."""
        return HolderConstants(alpha=self.q - 1.0, L=self.q * 2.0 ** (2.0 - self.q))


@dataclass(frozen=True)
class AbsoluteLoss(QNormLoss):
    r"""Absolute ``|z - y|`` (robust regression); subgradient ``sign(z - y)``, 0 at z = y.

    α = 0, L_φ = 2 (the subgradient ranges over [-1, 1]), so L = 2 B_x, and the loss is
    B_x-Lipschitz on R^d (docs/theory/non-smooth-sgd.md, "absolute" row).
    """

    q: float = field(default=1.0, init=False, repr=False)
    name: str = field(default="absolute", init=False, repr=False)


@dataclass(frozen=True)
class HuberLoss(ResidualLoss):
    r"""Huber: ``r^2 / 2`` if ``|r| <= δ``, else ``δ (|r| - δ / 2)``; derivative ``clip(r, -δ, δ)``.

    The scaling of scikit-learn's ``SGDRegressor(loss="huber", epsilon=δ)`` and of
    docs/theory/non-smooth-sgd.md. φ'' is 1 on [-δ, δ] and 0 beyond, so α = 1, L_φ = 1 (not 1/δ:
    that is the constant of the δ^{-1}-scaled variant ``r^2 / (2δ)``, ``|r| - δ/2``), and L = B_x^2.
    Since ``|φ'| <= δ`` it is also 0-Hölder with L_φ = 2δ, and Lipschitz on R^d with
    G = B_x min(δ, B_x R + B_y). Not in the paper (docs/theory/non-smooth-sgd.md).

    Attributes:
        delta: the threshold δ > 0 between the quadratic and the linear part (default 1.0).
    """

    delta: float = 1.0
    name: str = field(default="huber", init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", check_positive("delta", self.delta))

    def psi(self, r: np.ndarray) -> np.ndarray:
        """ψ(r) = r^2 / 2 if |r| <= δ, else δ (|r| - δ / 2)."""
        a = np.abs(r)
        return np.where(a <= self.delta, 0.5 * r * r, self.delta * (a - 0.5 * self.delta))

    def dpsi(self, r: np.ndarray) -> np.ndarray:
        """ψ'(r) = clip(r, -δ, δ)."""
        return np.clip(r, -self.delta, self.delta)

    def phi_holder(self) -> HolderConstants:
        """α = 1, L_φ = 1 (φ'' <= 1)."""
        return HolderConstants(alpha=1.0, L=1.0)
