"""Theorem 3.1 of Choquette-Choo et al. (2024): a convex-program bound on F_inf for smooth, strongly
convex problems.

Setting (docs/theory/correlated-noise.md; paper Section 3 and Appendix E)
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

Constants and conventions (docs/theory/correlated-noise.md and §7 item 3)
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

Implementation
--------------
The frequency grid and a correlation's ``|B(omega)|^2`` on it are in
:mod:`privopt.theory.convex_bound_grid` (with the discretisation rules); the cone program, its
multiplier parametrisation and the certified value are in
:mod:`privopt.theory.convex_bound_program`. This module states the bound
(:func:`convex_program_bound`) and minimises it over the correlation
(:func:`optimized_correlation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privopt._validate import check_count, check_nonnegative, check_positive
from privopt.noise import ToeplitzMechanism, nu_dpftrl
from privopt.theory.convex_bound_grid import (
    PowerSpectrum,
    _check_n_freq,
    _check_problem,
    _correlation_on_grid,
    _power_from_beta,
    _series_gamma_sq,
    frequency_grid,
)
from privopt.theory.convex_bound_program import (
    _BoundProgram,
    _default_solver,
    _import_cvxpy,
    _program_for,
    multiplier_basis,
)
from privopt.theory.mean_estimation import truncation_length
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
    """Theorem 3.1 (Choquette-Choo et al. 2024): bound F_inf of DP-FTRL on any mu-strongly convex,
    L-smooth F.

    Solves the discretised second-order cone program of Theorem E.1 (module docstring):

        minimise   (1/k) sum_omega psi(omega) (d sigma^2 |B(omega)|^2 + sigma_sgd^2)
        over       psi >= 0 on the k-point grid, lambda_t >= 0 for |t| <= T_max,
                   sum_t lambda_t <= 2 lambda_0,
                   N(omega; psi, lambda) >= 0 (2 x 2 Hermitian; a rotated cone) at every omega,

    with sigma^2 = G^2 gamma_inf^2(B) / (2 rho). ``distance`` is that optimum (a bound on
    lim E ||theta - theta*||^2) and ``value = L / 2 * distance`` bounds the excess risk. The
    paper's printed (10) is 4x ``value`` and E.1 is 8x (docs/theory/correlated-noise.md, §7 item 3).

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


@dataclass(frozen=True)
class OptimizedCorrelation:
    """Result of :func:`optimized_correlation` (Choquette-Choo et al. 2024, §3).

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
      (docs/theory/correlated-noise.md). The sigma_sgd term does not depend on B.

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
