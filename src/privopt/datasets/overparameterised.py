r"""Synthetic over-parameterised linear regression with an implicit diagonal H.

The model of "Private Overparameterized Linear Regression without Suffering in High
Dimensions" (anonymous submission; "the DP-FTRL-Σ paper" below).

The generator follows docs/theory/overparameterised-regression.md (``make_problem``), which matches
the paper's Assumptions 2.1–2.3 (docs/theory/overparameterised-regression.md). With 1-based indices
:math:`i = 1, \dots, d`,

.. math::

    H = \operatorname{diag}(\lambda_1, \dots, \lambda_d), \qquad
    \lambda_i = i^{-r}\ (r > 1) \quad\text{or}\quad \lambda_i = e^{-i},

    x = H^{1/2} z = \sqrt{\lambda} \odot z, \qquad y = \langle \theta^*, x \rangle + \zeta,

with :math:`z` i.i.d. unit-variance coordinates (Gaussian, or Rademacher; independent
coordinates give Assumption 2.2) and :math:`\zeta \sim N(0, \sigma_\zeta^2)` independent of
:math:`x`. No normalisation is applied to the spectrum: :math:`\lambda_1 = 1` (polynomial) or
:math:`e^{-1}` (exponential), so :math:`\lambda_1 \le 1` and :math:`\operatorname{tr} H`
is :math:`\sum_{i \le d} i^{-r} < \zeta(r)` or :math:`< 1/(e-1) \approx 0.582`, both O(1) as the
paper's corollaries assume (docs/theory/overparameterised-regression.md). :math:`H` is never formed:
every population quantity is an O(d) sum over the eigenvalues, so d = 10^5 is cheap (the sample
itself is n x d).

Exponential eigenvalues are floored at ``1e-300`` (docs/theory/overparameterised-regression.md,
§8.2: :math:`e^{-i}` underflows near i = 745 and denormals slow numpy); coordinates beyond i ≈ 40
are numerically irrelevant but still count toward d.

**Excess risk convention.** The loss is :math:`\ell(\theta; x, y) = \tfrac12 (\theta^\top x -
y)^2`, so (docs/theory/overparameterised-regression.md)

.. math::

    L(\theta) - L(\theta^*) = \tfrac12 (\theta - \theta^*)^\top H (\theta - \theta^*)
    = \tfrac12 \sum_i \lambda_i (\theta_i - \theta^*_i)^2,

*with* the factor 1/2. This is the quantity the rates of the paper's Table 1 bound
(docs/theory/overparameterised-regression.md); the factor is a constant and does not change fitted
log-log slopes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from privopt._validate import check_count, check_finite, check_nonnegative
from privopt.datasets._common import RegressionSample, check_choice, freeze

__all__ = ["OverparameterisedData", "make_overparameterised_regression", "spectrum_eigenvalues"]

SpectrumKind = Literal["polynomial", "exponential"]
ThetaKind = Literal["powerlaw", "e1", "isotropic"]
XLaw = Literal["gaussian", "rademacher"]

_SPECTRA = ("polynomial", "exponential")
_THETAS = ("powerlaw", "e1", "isotropic")
_X_LAWS = ("gaussian", "rademacher")
#: Floor of the exponential spectrum (e^{-i} < 1e-300 for i >= 691).
EXP_FLOOR = 1e-300


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy.random.Generator, got {rng!r}.")
    return rng


def spectrum_eigenvalues(
    n_features: int, spectrum: SpectrumKind = "polynomial", r: float | None = None
) -> np.ndarray:
    r"""The eigenvalues of H (docs/theory/overparameterised-regression.md): :math:`i^{-r}` or
    :math:`\max(e^{-i}, 10^{-300})`.

    Indices are 1-based, :math:`i = 1..d`, so :math:`\lambda_1 = 1` or :math:`e^{-1}`.
    ``r`` (default 2) must be > 1 for the polynomial spectrum (finite trace as d -> infinity)
    and must be left out for the exponential one.

    >>> spectrum_eigenvalues(3, "polynomial", r=2.0).tolist()
    [1.0, 0.25, 0.1111111111111111]
    """
    d = check_count("n_features", n_features)
    spectrum = check_choice("spectrum", spectrum, _SPECTRA)
    i = np.arange(1, d + 1, dtype=float)
    if spectrum == "exponential":
        if r is not None:
            raise ValueError(f'r applies only to spectrum="polynomial", got r={r!r}.')
        return np.maximum(np.exp(-i), EXP_FLOOR)
    r = 2.0 if r is None else check_finite("r", r)
    if not r > 1.0:
        raise ValueError(
            f"Expected r > 1 for the polynomial spectrum i^-r (so that tr H = sum i^-r stays "
            f"bounded as d grows, docs/theory/overparameterised-regression.md), got r={r!r}."
        )
    return i ** (-r)


def _draw_x(rng: np.random.Generator, law: str, n: int, sqrt_eig: np.ndarray) -> np.ndarray:
    """n rows x = sqrt(λ) ⊙ z with i.i.d. unit-variance z (in place, one n x d array)."""
    if law == "gaussian":
        X = rng.standard_normal((n, sqrt_eig.size))
    else:
        X = rng.integers(0, 2, size=(n, sqrt_eig.size), dtype=np.int8).astype(float)
        X *= 2.0
        X -= 1.0
    X *= sqrt_eig
    return X


@dataclass(frozen=True, eq=False)
class OverparameterisedData(RegressionSample):
    r"""An over-parameterised regression sample with its exact population oracle.

    The arrays are read-only, so that the oracle quantities keep describing the sample.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Training features :math:`x = \sqrt{\lambda} \odot z`.
    y : ndarray of shape (n,)
        Labels :math:`y = \langle\theta^*, x\rangle + \zeta`.
    public_X : ndarray of shape (M, d)
        Public *unlabeled* rows from the same law as ``X`` (independent of it), for the
        designed Σ = (λ I + X̃^T X̃)/M (docs/theory/overparameterised-regression.md); M may be 0.
    eigenvalues : ndarray of shape (d,)
        The diagonal of :math:`H = \mathbb E[x x^\top]` (H is never formed).
    theta_star : ndarray of shape (d,)
        The ground truth :math:`\theta^*`, with :math:`\|\theta^*\|_2` = ``theta_norm``.
    noise_std : float
        :math:`\sigma_\zeta`, the label-noise standard deviation.
    spectrum, r, x_law : str, float or None, str
        How the data were generated (``r`` is None for the exponential spectrum).
    """

    X: np.ndarray
    y: np.ndarray
    public_X: np.ndarray
    eigenvalues: np.ndarray
    theta_star: np.ndarray
    noise_std: float
    spectrum: str = "polynomial"
    r: float | None = 2.0
    x_law: str = "gaussian"

    @property
    def n_public(self) -> int:
        """M, the number of public unlabeled rows."""
        return self.public_X.shape[0]

    @property
    def theta_norm(self) -> float:
        r""":math:`\|\theta^*\|_2` (the paper's B with :math:`\mathbf w_0 = 0`)."""
        return float(np.linalg.norm(self.theta_star))

    @property
    def null_risk(self) -> float:
        r"""The excess risk of predicting 0: :math:`\tfrac12 \theta^{*\top} H \theta^*`.

        docs/theory/overparameterised-regression.md asks to report it as the reference level of
        every excess risk (its prototype reports 0.330 for r = 2 with the power-law
        :math:`\theta^*`, B = 1).
        """
        return 0.5 * float(np.dot(self.eigenvalues, self.theta_star**2))

    @property
    def bayes_risk(self) -> float:
        r""":math:`L(\theta^*) = \tfrac12 \sigma_\zeta^2`."""
        return 0.5 * self.noise_std**2

    def excess_risk(self, theta: np.ndarray) -> float | np.ndarray:
        r"""Exact excess risk :math:`\tfrac12 (\theta - \theta^*)^\top H (\theta - \theta^*)`, O(d).

        With the factor 1/2 of the loss :math:`\tfrac12(\theta^\top x - y)^2`
        (docs/theory/overparameterised-regression.md and the module docstring). ``theta`` of shape
        (d,) gives a float; (k, d) gives one risk per row.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if theta.ndim not in (1, 2) or theta.shape[-1] != self.n_features:
            raise ValueError(
                f"Expected theta of shape ({self.n_features},) or (k, {self.n_features}), "
                f"got {theta.shape}."
            )
        if not np.all(np.isfinite(theta)):
            raise ValueError("Expected theta to be finite, got NaN or infinite entries.")
        delta = theta - self.theta_star
        risk = 0.5 * ((delta * delta) @ self.eigenvalues)
        return float(risk) if theta.ndim == 1 else risk

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Fresh labeled rows (X, y) from the same law, e.g. estimating data for RESIDUALEST."""
        n = check_count("n", n)
        rng = _check_rng(rng)
        X = _draw_x(rng, self.x_law, n, np.sqrt(self.eigenvalues))
        y = X @ self.theta_star
        y += self.noise_std * rng.standard_normal(n)
        return X, y

    def sample_unlabeled(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Fresh unlabeled rows from the same law (e.g. a held-out public set for C, §8.1)."""
        n = check_count("n", n)
        return _draw_x(_check_rng(rng), self.x_law, n, np.sqrt(self.eigenvalues))


def make_overparameterised_regression(
    n_samples: int,
    n_features: int,
    *,
    spectrum: SpectrumKind = "polynomial",
    r: float | None = None,
    n_public: int | None = None,
    theta: ThetaKind = "powerlaw",
    theta_norm: float = 1.0,
    noise_std: float = 0.5,
    x_law: XLaw = "gaussian",
    rng: np.random.Generator,
) -> OverparameterisedData:
    r"""Draw the over-parameterised regression model of the DP-FTRL-Σ paper
    (docs/theory/overparameterised-regression.md).

    .. math::

        \lambda_i = i^{-r} \text{ or } e^{-i}, \quad x = \sqrt\lambda \odot z, \quad
        y = \langle\theta^*, x\rangle + \sigma_\zeta \zeta, \quad \|\theta^*\|_2 = B.

    Parameters
    ----------
    n_samples, n_features : int
        N >= 1 training rows and d >= 1 features. The regime of the paper is d > N
        (docs/theory/overparameterised-regression.md suggests d in [4N, 100N]); d <= N is allowed.
    spectrum : {"polynomial", "exponential"}
        :math:`\lambda_i = i^{-r}` or :math:`e^{-i}` (1-based i, no normalisation).
    r : float, optional
        Polynomial decay, r > 1 (default 2); must be omitted for the exponential spectrum.
    n_public : int, optional
        M >= 0 public unlabeled rows from the same law; default M = N (the paper's designed
        Σ assumes M >= N, Cor. 4.5, docs/theory/overparameterised-regression.md).
    theta : {"powerlaw", "e1", "isotropic"}
        Direction of :math:`\theta^*`: :math:`\theta^*_i \propto 1/i` (default; head-heavy, so
        the bias term matters, docs/theory/overparameterised-regression.md), the first basis vector,
        or a uniformly random direction (then :math:`\|\theta^*\|_H^2 \approx B^2
        \operatorname{tr}H/d`, nearly 0 for large d, which makes every method look good).
    theta_norm : float
        :math:`B = \|\theta^*\|_2 \ge 0` (bounded norm,
        docs/theory/overparameterised-regression.md).
    noise_std : float
        :math:`\sigma_\zeta \ge 0` (default 0.5, as in docs/theory/overparameterised-regression.md).
    x_law : {"gaussian", "rademacher"}
        Law of the independent unit-variance coordinates :math:`z_j` (both satisfy
        Assumption 2.2 with :math:`\sigma_z \le \sqrt{8/3}`,
        docs/theory/overparameterised-regression.md).
    rng : numpy.random.Generator
        Source of randomness. Draws happen in a fixed order: direction of :math:`\theta^*`
        (only for ``theta="isotropic"``), X, the label noise (drawn even when
        ``noise_std == 0``), then ``public_X``.

    Returns
    -------
    OverparameterisedData
        Read-only arrays and the O(d) oracle. Memory is (N + M) x d floats; nothing d x d.

    Examples
    --------
    >>> import numpy as np
    >>> data = make_overparameterised_regression(50, 200, r=2.0, rng=np.random.default_rng(0))
    >>> data.X.shape, data.public_X.shape
    ((50, 200), (50, 200))
    >>> data.excess_risk(data.theta_star), round(data.excess_risk(np.zeros(200)), 6)
    (0.0, 0.329987)
    """
    n = check_count("n_samples", n_samples)
    d = check_count("n_features", n_features)
    eigenvalues = spectrum_eigenvalues(d, spectrum, r)
    r = (2.0 if r is None else float(r)) if spectrum == "polynomial" else None
    m = n if n_public is None else check_count("n_public", n_public, minimum=0)
    theta = check_choice("theta", theta, _THETAS)
    theta_norm = check_nonnegative("theta_norm", theta_norm)
    noise_std = check_nonnegative("noise_std", noise_std)
    x_law = check_choice("x_law", x_law, _X_LAWS)
    rng = _check_rng(rng)

    if theta == "powerlaw":
        direction = 1.0 / np.arange(1, d + 1, dtype=float)
    elif theta == "e1":
        direction = np.zeros(d)
        direction[0] = 1.0
    else:
        direction = rng.standard_normal(d)
        while not float(np.linalg.norm(direction)) > 0.0:  # probability zero
            direction = rng.standard_normal(d)
    theta_star = direction * (theta_norm / float(np.linalg.norm(direction)))

    sqrt_eig = np.sqrt(eigenvalues)
    X = _draw_x(rng, x_law, n, sqrt_eig)
    y = X @ theta_star
    y += noise_std * rng.standard_normal(n)
    public_X = _draw_x(rng, x_law, m, sqrt_eig) if m > 0 else np.zeros((0, d))

    freeze(X, y, public_X, eigenvalues, theta_star)
    return OverparameterisedData(
        X=X,
        y=y,
        public_X=public_X,
        eigenvalues=eigenvalues,
        theta_star=theta_star,
        noise_std=noise_std,
        spectrum=spectrum,
        r=r,
        x_law=x_law,
    )
