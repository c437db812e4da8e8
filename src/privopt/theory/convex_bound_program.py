"""Theorem E.1's cone program on the frequency grid, for :mod:`privopt.theory.convex_bound`.

Multiplier parametrisation
--------------------------
The paper truncates lambda to |t| <= T_max with one variable per lag. The optimal multipliers we
computed are one-sided, smooth and spread over ~1 / (eta mu) lags (e.g. kappa = 100, eta = 0.5:
support ~200 lags; the DP-SGD bound is 43.2 with T_max = 20, 37.4 with 40, 33.15 with 160 and
33.13 with 320), and a cone program with hundreds of dense multiplier columns is slow. So by
default T_max = ceil(2 / (eta mu))
(:func:`~privopt.theory.convex_bound.default_multiplier_taps`) and lambda is piecewise linear
in t between ``multiplier_knots`` geometrically spaced lags per side (:func:`multiplier_basis`):
non-negative combinations of non-negative hat sequences, i.e. a subset of the paper's truncated
multipliers, so the bound stays valid. With 24 knots it matched the converged
one-variable-per-lag value (33.13) in under a second.
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

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_count

__all__ = ["multiplier_basis"]

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


def _program_for(settings: dict) -> _BoundProgram:
    return _program(
        settings["eta"],
        settings["L"],
        settings["mu"],
        settings["n_freq"],
        settings["multiplier_taps"],
        settings["multiplier_knots"],
    )
