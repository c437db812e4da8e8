"""Theorem 3.1 of seed 001: a convex-program bound on F_inf for smooth, strongly convex problems.

Setting (notes/001.md §4.6; paper Section 3 and Appendix E)
===========================================================

F is mu-strongly convex and L-smooth, gradients are G-Lipschitz (so clipping at G never binds)
and the stochastic-gradient noise is bounded, ``||grad f(theta; z) - grad F(theta)|| <=
sigma_sgd``. DP-FTRL with a Toeplitz correlation beta runs

    theta_{t+1} = theta_t - eta (grad F(theta_t) + zeta_t),   zeta = B w + w_sgd,

with ``w_t ~ N(0, sigma^2 I_d)`` and, as everywhere in privopt, ``sigma^2 = G^2 gamma_inf^2(B) /
(2 rho)`` (the per-step variance that makes every horizon rho-zCDP, see
:func:`privopt.theory.mean_estimation.lti_noise_variance`).

The bound (Theorem E.1 with the constants re-derived)
=====================================================

Take a Zames–Falb multiplier ``lambda = (lambda_t)_{|t| <= T_max}`` with ``lambda_t >= 0`` and
``sum_t lambda_t <= 2 lambda_0``; ``Lambda(omega) = sum_t lambda_t e^{-i omega t}``. With
``q(omega) = (1 - e^{i omega}) / eta`` the integral quadratic constraint of the sector [mu, L]
(Heath & Wills 2005), written for the pair (theta, zeta) through the dynamics, gives: if for every
omega

    N(omega) = [[ 2 Re(Lambda (mu - conj(q)) (L - q)) - 1 ,  Lambda (mu - conj(q))
                                                           + conj(Lambda) (L - conj(q)) ],
                [ conj(.)                                  ,  psi(omega) + 2 Re Lambda ]]  >= 0

(a 2 x 2 Hermitian PSD constraint; it is the paper's constraint (93) divided by eta^2, i.e.
``psi = psi_E.1 / eta^2``), then

    lim E ||theta_t - theta*||^2  <=  (1 / 2 pi) int psi(omega) S(omega) d omega,
    S(omega) = d sigma^2 |B(omega)|^2 + sigma_sgd^2,

and by L-smoothness ``F_inf = lim E[F(theta_t) - F(theta*)] <= (L / 2) * that``. The bound is the
infimum over (psi, lambda), a convex program. Each 2 x 2 constraint is the rotated second-order
cone ``a >= 0, b >= 0, a b >= |c|^2`` with a = N_11, b = N_22, c = N_12, imposed as the SOC
``||(2 Re c, 2 Im c, a - b)|| <= a + b``.

Constants and conventions (notes/001.md §4.6 and §7 item 3)
-----------------------------------------------------------
* ``value`` is the bound on the excess risk F(theta) - F(theta*) (the library's convention,
  with the 1/2 of smoothness); ``distance`` is the bound on lim E ||theta - theta*||^2. For the
  mean-estimation objective lim E[delta^2] of :func:`privopt.theory.mean_estimation_f_inf`
  (no 1/2) compare ``distance`` (L = mu = 1).
* Bw and w_sgd are uncorrelated (w_sgd_t is a martingale difference, independent of the DP
  noise), so the spectral density of zeta is the sum: the paper's Cauchy–Schwarz factor 2 is not
  needed. sigma_sgd bounds the norm of the whole d-dimensional gradient noise, so it is not
  multiplied by d.
* Relative to the paper, for the privacy term: (10) as printed equals ``4 * value`` (rho^{-1}
  instead of 1/(2 rho), and L instead of L/2) once its psi is read as ours, i.e. (10)'s set C
  is {psi_E.1 / eta^2}; read literally with C = {psi_E.1} the printed (10) lacks the factor
  1/eta^2 and is not dimensionally a bound. E.1 as printed equals ``8 * value`` (the extra
  Cauchy–Schwarz 2). For the sigma_sgd term both carry an extra factor d. The
  Theta-statements and Fig. 3's ratios are unaffected.
* The DTFT sign convention of Lambda does not matter: reversing lambda_t -> lambda_{-t} maps the
  multiplier set onto itself. ``M~`` is used exactly as printed in (89c).
* For L = mu (a quadratic) the bound is exact: the constraint reduces to
  ``psi >= 2 R / (2 R |mu - q|^2 - 1)`` (R = Re Lambda), whose infimum as lambda grows is
  ``eta^2 / |1 - eta mu - e^{i omega}|^2``, the transfer function of the linear recursion, so
  ``distance`` equals lim E ||theta - theta*||^2 of that quadratic. The infimum is not attained
  (lambda -> infinity), which is why the solver may report ``optimal_inaccurate`` there.

Discretisation (the paper's numerics)
-------------------------------------
omega runs over the uniform grid ``2 pi m / k``, m = -floor(k/2), ..., k - 1 - floor(k/2); the
integral becomes the mean over the grid (the trapezoid rule, spectrally accurate for smooth
periodic integrands). Since all coefficients are real, N(-omega) = conj(N(omega)): the cones are
imposed on omega in [0, pi] only and psi is even. The resonance at omega = 0 has width eta mu,
so the grid must resolve it: ``n_freq * eta * mu >= 2 pi`` is required (the discretisation error
then decays like exp(-n_freq eta mu); doubling k moved our bounds by < 1e-4 relative). The paper
used k = 1000.

Multiplier parametrisation
--------------------------
The paper truncates lambda to |t| <= T_max with one variable per lag. The optimal multipliers we
computed are one-sided, smooth and spread over ~1 / (eta mu) lags (e.g. kappa = 100, eta = 0.5:
support ~200 lags; the DP-SGD bound is 43.2 with T_max = 20, 37.4 with 40, 33.15 with 160 and
33.13 with 320), and a cone program with hundreds of dense multiplier columns is slow. So by
default T_max = ceil(2 / (eta mu)) (:func:`default_multiplier_taps`) and lambda is piecewise
linear in t between ``multiplier_knots`` geometrically spaced lags per side
(:func:`multiplier_basis`): non-negative combinations of non-negative hat sequences, i.e. a
subset of the paper's truncated multipliers, so the bound stays valid. With 24 knots it
matched the converged one-variable-per-lag value (33.13) in under a second.
``multiplier_knots=None`` restores one variable per lag.

Certified value
---------------
The solver's multiplier is projected onto the multiplier set, and for it the smallest feasible
psi is explicit: with c = 2 Re(Lambda (mu - conj q)(L - q)) and the identity
``|N_12|^2 - 2 Re Lambda (N_11 + 1) = (L - mu)^2 |Lambda|^2``,

    psi(omega) = ((L - mu)^2 |Lambda|^2 + 2 Re Lambda) / (c - 1)       (needs c > 1).

Rescaling lambda -> s lambda keeps it a multiplier and the objective is convex in s, so a 1-D
search over s polishes the solution (this is what makes L = mu exact). The reported bound is
the objective at this explicitly feasible point of the discretised program, so it does not rest
on the solver's tolerances.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_count, check_nonnegative, check_positive
from privopt.noise import Mechanism, ToeplitzMechanism, nu_dpftrl
from privopt.theory.mean_estimation import lti_noise_variance, truncation_length
from privopt.theory.spectral import min_phase_beta

__all__ = [
    "ConvexBoundResult",
    "OptimizedCorrelation",
    "PowerSpectrum",
    "convex_program_bound",
    "default_multiplier_taps",
    "frequency_grid",
    "multiplier_basis",
    "optimized_correlation",
]

DEFAULT_N_FREQ = 1000
DEFAULT_TAPS = 20
DEFAULT_KNOTS = 24
_MIN_N_FREQ = 16
_INSTALL_HINT = (
    "The convex-program bound needs cvxpy (with the CLARABEL or SCS solver): "
    "install privopt[theory] (pip install 'privopt[theory]')."
)


def _import_cvxpy():
    try:
        import cvxpy as cp
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL_HINT) from err
    return cp


# --------------------------------------------------------------------------------------------
# Inputs


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


# --------------------------------------------------------------------------------------------
# The discretised program


def multiplier_basis(taps: int, knots: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative basis sequences for the Zames–Falb multiplier on lags -taps..taps.

    Returns ``(lags, H)`` with ``lambda = H @ x`` for coefficients ``x >= 0``; column 0 is the
    impulse at t = 0. With ``knots=None`` (or taps <= knots) every lag is its own column (the
    paper's truncated multiplier). Otherwise lambda is piecewise linear in t on each side, with
    nodes at ``knots`` geometrically spaced lags in [1, taps] and value 0 at t = 0 and
    |t| = taps + 1: a subset of the truncated multipliers (still lambda_t >= 0 for |t| <= taps,
    0 beyond), with few variables but long reach.
    """
    taps = check_count("multiplier_taps", taps, minimum=0)
    lags = np.arange(-taps, taps + 1)
    if knots is None or taps <= knots:
        order = np.argsort(np.abs(lags) * 2 - (lags < 0), kind="stable")  # 0, 1, -1, 2, -2, ..
        return lags, np.eye(lags.size)[:, order]
    knots = check_count("multiplier_knots", knots, minimum=2)
    nodes = np.unique(np.round(np.geomspace(1.0, taps, knots)).astype(int))
    edges = np.concatenate([[0], nodes, [taps + 1]])
    t = np.arange(taps + 1)
    side = np.stack(
        [
            np.interp(t, edges[j : j + 3], [0.0, 1.0, 0.0], left=0.0, right=0.0)
            for j in range(nodes.size)
        ],
        axis=1,
    )  # (taps + 1) x nodes, rows t = 0..taps
    columns = np.zeros((lags.size, 1 + 2 * nodes.size))
    columns[taps, 0] = 1.0
    columns[taps:, 1 : 1 + nodes.size] = side
    columns[: taps + 1, 1 + nodes.size :] = side[::-1]
    return lags, columns


