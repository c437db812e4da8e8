"""Exact stationary error F_inf of Noisy-FTRL for linear regression with Gaussian inputs.

Choquette-Choo et al. (2024), Section 2.2, in the exact form of docs/theory/correlated-noise.md
(derived from the paper's
covariance recursion, Lemma D.12; verified there by simulation). With x ~ N(0, H), eigenvalues
lambda_j of H, r_j = 1 - eta lambda_j, t_j = <beta, T_{r_j} beta> and
sigma^2 = G^2 gamma_inf^2 / (2 rho):

    F_inf = 1/2 * sum_j eta (sigma_sgd^2 lambda_j + sigma^2 t_j) / (2 (1 - eta lambda_j))
            / (1 - a),        a = sum_j eta lambda_j / (2 (1 - eta lambda_j)) < 1,

the excess risk 1/2 ||theta - theta*||_H^2 at stationarity. The LTI surrogate (x x^T replaced by
H) is 1/2 sum_j eta (sigma^2 t_j + sigma_sgd^2 lambda_j) / (2 - eta lambda_j). Outside a < 1
(roughly eta Tr H >= 2) the process has no stationary second moment and a ValueError is raised.

Bounds (Theorems C.14 and C.18, docs/theory/correlated-noise.md), all in the library's
1/2-convention (the paper's C.14/C.18 are stated for Tr[H Cov] without the 1/2; erratum §7 item 3),
with S_beta = sum_j t_j / (2 - eta lambda_j) = (eta / 2 pi) int |B|^2 h:

    lower(beta) = 1/2 (eta sigma_sgd^2 Tr H / 2 + eta sigma^2 S_beta)         (= LTI noise part)
    upper(beta) = 1/2 ((1 + (1 - sqrt(eta R^2))^-2) eta R^2 sigma_sgd^2
                       + (1 + C_kurt (1 - sqrt(eta R^2))^-2) 2 eta sigma^2 S_beta)
    inf_beta F_inf^LTI = 1/2 sum_j eta sigma_sgd^2 lambda_j / (2 - eta lambda_j)
                         + eta^2 G^2 / (16 pi^2 rho) (int sqrt(h))^2,

with h(omega) = sum_j lambda_j / |1 - e^{i omega} - eta lambda_j|^2. The upper bound needs
eta R^2 < 1; for Gaussian inputs E[||x||^2 x x^T] = 2 H^2 + Tr(H) H, so R^2 = Tr H + 2 ||H||
and C_kurt = 3 (Assumption C.2 (A3)). The infimum is attained by the minimum-phase beta with
|B|^2 = h^{-1/2} (Theorem C.18; :func:`lower_bound_mechanism`).
"""

from __future__ import annotations

import numpy as np

from privopt._validate import check_count, check_finite, check_positive
from privopt.noise import Mechanism, ToeplitzMechanism
from privopt.theory.mean_estimation import (
    _check_noise_terms,
    lti_noise_variance,
    toeplitz_quadratic,
    truncation_length,
)
from privopt.theory.spectral import spectral_mechanism

__all__ = [
    "effective_dimension",
    "linear_regression_best_lower_bound",
    "linear_regression_f_inf",
    "linear_regression_f_inf_lti",
    "linear_regression_lower_bound",
    "linear_regression_upper_bound",
    "lower_bound_mechanism",
]


def _check_eigenvalues(eigenvalues) -> np.ndarray:
    lam = np.asarray(eigenvalues, dtype=float)
    if lam.ndim != 1 or lam.size == 0 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError("Expected a non-empty 1-D array of positive, finite eigenvalues of H.")
    return lam


def effective_dimension(eigenvalues: np.ndarray) -> float:
    """d_eff = Tr[H] / ||H||_2, the stable rank of H^{1/2} (Choquette-Choo et al. (2024) §2.2,
    docs/theory/correlated-noise.md)."""
    lam = _check_eigenvalues(eigenvalues)
    return float(lam.sum() / lam.max())


def _check_setting(eta, eigenvalues) -> tuple[float, np.ndarray]:
    """eta in the theory's stable range (0, 1 / lambda_max) and valid eigenvalues of H."""
    eta = check_finite("eta", eta)
    lam = _check_eigenvalues(eigenvalues)
    if not 0.0 < eta < 1.0 / float(lam.max()):
        raise ValueError(
            f"Expected 0 < eta < 1 / lambda_max = {1.0 / float(lam.max()):.4g} (stable range of "
            f"the theory), got eta={eta!r}."
        )
    return eta, lam


def _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd):
    eta, lam = _check_setting(eta, eigenvalues)
    rho, clip, sigma_sgd = _check_noise_terms(rho, clip, sigma_sgd)
    sigma_sq = lti_noise_variance(mechanism, rho, clip)
    beta = mechanism.beta(truncation_length(eta * float(lam.min())))
    t = np.array([toeplitz_quadratic(beta, 1.0 - eta * lj) for lj in lam])
    return eta, lam, t, sigma_sq, sigma_sgd


def linear_regression_f_inf(
    mechanism: Mechanism,
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
) -> float:
    """Exact stationary excess risk of Noisy-FTRL (Gaussian inputs),
    docs/theory/correlated-noise.md."""
    eta, lam, t, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    a = float(np.sum(eta * lam / (2.0 * (1.0 - eta * lam))))
    if not a < 1.0:
        raise ValueError(
            f"No stationary error: sum_j eta lambda_j / (2 (1 - eta lambda_j)) = {a:.4g} >= 1 "
            "(roughly eta Tr H >= 2); use a smaller learning rate."
        )
    numerator = float(np.sum(eta * (sigma_sgd**2 * lam + sigma_sq * t) / (2.0 * (1.0 - eta * lam))))
    return 0.5 * numerator / (1.0 - a)


