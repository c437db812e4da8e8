"""Monte-Carlo estimate of the stationary error of Noisy-FTRL for linear regression.

The process of Choquette-Choo et al. (2024) Eq. (23), written for the error delta = theta - theta*
in the eigenbasis
of H (x ~ N(0, diag(lambda)), batch size 1, no clipping):

    delta_{t+1} = delta_t - eta x_t (x_t^T delta_t - xi_t) - eta sigma z_t,
    z = B w (z_t = sum_tau beta_tau w_{t - tau}),  w_t ~ N(0, I_d),  xi_t ~ N(0, sigma_sgd^2),

with sigma^2 = G^2 gamma_inf^2 / (2 rho). The estimate is the time-and-chain average of the excess
risk 1/2 delta^T H delta after a burn-in. It is the empirical side of the exact formula
:func:`privopt.theory.linear_regression_f_inf` (docs/theory/correlated-noise.md) and of the Fig. 2
reproduction.

The correlated noise is generated stationary from the first step, by circular convolution with
beta truncated to the horizon (FFT): the horizon is several times 1 / (eta lambda_min), where
beta of nu-DP-FTRL with nu = eta lambda_min has decayed by (1 - nu)^T. Chains are independent,
so the standard error is that of the per-chain means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.noise import Mechanism
from privopt.theory.linear_regression import _terms

__all__ = ["SimulatedError", "simulate_linear_regression_f_inf"]


@dataclass(frozen=True)
class SimulatedError:
    """Monte-Carlo estimate of F_inf: ``mean`` +- ``std_error`` (over independent chains)."""

    mean: float
    std_error: float
    chains: int
    burn_in: int
    kept_steps: int


def _stationary_noise(beta: np.ndarray, steps: int, columns: int, rng) -> np.ndarray:
    """(steps, columns) noise z = beta (*) w, circular convolution over the horizon."""
    w = rng.standard_normal((steps, columns))
    spectrum = np.fft.rfft(beta[:steps], n=steps)
    return np.fft.irfft(spectrum[:, None] * np.fft.rfft(w, axis=0), n=steps, axis=0)


def simulate_linear_regression_f_inf(
    mechanism: Mechanism,
    eta: float,
    eigenvalues: np.ndarray,
    rho: float,
    clip: float = 1.0,
    sigma_sgd: float = 0.0,
    *,
    rng: np.random.Generator,
    chains: int = 16,
    burn_in: int | None = None,
    kept_steps: int | None = None,
    max_block_elements: int = 25_000_000,
) -> SimulatedError:
    """Simulate Noisy-FTRL on Gaussian linear regression and estimate its stationary excess risk.

    Args:
        mechanism: a Toeplitz mechanism with finite anytime sensitivity (sigma is calibrated to
            rho-zCDP at every horizon, as in the theory).
        eta, eigenvalues, rho, clip, sigma_sgd: the setting of the exact formula.
        rng: randomness (data, label noise, privacy noise).
        chains: independent chains (at least 2, for the standard error).
        burn_in, kept_steps: default 3 / (eta lambda_min) and 2 / (eta lambda_min) steps: the
            slowest direction has then converged to within e^{-6} in variance.
        max_block_elements: chains are simulated in groups whose noise array (steps x group x d)
            stays below this many floats (memory bound).
    """
    eta, lam, _, sigma_sq, sigma_sgd = _terms(mechanism, eta, eigenvalues, rho, clip, sigma_sgd)
    chains = check_count("chains", chains, minimum=2)
    mixing = 1.0 / (eta * float(lam.min()))
    burn_in = check_count("burn_in", burn_in or math.ceil(3 * mixing), minimum=0)
    kept_steps = check_count("kept_steps", kept_steps or math.ceil(2 * mixing))
    max_block_elements = check_positive("max_block_elements", max_block_elements)
    steps = burn_in + kept_steps
    d = lam.size
    beta = mechanism.beta(steps)
    sigma = math.sqrt(sigma_sq)
    scale = np.sqrt(lam)
    group = max(1, min(chains, int(max_block_elements // (steps * d))))
    chain_means: list[np.ndarray] = []
    for start in range(0, chains, group):
        size = min(group, chains - start)
        noise = _stationary_noise(beta, steps, size * d, rng).reshape(steps, size, d)
        delta = np.zeros((size, d))
        total = np.zeros(size)
        for t in range(steps):
            x = rng.standard_normal((size, d)) * scale
            residual = np.einsum("ij,ij->i", x, delta) - sigma_sgd * rng.standard_normal(size)
            delta -= eta * (residual[:, None] * x + sigma * noise[t])
            if t >= burn_in:
                total += 0.5 * (delta**2 @ lam)
        chain_means.append(total / kept_steps)
    means = np.concatenate(chain_means)
    return SimulatedError(
        mean=float(means.mean()),
        std_error=float(means.std(ddof=1) / math.sqrt(chains)),
        chains=chains,
        burn_in=burn_in,
        kept_steps=kept_steps,
    )
