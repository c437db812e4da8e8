r"""Margin losses for binary classification with labels y in {-1, +1}: ``φ(z, y) = ψ(y z)``.

ψ is convex, nonnegative and nonincreasing in the margin ``u = y z``. Hence

* ``φ'(z, y) = y ψ'(y z)`` and, since |y| = 1, ``|φ'(z, y) - φ'(z', y)| = |ψ'(u) - ψ'(u')|``
  with ``|u - u'| = |z - z'|``: the Hölder modulus of φ' in z is that of ψ';
* over ``|z| <= s`` the margin ranges over ``[-s, s]`` and, ψ being nonincreasing and convex,
  ``sup φ = ψ(-s)`` and ``sup |φ'| = |ψ'(-s)|``.

Constants (docs/theory/non-smooth-sgd.md; B_x = x_bound, R = radius, σ the sigmoid; M is G at R =
0):

* q-norm hinge ``max(0, 1 - y z)^q``, q in [1, 2]: α = q - 1, L_φ = q, L = q B_x^q,
  G = q B_x (1 + B_x R)^(q-1), M = q B_x, M_0 = 1.
* hinge (q = 1): α = 0, L_φ = 1, L = B_x, G = M = B_x on any domain, M_0 = 1.
* squared hinge (q = 2): α = 1, L_φ = 2, L = 2 B_x^2, G = 2 B_x (1 + B_x R), M = 2 B_x, M_0 = 1.
* logistic ``log(1 + exp(-y z))``: α = 1, L_φ = 1/4, L = B_x^2 / 4, G = B_x σ(B_x R) <= B_x
  on any domain, M = B_x / 2, M_0 = log 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from privopt.losses._checks import check_exponent, check_labels, check_y_bound
from privopt.losses.base import HolderConstants, PsiLoss

__all__ = [
    "HingeLoss",
    "LogisticLoss",
    "MarginLoss",
    "QNormHingeLoss",
    "SquaredHingeLoss",
]


@dataclass(frozen=True)
class MarginLoss(PsiLoss):
    r"""A classification loss ``φ(z, y) = ψ(y z)``, ψ convex, nonnegative, nonincreasing.

    :meth:`psi` and :meth:`dpsi` take margins ``u = y z``; ``φ'(z, y) = y ψ'(y z)``; over
    ``|z| <= s`` ψ and |ψ'| are largest at the margin ``-s``.
    """

    task: str = field(default="classification", init=False, repr=False)

    def _argument(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return y * z

    def _extreme_argument(self, z_bound: float, y_bound: float) -> float:
        return -z_bound

    def _derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return y * self.dpsi(y * z)

    def _labels(self, y: np.ndarray) -> np.ndarray:
        return check_labels(y)

    def _y_bound(self, y_bound: float | None) -> float:
        """Labels are ±1, so the bound is 1; a given ``y_bound`` must be >= 1 (it is not used)."""
        limit = check_y_bound(y_bound)
        if limit < 1.0:
            raise ValueError(
                f"Classification labels are -1 or +1, so y_bound must be >= 1 (or None), got "
                f"{limit!r}."
            )
        return 1.0


@dataclass(frozen=True)
class QNormHingeLoss(MarginLoss):
    r"""q-norm hinge ``ψ(u) = max(0, 1 - u)^q`` for q in [1, 2] (q-norm soft-margin SVM).

    ``ψ'(u) = -q max(0, 1 - u)^(q-1)``, taken as 0 for ``u >= 1`` (also at the kink u = 1 when
    q = 1). Hölder: α = q - 1, L_φ = q, because ``t ↦ max(0, t)^p`` (p = q - 1 in [0, 1]) is
    p-Hölder with constant 1 (subadditivity of t^p; for p = 0 it jumps by 1), attained for
    u' >= 1 (docs/theory/non-smooth-sgd.md). q < 1 (non-convex) and q > 2 (not Hölder) raise
    ValueError.
    """

    q: float
    name: str = field(default="qnorm_hinge", init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", check_exponent(self.q, "q-norm hinge"))

    def psi(self, u: np.ndarray) -> np.ndarray:
        """ψ(u) = max(0, 1 - u)^q."""
        return np.maximum(1.0 - u, 0.0) ** self.q

    def dpsi(self, u: np.ndarray) -> np.ndarray:
        """ψ'(u) = -q max(0, 1 - u)^(q-1) for u < 1, and 0 for u >= 1."""
        slack = np.maximum(1.0 - u, 0.0)
        # where(): for q = 1, slack**0 would be 1 also where the hinge is flat (slack = 0).
        return np.where(slack > 0.0, -self.q * slack ** (self.q - 1.0), 0.0)

    def phi_holder(self) -> HolderConstants:
        """α = q - 1, L_φ = q (docs/theory/non-smooth-sgd.md, "q-norm hinge" row)."""
        return HolderConstants(alpha=self.q - 1.0, L=self.q)


@dataclass(frozen=True)
class HingeLoss(QNormHingeLoss):
    r"""Hinge ``max(0, 1 - y z)`` (SVM); subgradient ``-y 1[y z < 1]`` (0 at the kink).

    α = 0, L_φ = 1: two subgradients differ by at most ``||x|| <= B_x``, so L = B_x and the
    loss is B_x-Lipschitz on R^d (docs/theory/non-smooth-sgd.md, "hinge" row).
    """

    q: float = field(default=1.0, init=False, repr=False)
    name: str = field(default="hinge", init=False, repr=False)


@dataclass(frozen=True)
class SquaredHingeLoss(QNormHingeLoss):
    r"""Squared hinge ``max(0, 1 - y z)^2``; derivative ``-2 y max(0, 1 - y z)``.

    α = 1, L_φ = 2, L = 2 B_x^2; not Lipschitz on R^d (docs/theory/non-smooth-sgd.md, "squared
    hinge" row).
    """

    q: float = field(default=2.0, init=False, repr=False)
    name: str = field(default="squared_hinge", init=False, repr=False)


@dataclass(frozen=True)
class LogisticLoss(MarginLoss):
    r"""Logistic ``log(1 + exp(-y z))``, computed as ``logaddexp(0, -y z)``.

    ``ψ'(u) = -σ(-u)`` (σ the sigmoid, via ``scipy.special.expit``), ``ψ'' = σ(u) σ(-u) <= 1/4``,
    so α = 1, L_φ = 1/4 and L = B_x^2 / 4; ``|ψ'| < 1`` gives G = B_x σ(B_x R) <= B_x on any
    domain, M = B_x / 2 and M_0 = log 2 (docs/theory/non-smooth-sgd.md, "logistic" row; not in the
    paper).
    """

    name: str = field(default="logistic", init=False, repr=False)

    def psi(self, u: np.ndarray) -> np.ndarray:
        """ψ(u) = log(1 + exp(-u)), as logaddexp(0, -u) (no overflow)."""
        return np.logaddexp(0.0, -u)

    def dpsi(self, u: np.ndarray) -> np.ndarray:
        """ψ'(u) = -1 / (1 + exp(u)) = -σ(-u)."""
        return -expit(-u)

    def phi_holder(self) -> HolderConstants:
        """α = 1, L_φ = max ψ'' = 1/4 (at u = 0)."""
        return HolderConstants(alpha=1.0, L=0.25)