def linear_regression_f_inf_lti(
    mechanism: Mechanism,
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
) -> float:
    """LTI surrogate (x x^T replaced by H; the lower-bound process),
    docs/theory/correlated-noise.md."""
    eta, lam, t, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    return 0.5 * float(np.sum(eta * (sigma_sq * t + sigma_sgd**2 * lam) / (2.0 - eta * lam)))


def linear_regression_lower_bound(
    mechanism: Mechanism,
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
) -> float:
    """Theorem C.18's lower bound on F_inf for this beta (1/2-convention; module docstring)."""
    eta, lam, t, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    s_beta = float(np.sum(t / (2.0 - eta * lam)))
    return 0.5 * (eta * sigma_sgd**2 * float(lam.sum()) / 2.0 + eta * sigma_sq * s_beta)


def linear_regression_upper_bound(
    mechanism: Mechanism,
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
    r_squared: float | None = None,
    kurtosis: float = 3.0,
) -> float:
    """Theorem C.14/C.15's upper bound on F_inf for this beta (1/2-convention; module docstring).

    Args:
        r_squared: R^2 with E[||x||^2 x x^T] <= R^2 H; default Tr H + 2 ||H|| (Gaussian inputs).
        kurtosis: C_kurt of Assumption C.2 (A3); 3 for Gaussian inputs.

    Raises ``ValueError`` unless eta R^2 < 1 (the theorem's condition).
    """
    eta, lam, t, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    r_sq = float(lam.sum() + 2.0 * lam.max()) if r_squared is None else r_squared
    r_sq = check_positive("r_squared", r_sq)
    kurtosis = check_positive("kurtosis", kurtosis)
    if not eta * r_sq < 1.0:
        raise ValueError(
            f"Theorem C.14 needs eta R^2 < 1; got eta R^2 = {eta * r_sq:.4g} (R^2 = {r_sq:.4g})."
        )
    blow_up = (1.0 - np.sqrt(eta * r_sq)) ** -2
    s_beta = float(np.sum(t / (2.0 - eta * lam)))
    sgd = (1.0 + blow_up) * eta * r_sq * sigma_sgd**2
    noise = (1.0 + kurtosis * blow_up) * 2.0 * eta * sigma_sq * s_beta
    return 0.5 * (sgd + noise)


def _h_on_grid(eta: float, lam: np.ndarray, grid_size: int) -> np.ndarray:
    """h(omega) = sum_j lambda_j / |1 - e^{i omega} - eta lambda_j|^2 on 2 pi k / grid_size."""
    omega = 2.0 * np.pi * np.arange(grid_size) / grid_size
    h = np.zeros(grid_size)
    for lj in lam:  # |1 - eta l - e^{iw}|^2 = (1 - eta l)^2 + 1 - 2 (1 - eta l) cos w
        r = 1.0 - eta * lj
        h += lj / (r * r + 1.0 - 2.0 * r * np.cos(omega))
    return h


def _check_grid_setting(eta, eigenvalues, grid_size):
    eta, lam = _check_setting(eta, eigenvalues)
    grid_size = check_count("grid_size", grid_size, minimum=1024)
    if grid_size * eta * float(lam.min()) < 64:
        raise ValueError(
            f"grid_size={grid_size} cannot resolve h(omega), whose peak at omega = 0 has width "
            f"eta * lambda_min = {eta * float(lam.min()):.3g}; use at least "
            f"{int(np.ceil(64 / (eta * float(lam.min()))))}."
        )
    return eta, lam, grid_size


def linear_regression_best_lower_bound(
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
    grid_size: int = 2**20,
) -> float:
    """inf over beta of F_inf^LTI (Theorem C.18, 1/2-convention): no correlation does better.

    (int sqrt(h))^2 is computed as (2 pi mean(sqrt(h)))^2 on a uniform grid (spectrally accurate
    for the smooth periodic h); attained by :func:`lower_bound_mechanism`.
    """
    eta, lam, grid_size = _check_grid_setting(eta, eigenvalues, grid_size)
    rho, clip, sigma_sgd = _check_noise_terms(rho, clip, sigma_sgd)
    integral = 2.0 * np.pi * float(np.mean(np.sqrt(_h_on_grid(eta, lam, grid_size))))
    sgd = 0.5 * float(np.sum(eta * sigma_sgd**2 * lam / (2.0 - eta * lam)))
    return sgd + eta**2 * clip**2 / (16.0 * np.pi**2 * rho) * integral**2


def lower_bound_mechanism(
    eta: float, eigenvalues: np.ndarray, grid_size: int = 2**20
) -> ToeplitzMechanism:
    """The correlation attaining the lower bound: minimum-phase beta with |B|^2 = h^{-1/2}.

    "Optimized" DP-FTRL for linear regression (Theorem C.18; docs/theory/correlated-noise.md). It
    depends on the spectrum of H, which must be public (e.g. from public data) to keep the
    guarantee.
    """
    eta, lam, grid_size = _check_grid_setting(eta, eigenvalues, grid_size)
    power = 1.0 / np.sqrt(_h_on_grid(eta, lam, grid_size))
    return spectral_mechanism(power, grid_size, name="linreg-lower-bound")
