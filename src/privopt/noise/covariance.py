r"""Covariance operators Σ for covariance-shaped noise N(0, std^2 Σ) (Choquette-Choo et al. 2024;
the DP-FTRL-Σ paper).

Mechanisms are generic in the per-step law: a stream given ``covariance=Σ`` maps each combined
standard-normal vector z to Σ^{1/2} z, so every noise source is N(0, std^2 Σ) and the correlation
across steps (B) is unchanged (the map is linear and acts per step). Operators never form a d x d
matrix unless asked to for tests (:meth:`CovarianceOperator.dense`).

Every operator offers the operations DP-FTRL-Σ (docs/theory/overparameterised-regression.md, §3.4)
needs, uniformly:

=============================  ===================================================================
``sqrt_apply(z)``              Σ^{1/2} z (symmetric square root; maps N(0, I) to N(0, Σ))
``apply(v)`` / ``solve(v)``    Σ v and Σ^{-1} v
``inv_sqrt_apply(v)``          Σ^{-1/2} v, so that ||Σ^{-1/2} v||_2 = ||v||_{Σ^{-1}}
``inv_norm(v)``                the Mahalanobis norm ||v||_{Σ^{-1}} = sqrt(v^T Σ^{-1} v), row-wise:
                               the per-example clipping norm of DP-FTRL-Σ
                               (docs/theory/overparameterised-regression.md [FIX]: the *non-squared*
                               norm)
``inv_norm_squared(v)``        v^T Σ^{-1} v (the squared form of Lemma 2.6,
docs/theory/overparameterised-regression.md) ``sample(rng, size)``          draws from N(0, Σ), one
per row ``trace()``, ``diagonal()``,   tr Σ, diag Σ and diag Σ^{-1}; with them ``trace_with(h)`` =
``inv_diagonal()``             tr(Σ diag(h)) and ``inv_trace_with(h)`` = tr(Σ^{-1} diag(h)), e.g.
                               tr(Σ^{-1} H) of the clip constant C
                               (docs/theory/overparameterised-regression.md, §8.1)
=============================  ===================================================================

Vectors are the last axis: a ``(d,)`` array is one vector, a ``(k, d)`` array is k row vectors.

:class:`LowRankPlusRidgeCovariance` is the public-data design (3.2) of the DP-FTRL-Σ paper (Private
Overparameterized Linear Regression, anonymous submission),
Σ = (λ I + X̃^T X̃)/M, in O(d·min(M, d)) memory and time per product.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive

__all__ = [
    "CovarianceOperator",
    "DiagonalCovariance",
    "IdentityCovariance",
    "LowRankPlusRidgeCovariance",
]


# Temporaries of chunked loops stay below about 2^22 float64 entries (32 MiB).
_CHUNK_ENTRIES = 1 << 22
# dense() of an implicit operator refuses dimensions above this (a d x d float64 array).
_DENSE_MAX_DIM = 8192


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"Expected rng to be a numpy.random.Generator, got {rng!r}; privopt never draws "
            "randomness silently."
        )
    return rng


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

    def inv_norm_squared(self, v: np.ndarray) -> np.ndarray | float:
        """The squared Mahalanobis norm v^T Σ^{-1} v (row-wise for a 2-D ``v``)."""
        v = self._check(v)
        return np.maximum(np.sum(v * self.solve(v), axis=-1), 0.0)

    def inv_sqrt_apply(self, v: np.ndarray) -> np.ndarray:
        """Σ^{-1/2} v for the symmetric square root, so ||Σ^{-1/2} v||_2 = ||v||_{Σ^{-1}}."""
        raise NotImplementedError(f"{type(self).__name__} does not implement inv_sqrt_apply.")

    def diagonal(self) -> np.ndarray:
        """The diagonal of Σ, shape (d,)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement diagonal.")

    def inv_diagonal(self) -> np.ndarray:
        """The diagonal of Σ^{-1}, shape (d,)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement inv_diagonal.")

    def trace(self) -> float:
        """tr Σ."""
        return float(np.sum(self.diagonal()))

    def trace_with(self, h: np.ndarray) -> float:
        """tr(Σ diag(h)) for a diagonal matrix given by its diagonal ``h`` (shape (d,))."""
        return float(self.diagonal() @ self._check_diagonal(h))

    def inv_trace_with(self, h: np.ndarray) -> float:
        """tr(Σ^{-1} diag(h)), e.g. tr(Σ^{-1} H) for a diagonal H
        (docs/theory/overparameterised-regression.md)."""
        return float(self.inv_diagonal() @ self._check_diagonal(h))

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Draws from N(0, Σ): shape (d,) if ``size`` is None, else (size, d), one per row.

        The default maps standard normals through :meth:`sqrt_apply`.
        """
        rng = _check_rng(rng)
        shape = (self.dim,) if size is None else (check_count("size", size), self.dim)
        return self.sqrt_apply(rng.standard_normal(shape))

    def dense(self) -> np.ndarray:
        """The explicit matrix (tests and small d only)."""
        return self.apply(np.eye(self.dim))

    def _check(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if v.ndim == 0:
            raise ValueError(f"Expected vectors of dimension {self.dim}, got a scalar.")
        if v.shape[-1] != self.dim:
            raise ValueError(f"Expected vectors of dimension {self.dim}, got {v.shape[-1]}.")
        return v

    def _check_diagonal(self, h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=float)
        if h.shape != (self.dim,):
            raise ValueError(f"Expected a diagonal of shape ({self.dim},), got {h.shape}.")
        if not np.all(np.isfinite(h)):
            raise ValueError("Expected a finite diagonal, got NaN or infinite entries.")
        return h


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

    def inv_sqrt_apply(self, v: np.ndarray) -> np.ndarray:
        return self._check(v)

    def diagonal(self) -> np.ndarray:
        return np.ones(self.dim)

    def inv_diagonal(self) -> np.ndarray:
        return np.ones(self.dim)

    def trace(self) -> float:
        return float(self.dim)


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

    def inv_sqrt_apply(self, v: np.ndarray) -> np.ndarray:
        return self._check(v) / self._sqrt

    def diagonal(self) -> np.ndarray:
        return self.variances.copy()

    def inv_diagonal(self) -> np.ndarray:
        return 1.0 / self.variances


class LowRankPlusRidgeCovariance(CovarianceOperator):
    r"""The public-data design Σ = (λ I + X̃^T X̃) / M of the DP-FTRL-Σ paper
    (docs/theory/overparameterised-regression.md,
    eq. (3.2)).

    ``public_X`` holds M public *unlabeled* rows x̃_1..x̃_M of width d (the paper's X̃ is the
    d x M matrix of columns, so its X̃ X̃^T is our X̃^T X̃). With a = λ/M and Ĥ = X̃^T X̃ / M,

    .. math::

        \Sigma = a I + \hat H = a I + F^\top F, \qquad a = \lambda / M,

    where F (r x d, r = min(M, d)) is X̃/√M when M <= d and the triangular factor of a QR of
    X̃/√M otherwise (same F^T F). Nothing d x d is ever formed
    (docs/theory/overparameterised-regression.md, ``LowRankPlusIdentity``).

    **Thin SVD through the Gram matrix.** With X̃/√M = P S W^T (thin SVD), F F^T = P S^2 P^T is an
    r x r eigendecomposition (cost O(d r^2), one BLAS ``syrk``), and μ = s^2 are the nonzero
    eigenvalues of Ĥ. For any power p, since (a + x)^p - a^p = x φ_p(x),

    .. math::

        \Sigma^p = a^p I + W \operatorname{diag}((a+\mu)^p - a^p) W^\top
                 = a^p I + F^\top P \operatorname{diag}(\varphi_p(\mu)) P^\top F,

    with φ_p smooth and bounded at μ = 0:

    * φ_1 = 1;  φ_{1/2}(μ) = 1/(√(a+μ) + √a);
    * φ_{-1}(μ) = -1/(a (a+μ))  (Woodbury);
    * φ_{-1/2}(μ) = -1/(√a √(a+μ) (√(a+μ) + √a)).

    The right singular vectors W = F^T P S^{-1} are used only implicitly, so small or zero
    singular values (rank-deficient public data) are never divided by. Each product costs two
    matrix products with F: O(k d r) time and O(k d) extra memory for k vectors.

    **Sampling** (exact): a draw of N(0, Σ) is √a g + F^T h with g ~ N(0, I_d) and
    h ~ N(0, I_r). For M <= d this is literally (√λ g + X̃^T h)/√M with h ~ N(0, I_M)
    (docs/theory/overparameterised-regression.md); for M > d, F^T h has the same law N(0, X̃^T
    X̃/M).

    Forming F F^T squares the singular values, but they enter only through a + μ, so every
    product keeps a relative error of O(eps · cond(Σ)) (tested against dense solves to 1e-10).

    **Mahalanobis norm** (the clipping norm of DP-FTRL-Σ,
    docs/theory/overparameterised-regression.md [FIX], §3.4):
    ||v||^2_{Σ^{-1}} = (||v||^2 - Σ_j c_j^2/(a+μ_j))/a with c = P^T F v. The subtraction
    loses about eps · cond(Σ) relatively (cond(Σ) = (a + μ_max)/a, benign for the paper's
    a = 1/(Nη), docs/theory/overparameterised-regression.md); the result is clamped to the exact
    bounds
    ||v||^2/(a+μ_max) <= v^T Σ^{-1} v <= ||v||^2/a.

    **Positive definiteness** needs λ > 0: Ĥ has rank at most M, so for M < d Σ would be
    singular with λ = 0 (docs/theory/overparameterised-regression.md). λ -> 0 also blows up
    tr(Σ^{-1} H) and the clip constant (docs/theory/overparameterised-regression.md). Privacy holds
    for any fixed, public, positive-definite Σ used for both clipping and noise; the rows must be
    public and disjoint from the private data (docs/theory/overparameterised-regression.md [IMPL],
    §3.4 item 5).

    Parameters
    ----------
    public_X : array of shape (M, d)
        Public unlabeled rows, M >= 1, all finite. Copied (scaled by 1/√M); the caller's array
        is not kept.
    ridge : float
        λ > 0. :meth:`from_public_data` sets the paper's λ = M/(Nη) (Cor. 4.5).
    center : bool
        If true, subtract the column mean of ``public_X`` first (Ĥ becomes the sample
        covariance). The paper's design (3.2) uses the *uncentred* second moment, matching
        H = E[x x^T] for zero-mean x (docs/theory/overparameterised-regression.md), so the default
        is False.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> pub = rng.standard_normal((3, 6))
    >>> sigma = LowRankPlusRidgeCovariance(pub, ridge=0.5)
    >>> dense = (0.5 * np.eye(6) + pub.T @ pub) / 3
    >>> v = rng.standard_normal(6)
    >>> bool(np.allclose(sigma.solve(v), np.linalg.solve(dense, v)))
    True
    >>> bool(np.isclose(sigma.inv_norm(v), np.sqrt(v @ np.linalg.solve(dense, v))))
    True
    >>> sigma.sample(rng, 4).shape
    (4, 6)
    """

    def __init__(self, public_X: Any, ridge: float, *, center: bool = False) -> None:
        X = np.asarray(public_X, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"Expected public_X of shape (M, d), got shape {X.shape}.")
        M, d = X.shape
        if M == 0:
            raise ValueError(
                "public_X has no rows (M = 0): the low-rank-plus-ridge Σ needs at least one "
                "public unlabeled row; without public data use IdentityCovariance "
                "(docs/theory/overparameterised-regression.md)."
            )
        if d == 0:
            raise ValueError("public_X has no columns (d = 0): expected d >= 1 features.")
        finite = np.isfinite(X).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            shown = ", ".join(map(str, bad[:5])) + (", ..." if bad.size > 5 else "")
            raise ValueError(
                f"public_X contains non-finite values (NaN or inf) in {bad.size} row(s): {shown}."
            )
        if isinstance(ridge, bool) or not isinstance(ridge, numbers.Real):
            raise ValueError(f"Expected ridge (lambda) to be a real number, got {ridge!r}.")
        ridge = float(ridge)
        if not (math.isfinite(ridge) and ridge > 0.0):
            why = (
                f"X̃^T X̃ has rank at most M = {M} < d = {d}, so with lambda <= 0 Σ would be "
                "singular (or indefinite) and its Σ^{-1} clipping norm undefined"
                if M < d
                else "lambda <= 0 can make Σ singular or indefinite (duplicate or collinear rows), "
                "and lambda -> 0 blows up tr(Σ^{-1} H) and the clip constant"
            )
            raise ValueError(
                f"Expected ridge (lambda) > 0 and finite, got {ridge!r}: Σ = (lambda I + X̃^T X̃)/M "
                f"must be positive definite; {why} (docs/theory/overparameterised-regression.md)."
            )
        if not isinstance(center, bool | np.bool_):
            raise ValueError(f"Expected center to be a bool, got {center!r}.")
        scale = ridge / M
        if not scale > 0.0:
            raise ValueError(f"ridge / M = {ridge!r} / {M} underflows to 0; Σ would be singular.")

        self.dim = d
        self.n_public = M
        self.ridge = ridge
        self.center = bool(center)
        #: a = λ / M, the eigenvalue of Σ on the orthogonal complement of the public rows.
        self.scale = scale
        self._sqrt_scale = math.sqrt(scale)

        inv_sqrt_m = 1.0 / math.sqrt(M)
        if self.center:
            F = X - X.mean(axis=0)
            F *= inv_sqrt_m
        else:
            F = X * inv_sqrt_m
        if M > d:
            # F^T F is all that matters: compress the M x d rows to a d x d triangular factor.
            F = np.linalg.qr(F, mode="r")
        F = np.ascontiguousarray(F)
        F.setflags(write=False)
        self._factor = F
        self.rank = F.shape[0]

        gram = F @ F.T  # r x r, BLAS syrk
        mu, P = np.linalg.eigh(0.5 * (gram + gram.T))
        mu = np.maximum(mu, 0.0)[::-1]  # descending; rounding can make zeros slightly negative
        self._mu = mu
        self._P = np.ascontiguousarray(P[:, ::-1])
        a, ra = scale, self._sqrt_scale
        rb = np.sqrt(a + mu)
        self._phi = {
            1.0: np.ones_like(mu),
            0.5: 1.0 / (rb + ra),
            -1.0: -1.0 / (a * (a + mu)),
            -0.5: -1.0 / (ra * rb * (rb + ra)),
        }

    @classmethod
    def from_public_data(
        cls,
        public_X: Any,
        *,
        ridge: float | None = None,
        n_samples: int | None = None,
        step_size: float | None = None,
        center: bool = False,
    ) -> LowRankPlusRidgeCovariance:
        r"""Σ = (λ I + X̃^T X̃)/M designed from M public unlabeled rows
        (docs/theory/overparameterised-regression.md, (3.2)).

        Give either ``ridge`` = λ directly, or the training size N = ``n_samples`` and step size
        η = ``step_size`` of DP-FTRL-Σ, in which case λ = M/(Nη) as in the paper's utility
        theory (Corollary 4.5; docs/theory/overparameterised-regression.md and §5.4), i.e. Σ =
        I/(Nη) + X̃^T X̃/M. The paper's analysis assumes M >= N (Cor. 4.5); smaller M is allowed (an
        ablation, docs/theory/overparameterised-regression.md E5) and stays positive definite.
        """
        M = np.shape(public_X)[0] if np.ndim(public_X) >= 1 else 0
        by_training = n_samples is not None or step_size is not None
        if ridge is not None and by_training:
            raise ValueError(
                "Give either ridge, or n_samples and step_size (ridge = M / (N * eta)), not both."
            )
        if ridge is None:
            if n_samples is None or step_size is None:
                raise ValueError(
                    "Give ridge, or both n_samples (N) and step_size (eta) for the paper's "
                    "ridge = M / (N * eta) (Corollary 4.5, "
                    "docs/theory/overparameterised-regression.md)."
                )
            n = check_count("n_samples", n_samples)
            eta = check_positive("step_size", step_size)
            ridge = max(M, 1) / (n * eta)
        return cls(public_X, ridge, center=center)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dim={self.dim}, n_public={self.n_public}, "
            f"ridge={self.ridge!r}, rank={self.rank}, center={self.center})"
        )

    # -- spectrum -------------------------------------------------------------------------------

    @property
    def leading_eigenvalues(self) -> np.ndarray:
        """The r = min(M, d) largest eigenvalues a + μ of Σ, descending; the other d - r are a."""
        return self.scale + self._mu

    @property
    def condition_number(self) -> float:
        """cond(Σ) = (a + μ_max) / a (for d > r; otherwise (a + μ_max)/(a + μ_min))."""
        low = self.scale if self.dim > self.rank else self.scale + float(self._mu[-1])
        return (self.scale + float(self._mu[0])) / low

    # -- products -------------------------------------------------------------------------------

    def _power(self, v: np.ndarray, p: float) -> np.ndarray:
        """Σ^p v = a^p v + F^T P diag(φ_p(μ)) P^T F v (row-wise)."""
        v = self._check(v)
        coeffs = ((v @ self._factor.T) @ self._P) * self._phi[p]
        out = (coeffs @ self._P.T) @ self._factor
        out += self.scale**p * v
        return out

    def apply(self, v: np.ndarray) -> np.ndarray:
        """Σ v = a v + F^T F v."""
        return self._power(v, 1.0)

    def sqrt_apply(self, z: np.ndarray) -> np.ndarray:
        """Σ^{1/2} z for the symmetric square root (maps N(0, I_d) to N(0, Σ))."""
        return self._power(z, 0.5)

    def solve(self, v: np.ndarray) -> np.ndarray:
        """Σ^{-1} v = v/a - F^T P diag(1/(a(a+μ))) P^T F v (Woodbury)."""
        return self._power(v, -1.0)

    def inv_sqrt_apply(self, v: np.ndarray) -> np.ndarray:
        """Σ^{-1/2} v for the symmetric square root."""
        return self._power(v, -0.5)

    def inv_norm_squared(self, v: np.ndarray) -> np.ndarray | float:
        """v^T Σ^{-1} v, row-wise; O(k d r) for k rows, in chunks of rows (bounded memory)."""
        v = self._check(v)
        if v.ndim == 1:
            return float(self._inv_quad(v[None, :])[0])
        flat = v.reshape(-1, self.dim)
        out = np.empty(flat.shape[0])
        step = max(1, _CHUNK_ENTRIES // max(self.dim, 1))
        for start in range(0, flat.shape[0], step):
            out[start : start + step] = self._inv_quad(flat[start : start + step])
        return out.reshape(v.shape[:-1])

    def _inv_quad(self, v: np.ndarray) -> np.ndarray:
        a = self.scale
        sq = np.einsum("ij,ij->i", v, v)
        c = (v @ self._factor.T) @ self._P
        shrink = np.sum(c * c / (a + self._mu), axis=1)
        quad = (sq - shrink) / a
        return np.clip(quad, sq / (a + float(self._mu[0])), sq / a)

    def inv_norm(self, v: np.ndarray) -> np.ndarray | float:
        """||v||_{Σ^{-1}} = sqrt(v^T Σ^{-1} v), row-wise: the DP-FTRL-Σ clipping norm."""
        return np.sqrt(self.inv_norm_squared(v))

    # -- diagonals and traces -------------------------------------------------------------------

    def trace(self) -> float:
        """tr Σ = d a + ||X̃||_F^2 / M = (d λ + ||X̃||_F^2)/M."""
        return self.dim * self.scale + float(np.sum(self._mu))

    def _column_chunks(self):
        step = max(1, _CHUNK_ENTRIES // max(self.rank, 1))
        for start in range(0, self.dim, step):
            yield slice(start, start + step)

    def diagonal(self) -> np.ndarray:
        """diag Σ = a + (column sums of F ∘ F); O(d r)."""
        out = np.empty(self.dim)
        for cols in self._column_chunks():
            block = self._factor[:, cols]
            out[cols] = np.einsum("ij,ij->j", block, block)
        out += self.scale
        return out

    def inv_diagonal(self) -> np.ndarray:
        """diag Σ^{-1} = (1 - Σ_j (P^T F)_{ji}^2/(a+μ_j))/a; O(d r^2), clamped to exact bounds."""
        a = self.scale
        weights = 1.0 / (a + self._mu)
        out = np.empty(self.dim)
        for cols in self._column_chunks():
            block = self._P.T @ self._factor[:, cols]
            out[cols] = np.einsum("j,ji,ji->i", weights, block, block)
        out = (1.0 - out) / a
        return np.clip(out, 1.0 / (a + float(self._mu[0])), 1.0 / a)

    # -- sampling and tests ---------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Exact draws of N(0, Σ): √a g + F^T h, g ~ N(0, I_d), h ~ N(0, I_r) (g drawn first).

        For M <= d this is (√λ g + X̃^T h)/√M with h ~ N(0, I_M)
        (docs/theory/overparameterised-regression.md). Shape (d,) if ``size`` is None, else (size,
        d).
        """
        rng = _check_rng(rng)
        k = 1 if size is None else check_count("size", size)
        out = rng.standard_normal((k, self.dim))
        out *= self._sqrt_scale
        out += rng.standard_normal((k, self.rank)) @ self._factor
        return out[0] if size is None else out

    def dense(self) -> np.ndarray:
        """The explicit d x d matrix, for tests at small d only (refused for d > 8192)."""
        if self.dim > _DENSE_MAX_DIM:
            raise ValueError(
                f"dense() would allocate a {self.dim} x {self.dim} array; it is meant for tests "
                f"with d <= {_DENSE_MAX_DIM}."
            )
        out = self._factor.T @ self._factor
        out[np.diag_indices(self.dim)] += self.scale
        return out
