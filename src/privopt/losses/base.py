r"""Convex losses of linear models and the constants Wang et al.'s (2022) theorems need.

A loss of a linear model is ``ℓ(w; x, y) = φ(<w, x>, y)``: it sees the data only through the
margin (or prediction) ``z = <w, x>`` and the label (or target) ``y``. Its (sub)gradient is
``∇ℓ(w; x, y) = φ'(z, y) x`` with ``φ' = ∂φ/∂z``, so every per-example quantity follows from the
scalar derivative: gradients ``φ'(z_i, y_i) x_i``, their norms ``|φ'(z_i, y_i)| ||x_i||`` and
their sum ``X^T φ'(z, y)``, without materialising an ``(n, d)`` matrix.

The constants (docs/theory/non-smooth-sgd.md and §5) are suprema over all data with ``||x|| <=
x_bound`` and ``|y| <= y_bound`` (labels ±1 for classification), never statistics of the sample:

* ``holder``: (α, L) with ``||∇ℓ(w) - ∇ℓ(w')|| <= L ||w - w'||^α`` for all w, w' in R^d,
  ``L = L_φ x_bound^(1+α)`` where (α, L_φ) is the Hölder modulus of ``z ↦ φ'(z, y)``;
* ``gradient_bound_at_zero``: M = sup ||∇ℓ(0; x, y)||;
* ``value_bound_at_zero``: M_0 = sup ℓ(0; x, y);
* ``lipschitz``: G = sup ||∇ℓ(w; x, y)|| over ||w|| <= R (the tight bound of
docs/theory/non-smooth-sgd.md);
* ``paper_gradient_bound``: the paper's G = M + L R^α (docs/theory/non-smooth-sgd.md and §4,
Algorithm 2);
* ``value_bound``: sup ℓ(w; x, y) over ||w|| <= R.

Subclasses supply φ, φ', the Hölder modulus of φ' and the suprema of φ and |φ'| over margins
``|z| <= s``; :mod:`privopt.losses.classification` and :mod:`privopt.losses.regression` do this
once for margin losses ψ(y z) and residual losses ψ(z - y).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from privopt._validate import check_design, check_finite, check_nonnegative
from privopt.clipping import row_norms
from privopt.losses._checks import (
    check_bound,
    check_linear_inputs,
    check_pointwise_inputs,
    check_radius,
)

__all__ = ["HolderConstants", "LinearLoss", "LossConstants"]

# Relative slack of LinearLoss.check_data: clipping guarantees its own computed norm is at most
# the bound; a recomputed norm may differ by a few ulps (tests/clipping uses the same 1e-12).
_BOUND_RTOL = 1e-12


@dataclass(frozen=True)
class HolderConstants:
    r"""Hölder smoothness of a (sub)gradient map: ``||g(w) - g(w')|| <= L ||w - w'||^α``.

    ``α = 1`` is L-smoothness; ``α = 0`` means any two subgradients differ by at most L, so the
    loss is (M + L)-Lipschitz (docs/theory/non-smooth-sgd.md); α in (0, 1) interpolates.

    Attributes:
        alpha: the exponent α, in [0, 1].
        L: the constant L >= 0.
    """

    alpha: float
    L: float

    def __post_init__(self) -> None:
        alpha = check_finite("alpha", self.alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"Expected alpha in [0, 1], got {alpha!r}.")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "L", check_nonnegative("L", self.L))

    def bound(self, distance: float | np.ndarray) -> float | np.ndarray:
        r"""``L distance^α``: the largest allowed ``||g(w) - g(w')||`` at ``||w - w'|| = distance``.

        Uses the convention ``0^0 = 1`` (docs/theory/non-smooth-sgd.md), so for α = 0 the bound is L
        everywhere.

        >>> HolderConstants(alpha=0.5, L=2.0).bound(0.25)
        1.0
        """
        out = self.L * np.power(np.asarray(distance, dtype=float), self.alpha)
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class LossConstants:
    r"""Every data-independent constant of a loss under stated bounds
    (docs/theory/non-smooth-sgd.md).

    Attributes:
        loss: the loss's registry name.
        alpha: Hölder exponent α of the gradient.
        L: Hölder constant, ``||∇ℓ(w) - ∇ℓ(w')|| <= L ||w - w'||^α``.
        M: ``sup_z ||∇ℓ(0; z)||``.
        M0: ``sup_z ℓ(0; z)``.
        lipschitz: tight ``sup ||∇ℓ(w; z)||`` over ``||w|| <= radius`` (inf if unbounded).
        paper_gradient_bound: the paper's ``M + L radius^α`` (Algorithm 2 line 2).
        value_bound: ``sup ℓ(w; z)`` over ``||w|| <= radius`` (inf if unbounded).
        x_bound, y_bound, radius: the bounds these hold under (None: no bound).
    """

    loss: str
    alpha: float
    L: float
    M: float
    M0: float
    lipschitz: float
    paper_gradient_bound: float
    value_bound: float
    x_bound: float
    y_bound: float | None
    radius: float | None


@dataclass(frozen=True)
class LinearLoss(ABC):
    r"""A convex, nonnegative loss of a linear model, ``ℓ(w; x, y) = φ(<w, x>, y)``.

    Attributes:
        name: registry name (see :func:`privopt.losses.get_loss`).
        task: ``"classification"`` (labels in {-1, +1}) or ``"regression"``.
        convex: whether z ↦ φ(z, y) is convex; True for every loss privopt offers, as Wang et
            al.'s (2022)
            analysis requires (docs/theory/non-smooth-sgd.md).
    """

    name: str = field(init=False, repr=False)
    task: str = field(init=False, repr=False)
    convex: bool = field(default=True, init=False, repr=False)

    # -- what a concrete loss supplies -------------------------------------------------------

    @abstractmethod
    def _phi(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """φ(z, y) elementwise, on validated arrays."""

    @abstractmethod
    def _derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """φ'(z, y) elementwise, on validated arrays."""

    @abstractmethod
    def phi_holder(self) -> HolderConstants:
        r"""(α, L_φ) with ``|φ'(z, y) - φ'(z', y)| <= L_φ |z - z'|^α`` for all z, z', y."""

    @abstractmethod
    def _sup_phi(self, z_bound: float, y_bound: float) -> float:
        """sup φ(z, y) over |z| <= z_bound (possibly inf) and admissible |y| <= y_bound."""

    @abstractmethod
    def _sup_abs_derivative(self, z_bound: float, y_bound: float) -> float:
        """sup |φ'(z, y)| over |z| <= z_bound (possibly inf) and admissible |y| <= y_bound."""

    @abstractmethod
    def _labels(self, y: np.ndarray) -> np.ndarray:
        """Validate labels/targets (classification: in {-1, +1})."""

    @abstractmethod
    def _y_bound(self, y_bound: float | None) -> float:
        """The effective bound on |y|: validated, inf when None (regression), 1 (classification)."""

    # -- pointwise ---------------------------------------------------------------------------

    def phi(self, z: object, y: object) -> np.ndarray:
        r"""Per-example loss values ``φ(z_i, y_i)`` given margins/predictions ``z = X w``.

        ``z`` and ``y`` must have the same shape; the result has that shape.
        """
        z, y = check_pointwise_inputs(z, y)
        return self._phi(z, self._labels(y))

    def derivative(self, z: object, y: object) -> np.ndarray:
        r"""Per-example derivatives ``φ'(z_i, y_i) = ∂φ/∂z`` (a subgradient at kinks).

        At a kink the minimum-norm subgradient is returned (0 for the hinge at ``y z = 1`` and
        for the absolute loss at ``z = y``): a deterministic function of (w, x, y), as the
        sensitivity argument of docs/theory/non-smooth-sgd.md requires, and one that satisfies the
        stated Hölder inequality.
        """
        z, y = check_pointwise_inputs(z, y)
        return self._derivative(z, self._labels(y))

    # -- per-example quantities of a linear model ---------------------------------------------

    def value(self, w: object, X: object, y: object) -> np.ndarray:
        r"""Per-example losses ``ℓ(w; x_i, y_i) = φ(<w, x_i>, y_i)``, shape (n,)."""
        w, X = check_linear_inputs(w, X, y)
        return self.phi(X @ w, y)

    def mean_value(self, w: object, X: object, y: object) -> float:
        r"""Empirical risk ``R_S(w) = (1/n) Σ_i φ(<w, x_i>, y_i)``; requires n >= 1."""
        values = self.value(w, X, y)
        if values.size == 0:
            raise ValueError("Expected at least one example (n >= 1) for the mean loss, got 0.")
        return float(np.mean(values))

    def _margin_derivatives(self, w: object, X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
        w, X = check_linear_inputs(w, X, y)
        return self.derivative(X @ w, y), X

    def gradients(self, w: object, X: object, y: object) -> np.ndarray:
        r"""Per-example (sub)gradients ``∇ℓ(w; x_i, y_i) = φ'(<w, x_i>, y_i) x_i``, shape (n, d)."""
        d, X = self._margin_derivatives(w, X, y)
        return d[:, None] * X

    def gradient_norms(self, w: object, X: object, y: object) -> np.ndarray:
        r"""Per-example gradient norms ``|φ'(<w, x_i>, y_i)| ||x_i||``, shape (n,), in O(n d).

        The (n, d) gradient matrix is never formed.
        """
        d, X = self._margin_derivatives(w, X, y)
        return np.abs(d) * row_norms(X)

    def gradient_sum(self, w: object, X: object, y: object) -> np.ndarray:
        r"""Sum of the per-example gradients ``Σ_i φ'(<w, x_i>, y_i) x_i = X^T φ'(X w, y)``."""
        d, X = self._margin_derivatives(w, X, y)
        return X.T @ d

    # -- constants under data bounds ---------------------------------------------------------

    def holder(self, x_bound: float, y_bound: float | None = None) -> HolderConstants:
        r"""(α, L) with ``||∇ℓ(w) - ∇ℓ(w')|| <= L ||w - w'||^α`` for all w, w' and admissible data.

        Derivation (docs/theory/non-smooth-sgd.md): with ``z = <w, x>`` and ``z' = <w', x>``,

        ``||∇ℓ(w) - ∇ℓ(w')|| = |φ'(z, y) - φ'(z', y)| ||x|| <= L_φ |<w - w', x>|^α ||x||
        <= L_φ ||x||^(1+α) ||w - w'||^α``  (Cauchy–Schwarz),

        so ``L = L_φ x_bound^(1+α)`` for ``||x|| <= x_bound``, with (α, L_φ) from
        :meth:`phi_holder`. The bound is attained when w - w' is parallel to x and φ' attains
        its modulus. It holds on all of R^d, so on every domain. ``y_bound`` does not enter
        (it is validated for a uniform signature).
        """
        x_bound = check_bound("x_bound", x_bound)
        self._y_bound(y_bound)
        modulus = self.phi_holder()
        return HolderConstants(modulus.alpha, modulus.L * x_bound ** (1.0 + modulus.alpha))

    def lipschitz(
        self, x_bound: float, y_bound: float | None = None, radius: float | None = None
    ) -> float:
        r"""Tight gradient bound ``G = sup ||∇ℓ(w; x, y)||`` over ``||w|| <= radius``.

        Since ``|<w, x>| <= radius x_bound`` (Cauchy–Schwarz, attained for x parallel to w),

        ``G = x_bound · sup{|φ'(z, y)| : |z| <= radius · x_bound, |y| <= y_bound}``.

        ``radius=None`` is the unbounded domain R^d; the result is ``math.inf`` where the loss
        is not Lipschitz there (least squares, q-norm regression and q-norm hinge with q > 1),
        and for regression losses whose derivative grows with |y| when ``y_bound`` is None.
        This is the "tighter valid gradient bound" of docs/theory/non-smooth-sgd.md; it never
        exceeds the paper's :meth:`paper_gradient_bound` ``M + L radius^α`` (by the Hölder
        inequality). It bounds the per-step sensitivity ``2 G`` of gradient perturbation.
        """
        x_bound = check_bound("x_bound", x_bound)
        z_bound = check_radius(radius) * x_bound
        return float(x_bound * self._sup_abs_derivative(z_bound, self._y_bound(y_bound)))

    def gradient_bound_at_zero(self, x_bound: float, y_bound: float | None = None) -> float:
        r"""``M = sup_z ||∇ℓ(0; z)|| = x_bound · sup_y |φ'(0, y)|`` (docs/theory/non-smooth-sgd.md).

        Enters the uniform-argument-stability bound (Theorem 7) through ``M + L R^α`` and
        ``c_{0,1} = M + L``. Infinite for least squares and q-norm regression (q > 1) without
        ``y_bound``.
        """
        return self.lipschitz(x_bound, y_bound, radius=0.0)

    def value_bound_at_zero(self, x_bound: float, y_bound: float | None = None) -> float:
        r"""``M_0 = sup_z ℓ(0; z) = sup_y φ(0, y)`` (docs/theory/non-smooth-sgd.md and §5).

        Needed by output perturbation on R^d (Theorem 7(a), through C_α of Lemma 20): 1 for the
        hinge family, log 2 for logistic, ψ(y_bound) for a regression loss ψ(z - y) (inf when
        ``y_bound`` is None). ``x_bound`` is validated for a uniform signature.
        """
        return self.value_bound(x_bound, y_bound, radius=0.0)

    def value_bound(
        self, x_bound: float, y_bound: float | None = None, radius: float | None = None
    ) -> float:
        r"""``sup ℓ(w; x, y)`` over ``||w|| <= radius``: ``sup{φ(z, y) : |z| <= radius x_bound}``.

        Tight (attained for x parallel to w at the bounds), hence at most the paper's
        ``M_0 + M R + L R^(1+α)`` (docs/theory/non-smooth-sgd.md). ``radius=None`` (R^d) gives inf.
        """
        x_bound = check_bound("x_bound", x_bound)
        z_bound = check_radius(radius) * x_bound
        return float(self._sup_phi(z_bound, self._y_bound(y_bound)))

    def paper_gradient_bound(
        self, x_bound: float, y_bound: float | None = None, radius: float | None = None
    ) -> float:
        r"""The paper's gradient bound ``M + L R^α`` (docs/theory/non-smooth-sgd.md; Algorithm 2
        line 2, §4).

        Valid because ``||∇ℓ(w)|| <= ||∇ℓ(0)|| + L ||w||^α``. Uses ``0^0 = inf^0 = 1``
        (docs/theory/non-smooth-sgd.md), so for α = 0 it is ``M + L`` on every domain, R^d included
        (the Remark 5 case of docs/theory/non-smooth-sgd.md); for α > 0 it is inf on R^d. Use it for
        a "faithful" reproduction; :meth:`lipschitz` is the tighter valid bound.
        """
        M = self.gradient_bound_at_zero(x_bound, y_bound)
        holder = self.holder(x_bound, y_bound)
        return float(M + holder.L * check_radius(radius) ** holder.alpha)

    def constants(
        self, x_bound: float, y_bound: float | None = None, radius: float | None = None
    ) -> LossConstants:
        """All constants of this loss under the bounds, as one :class:`LossConstants`."""
        holder = self.holder(x_bound, y_bound)
        return LossConstants(
            loss=self.name,
            alpha=holder.alpha,
            L=holder.L,
            M=self.gradient_bound_at_zero(x_bound, y_bound),
            M0=self.value_bound_at_zero(x_bound, y_bound),
            lipschitz=self.lipschitz(x_bound, y_bound, radius),
            paper_gradient_bound=self.paper_gradient_bound(x_bound, y_bound, radius),
            value_bound=self.value_bound(x_bound, y_bound, radius),
            x_bound=float(x_bound),
            y_bound=None if y_bound is None else float(y_bound),
            radius=None if radius is None else float(radius),
        )

    def check_data(
        self, X: object, y: object, x_bound: float, y_bound: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Return (X, y) as float arrays after checking they satisfy the stated public bounds.

        Requires finite, non-empty X of shape (n, d) and y of shape (n,), labels in {-1, +1}
        for classification, ``||x_i|| <= x_bound`` and (regression, when given)
        ``|y_i| <= y_bound``. The constants are suprema over data within these bounds; data
        outside them silently void every privacy guarantee (docs/theory/non-smooth-sgd.md item 2). A
        relative slack of 1e-12 absorbs the rounding of a recomputed norm of clipped rows.
        """
        X, y = check_design(X, y)
        y = self._labels(y)
        x_bound = check_bound("x_bound", x_bound)
        y_limit = self._y_bound(y_bound)
        largest = float(np.max(row_norms(X)))
        if largest > x_bound * (1.0 + _BOUND_RTOL):
            raise ValueError(
                f"A row of X has norm {largest!r} > x_bound = {x_bound!r}; clip or normalise the "
                "rows to the public bound first (privopt.clipping.clip_rows)."
            )
        largest_y = float(np.max(np.abs(y)))
        if largest_y > y_limit * (1.0 + _BOUND_RTOL):
            raise ValueError(
                f"A target has |y| = {largest_y!r} > y_bound = {y_limit!r}; clip the targets to "
                "the public bound first."
            )
        return X, y


@dataclass(frozen=True)
class PsiLoss(LinearLoss):
    r"""``φ(z, y) = ψ(a)`` of one scalar argument ``a = a(z, y)`` with ``|∂a/∂z| = 1``.

    The margin ``a = y z`` (:class:`~privopt.losses.MarginLoss`) and the residual ``a = z - y``
    (:class:`~privopt.losses.ResidualLoss`). Because ``|∂a/∂z| = 1``, the Hölder modulus of φ'
    in z is that of ψ'; over the admissible (z, y), ψ and |ψ'| are largest at one argument
    (:meth:`_extreme_argument`), which gives ``sup φ`` and ``sup |φ'|``.
    """

    @abstractmethod
    def psi(self, a: np.ndarray) -> np.ndarray:
        """ψ(a) at the arguments a (margins y z, or residuals z - y)."""

    @abstractmethod
    def dpsi(self, a: np.ndarray) -> np.ndarray:
        """ψ'(a) at the arguments a (the minimum-norm subgradient at kinks)."""

    @abstractmethod
    def _argument(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """a(z, y) elementwise."""

    @abstractmethod
    def _extreme_argument(self, z_bound: float, y_bound: float) -> float:
        """The argument maximising ψ and |ψ'| over |z| <= z_bound, |y| <= y_bound."""

    def _phi(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.psi(self._argument(z, y))

    def _sup_phi(self, z_bound: float, y_bound: float) -> float:
        return float(self.psi(np.asarray(self._extreme_argument(z_bound, y_bound))))

    def _sup_abs_derivative(self, z_bound: float, y_bound: float) -> float:
        return float(np.abs(self.dpsi(np.asarray(self._extreme_argument(z_bound, y_bound)))))
