"""Exact stationary error F_inf of Noisy-FTRL for linear regression with Gaussian inputs.

Seed 001, Section 2.2, in the exact form of notes/001.md §4.4 (derived from the paper's
covariance recursion, Lemma D.12; verified there by simulation). With x ~ N(0, H), eigenvalues
lambda_j of H, r_j = 1 - eta lambda_j, t_j = <beta, T_{r_j} beta> and
sigma^2 = G^2 gamma_inf^2 / (2 rho):

    F_inf = 1/2 * sum_j eta (sigma_sgd^2 lambda_j + sigma^2 t_j) / (2 (1 - eta lambda_j))
            / (1 - a),        a = sum_j eta lambda_j / (2 (1 - eta lambda_j)) < 1,

the excess risk 1/2 ||theta - theta*||_H^2 at stationarity. The LTI surrogate (x x^T replaced by
H) is 1/2 sum_j eta (sigma^2 t_j + sigma_sgd^2 lambda_j) / (2 - eta lambda_j). Outside a < 1
(roughly eta Tr H >= 2) the process has no stationary second moment and a ValueError is raised.
"""

from __future__ import annotations

import numpy as np

from privopt._validate import check_finite, check_nonnegative, check_positive
from privopt.noise import Mechanism
from privopt.theory.mean_estimation import (
    lti_noise_variance,
    toeplitz_quadratic,
    truncation_length,
)

__all__ = ["linear_regression_f_inf", "linear_regression_f_inf_lti"]


def _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd):
    eta = check_finite("eta", eta)
    lam = np.asarray(eigenvalues, dtype=float)
    if lam.ndim != 1 or lam.size == 0 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError("Expected a non-empty 1-D array of positive, finite eigenvalues of H.")
    if not 0.0 < eta < 1.0 / float(lam.max()):
        raise ValueError(
            f"Expected 0 < eta < 1 / lambda_max = {1.0 / float(lam.max()):.4g} (stable range of "
            f"the theory), got eta={eta!r}."
        )
    rho = check_positive("rho", rho)
    clip = check_positive("clip", clip)
    sigma_sgd = check_nonnegative("sigma_sgd", sigma_sgd)
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
    """Exact stationary excess risk of Noisy-FTRL (Gaussian inputs), notes/001.md §4.4."""
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
    """LTI surrogate (x x^T replaced by H; the lower-bound process), notes/001.md §4.4."""
    eta, lam, t, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    return 0.5 * float(np.sum(eta * (sigma_sq * t + sigma_sgd**2 * lam) / (2.0 - eta * lam)))
