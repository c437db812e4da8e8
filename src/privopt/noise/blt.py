"""Buffered Linear Toeplitz (BLT) correlated noise: d model-sized buffers, no history.

A degree-d BLT (docs/theory/blt-and-adaptive-clipping.md) is the lower-triangular Toeplitz encoder
C with first column

    c_0 = 1,   c_t = sum_j omega_j theta_j^(t-1)   (t >= 1),

given by buffer decays theta_j in (0, 1) (distinct) and output scales omega_j > 0 with
sum_j omega_j <= 1, so that c is positive and non-increasing (§2.6). Its generating function is
r(x) = 1 + x sum_j omega_j / (1 - theta_j x) = q(x) / p(x).

privopt's convention (:mod:`privopt.noise.base`): the per-step noise is (B z)_t with B = C^-1 (the
"noising matrix" of §1.1), so ``decoder_matrix`` is C^-1 and ``encoder_matrix`` is C, exactly as
for :class:`~privopt.noise.toeplitz.ToeplitzMechanism` (whose B is Toeplitz(beta)). C^-1 is again
a BLT, BLT(theta_hat, omega_hat) with the same d (§2.3): theta_hat are the eigenvalues of
diag(theta) - omega 1^T, and

    omega_hat_i = prod_j (theta_hat_i - theta_j) / prod_{j != i} (theta_hat_i - theta_hat_j).

The runtime never needs (theta_hat, omega_hat): the stream runs x_t = z_t - sum_j omega_j S_j,
S_j <- theta_j S_j + x_t (§2.2, the buffers hold the outputs).

Sensitivity (§2.4, §3.4): single participation sens^2 = sum_{t<n} c_t^2
= 1 + sum_{i,j} omega_i omega_j G_{n-1}(theta_i theta_j) with G_N(r) = (1 - r^N) / (1 - r); its
anytime limit is 1 + sum_{i,j} omega_i omega_j / (1 - theta_i theta_j); under b-min-separation the
O(n) formula of §3.1 on the materialised coefficients is exact (they are non-negative and
non-increasing).

Losses (§1.3): with beta_t = sum_{s<=t} c^-_s the prefix sums of C^-1's coefficients, the
prefix-sum workload's B = A C^-1 has MaxErr = sum_{t<n} beta_t^2 and
MeanErr = sum_t (n - t) beta_t^2 / n; max/mean loss = sens^2 * MaxErr/MeanErr (unit per-step
contributions, no replace-one factor). Single-participation max loss costs O(d^2).

:func:`optimize_blt` minimises these losses over the interlaced decays
0 < theta_hat_1 < theta_1 < theta_hat_2 < ... < theta_d < 1, which satisfy every constraint of
§2.6 by construction (§2.3, §2.7 [IDEA]).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy.linalg import toeplitz
from scipy.optimize import minimize

from privopt._validate import check_count
from privopt.noise._checks import restored_array
from privopt.noise.base import (
    SINGLE,
    Mechanism,
    NoiseSource,
    NoiseStream,
    Participation,
)
from privopt.noise.sensitivity import toeplitz_minsep_squared

__all__ = ["BLTMechanism", "BLTStream", "optimize_blt", "toeplitz_prefix_losses"]

#: below this n * (1 - r) the closed forms lose digits to cancellation; use O(n) sums instead
_CLOSED_FORM_MIN = 1e-2


# -- geometric-sum primitives, in terms of the deficit s = 1 - r (precise for r near 1) ----------
def _geom(n: int, s: np.ndarray) -> np.ndarray:
    """G_n(r) = sum_{t<n} r^t with r = 1 - s (elementwise; s may exceed 1, i.e. r <= 0)."""
    s = np.asarray(s, dtype=float)
    near = s < 0.5
    safe = np.where(near, s, 0.25)
    with np.errstate(divide="ignore", invalid="ignore"):
        small = -np.expm1(n * np.log1p(-safe)) / safe
        far_s = np.where(near, 1.0, s)
        far = (1.0 - (1.0 - far_s) ** n) / far_s
    out = np.where(near, small, far)
    return np.where(s == 0.0, float(n), out)


def _powers(s: np.ndarray, n: int) -> np.ndarray:
    """Matrix (len(s), n) of r^t for t < n, r = 1 - s."""
    s = np.asarray(s, dtype=float)[:, None]
    t = np.arange(n, dtype=float)[None, :]
    near = s < 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        small = np.exp(t * np.log1p(-np.where(near, s, 0.25)))
        far = (1.0 - np.where(near, 0.0, s)) ** t
    return np.where(near, small, far)


def _blt_coefficients(decay_deficit: np.ndarray, scale: np.ndarray, n: int) -> np.ndarray:
    """First n coefficients of BLT: 1, sum_j scale_j r_j^(t-1) with r_j = 1 - deficit_j."""
    out = np.empty(n)
    out[0] = 1.0
    if n > 1:
        out[1:] = scale @ _powers(decay_deficit, n - 1)
    return out


def _prefix_sums_direct(deficit: np.ndarray, n: int) -> np.ndarray:
    """Matrix (d, n) of G_t(r_j) for t < n (t = 0 gives 0)."""
    g = np.zeros((deficit.size, n))
    if n > 1:
        g[:, 1:] = np.cumsum(_powers(deficit, n - 1), axis=1)
    return g


def _max_error_single(hat_deficit: np.ndarray, hat_scale: np.ndarray, n: int) -> float:
    """MaxErr(n) = sum_{t<n} beta_t^2, beta_t = 1 + sum_j omega_hat_j G_t(theta_hat_j) (§2.4).

    Expanded: n + 2 sum_j w_j F(s_j) + sum_{jk} w_j w_k Q(s_j, s_k), with F(s) = sum_t G_t and
    Q = sum_t G_t(r_j) G_t(r_k) = [s_j F(s_j) + s_k F(s_k) - s_jk F(s_jk)] / (s_j s_k),
    s_jk = 1 - r_j r_k. O(d^2); an O(n d) sum when some n s_j is too small for the closed form.
    """
    s = hat_deficit
    if s.size == 0:
        return float(n)
    if np.min(s) * n < _CLOSED_FORM_MIN:
        beta = 1.0 + hat_scale @ _prefix_sums_direct(s, n)
        return float(beta @ beta)
    f = (n - _geom(n, s)) / s
    s_jk = s[:, None] + s[None, :] - s[:, None] * s[None, :]
    f_jk = (n - _geom(n, s_jk)) / s_jk
    q = (s[:, None] * f[:, None] + s[None, :] * f[None, :] - s_jk * f_jk) / (
        s[:, None] * s[None, :]
    )
    return float(n + 2.0 * hat_scale @ f + hat_scale @ q @ hat_scale)


def _sensitivity_single(deficit: np.ndarray, scale: np.ndarray, n: int) -> float:
    """sum_{t<n} c_t^2 = 1 + sum_{ij} omega_i omega_j G_{n-1}(theta_i theta_j) (§2.4)."""
    if n == 1 or deficit.size == 0:
        return 1.0
    s_jk = deficit[:, None] + deficit[None, :] - deficit[:, None] * deficit[None, :]
    return float(1.0 + scale @ _geom(n - 1, s_jk) @ scale)


def _errors_materialised(hat_deficit: np.ndarray, hat_scale: np.ndarray, n: int) -> np.ndarray:
    """beta_t^2 for t < n from C^-1's materialised coefficients (§2.5)."""
    beta = np.cumsum(_blt_coefficients(hat_deficit, hat_scale, n))
    return beta**2


