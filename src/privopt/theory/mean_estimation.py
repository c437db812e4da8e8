"""Asymptotic suboptimality F_inf of Noisy-FTRL for mean estimation (Choquette-Choo et al. 2024,
Section 2.1).

Dynamics (docs/theory/correlated-noise.md, Eq. (14)): delta_{t+1} = (1 - eta) delta_t + eta
sigma_sgd u_t
- eta sigma_dp G (B w)_t, with sigma_dp^2 = gamma_inf^2(B) / (2 rho) so that the run is rho-zCDP
for every horizon. F_inf = lim E[delta_t^2] (no factor 1/2). In the time domain:

    F_inf(beta) = eta / (2 - eta) * ( G^2 gamma_inf^2(beta) / (2 rho) * <beta, T_{1-eta} beta>
                                      + sigma_sgd^2 ),
    <beta, T_r beta> = sum_{t, tau >= 0} beta_t beta_tau r^{|t - tau|},

evaluated in O(N) by the recursion s_t = r (s_{t-1} + beta_{t-1}). Closed forms (same note):
DP-SGD F_inf = eta/(2 - eta) (G^2/(2 rho) + sigma_sgd^2); the optimum beta* (nu-DP-FTRL with
nu = eta, Theorem 2.1) has
F_inf = 2 eta^2 G^2 K(1 - eta)^2 / (pi^2 rho) + eta sigma_sgd^2 / (2 - eta), with K the
complete elliptic integral of the first kind of modulus k (scipy: ``ellipk(k**2)``).
Stability needs 0 < eta < 2.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter
from scipy.special import ellipk

from privopt._validate import check_finite, check_nonnegative, check_positive
from privopt.noise import Mechanism, ToeplitzMechanism

__all__ = [
    "check_learning_rate",
    "mean_estimation_f_inf",
    "mean_estimation_f_inf_dpsgd",
    "mean_estimation_f_inf_optimal",
    "optimal_to_dpsgd_ratio",
    "toeplitz_quadratic",
]


def check_learning_rate(eta: float) -> float:
    """eta in (0, 2): the stability range of the mean-estimation dynamics (|1 - eta| < 1)."""
    eta = check_finite("eta", eta)
    if not 0.0 < eta < 2.0:
        raise ValueError(
            f"Expected the learning rate eta in (0, 2) (stable: |1 - eta| < 1), got {eta!r}."
        )
    return eta


def _check_noise_terms(rho: float, clip: float, sigma_sgd: float) -> tuple[float, float, float]:
    """(rho, clip, sigma_sgd) of an F_inf formula, checked: rho > 0, clip > 0, sigma_sgd >= 0."""
    return (
        check_positive("rho", rho),
        check_positive("clip", clip),
        check_nonnegative("sigma_sgd", sigma_sgd),
    )


def toeplitz_quadratic(beta: np.ndarray, r: float) -> float:
    """<beta, T_r beta> = sum_{t,tau} beta_t beta_tau r^{|t - tau|} (|r| < 1), in O(len(beta))."""
    r = check_finite("r", r)
    if not abs(r) < 1.0:
        raise ValueError(f"Expected |r| < 1, got {r!r}.")
    beta = np.asarray(beta, dtype=float)
    s = lfilter([0.0, r], [1.0, -r], beta)  # s_t = r (s_{t-1} + beta_{t-1}), s_0 = 0
    return float(np.sum(beta**2) + 2.0 * np.sum(beta * s))


def truncation_length(decay: float) -> int:
    """Terms of beta to keep when the kernel r^{|t - tau|} decays like (1 - decay)^t."""
    return int(min(2_000_000, max(1_000, math.ceil(40.0 / decay))))


def lti_noise_variance(mechanism: Mechanism, rho: float, clip: float) -> float:
    """sigma^2 = G^2 gamma_inf^2(beta) / (2 rho): the per-step variance making the run rho-zCDP
    at every horizon. Refuses non-Toeplitz mechanisms and infinite anytime sensitivity."""
    if not isinstance(mechanism, ToeplitzMechanism):
        raise ValueError("F_inf is defined here for Toeplitz (LTI) mechanisms.")
    gamma_sq = mechanism.anytime_sensitivity_squared()
    if math.isinf(gamma_sq):
        raise ValueError(
            f"{mechanism.name} has infinite anytime sensitivity: no noise level makes it "
            "rho-zCDP for every horizon, so F_inf is infinite."
        )
    return clip**2 * gamma_sq / (2.0 * rho)


def mean_estimation_f_inf(
    mechanism: Mechanism,
    eta: float,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
) -> float:
    """F_inf of Noisy-FTRL with a Toeplitz mechanism, calibrated to rho-zCDP at any horizon.

    Raises ``ValueError`` for a mechanism whose anytime sensitivity is infinite (no rho-zCDP
    calibration holds for every horizon) and for eta outside (0, 2).
    """
    eta = check_learning_rate(eta)
    rho, clip, sigma_sgd = _check_noise_terms(rho, clip, sigma_sgd)
    sigma_sq = lti_noise_variance(mechanism, rho, clip)
    beta = mechanism.beta(truncation_length(min(eta, 2.0 - eta)))
    quad = toeplitz_quadratic(beta, 1.0 - eta)
    return eta / (2.0 - eta) * (sigma_sq * quad + sigma_sgd**2)


def mean_estimation_f_inf_dpsgd(
    eta: float, rho: float, clip: float = 1.0, sigma_sgd: float = 0.0
) -> float:
    """Closed form for DP-SGD (B = I): eta/(2 - eta) (G^2/(2 rho) + sigma_sgd^2)."""
    eta = check_learning_rate(eta)
    rho, clip, sigma_sgd = _check_noise_terms(rho, clip, sigma_sgd)
    return eta / (2.0 - eta) * (clip**2 / (2.0 * rho) + sigma_sgd**2)


def mean_estimation_f_inf_optimal(
    eta: float, rho: float, clip: float = 1.0, sigma_sgd: float = 0.0
) -> float:
    """Closed form for beta* (Theorem 2.1): 2 eta^2 G^2 K(1-eta)^2/(pi^2 rho) + noise term."""
    eta = check_learning_rate(eta)
    rho, clip, sigma_sgd = _check_noise_terms(rho, clip, sigma_sgd)
    k = float(ellipk((1.0 - eta) ** 2))
    privacy = 2.0 * eta**2 * clip**2 * k**2 / (math.pi**2 * rho)
    return privacy + eta * sigma_sgd**2 / (2.0 - eta)


def optimal_to_dpsgd_ratio(eta: float) -> float:
    """Privacy-term ratio optimal / DP-SGD (Fig. 1, left): 4 eta (2 - eta) K(1 - eta)^2 / pi^2."""
    eta = check_learning_rate(eta)
    k = float(ellipk((1.0 - eta) ** 2))
    return 4.0 * eta * (2.0 - eta) * k**2 / math.pi**2
