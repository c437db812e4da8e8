r"""Synthetic linear-regression data with exact oracle quantities.

The generator follows the model of Varshney et al. (2022)
(docs/theory/linear-regression-adaptive-clipping.md). Features are

.. math::

    x = U \Lambda^{1/2} \xi, \qquad H = \mathbb E[x x^\top] = U \Lambda U^\top,

with :math:`\Lambda = \operatorname{diag}(\lambda_1, \dots, \lambda_d)`,
:math:`\lambda_1 = \lambda_{\max} \ge \dots \ge \lambda_d = \lambda_{\max}/\kappa`,
:math:`U` the identity or a Haar-random orthogonal matrix, and :math:`\xi` a vector of i.i.d.
zero-mean unit-variance coordinates (Gaussian, Laplace or Rademacher). Labels are
:math:`y = x^\top w^* + z` with :math:`z = \sigma \zeta`, :math:`\zeta` unit-variance and
independent of :math:`x`.

For Gaussian :math:`\xi` the law of :math:`x` is :math:`N(0, H)`, the same as
:math:`H^{1/2}\xi`. For the other laws the coordinates are independent in the eigenbasis of
:math:`H`; this is the construction for which the oracle :math:`R_x^2` below is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from privopt._validate import check_count, check_finite, check_nonnegative, check_positive
from privopt.datasets._common import RegressionSample, check_choice, freeze

__all__ = ["LinearRegressionData", "make_linear_regression"]

Spectrum = Literal["identity", "geometric", "linear"]
XLaw = Literal["gaussian", "laplace", "rademacher"]
NoiseLaw = Literal["gaussian", "laplace"]
NormIn = Literal["l2", "H"]

# Fourth moment E[ξ^4] of each unit-variance coordinate law (Laplace with scale b = 1/√2 has
# E[ξ^4] = 24 b^4 = 6).
_FOURTH_MOMENT: dict[str, float] = {"gaussian": 3.0, "laplace": 6.0, "rademacher": 1.0}
_NOISE_LAWS = ("gaussian", "laplace")
_SPECTRA = ("identity", "geometric", "linear")
_NORMS = ("l2", "H")


def _unit_variance(rng: np.random.Generator, law: str, size: tuple[int, ...]) -> np.ndarray:
    """Draw i.i.d. zero-mean, unit-variance values of the given law."""
    if law == "gaussian":
        return rng.standard_normal(size)
    if law == "laplace":
        return rng.laplace(0.0, 1.0 / math.sqrt(2.0), size)
    # Rademacher: ±1 with probability 1/2 each.
    return 2.0 * rng.integers(0, 2, size=size, dtype=np.int8) - 1.0


def _haar_orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    """A Haar-distributed orthogonal matrix: QR of a Gaussian matrix with the sign fix.

    Multiplying column ``j`` of ``Q`` by ``sign(R_jj)`` makes the factorisation unique, and the
    resulting ``Q`` is exactly Haar (Mezzadri 2007, "How to generate random matrices from the
    classical compact groups").
    """
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def _spectrum(spectrum: str, d: int, kappa: float, lam_max: float) -> np.ndarray:
    lam_min = lam_max / kappa
    if not lam_min > 0.0:
        raise ValueError(
            f"Expected lam_max / kappa > 0, got {lam_max!r} / {kappa!r} = {lam_min!r} (underflow)."
        )
    if spectrum == "identity":
        if kappa != 1.0:
            raise ValueError(f'Expected kappa == 1 for spectrum="identity", got {kappa!r}.')
        return np.full(d, lam_max)
    if d == 1 and kappa != 1.0:
        raise ValueError(f"Expected kappa == 1 when n_features == 1, got {kappa!r}.")
    t = np.linspace(0.0, 1.0, d)
    if spectrum == "geometric":
        eigenvalues = lam_max * kappa ** (-t)
    else:
        eigenvalues = lam_max - t * (lam_max - lam_min)
    # Pin both ends exactly, so that mu == lam_max / kappa and the condition number is exact.
    eigenvalues[0], eigenvalues[-1] = lam_max, lam_min
    return eigenvalues


@dataclass(frozen=True, eq=False)
class LinearRegressionData(RegressionSample):
    r"""A linear-regression sample with its population oracle (Varshney et al. 2022, §2.3).

    The arrays are read-only, so that the oracle quantities keep describing the sample.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Features, rows :math:`x_i = U \Lambda^{1/2} \xi_i`.
    y : ndarray of shape (n,)
        Labels :math:`y_i = x_i^\top w^* + z_i`.
    w_star : ndarray of shape (d,)
        The population minimiser :math:`w^*`.
    H : ndarray of shape (d, d)
        The feature covariance :math:`H = \mathbb E[x x^\top] = U \Lambda U^\top`.
    eigenvalues : ndarray of shape (d,)
        :math:`\lambda_1 \ge \dots \ge \lambda_d > 0`, the spectrum of :math:`H`.
    sigma : float
        Noise standard deviation, :math:`\mathbb E[z^2] = \sigma^2`.
    x_law, noise_law : str
        Laws of the coordinates :math:`\xi_j` and of :math:`\zeta`.
    """

    X: np.ndarray
    y: np.ndarray
    w_star: np.ndarray
    H: np.ndarray
    eigenvalues: np.ndarray
    sigma: float
    x_law: str = "gaussian"
    noise_law: str = "gaussian"

    @property
    def mu(self) -> float:
        r"""Smallest eigenvalue :math:`\mu = \lambda_d` of :math:`H`."""
        return float(self.eigenvalues[-1])

    @property
    def H_norm(self) -> float:
        r"""Operator norm :math:`\|H\|_2 = \lambda_1`."""
        return float(self.eigenvalues[0])

    @property
    def kappa(self) -> float:
        r"""Condition number :math:`\kappa = \|H\|_2 / \mu`."""
        return self.H_norm / self.mu

    @property
    def trace_H_inv(self) -> float:
        r""":math:`\operatorname{Tr}(H^{-1}) = \sum_i 1/\lambda_i`."""
        return float((1.0 / self.eigenvalues).sum())

    @property
    def R_x_squared(self) -> float:
        r"""The smallest :math:`R^2` with :math:`\mathbb E[\|x\|^2 x x^\top] \preceq R^2 H`.

        With :math:`m_4 = \mathbb E[\xi_j^4]` (3 Gaussian, 6 Laplace, 1 Rademacher),
        :math:`\|x\|^2 = \sum_j \lambda_j \xi_j^2` for any orthogonal :math:`U`, and the
        independence and zero mean of the :math:`\xi_j` give

        .. math::

            \mathbb E[\|x\|^2 x x^\top]
            = U \operatorname{diag}\big(\lambda_i (\operatorname{Tr} H + (m_4 - 1)\lambda_i)
            \big) U^\top = \operatorname{Tr}(H)\, H + (m_4 - 1) H^2,

        so :math:`R_x^2 = \max_i (\operatorname{Tr} H + (m_4-1)\lambda_i)
        = \operatorname{Tr} H + (m_4 - 1)\|H\|_2` since :math:`m_4 \ge 1`. Gaussian
        :math:`N(0, I_d)` gives :math:`d + 2`.
        """
        return self.trace_H + (_FOURTH_MOMENT[self.x_law] - 1.0) * self.H_norm

    @property
    def w_star_H_norm(self) -> float:
        r""":math:`\|w^*\|_H = \sqrt{w^{*\top} H w^*}`."""
        return math.sqrt(max(0.0, float(self.w_star @ self.H @ self.w_star)))

    @property
    def bayes_rate(self) -> float:
        r"""The MLE reference excess risk :math:`\sigma^2 d / n`."""
        return self.sigma**2 * self.n_features / self.n_samples

    def excess_risk(self, w: np.ndarray, intercept: float = 0.0) -> float:
        r"""Population excess squared-loss risk of the predictor :math:`x \mapsto x^\top w + b`.

        .. math::

            \tfrac12 \mathbb E[(y - x^\top w - b)^2] - \tfrac12 \mathbb E[z^2]
            = \tfrac12 (w - w^*)^\top H (w - w^*) + \tfrac12 b^2,

        since :math:`\mathbb E[x] = 0`, :math:`\mathbb E[z] = 0` and :math:`z` is independent of
        :math:`x`.
        """
        w = np.asarray(w, dtype=np.float64)
        if w.shape != self.w_star.shape:
            raise ValueError(f"Expected w of shape {self.w_star.shape}, got {w.shape}.")
        if not np.all(np.isfinite(w)):
            raise ValueError("Expected w to be finite, got NaN or infinite entries.")
        b = check_finite("intercept", intercept)
        delta = w - self.w_star
        return max(0.0, 0.5 * float(delta @ self.H @ delta)) + 0.5 * b * b


def make_linear_regression(
    n_samples: int,
    n_features: int,
    *,
    spectrum: Spectrum = "identity",
    kappa: float = 1.0,
    lam_max: float = 1.0,
    rotate: bool = False,
    w_norm: float = 1.0,
    w_norm_in: NormIn = "l2",
    sigma: float = 1.0,
    x_law: XLaw = "gaussian",
    noise_law: NoiseLaw = "gaussian",
    rng: np.random.Generator,
) -> LinearRegressionData:
    r"""Draw a linear-regression sample from the model of Varshney et al. (2022, §2.3).

    .. math::

        \lambda_1 = \lambda_{\max} \ge \dots \ge \lambda_d = \lambda_{\max}/\kappa,
        \quad H = U \Lambda U^\top, \quad x = U \Lambda^{1/2} \xi, \quad
        y = x^\top w^* + \sigma \zeta.

    Parameters
    ----------
    n_samples, n_features : int
        :math:`n \ge 1` rows and :math:`d \ge 1` features.
    spectrum : {"identity", "geometric", "linear"}
        Spacing of the eigenvalues between :math:`\lambda_{\max}` and
        :math:`\lambda_{\max}/\kappa`: all equal (requires ``kappa == 1``),
        :math:`\lambda_i = \lambda_{\max}\kappa^{-(i-1)/(d-1)}`, or evenly spaced.
    kappa : float
        Condition number :math:`\kappa \ge 1`.
    lam_max : float
        Largest eigenvalue :math:`\lambda_{\max} > 0`.
    rotate : bool
        If true, :math:`U` is Haar-random orthogonal; otherwise :math:`U = I`.
    w_norm : float
        Norm of :math:`w^*`, a uniformly random direction.
    w_norm_in : {"l2", "H"}
        Whether ``w_norm`` is :math:`\|w^*\|_2` or :math:`\|w^*\|_H`.
    sigma : float
        Noise standard deviation :math:`\sigma \ge 0`.
    x_law : {"gaussian", "laplace", "rademacher"}
        Law of the unit-variance coordinates :math:`\xi_j`: :math:`N(0,1)`,
        Laplace with scale :math:`1/\sqrt2`, or :math:`\pm 1`.
    noise_law : {"gaussian", "laplace"}
        Law of the unit-variance noise :math:`\zeta`.
    rng : numpy.random.Generator
        Source of randomness. Draws happen in a fixed order (:math:`U`, direction of
        :math:`w^*`, :math:`\xi`, :math:`\zeta`), and :math:`\zeta` is drawn even when
        ``sigma == 0``, so runs that differ only in ``sigma`` share ``X`` and ``w_star``.

    Returns
    -------
    LinearRegressionData
        The sample and its oracle quantities. Nothing larger than :math:`n \times d` is formed
        besides the :math:`d \times d` matrices.

    Examples
    --------
    >>> import numpy as np
    >>> data = make_linear_regression(
    ...     1000, 5, spectrum="geometric", kappa=10.0, rng=np.random.default_rng(0)
    ... )
    >>> data.X.shape, data.y.shape
    ((1000, 5), (1000,))
    >>> round(data.kappa, 12), data.excess_risk(data.w_star)
    (10.0, 0.0)
    """
    n = check_count("n_samples", n_samples)
    d = check_count("n_features", n_features)
    spectrum = check_choice("spectrum", spectrum, _SPECTRA)
    kappa = check_finite("kappa", kappa)
    if not kappa >= 1.0:
        raise ValueError(f"Expected kappa >= 1, got {kappa!r}.")
    lam_max = check_positive("lam_max", lam_max)
    if not isinstance(rotate, bool | np.bool_):
        raise ValueError(f"Expected rotate to be a bool, got {rotate!r}.")
    w_norm = check_nonnegative("w_norm", w_norm)
    w_norm_in = check_choice("w_norm_in", w_norm_in, _NORMS)
    sigma = check_nonnegative("sigma", sigma)
    x_law = check_choice("x_law", x_law, tuple(_FOURTH_MOMENT))
    noise_law = check_choice("noise_law", noise_law, _NOISE_LAWS)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy.random.Generator, got {rng!r}.")

    eigenvalues = _spectrum(spectrum, d, kappa, lam_max)
    u = _haar_orthogonal(rng, d) if rotate else None
    H = (u * eigenvalues) @ u.T if u is not None else np.diag(eigenvalues)
    H = 0.5 * (H + H.T)  # exactly symmetric

    direction = rng.standard_normal(d)
    while not (norm := float(np.linalg.norm(direction))) > 0.0:  # probability zero
        direction = rng.standard_normal(d)
    direction /= norm
    if w_norm_in == "H":
        # ||v||_H = ||Λ^{1/2} U^T v||_2, computed in the eigenbasis to stay non-negative.
        coords = direction if u is None else u.T @ direction
        direction /= float(np.linalg.norm(np.sqrt(eigenvalues) * coords))
    w_star = w_norm * direction

    X = _unit_variance(rng, x_law, (n, d))
    X *= np.sqrt(eigenvalues)
    if u is not None:
        X = X @ u.T
    y = X @ w_star
    y += sigma * _unit_variance(rng, noise_law, (n,))

    freeze(X, y, w_star, H, eigenvalues)
    return LinearRegressionData(
        X=X,
        y=y,
        w_star=w_star,
        H=H,
        eigenvalues=eigenvalues,
        sigma=sigma,
        x_law=x_law,
        noise_law=noise_law,
    )