def _error(hat_deficit, hat_scale, n: int, error: str) -> float:
    if error == "max" and hat_deficit.size and np.min(hat_deficit) * n >= _CLOSED_FORM_MIN:
        return _max_error_single(hat_deficit, hat_scale, n)
    sq = _errors_materialised(hat_deficit, hat_scale, n)
    if error == "max":
        return float(np.sum(sq))
    return float(np.sum((n - np.arange(n)) * sq) / n)


def _sensitivity(deficit, scale, n: int, participation: Participation) -> float:
    if participation.kind == "single":
        return _sensitivity_single(deficit, scale, n)
    c = _blt_coefficients(deficit, scale, n)
    return toeplitz_minsep_squared(
        c,
        n,
        participation.min_sep,  # type: ignore[arg-type]
        participation.participations,  # type: ignore[arg-type]
    )


def _inverse(theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(theta_hat, omega_hat) of C^-1 = BLT(theta_hat, omega_hat) (§2.3)."""
    if theta.size == 0:
        return theta.copy(), omega.copy()
    theta_hat = np.sort(
        np.real(np.linalg.eigvals(np.diag(theta) - np.outer(omega, np.ones_like(theta))))
    )
    diff_ht = theta_hat[:, None] - theta[None, :]
    diff_hh = theta_hat[:, None] - theta_hat[None, :]
    np.fill_diagonal(diff_hh, 1.0)
    omega_hat = np.prod(diff_ht, axis=1) / np.prod(diff_hh, axis=1)
    return theta_hat, omega_hat


class BLTMechanism(Mechanism):
    """BLT encoder C = BLT(buf_decay, output_scale); the step noise is (C^-1 z)_t.

    Args:
        buf_decay: theta, distinct decays in (0, 1) (one per buffer; may be empty: DP-SGD).
        output_scale: omega > 0 with sum(omega) <= 1 (non-increasing coefficients).

    ``decoder_matrix`` is B = C^-1 (per-step noise), ``encoder_matrix`` is C, as for
    :class:`~privopt.noise.toeplitz.ToeplitzMechanism`. See the module docstring for the math.
    """

    def __init__(self, buf_decay, output_scale) -> None:
        theta = np.atleast_1d(np.asarray(buf_decay, dtype=float))
        omega = np.atleast_1d(np.asarray(output_scale, dtype=float))
        if theta.ndim != 1 or omega.ndim != 1:
            raise ValueError("buf_decay and output_scale must be 1-D.")
        if theta.shape != omega.shape:
            raise ValueError(
                f"buf_decay and output_scale must have the same length, got {theta.size} and "
                f"{omega.size}."
            )
        if not (np.all(np.isfinite(theta)) and np.all((theta > 0.0) & (theta < 1.0))):
            raise ValueError(f"buf_decay must lie in (0, 1), got {theta.tolist()}.")
        if theta.size > 1 and np.min(np.diff(np.sort(theta))) < 1e-12:
            raise ValueError(f"buf_decay must be distinct, got {theta.tolist()}.")
        if not (np.all(np.isfinite(omega)) and np.all(omega > 0.0)):
            raise ValueError(f"output_scale must be positive, got {omega.tolist()}.")
        if float(np.sum(omega)) > 1.0 + 1e-12:
            raise ValueError(
                f"output_scale must sum to at most 1 (non-increasing coefficients), got sum "
                f"{float(np.sum(omega))!r}."
            )
        order = np.argsort(theta)[::-1]
        self.buf_decay = theta[order]
        self.output_scale = omega[order]
        self._deficit = 1.0 - self.buf_decay
        theta_hat, omega_hat = _inverse(self.buf_decay, self.output_scale)
        self.inverse_decay = theta_hat
        self.inverse_scale = omega_hat
        self._hat_deficit = 1.0 - theta_hat
        self.name = f"blt(d={theta.size})"

    @classmethod
    def _from_pair(cls, deficit, scale, hat_deficit, hat_scale) -> BLTMechanism:
        """Build from the optimiser's precise deficits (keeps 1 - theta exact near 1)."""
        mech = cls(1.0 - deficit, scale)
        order = np.argsort(deficit)
        mech._deficit = np.asarray(deficit, dtype=float)[order]
        mech.buf_decay = 1.0 - mech._deficit
        mech.output_scale = np.asarray(scale, dtype=float)[order]
        hat_order = np.argsort(hat_deficit)[::-1]
        mech._hat_deficit = np.asarray(hat_deficit, dtype=float)[hat_order]
        mech.inverse_decay = 1.0 - mech._hat_deficit
        mech.inverse_scale = np.asarray(hat_scale, dtype=float)[hat_order]
        return mech

    @property
    def buffers(self) -> int:
        return int(self.buf_decay.size)

    def __repr__(self) -> str:
        return (
            f"BLTMechanism(buf_decay={self.buf_decay.tolist()}, "
            f"output_scale={self.output_scale.tolist()})"
        )

    # -- coefficients and dense matrices -------------------------------------------------------
    def c(self, n: int) -> np.ndarray:
        """First n coefficients of C: 1, sum_j omega_j theta_j^(t-1)."""
        return _blt_coefficients(self._deficit, self.output_scale, check_count("n", n))

    def inverse_c(self, n: int) -> np.ndarray:
        """First n coefficients of C^-1 (the per-step noise coefficients, privopt's beta)."""
        return _blt_coefficients(self._hat_deficit, self.inverse_scale, check_count("n", n))

    def decoder_matrix(self, steps: int) -> np.ndarray:
        return np.tril(toeplitz(self.inverse_c(steps)))

    def encoder_matrix(self, steps: int) -> np.ndarray:
        return np.tril(toeplitz(self.c(steps)))

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return [(0, tau) for tau in range(check_count("steps", steps))]

    # -- sensitivity ----------------------------------------------------------------------------
    def anytime_sensitivity_squared(self) -> float:
        """lim_n sens^2 = 1 + sum_{ij} omega_i omega_j / (1 - theta_i theta_j) (§2.4)."""
        s = self._deficit
        s_jk = s[:, None] + s[None, :] - s[:, None] * s[None, :]
        return float(1.0 + self.output_scale @ (1.0 / s_jk) @ self.output_scale)

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        """Single: closed form (§2.4); min-separation: §3.1 on the materialised c (exact)."""
        return _sensitivity(self._deficit, self.output_scale, steps, participation)

    # -- losses -----------------------------------------------------------------------------------
    def max_error(self, steps: int) -> float:
        """MaxErr = max_t ||(A C^-1)_{t,:}||^2 = sum_{t<n} beta_t^2 (O(d^2), §2.4)."""
        steps = check_count("steps", steps)
        return _error(self._hat_deficit, self.inverse_scale, steps, "max")

    def mean_error(self, steps: int) -> float:
        """MeanErr = ||A C^-1||_F^2 / n = sum_t (n - t) beta_t^2 / n (O(n d), §2.5)."""
        steps = check_count("steps", steps)
        return _error(self._hat_deficit, self.inverse_scale, steps, "mean")

    def max_loss(self, steps: int, participation: Participation = SINGLE) -> float:
        """sens^2 * MaxErr for the prefix-sum workload (§1.3)."""
        return self.sensitivity_squared(steps, participation) * self.max_error(steps)

    def mean_loss(self, steps: int, participation: Participation = SINGLE) -> float:
        """sens^2 * MeanErr for the prefix-sum workload (§1.3)."""
        return self.sensitivity_squared(steps, participation) * self.mean_error(steps)

    def prefix_losses(
        self, steps: int, participation: Participation = SINGLE
    ) -> tuple[float, float]:
        """(max loss, mean loss) without dense matrices."""
        return self.max_loss(steps, participation), self.mean_loss(steps, participation)

    def prefix_sum_error(self, steps: int, participation: Participation = SINGLE) -> float:
        """sens^2 ||A C^-1||_F^2 = n * mean_loss, without dense matrices."""
        steps = check_count("steps", steps)
        return steps * self.mean_loss(steps, participation)

    def _make_stream(self, dim, std, source, covariance, **options: Any) -> BLTStream:
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return BLTStream(self, dim, std, source, covariance)


class BLTStream(NoiseStream):
    """(C^-1 z)_t with d buffers of size dim (§2.2, [HF24] Alg. 3): no history, O(d dim) state.

    x_t = z_t - sum_j omega_j S_j, then S_j <- theta_j S_j + x_t (S starts at 0).
    """

    def __init__(
        self, mechanism: BLTMechanism, dim: int, std: float, source: NoiseSource, covariance=None
    ) -> None:
        super().__init__(dim, std, source, covariance)
        self.mechanism = mechanism
        self._theta = mechanism.buf_decay[:, None]
        self._omega = mechanism.output_scale
        self._state = np.zeros((mechanism.buffers, self.dim))

    def _combine(self, t: int) -> np.ndarray:
        z = self.source.draw((0, t), self.dim)
        if self._omega.size == 0:
            return z
        x = z - self._omega @ self._state
        self._state *= self._theta
        self._state += x[None, :]
        return x

    def _buffers(self) -> dict[str, Any]:
        return {"buffers": self._state.copy()}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._state = restored_array(state, "buffers", self._state)


# -- optimisation ---------------------------------------------------------------------------------
class _Interlaced:
    """Maps u in R^(2d+1) to interlaced decays 0 < th_1 < t_1 < ... < th_d < t_d < 1.

    g = softmax(u) are the 2d+1 gaps; every difference of two decays and every deficit 1 - decay
    is a sum of gaps (computed without cancellation). Then omega, omega_hat follow from the
    theta-pair formulas (§2.3(2)); interlacing gives omega > 0, omega_hat < 0, sum omega < 1.
    """

    def __init__(self, d: int) -> None:
        self.d = d
        m = 2 * d
        # diff[a, b] = p_a - p_b = sum g[b+1 .. a] for a > b (negated for a < b)
        mask = np.zeros((m, m, m + 1))
        for a in range(m):
            for b in range(m):
                lo, hi = min(a, b), max(a, b)
                mask[a, b, lo + 1 : hi + 1] = 1.0 if a > b else -1.0
        self.diff_mask = mask
        tail = np.zeros((m, m + 1))  # deficit of p_a = sum g[a+1 ..]
        for a in range(m):
            tail[a, a + 1 :] = 1.0
        self.tail = tail
        self.hat = np.arange(0, m, 2)
        self.dec = np.arange(1, m, 2)

    def gaps(self, u: np.ndarray) -> np.ndarray:
        e = np.exp(u - np.max(u))
        return e / np.sum(e)

    def decode(self, u: np.ndarray):
        g = self.gaps(u)
        diff = self.diff_mask @ g
        deficit_all = self.tail @ g
        d_th = diff[np.ix_(self.dec, self.hat)]  # theta_i - theta_hat_j
        d_tt = diff[np.ix_(self.dec, self.dec)].copy()
        np.fill_diagonal(d_tt, 1.0)
        d_ht = diff[np.ix_(self.hat, self.dec)]  # theta_hat_i - theta_j
        d_hh = diff[np.ix_(self.hat, self.hat)].copy()
        np.fill_diagonal(d_hh, 1.0)
        omega = np.prod(d_th, axis=1) / np.prod(d_tt, axis=1)
        omega_hat = np.prod(d_ht, axis=1) / np.prod(d_hh, axis=1)
        return deficit_all[self.dec], omega, deficit_all[self.hat], omega_hat, g

    def encode(self, deficits: np.ndarray) -> np.ndarray:
        """u for the interlaced sequence with the given deficits (descending: th_1 first)."""
        pos = 1.0 - np.asarray(deficits, dtype=float)
        edges = np.concatenate([[0.0], pos, [1.0]])
        g = np.diff(edges)
        g[-1] = deficits[-1]
        return np.log(g)


def _objective_factory(steps: int, participation: Participation, error: str, d: int):
    param = _Interlaced(d)

    def objective(u: np.ndarray) -> float:
        deficit, omega, hat_deficit, hat_scale, g = param.decode(u)
        if not (np.all(np.isfinite(omega)) and np.all(np.isfinite(hat_scale))):
            return math.inf
        sens = _sensitivity(deficit, omega, steps, participation)
        err = _error(hat_deficit, hat_scale, steps, error)
        if not (sens > 0 and err > 0):
            return math.inf
        # tiny log-barrier on the gaps (§2.7): keeps decays apart and away from 0 and 1
        return math.log(sens) + math.log(err) - 1e-8 * float(np.sum(np.log(g)))

    return param, objective


def _central_gradient(f, u: np.ndarray, f0: float) -> np.ndarray:
    grad = np.empty_like(u)
    h = 1e-6
    for i in range(u.size):
        up = u.copy()
        up[i] += h
        down = u.copy()
        down[i] -= h
        fp, fm = f(up), f(down)
        if math.isfinite(fp) and math.isfinite(fm):
            grad[i] = (fp - fm) / (2 * h)
        elif math.isfinite(fm):
            grad[i] = (f0 - fm) / h
        else:
            grad[i] = (fp - f0) / h
    return grad


def _initial_deficits(steps: int, d: int, spread: float) -> np.ndarray:
    """2d log-spaced deficits from about 0.9 down to spread / steps (descending)."""
    low = min(spread / steps, 0.5)
    return np.geomspace(0.9, low, 2 * d) if d else np.zeros(0)


def _fit(steps: int, participation: Participation, error: str, d: int, starts: list[np.ndarray]):
    param, objective = _objective_factory(steps, participation, error, d)

    def fun(u):
        value = objective(u)
        if not math.isfinite(value):
            return 1e300, np.zeros_like(u)
        return value, _central_gradient(objective, u, value)

    best = None
    for deficits in starts:
        u0 = param.encode(deficits)
        res = minimize(
            fun,
            u0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 600, "maxcor": 15, "ftol": 1e-15, "gtol": 1e-10},
        )
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x)
    assert best is not None
    deficit, omega, hat_deficit, hat_scale, _ = param.decode(best[1])
    return best[0], (deficit, omega, hat_deficit, hat_scale)


