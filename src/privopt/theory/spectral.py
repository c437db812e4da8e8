"""Minimum-phase spectral factorisation: a causal beta with a prescribed |B(omega)|^2.

Choquette-Choo et al. (2024) characterises optimal correlations through their power spectrum (|B*|^2
= |1 - eta -
e^{i omega}| for mean estimation, h^{-1/2} for linear regression). To turn a target S(omega) > 0
into coefficients, privopt uses the cepstral (Kolmogorov) method of docs/theory/correlated-noise.md:
on an FFT grid of size M,

    c = ifft(log(S) / 2);  fold: f_0 = c_0, f_k = 2 c_k (1 <= k < M/2), f_{M/2} = c_{M/2}, else 0;
    beta = Re ifft(exp(fft(f))),  normalised to beta_0 = 1.

The minimum-phase factor has a causal inverse, so C = B^{-1} is lower-triangular, as the privacy
analysis requires. Scale does not matter (F_inf is invariant to rescaling beta).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privopt._validate import check_count
from privopt.noise import ToeplitzMechanism

__all__ = ["min_phase_beta", "spectral_mechanism"]


def min_phase_beta(
    power: Callable[[np.ndarray], np.ndarray] | np.ndarray,
    n_coefficients: int,
    grid_size: int = 2**20,
) -> np.ndarray:
    """First ``n_coefficients`` of the minimum-phase beta with |B(omega)|^2 = power(omega).

    Args:
        power: S(omega) > 0 as a function of omega in [0, 2 pi) (vectorised), or its values on
            the grid ``2 pi k / grid_size``.
        n_coefficients: how many coefficients to return (at most grid_size / 2).
        grid_size: FFT size M (a power of two is fastest); the aliasing error decays with M.
    """
    grid_size = check_count("grid_size", grid_size, minimum=8)
    n_coefficients = check_count("n_coefficients", n_coefficients)
    if n_coefficients > grid_size // 2:
        raise ValueError(f"n_coefficients must be at most grid_size / 2 = {grid_size // 2}.")
    values = _spectrum_on_grid(power, grid_size)
    return _min_phase_from_values(values)[:n_coefficients]


def _spectrum_on_grid(power, grid_size: int) -> np.ndarray:
    omega = 2.0 * np.pi * np.arange(grid_size) / grid_size
    values = np.asarray(power(omega) if callable(power) else power, dtype=float)
    if values.shape != (grid_size,):
        raise ValueError(f"Expected {grid_size} spectrum values, got shape {values.shape}.")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("The power spectrum must be finite and strictly positive everywhere.")
    return values


def _min_phase_from_values(values: np.ndarray) -> np.ndarray:
    """All grid_size / 2 coefficients of the minimum-phase factor, normalised to beta_0 = 1."""
    grid_size = values.size
    cepstrum = np.fft.ifft(0.5 * np.log(values))
    folded = np.zeros(grid_size, dtype=complex)
    half = grid_size // 2
    folded[0] = cepstrum[0]
    folded[1:half] = 2.0 * cepstrum[1:half]
    folded[half] = cepstrum[half]
    beta = np.real(np.fft.ifft(np.exp(np.fft.fft(folded))))[:half]
    return beta / beta[0]


def spectral_mechanism(
    power: Callable[[np.ndarray], np.ndarray] | np.ndarray,
    grid_size: int = 2**20,
    name: str = "spectral",
) -> ToeplitzMechanism:
    """The Toeplitz mechanism whose |B(omega)|^2 is proportional to ``power`` (minimum phase).

    beta is the minimum-phase factor of S = power (normalised to beta_0 = 1), and C = B^{-1} the
    minimum-phase factor of 1/S (also causal, c_0 = 1). With the normalisation,
    |B|^2 = S / exp(mean log S) (the geometric mean of a minimum-phase factor is |beta_0|^2), so
    the anytime sensitivity is computed exactly on the grid:

        gamma_inf^2 = (1 / 2 pi) int |B|^{-2} d omega = exp(mean log S) * mean(1 / S).

    Both coefficient sequences are truncated at grid_size / 2 terms (beta is zero past it);
    choose grid_size so that they have decayed there (aliasing error).
    """
    grid_size = check_count("grid_size", grid_size, minimum=8)
    values = _spectrum_on_grid(power, grid_size)
    beta = _min_phase_from_values(values)
    c = _min_phase_from_values(1.0 / values)
    gamma_sq = float(np.exp(np.mean(np.log(values))) * np.mean(1.0 / values))

    def _take(coefficients: np.ndarray, n: int) -> np.ndarray:
        out = np.zeros(n)
        k = min(n, coefficients.size)
        out[:k] = coefficients[:k]
        return out

    return ToeplitzMechanism(
        lambda n: _take(beta, n),
        lambda n: _take(c, n),
        support=beta.size,
        anytime_squared=gamma_sq,
        name=name,
    )
