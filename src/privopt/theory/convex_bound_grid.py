"""The frequency grid and a correlation's |B|^2 on it (:mod:`privopt.theory.convex_bound`).

Discretisation (the paper's numerics)
-------------------------------------
omega runs over the uniform grid ``2 pi m / k``, m = -floor(k/2), ..., k - 1 - floor(k/2); the
integral becomes the mean over the grid (the trapezoid rule, spectrally accurate for smooth
periodic integrands). Since all coefficients are real, N(-omega) = conj(N(omega)): the cones are
imposed on omega in [0, pi] only and psi is even. The resonance at omega = 0 has width eta mu,
so the grid must resolve it: ``n_freq * eta * mu >= 2 pi`` is required (the discretisation error
then decays like exp(-n_freq eta mu); doubling k moved our bounds by < 1e-4 relative). The paper
used k = 1000.

A correlation enters the bound only through ``|B(omega)|^2`` on the grid and its anytime
sensitivity gamma_inf^2: :func:`_correlation_on_grid` computes both for a
:class:`~privopt.noise.ToeplitzMechanism`, a raw coefficient array beta or a
:class:`PowerSpectrum`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.noise import Mechanism, ToeplitzMechanism
from privopt.theory.mean_estimation import lti_noise_variance, truncation_length

__all__ = ["PowerSpectrum", "frequency_grid"]

_MIN_N_FREQ = 16


@dataclass(frozen=True)
class PowerSpectrum:
    """A correlation given by its power spectrum |B(omega)|^2 instead of coefficients.

    Args:
        values: |B(omega)|^2 > 0 on :func:`frequency_grid` ``(n_freq)`` (an array of length
            n_freq), or a vectorised callable of omega.
        gamma_sq: gamma_inf^2 = (1/2 pi) int |B|^{-2}; default: the grid mean of 1/|B|^2. Pass
            it when B is known to be minimum phase with a known sensitivity (for a B that is not
            minimum phase the frequency integral is *not* the sensitivity of the causal C).
    """

    values: np.ndarray | Callable[[np.ndarray], np.ndarray]
    gamma_sq: float | None = None


def frequency_grid(n_freq: int) -> np.ndarray:
    """The uniform grid ``2 pi m / n_freq`` on [-pi, pi), m = -floor(n/2), ..., n-1-floor(n/2)."""
    n_freq = check_count("n_freq", n_freq, minimum=_MIN_N_FREQ)
    return 2.0 * np.pi * (np.arange(n_freq) - n_freq // 2) / n_freq


def _check_problem(eta: float, L: float, mu: float) -> tuple[float, float, float]:
    eta = check_positive("eta", eta)
    mu = check_positive("mu", mu)
    L = check_positive("L", L)
    if L < mu:
        raise ValueError(
            f"Expected L >= mu (smoothness >= strong convexity), got L={L!r} < mu={mu!r}."
        )
    if not eta * L < 2.0:
        raise ValueError(
            f"Expected 0 < eta < 2 / L = {2.0 / L:.4g} (gradient descent on an L-smooth quadratic "
            f"diverges otherwise), got eta={eta!r}."
        )
    return eta, L, mu


def _check_n_freq(n_freq: int, eta: float, mu: float) -> int:
    n_freq = check_count("n_freq", n_freq, minimum=1)
    needed = max(_MIN_N_FREQ, math.ceil(2.0 * math.pi / (eta * mu)))
    if n_freq < needed:
        raise ValueError(
            f"n_freq={n_freq} is too small: the grid must have at least {_MIN_N_FREQ} points and "
            f"resolve the resonance of width eta*mu = {eta * mu:.3g} at omega = 0 "
            f"(n_freq * eta * mu >= 2 pi), so use n_freq >= {needed}."
        )
    return n_freq


def _power_from_beta(beta: np.ndarray, n_freq: int) -> np.ndarray:
    """|B(omega)|^2 on :func:`frequency_grid` (exact for the given coefficients): fold beta
    modulo n_freq (aliasing), FFT, and reorder to the grid."""
    folded = np.bincount(np.arange(beta.size) % n_freq, weights=beta, minlength=n_freq)
    response = np.fft.fft(folded)  # at 2 pi m / n_freq, m = 0..n-1 (e^{-i omega t})
    m = np.arange(n_freq) - n_freq // 2
    return np.abs(response[m % n_freq]) ** 2


def _series_gamma_sq(beta: np.ndarray) -> float:
    """gamma_inf^2 = sum_t c_t^2 with c the causal inverse of beta; ``inf`` if c is not
    square-summable (beta(x) has a zero in the closed unit disk).

    On an FFT grid of size M: B = fft(beta); beta is minimum phase iff the winding number of
    B around 0 is zero (argument principle), and then c = ifft(1 / B) up to aliasing, which is
    negligible once the tail of c has decayed (M grows until it has).
    """
    size = 1 << max(16, math.ceil(math.log2(16 * beta.size)))
    while size <= 2**24:
        response = np.fft.fft(beta, size)
        if np.min(np.abs(response)) <= 1e-300:
            return math.inf
        phase = np.unwrap(np.angle(np.append(response, response[0])))
        if round((phase[-1] - phase[0]) / (2.0 * np.pi)) != 0:
            return math.inf  # zeros inside the unit disk: the causal inverse diverges
        c = np.fft.ifft(1.0 / response).real
        head = float(np.sum(c[: size // 2] ** 2))
        tail = float(np.sum(c[size // 2 :] ** 2))
        if tail <= 1e-13 * head:
            return head + tail
        size *= 4
    raise ValueError(
        "The inverse coefficients of beta decay too slowly to compute gamma_inf^2 (a zero of "
        "beta(x) very close to the unit circle); pass a ToeplitzMechanism with a closed form."
    )


def _correlation_on_grid(
    source: Any, n_freq: int, eta: float, mu: float
) -> tuple[np.ndarray, float, str]:
    """(|B|^2 on the grid, gamma_inf^2, description) for a mechanism, beta or PowerSpectrum."""
    if isinstance(source, PowerSpectrum):
        omega = frequency_grid(n_freq)
        raw = source.values(omega) if callable(source.values) else source.values
        power = np.asarray(raw, dtype=float)
        if power.shape != (n_freq,):
            raise ValueError(
                f"Expected |B|^2 on the {n_freq}-point frequency grid, got shape {power.shape}."
            )
        if not np.all(np.isfinite(power)) or np.any(power <= 0):
            raise ValueError("|B(omega)|^2 must be finite and strictly positive on the grid.")
        if source.gamma_sq is None:
            gamma_sq = float(np.mean(1.0 / power))
        else:
            gamma_sq = check_positive("gamma_sq", source.gamma_sq)
        return power, gamma_sq, "power spectrum"
    if isinstance(source, Mechanism):
        if not isinstance(source, ToeplitzMechanism):
            raise ValueError(
                "The convex-program bound is defined for Toeplitz (LTI) mechanisms; got "
                f"{type(source).__name__}."
            )
        # G^2 gamma^2 / (2 rho) with G = 1, rho = 1/2 is gamma_inf^2; refuses an infinite one.
        gamma_sq = lti_noise_variance(source, rho=0.5, clip=1.0)
        length = source.support or max(truncation_length(eta * mu), n_freq)
        beta = source.beta(length)
        while source.support is None and length < 2**22:
            # |B|^2 needs sum_{t >= length} |beta_t| negligible: extend while the tail is not
            if np.sum(np.abs(beta[length // 2 :])) <= 1e-12 * np.sum(np.abs(beta)):
                break
            length *= 4
            beta = source.beta(length)
        return _power_from_beta(beta, n_freq) / beta[0] ** 2, gamma_sq * beta[0] ** 2, source.name
    if callable(source):
        raise ValueError("Wrap a power-spectrum function in PowerSpectrum(values=...).")
    beta = np.asarray(source, dtype=float)
    if beta.ndim != 1 or beta.size == 0 or not np.all(np.isfinite(beta)):
        raise ValueError("Expected beta as a non-empty 1-D array of finite coefficients.")
    if beta[0] == 0.0:
        raise ValueError("beta_0 must be non-zero (B must be invertible).")
    beta = beta / beta[0]
    gamma_sq = _series_gamma_sq(beta)
    if math.isinf(gamma_sq):
        raise ValueError(
            "This beta has infinite anytime sensitivity (its inverse C is not square-summable): "
            "no noise level makes it rho-zCDP for every horizon, so F_inf is infinite."
        )
    return _power_from_beta(beta, n_freq), gamma_sq, "beta"