def _warm_start(prev_deficits: np.ndarray, steps: int) -> list[np.ndarray]:
    """Two d+1 starts from a d-buffer optimum: a new pair at the near-1 or the far end."""
    out = []
    near = np.concatenate([prev_deficits, [prev_deficits[-1] / 3.0, prev_deficits[-1] / 9.0]])
    far = np.concatenate([[min(0.95, 0.5 * (1 + prev_deficits[0])), prev_deficits[0] ** 0.5]])
    far = np.concatenate([np.sort(far)[::-1], prev_deficits])
    for cand in (near, far):
        if np.all(np.diff(cand) < 0) and cand[0] < 1 and cand[-1] > 0:
            out.append(cand)
    return out


@functools.lru_cache(maxsize=64)
def _optimize_cached(steps, min_sep, participations, error, buffers):
    participation = SINGLE if min_sep is None else Participation.multiple(min_sep, participations)
    sizes = [buffers] if buffers is not None else list(range(1, 11))
    best_loss = math.inf
    best_params = None
    prev_deficits = None
    for d in sizes:
        starts = [_initial_deficits(steps, d, spread) for spread in (0.3, 3.0)]
        if prev_deficits is not None:
            starts += _warm_start(prev_deficits, steps)
        log_loss, params = _fit(steps, participation, error, d, starts)
        loss = math.exp(log_loss)
        deficit, _, hat_deficit, _ = params
        prev_deficits = np.sort(np.concatenate([deficit, hat_deficit]))[::-1]
        if buffers is None and best_params is not None and loss * 1.01 > best_loss:
            break
        best_loss, best_params = loss, params
    assert best_params is not None
    return tuple(tuple(map(float, p)) for p in best_params)