class _BoundProgram:
    """The SOCP of Theorem E.1 on the half grid omega in [0, pi], objective weights as a cvxpy
    Parameter (re-solving with new weights reuses the compiled problem)."""

    def __init__(
        self, eta: float, L: float, mu: float, n_freq: int, taps: int, knots: int | None
    ) -> None:
        cp = _import_cvxpy()
        self.eta, self.L, self.mu, self.n_freq = eta, L, mu, n_freq
        half = np.arange(n_freq // 2 + 1)
        self.omega_half = 2.0 * np.pi * half / n_freq
        # multiplicity of each half-grid point in the full grid (omega and -omega)
        mult = np.full(half.size, 2.0)
        mult[0] = 1.0
        if n_freq % 2 == 0:
            mult[-1] = 1.0  # pi == -pi
        self.multiplicity = mult
        self.lags, self.basis = multiplier_basis(taps, knots)
        # Lambda(omega_m) of each basis sequence: fold the lags modulo n_freq, FFT.
        folded = np.zeros((n_freq, self.basis.shape[1]))
        np.add.at(folded, self.lags % n_freq, self.basis)
        transform = np.fft.fft(folded, axis=0)[: half.size]  # sum_t b_t e^{-i omega t}
        self.mass = self.basis[self.lags != 0].sum(axis=0)  # sum_{t != 0} lambda_t per unit
        omega = self.omega_half
        q = (1.0 - np.exp(1j * omega)) / eta
        p = (mu - np.conj(q)) * (L - q)
        self.p = p
        h = omega.size
        # Scaled variables: at omega = 0 feasibility needs Re Lambda >= 1 / (2 mu L) and psi
        # reaches ~1 / mu^2, so x = x_hat / (mu L) and psi = psi_hat / mu^2 are O(1).
        self.x_scale, self.psi_scale = 1.0 / (mu * L), 1.0 / mu**2
        x = cp.Variable(self.basis.shape[1], nonneg=True)
        re = cp.Variable(h)  # Re Lambda(omega) * mu L
        im = cp.Variable(h)  # Im Lambda(omega) * mu L
        psi = cp.Variable(h, nonneg=True)  # psi * mu^2
        weights = cp.Parameter(h, nonneg=True)
        # The cone rows, multiplied by mu^2 (a positive factor does not change the cone).
        a = self.x_scale * mu**2
        n11 = cp.multiply(2.0 * a * p.real, re) - cp.multiply(2.0 * a * p.imag, im) - mu**2
        n12_re = cp.multiply(a * (mu + L - 2.0 * q.real), re)
        n12_im = cp.multiply(2.0 * a * q.imag, re) + a * (mu - L) * im
        n22 = psi + 2.0 * a * re
        cone = cp.SOC(n11 + n22, cp.vstack([2.0 * n12_re, 2.0 * n12_im, n11 - n22]), axis=0)
        constraints = [
            re == transform.real @ x,
            im == transform.imag @ x,
            self.mass @ x <= x[0],  # sum_t lambda_t <= 2 lambda_0
            cone,
        ]
        self.problem = cp.Problem(cp.Minimize(weights @ psi / n_freq), constraints)
        self.x, self.weights = x, weights
        self.transform = transform

    def half_weights(self, spectrum: np.ndarray) -> np.ndarray:
        """Fold S on the full grid onto [0, pi]: S(omega) + S(-omega) (once at 0 and pi)."""
        n = self.n_freq
        m = np.arange(self.omega_half.size)
        plus = spectrum[(n // 2 + m) % n]
        minus = spectrum[n // 2 - m]
        return np.where(self.multiplicity == 2.0, plus + minus, plus)

    def solve(self, weights: np.ndarray, solver: str | None) -> tuple[str, np.ndarray | None]:
        cp = _import_cvxpy()
        scale = float(np.max(weights))
        self.weights.value = weights / scale
        chosen = solver or _default_solver(cp)
        try:
            with warnings.catch_warnings():
                # Inaccurate solutions are expected at L = mu (the infimum is not attained);
                # the bound is certified below, so the warning would only be noise.
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                self.problem.solve(solver=chosen)
        except cp.error.SolverError as err:
            return f"solver_error: {err}", None
        status = str(self.problem.status)
        if self.x.value is None or status in ("infeasible", "unbounded", "infeasible_inaccurate"):
            return status, None
        return status, self.x_scale * np.asarray(self.x.value, dtype=float)

    def certify(self, x: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(objective, psi on the half grid, coefficients x) at an explicitly feasible point.

        Projects x onto the multiplier set, takes the smallest feasible psi for it,
        psi = ((L - mu)^2 |Lambda|^2 + 2 Re Lambda) / (c - 1), and rescales x by the best s > 0
        (the objective is convex in s).
        """
        x = np.maximum(np.asarray(x, dtype=float), 0.0)
        off = float(self.mass @ x)
        if off > x[0]:  # project onto sum_{t != 0} lambda_t <= lambda_0
            x = x.copy()
            x[1:] *= x[0] / off
        transform = self.transform @ x
        re, im = transform.real, transform.imag
        c = 2.0 * (self.p.real * re - self.p.imag * im)
        if not np.all(c > 0.0):
            return math.inf, np.full(re.size, math.inf), x
        num2 = (self.L - self.mu) ** 2 * (re**2 + im**2)
        num1 = np.maximum(2.0 * re, 0.0)  # Re Lambda >= lambda_0 - sum_{t != 0} lambda_t >= 0
        c_min = float(np.min(c))

        def psi_at(u: float) -> np.ndarray:
            s = (1.0 + math.exp(u)) / c_min  # s c_min - 1 = e^u > 0
            return (s * num2 + num1) / (c - 1.0 / s)

        def objective(u: float) -> float:
            return float(np.sum(weights * psi_at(u))) / self.n_freq

        result = minimize_scalar(
            objective, bounds=(-40.0, 40.0), method="bounded", options={"xatol": 1e-10}
        )
        best = float(result.x)
        if c_min > 1.0 and objective(math.log(c_min - 1.0)) <= objective(best):
            best = math.log(c_min - 1.0)  # the solver's own scale (s = 1)
        return objective(best), psi_at(best), (1.0 + math.exp(best)) / c_min * x


def _default_solver(cp) -> str | None:
    installed = cp.installed_solvers()
    for name in ("CLARABEL", "SCS"):
        if name in installed:
            return name
    return None


_PROGRAMS: dict[tuple, _BoundProgram] = {}


def _program(
    eta: float, L: float, mu: float, n_freq: int, taps: int, knots: int | None
) -> _BoundProgram:
    """The compiled program for these settings (one is cached; re-solves only change weights)."""
    key = (eta, L, mu, n_freq, taps, knots)
    cached = _PROGRAMS.get(key)
    if cached is None:
        _PROGRAMS.clear()  # keep one compiled program (they can be large)
        cached = _PROGRAMS[key] = _BoundProgram(eta, L, mu, n_freq, taps, knots)
    return cached


# --------------------------------------------------------------------------------------------
# Public API


def default_multiplier_taps(eta: float, mu: float) -> int:
    """T_max = ceil(2 / (eta mu)), at least 20: the optimal multipliers we computed have support
    ~ 1 / (eta mu) (the memory of the slowest mode); the bound stops improving beyond ~2x."""
    return max(DEFAULT_TAPS, math.ceil(2.0 / (eta * mu)))


@dataclass(frozen=True)
class ConvexBoundResult:
    """The Theorem 3.1 bound for one correlation (see the module docstring for conventions).

    Attributes:
        value: bound on F_inf = lim E[F(theta_t) - F(theta*)] = (L / 2) * ``distance``.
        distance: bound on lim E ||theta_t - theta*||^2 = (1/2 pi) int psi S.
        omega: the uniform frequency grid (k points on [-pi, pi)).
        psi: the optimal psi on the grid (even in omega; our normalisation psi_E.1 / eta^2).
        multiplier: the Zames–Falb multiplier lambda_t at ``lags`` (t = -T_max..T_max).
        lags: the lags t of ``multiplier``.
        power: |B(omega)|^2 on the grid (beta normalised to beta_0 = 1).
        gamma_sq: gamma_inf^2 used (of beta normalised to beta_0 = 1).
        noise_variance: sigma^2 = G^2 gamma_inf^2 / (2 rho).
        status: the solver's status ("optimal", "optimal_inaccurate", "infeasible", ...);
            ``value`` is certified at a feasible point either way, and ``inf`` if none was found.
        solver: the solver used.
        settings: eta, L, mu, rho, clip, sigma_sgd, dim, n_freq, multiplier_taps,
            multiplier_knots.
    """

    value: float
    distance: float
    omega: np.ndarray = field(repr=False)
    psi: np.ndarray = field(repr=False)
    multiplier: np.ndarray = field(repr=False)
    lags: np.ndarray = field(repr=False)
    power: np.ndarray = field(repr=False)
    gamma_sq: float
    noise_variance: float
    status: str
    solver: str
    settings: dict = field(repr=False)
    # internal: the multiplier's coefficients in :func:`multiplier_basis` (warm start)
    _coefficients: np.ndarray | None = field(default=None, repr=False, compare=False)


def _validate_common(eta, L, mu, clip, rho, sigma_sgd, dim, n_freq, taps, knots):
    eta, L, mu = _check_problem(eta, L, mu)
    clip = check_positive("clip", clip)
    rho = check_positive("rho", rho)
    sigma_sgd = check_nonnegative("sigma_sgd", sigma_sgd)
    dim = check_count("dim", dim)
    n_freq = _check_n_freq(n_freq, eta, mu)
    taps = default_multiplier_taps(eta, mu) if taps is None else taps
    taps = check_count("multiplier_taps", taps, minimum=0)
    if knots is not None:
        knots = check_count("multiplier_knots", knots, minimum=2)
    settings = {
        "eta": eta,
        "L": L,
        "mu": mu,
        "rho": rho,
        "clip": clip,
        "sigma_sgd": sigma_sgd,
        "dim": dim,
        "n_freq": n_freq,
        "multiplier_taps": taps,
        "multiplier_knots": knots,
    }
    return settings


def _solve_bound(
    program: _BoundProgram,
    power: np.ndarray,
    gamma_sq: float,
    settings: dict,
    solver: str | None,
    previous: np.ndarray | None = None,
) -> ConvexBoundResult:
    """Solve for psi (and lambda) at fixed |B|^2; ``previous`` multiplier coefficients are
    also certified and the better of the two is kept (guarantees descent in the alternation)."""
    cp = _import_cvxpy()
    sigma_sq = settings["clip"] ** 2 * gamma_sq / (2.0 * settings["rho"])
    spectrum = settings["dim"] * sigma_sq * power + settings["sigma_sgd"] ** 2
    weights = program.half_weights(spectrum)
    status, x = program.solve(weights, solver)
    distance, psi_half = math.inf, np.full(program.omega_half.size, math.inf)
    if x is not None:
        distance, psi_half, x = program.certify(x, weights)
    if previous is not None:
        candidate = program.certify(previous, weights)
        if candidate[0] < distance:
            distance, psi_half, x = candidate
    m = np.abs(np.arange(program.n_freq) - program.n_freq // 2)
    psi = psi_half[np.minimum(m, psi_half.size - 1)]  # even in omega
    multiplier = program.basis @ x if x is not None else np.full(program.lags.size, np.nan)
    return ConvexBoundResult(
        value=settings["L"] / 2.0 * distance,
        distance=distance,
        omega=frequency_grid(program.n_freq),
        psi=psi,
        multiplier=multiplier,
        lags=program.lags.copy(),
        power=power,
        gamma_sq=float(gamma_sq),
        noise_variance=float(sigma_sq),
        status=status,
        solver=str(solver or _default_solver(cp)),
        settings=dict(settings),
        _coefficients=x,
    )


def convex_program_bound(
    beta_or_mechanism: ToeplitzMechanism | np.ndarray | PowerSpectrum,
    *,
    eta: float,
    L: float,
    mu: float,
    clip: float = 1.0,
    rho: float = 1.0,
    sigma_sgd: float = 0.0,
    dim: int = 1,
    n_freq: int = DEFAULT_N_FREQ,
    multiplier_taps: int | None = None,
    multiplier_knots: int | None = DEFAULT_KNOTS,
    solver: str | None = None,
) -> ConvexBoundResult:
    """Theorem 3.1 (seed 001): bound F_inf of DP-FTRL on any mu-strongly convex, L-smooth F.

    Solves the discretised second-order cone program of Theorem E.1 (module docstring):

        minimise   (1/k) sum_omega psi(omega) (d sigma^2 |B(omega)|^2 + sigma_sgd^2)
        over       psi >= 0 on the k-point grid, lambda_t >= 0 for |t| <= T_max,
                   sum_t lambda_t <= 2 lambda_0,
                   N(omega; psi, lambda) >= 0 (2 x 2 Hermitian; a rotated cone) at every omega,

    with sigma^2 = G^2 gamma_inf^2(B) / (2 rho). ``distance`` is that optimum (a bound on
    lim E ||theta - theta*||^2) and ``value = L / 2 * distance`` bounds the excess risk. The
    paper's printed (10) is 4x ``value`` and E.1 is 8x (notes/001.md §4.6, §7 item 3).

    Args:
        beta_or_mechanism: a :class:`~privopt.noise.ToeplitzMechanism` (|B|^2 from its beta,
            gamma_inf^2 from its anytime sensitivity), a raw coefficient array beta (gamma_inf^2
            = sum c_t^2 of the causal inverse), or a :class:`PowerSpectrum`.
        eta: learning rate, 0 < eta < 2 / L.
        L, mu: smoothness and strong convexity, L >= mu > 0.
        clip: the gradient bound G. rho: the zCDP parameter.
        sigma_sgd: bound on the norm of the stochastic-gradient noise.
        dim: the dimension d (multiplies the privacy noise).
        n_freq: grid size k; needs ``n_freq * eta * mu >= 2 pi`` (and >= 16).
        multiplier_taps: T_max, the multiplier's support |t| <= T_max (0: the constant
            multiplier, i.e. the circle criterion). Default :func:`default_multiplier_taps`.
        multiplier_knots: lambda is piecewise linear between this many geometrically spaced
            lags per side (see :func:`multiplier_basis`); ``None`` makes every lag a variable
            (the paper's parametrisation; costly for T_max in the hundreds).
        solver: a cvxpy solver name; default CLARABEL, else SCS.

    Raises:
        ValueError: bad parameters, a non-Toeplitz mechanism, infinite anytime sensitivity.
        ImportError: cvxpy missing (install ``privopt[theory]``).
    """
    settings = _validate_common(
        eta, L, mu, clip, rho, sigma_sgd, dim, n_freq, multiplier_taps, multiplier_knots
    )
    power, gamma_sq, _ = _correlation_on_grid(
        beta_or_mechanism, settings["n_freq"], settings["eta"], settings["mu"]
    )
    program = _program_for(settings)
    return _solve_bound(program, power, gamma_sq, settings, solver)


def _program_for(settings: dict) -> _BoundProgram:
    return _program(
        settings["eta"],
        settings["L"],
        settings["mu"],
        settings["n_freq"],
        settings["multiplier_taps"],
        settings["multiplier_knots"],
    )


@dataclass(frozen=True)
class OptimizedCorrelation:
    """Result of :func:`optimized_correlation` ("Optimized" DP-FTRL of seed 001, Section 3).

    Attributes:
        beta: causal, minimum-phase coefficients (beta_0 = 1) realising the final |B|^2.
        mechanism: a :class:`~privopt.noise.ToeplitzMechanism` with that beta (usable for
            training; its anytime sensitivity is computed from the truncated beta).
        bounds: the bound ``value`` after each psi-step, iteration 0 being the starting
            correlation, all in the grid representation (|B|^2 on the grid, gamma_inf^2 =
            grid mean of |B|^{-2}); non-increasing up to solver tolerance.
        bound: the bound of ``mechanism`` itself (exact DTFT of the truncated beta and its
            gamma_inf^2), i.e. of the correlation one can actually run.
        power: the final |B|^2 on the grid (grid representation, geometric mean 1).
        result: the :class:`ConvexBoundResult` of ``mechanism``.
    """

    beta: np.ndarray = field(repr=False)
    mechanism: ToeplitzMechanism = field(repr=False)
    bounds: tuple[float, ...]
    bound: float
    power: np.ndarray = field(repr=False)
    result: ConvexBoundResult = field(repr=False)


def optimized_correlation(
    eta: float,
    L: float,
    mu: float,
    *,
    clip: float = 1.0,
    rho: float = 1.0,
    sigma_sgd: float = 0.0,
    dim: int = 1,
    n_freq: int = DEFAULT_N_FREQ,
    multiplier_taps: int | None = None,
    multiplier_knots: int | None = DEFAULT_KNOTS,
    iterations: int = 8,
    rtol: float = 1e-4,
    start: ToeplitzMechanism | np.ndarray | PowerSpectrum | None = None,
    n_coefficients: int | None = None,
    solver: str | None = None,
) -> OptimizedCorrelation:
    """Alternating minimisation of the Theorem 3.1 bound over (psi, lambda) and B.

    The bound is J(B, psi) = (1/k) sum psi (d sigma^2(B) |B|^2 + sigma_sgd^2) with sigma^2(B) =
    G^2 gamma^2(B) / (2 rho) and, on the grid, gamma^2(B) = (1/k) sum |B|^{-2}. Alternate:

    * psi-step: for fixed B, solve the SOCP of :func:`convex_program_bound` for (psi, lambda);
    * B-step: for fixed psi, minimise (1/k sum |B|^2 psi)(1/k sum |B|^{-2}); by Cauchy–Schwarz
      the minimiser is |B|^2 proportional to psi^{-1/2}, with value (1/k sum psi^{1/2})^2
      (notes/001.md §2.5.7). The sigma_sgd term does not depend on B.

    The B-step lowers J at fixed (psi, lambda), and the psi-step keeps the previous multiplier
    if the solver's is not better, so ``bounds`` is non-increasing. It starts from nu-DP-FTRL
    with nu = eta * mu (``start`` to override) and stops after ``iterations`` psi-steps or when
    a round lowers the bound by less than ``rtol`` (relative). The final |B|^2 (interpolated
    log-linearly onto a fine FFT grid) is turned into causal coefficients by the minimum-phase
    factorisation :func:`privopt.theory.min_phase_beta`; their own bound is ``bound``.

    Args:
        eta, L, mu, clip, rho, sigma_sgd, dim, n_freq, multiplier_taps, multiplier_knots,
            solver: as in :func:`convex_program_bound`.
        iterations: maximum number of psi-steps after the first (>= 1).
        rtol: stop when a round lowers the bound by less than this fraction.
        start: the starting correlation (default nu-DP-FTRL, nu = min(1, eta mu)).
        n_coefficients: length of the returned beta (default ``40 / (eta mu)``, at least 1000).
    """
    settings = _validate_common(
        eta, L, mu, clip, rho, sigma_sgd, dim, n_freq, multiplier_taps, multiplier_knots
    )
    eta, mu, n_freq = settings["eta"], settings["mu"], settings["n_freq"]
    iterations = check_count("iterations", iterations)
    rtol = check_nonnegative("rtol", rtol)
    if n_coefficients is None:
        n_coefficients = truncation_length(eta * mu)
    n_coefficients = check_count("n_coefficients", n_coefficients)
    program = _program_for(settings)
    power, _, _ = _correlation_on_grid(
        nu_dpftrl(min(1.0, eta * mu)) if start is None else start, n_freq, eta, mu
    )

    def step(grid_power: np.ndarray, previous: np.ndarray | None) -> ConvexBoundResult:
        gamma_sq = float(np.mean(1.0 / grid_power))  # grid quadrature of (1/2pi) int |B|^-2
        return _solve_bound(program, grid_power, gamma_sq, settings, solver, previous)

    current = step(power, None)
    if not math.isfinite(current.value):
        raise ValueError(f"The bound is infinite at the start (solver status {current.status}).")
    bounds = [current.value]
    for _ in range(iterations):
        candidate_power = np.maximum(current.psi, 1e-300) ** -0.5  # Cauchy–Schwarz B-step
        candidate_power /= np.exp(np.mean(np.log(candidate_power)))  # the scale is irrelevant
        candidate = step(candidate_power, current._coefficients)
        bounds.append(candidate.value)
        improvement = (current.value - candidate.value) / current.value
        if candidate.value < current.value:
            current, power = candidate, candidate_power
        if not improvement >= rtol:
            break
    beta = _realise(power, n_freq, n_coefficients)
    mechanism = _finite_mechanism(
        beta, name=f"optimized(eta={eta:g}, L={settings['L']:g}, mu={mu:g})"
    )
    gamma_sq = mechanism.anytime_sensitivity_squared()
    result = _solve_bound(
        program,
        _power_from_beta(beta, n_freq),
        gamma_sq,
        settings,
        solver,
        current._coefficients,
    )
    return OptimizedCorrelation(
        beta=beta,
        mechanism=mechanism,
        bounds=tuple(bounds),
        bound=result.value,
        power=power,
        result=result,
    )


def _realise(power: np.ndarray, n_freq: int, n_coefficients: int) -> np.ndarray:
    """Minimum-phase beta whose |B|^2 interpolates ``power`` (log-linear, periodic)."""
    grid_size = 1 << max(16, math.ceil(math.log2(max(4 * n_coefficients, 8 * n_freq))))
    omega = frequency_grid(n_freq)  # increasing
    knots = np.concatenate([omega, [omega[0] + 2.0 * np.pi]])
    values = np.log(power)
    values = np.concatenate([values, values[:1]])
    fine = 2.0 * np.pi * np.arange(grid_size) / grid_size
    wrapped = (fine - knots[0]) % (2.0 * np.pi) + knots[0]
    target = np.exp(np.interp(wrapped, knots, values))
    return min_phase_beta(target, n_coefficients, grid_size=grid_size)


def _finite_mechanism(beta: np.ndarray, name: str) -> ToeplitzMechanism:
    coeffs = np.asarray(beta, dtype=float).copy()
    gamma_sq = _series_gamma_sq(coeffs)
    if math.isinf(gamma_sq):
        raise ValueError("The realised beta is not minimum phase (infinite sensitivity).")
    return ToeplitzMechanism(
        lambda n: coeffs[:n].copy(), support=coeffs.size, anytime_squared=gamma_sq, name=name
    )