def optimize_blt(
    steps: int,
    *,
    min_sep: int | None = None,
    participations: int | None = None,
    error: str = "max",
    buffers: int | None = None,
) -> BLTMechanism:
    """A BLT minimising sens^2 * MaxErr (``error="max"``) or sens^2 * MeanErr (``"mean"``).

    Single participation (no ``min_sep``) uses the O(d^2) max-loss closed form (§2.4; mean error
    is an O(n d) sum); b-min-separation with at most ``participations`` uses materialised
    coefficients and the exact §3.1 sensitivity (§2.5). L-BFGS-B in float64 over the interlaced
    decays (softmax gaps, §2.7), started from log-spaced decays and, for d + 1 buffers, from the
    d-buffer optimum. Without ``buffers`` the count grows from 1 while the loss improves by at
    least 1% (at most 10). Deterministic and cached.
    """
    steps = check_count("steps", steps)
    if (min_sep is None) != (participations is None):
        raise ValueError("Give both min_sep and participations, or neither.")
    if min_sep is not None:
        min_sep = check_count("min_sep", min_sep)
        participations = check_count("participations", participations)
        Participation.multiple(min_sep, participations).check_steps(steps)
    if error not in ("max", "mean"):
        raise ValueError(f"Expected error in ('max', 'mean'), got {error!r}.")
    if buffers is not None:
        buffers = check_count("buffers", buffers)
        if buffers > 15:
            raise ValueError(f"Expected buffers <= 15, got {buffers}.")
    if steps < 2:
        raise ValueError(f"optimize_blt needs steps >= 2, got {steps}.")
    deficit, omega, hat_deficit, hat_scale = _optimize_cached(
        steps, min_sep, participations, error, buffers
    )
    return BLTMechanism._from_pair(
        np.array(deficit), np.array(omega), np.array(hat_deficit), np.array(hat_scale)
    )


def toeplitz_prefix_losses(
    mechanism: Mechanism, steps: int, participation: Participation = SINGLE
) -> tuple[float, float]:
    """(max loss, mean loss) of a lower-triangular Toeplitz mechanism (e.g. the optimal Toeplitz
    ``optimal_cc()``, nu-DP-FTRL), the reference for BLT losses: its O(T)
    :meth:`~privopt.noise.toeplitz.ToeplitzMechanism.prefix_losses`."""
    if getattr(mechanism, "beta", None) is None:
        raise ValueError(f"{mechanism.name} is not a Toeplitz mechanism (it has no beta).")
    return mechanism.prefix_losses(steps, participation)
