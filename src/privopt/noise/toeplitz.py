"""Lower-triangular Toeplitz correlations: nu-DP-FTRL, optimal continual counting, anti-PGD, custom.

With ``B = Toeplitz(beta)`` the noise of step t is ``sum_{k<=t} beta_k w_{t-k}``
(docs/theory/correlated-noise.md Eq. (13)), and ``C = B^{-1}`` is Toeplitz with the coefficients
``c`` of ``1 / beta(x)``. Since the top-left block of C is the inverse of the top-left block of B,
the largest column norm is column 0: ``gamma_T^2 = sum_{t<T} c_t^2``, non-decreasing in T
(docs/theory/correlated-noise.md).

Factories (docs/theory/correlated-noise.md):

=========================  ============================================  ==========================
factory                    beta                                          anytime sensitivity^2
=========================  ============================================  ==========================
``nu_dpftrl(nu)``          (-1)^t binom(1/2, t) (1 - nu)^t               (2/pi) K(1 - nu)
``optimal_cc()``           nu = 0: Taylor coefficients of sqrt(1 - x)    infinite (needs T)
``mean_estimation(eta)``   nu = eta (optimal for mean estimation)        (2/pi) K(1 - eta)
``anti_pgd()``             (1, -1)                                       infinite; gamma_T^2 = T
``damped_anti_pgd(nu)``    (1, -(1 - nu))                                1 / (nu (2 - nu))
``custom(beta)``           given                                         series, or inf
=========================  ============================================  ==========================

K(k) is the complete elliptic integral of the first kind with modulus k (scipy: ``ellipk(k**2)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.linalg import toeplitz
from scipy.linalg.blas import dgemv as _gemv
from scipy.signal import lfilter
from scipy.special import ellipk

from privopt._validate import check_count, check_finite
from privopt.noise._checks import check_coefficient_vector
from privopt.noise.base import (
    SINGLE,
    Mechanism,
    NoiseSource,
    NoiseStream,
    Participation,
    SeededNoiseSource,
)
from privopt.noise.sensitivity import toeplitz_minsep_squared

__all__ = [
    "ToeplitzMechanism",
    "ToeplitzStream",
    "anti_pgd",
    "custom",
    "damped_anti_pgd",
    "independent",
    "inverse_coefficients",
    "mean_estimation_optimal",
    "nu_beta",
    "nu_c",
    "nu_dpftrl",
    "optimal_cc",
]


def _check_nu(nu: float) -> float:
    nu = check_finite("nu", nu)
    if not 0.0 <= nu <= 1.0:
        raise ValueError(f"Expected nu in [0, 1], got {nu!r}.")
    return nu


def _ratio_recursion(first: float, ratio: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    t = np.arange(1, n, dtype=float)
    return np.concatenate([[first], first * np.cumprod(ratio(t))])[:n]


def nu_beta(nu: float, n: int) -> np.ndarray:
    """First n coefficients of nu-DP-FTRL's beta: beta_t = beta_{t-1} (t - 3/2)/t (1 - nu)."""
    nu = _check_nu(nu)
    n = check_count("n", n)
    return _ratio_recursion(1.0, lambda t: (t - 1.5) / t * (1.0 - nu), n)


def nu_c(nu: float, n: int) -> np.ndarray:
    """First n coefficients of C for nu-DP-FTRL: c_t = binom(2t, t) 4^-t (1 - nu)^t."""
    nu = _check_nu(nu)
    n = check_count("n", n)
    return _ratio_recursion(1.0, lambda t: (t - 0.5) / t * (1.0 - nu), n)


def inverse_coefficients(beta: np.ndarray, n: int) -> np.ndarray:
    """First n coefficients of 1/beta(x) (the convolution recursion, run by ``lfilter``)."""
    beta = np.asarray(beta, dtype=float)
    if beta.ndim != 1 or beta.size == 0 or beta[0] == 0.0:
        raise ValueError("Expected a 1-D beta with beta_0 != 0 (B must be invertible).")
    impulse = np.zeros(n)
    impulse[0] = 1.0
    return lfilter([1.0], beta, impulse)


class ToeplitzMechanism(Mechanism):
    """Lower-triangular Toeplitz B from coefficients beta (possibly infinite).

    Args:
        beta_fn: n -> first n coefficients of beta (beta_0 != 0).
        c_fn: n -> first n coefficients of C = B^{-1}; default: the convolution recursion.
        support: number of non-zero beta coefficients if finite (None = infinite). Streams keep
            only ``support`` past vectors in history mode.
        anytime_squared: closed-form limit of gamma_T^2 (None = computed numerically).
        name: short name for reports.
    """

    def __init__(
        self,
        beta_fn: Callable[[int], np.ndarray],
        c_fn: Callable[[int], np.ndarray] | None = None,
        *,
        support: int | None = None,
        anytime_squared: float | None = None,
        name: str = "toeplitz",
    ) -> None:
        self._beta_fn = beta_fn
        self._c_fn = c_fn  # None: the convolution recursion (a method, so the mechanism pickles)
        self.support = support
        self._anytime_squared = anytime_squared
        self.name = name
        if self.beta(1)[0] == 0.0:
            raise ValueError("beta_0 must be non-zero (B must be invertible).")

    def beta(self, n: int) -> np.ndarray:
        """First n coefficients of beta (zeros past a finite support)."""
        n = check_count("n", n)
        if self.support is not None and n > self.support:
            out = np.zeros(n)
            out[: self.support] = self._beta_fn(self.support)
            return out
        return np.asarray(self._beta_fn(n), dtype=float)

    def c(self, n: int) -> np.ndarray:
        """First n coefficients of C = B^{-1}."""
        n = check_count("n", n)
        if self._c_fn is None:
            return inverse_coefficients(self.beta(self.support or n), n)
        return np.asarray(self._c_fn(n), dtype=float)

    def decoder_matrix(self, steps: int) -> np.ndarray:
        b = self.beta(steps)
        return np.tril(toeplitz(b))

    def encoder_matrix(self, steps: int) -> np.ndarray:
        return np.tril(toeplitz(self.c(steps)))

    def anytime_sensitivity_squared(self) -> float:
        """lim_{T -> inf} gamma_T^2 = ||c||_2^2; ``inf`` when C is not square-summable."""
        if self._anytime_squared is not None:
            return self._anytime_squared
        if self.support is None:
            raise ValueError(
                f"{self.name}: no closed-form anytime sensitivity for an infinite beta; pass a "
                "finite number of steps."
            )
        # 1/beta(x) is square-summable iff every root of beta(x) lies strictly outside |x| <= 1.
        coeffs = self.beta(self.support)
        roots = np.roots(coeffs[::-1]) if self.support > 1 else np.array([])
        if roots.size and np.min(np.abs(roots)) <= 1.0 + 1e-12:
            return math.inf
        n = 1024
        while True:
            c = self.c(n)
            total = float(np.sum(c**2))
            if c[-1] ** 2 * n < 1e-17 * total:
                return total
            n *= 4

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        c = self.c(steps)
        if participation.kind == "single":
            return float(np.sum(c**2))
        return toeplitz_minsep_squared(
            c,
            steps,
            participation.min_sep,
            participation.participations,  # type: ignore[arg-type]
        )

    def prefix_sum_error(self, steps: int, participation: Participation = SINGLE) -> float:
        """sens^2 ||A B||_F^2 in O(T): A B is Toeplitz with coefficients cumsum(beta), so
        ||A B||_F^2 = sum_m (T - m) (cumsum beta)_m^2 (docs/theory/correlated-noise.md)."""
        steps = check_count("steps", steps)
        frobenius = float(np.sum((steps - np.arange(steps)) * self._prefix_squares(steps)))
        return self.sensitivity_squared(steps, participation) * frobenius

    def prefix_losses(
        self, steps: int, participation: Participation = SINGLE
    ) -> tuple[float, float]:
        """(max loss, mean loss) in O(T): the rows of A B have non-decreasing norms, so the
        largest is the last, sum_m (cumsum beta)_m^2."""
        steps = check_count("steps", steps)
        squares = self._prefix_squares(steps)
        sens2 = self.sensitivity_squared(steps, participation)
        mean = float(np.sum((steps - np.arange(steps)) * squares)) / steps
        return sens2 * float(np.sum(squares)), sens2 * mean

    def _prefix_squares(self, steps: int) -> np.ndarray:
        """(cumsum beta)_m^2: the squared coefficients of the Toeplitz matrix A B."""
        return np.cumsum(self.beta(steps)) ** 2

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return [(0, tau) for tau in range(check_count("steps", steps))]

    def _make_stream(self, dim, std, source, covariance, mode: str = "history", **options: Any):
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return ToeplitzStream(self, dim, std, source, covariance, mode=mode)


class ToeplitzStream(NoiseStream):
    """Streaming ``(B z)_t = sum_{k<=t} beta_k z_{t-k}`` in one of two exact modes.

    * ``"history"``: keeps past source vectors (O(t d) memory, O(min(t, support) d) per step).
    * ``"regenerate"``: keeps nothing; past source vectors are regenerated from the
      counter-based source (O(d) memory, O(t d) work per step).

    The sum is a BLAS matrix-vector product (``dgemv``, y += H^T b) per block of ``block_rows``
    consecutive sources z_a..z_{a+K-1} (absolute blocks, K = 2^23 // d clipped to [1, 1024], so
    a block is at most 64 MB; at d = 10^5 one product covers 83 steps of history, at t <= K the
    whole history is one product). History mode keeps its past in such blocks; regeneration
    redraws each block into one scratch block (O(K d) memory) and makes the same calls on the
    same shapes with the same coefficients in the same order, so both modes are bit-identical.
    """

    def __init__(
        self,
        mechanism: ToeplitzMechanism,
        dim: int,
        std: float,
        source: NoiseSource,
        covariance=None,
        *,
        mode: str = "history",
    ) -> None:
        super().__init__(dim, std, source, covariance)
        if mode not in ("history", "regenerate"):
            raise ValueError(f"Expected mode in ('history', 'regenerate'), got {mode!r}.")
        self.mechanism = mechanism
        self.mode = mode
        self._window = mechanism.support
        self.block_rows = min(max(2**23 // self.dim, 1), 1024, self._window or 1024)
        self._blocks: dict[int, np.ndarray] = {}  # history: block index -> (K, dim) sources
        self._scratch: np.ndarray | None = None
        self._beta = mechanism.beta(64)
        self._identity = self._window == 1 and self._beta[0] == 1.0  # B = I: no history

    def _coefficients(self, n: int) -> np.ndarray:
        if self._beta.shape[0] < n:
            self._beta = self.mechanism.beta(max(n, 2 * self._beta.shape[0]))
        return self._beta[:n]

    def _block(self, index: int, rows: int) -> np.ndarray:
        """Sources of block ``index``, its first ``rows`` rows (stored, or regenerated)."""
        if self.mode == "history":
            return self._blocks[index][:rows]
        if self._scratch is None:
            self._scratch = np.empty((self.block_rows, self.dim))
        first = index * self.block_rows
        for r in range(rows):
            self._scratch[r] = self.source.draw((0, first + r), self.dim)
        return self._scratch[:rows]

    def next_many(self, count: int) -> np.ndarray:
        """B = I with a counter-based source: ``count`` consecutive sources at once (the same
        values as ``count`` calls of :meth:`next`); otherwise step by step."""
        if (
            self._identity
            and self.covariance is None
            and isinstance(self.source, SeededNoiseSource)
        ):
            noise = self.source.draw_run((0, self.step), count, self.dim)
            self.step += count
            return self.std * noise
        return super().next_many(count)

    def _combine(self, t: int) -> np.ndarray:
        if self._identity:
            return self.source.draw((0, t), self.dim)
        k_rows = self.block_rows
        oldest = 0 if self._window is None else max(0, t + 1 - self._window)
        beta = self._coefficients(t + 1 - oldest)
        if self.mode == "history":
            index, row = divmod(t, k_rows)
            if index not in self._blocks:
                self._blocks[index] = np.zeros((k_rows, self.dim))
            self._blocks[index][row] = self.source.draw((0, t), self.dim)
            for stale in [i for i in self._blocks if (i + 1) * k_rows <= oldest]:
                del self._blocks[stale]
        out = np.zeros(self.dim)
        for index in range(oldest // k_rows, t // k_rows + 1):
            first = index * k_rows
            stop = min(first + k_rows, t + 1)  # sources first..stop-1 of this block
            start = max(first, oldest)
            block = self._block(index, stop - first)[start - first :]
            # source z_a gets beta_{t-a}: a = start..stop-1
            coef = np.ascontiguousarray(beta[t - stop + 1 : t - start + 1][::-1])
            out = _gemv(1.0, block.T, coef, beta=1.0, y=out, overwrite_y=True)
        return out

    def _rows(self) -> list[np.ndarray]:
        """The stored sources of the window, oldest first (history mode)."""
        if self._identity:
            return []
        t = self.step - 1
        oldest = 0 if self._window is None else max(0, t + 1 - self._window)
        k_rows = self.block_rows
        return [self._blocks[a // k_rows][a % k_rows].copy() for a in range(oldest, t + 1)]

    def _buffers(self) -> dict[str, Any]:
        if self.mode == "history":
            return {"history": self._rows()}
        return {}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        if self.mode != "history":
            return
        rows = [np.asarray(h, dtype=float) for h in state["history"]]
        self._blocks = {}
        for offset, vector in enumerate(rows):
            a = self.step - len(rows) + offset
            index, row = divmod(a, self.block_rows)
            if index not in self._blocks:
                self._blocks[index] = np.zeros((self.block_rows, self.dim))
            self._blocks[index][row] = vector


def nu_dpftrl(nu: float) -> ToeplitzMechanism:
    """nu-DP-FTRL (Choquette-Choo et al. 2024, Eq. (7)); nu = 1 is DP-SGD, nu = 0 is optimal
    continual counting."""
    nu = _check_nu(nu)
    anytime = math.inf if nu == 0.0 else 2.0 / math.pi * float(ellipk((1.0 - nu) ** 2))
    return ToeplitzMechanism(
        lambda n: nu_beta(nu, n),
        lambda n: nu_c(nu, n),
        support=1 if nu == 1.0 else None,
        anytime_squared=anytime,
        name=f"nu-dpftrl(nu={nu:g})",
    )


def optimal_cc() -> ToeplitzMechanism:
    """Optimal continual counting (Fichtenberger et al. 2023): nu = 0; needs a finite horizon."""
    mech = nu_dpftrl(0.0)
    mech.name = "optimal-cc"
    return mech


def mean_estimation_optimal(eta: float) -> ToeplitzMechanism:
    """beta* of Choquette-Choo et al. (2024) Thm 2.1 for mean estimation at learning rate eta
    (nu-DP-FTRL, nu = eta)."""
    mech = nu_dpftrl(eta)
    mech.name = f"mean-estimation-optimal(eta={eta:g})"
    return mech


class _FinitePrefix:
    """The first n coefficients of a finite beta (zero beyond it); picklable, unlike a closure,
    so plans and fitted estimators that hold a mechanism can be saved."""

    def __init__(self, coeffs: np.ndarray) -> None:
        self.coeffs = coeffs

    def __call__(self, n: int) -> np.ndarray:
        return self.coeffs[:n].copy()


def custom(beta: np.ndarray | list[float], name: str = "custom") -> ToeplitzMechanism:
    """Toeplitz B from a finite coefficient vector beta (beta_0 != 0), inverted by recursion.

    ``custom(nu_beta(nu, L))`` bands the *noise* B to L taps (L past draws in history mode);
    its C = 1/beta(x) stays dense, so min-separation never separates a record's columns and the
    §3.1 sensitivity is exact only for non-negative, non-increasing C (else a warned bound).
    To band the encoder C instead (exact sensitivity for min_sep >= L, an (L - 1) d ring-buffer
    stream), use :func:`privopt.noise.banded_toeplitz`
    (docs/theory/blt-and-adaptive-clipping.md)."""
    coeffs = check_coefficient_vector(beta, "beta coefficients", "beta_0", "B")
    nonzero = np.flatnonzero(coeffs)
    coeffs = coeffs[: nonzero[-1] + 1]
    return ToeplitzMechanism(_FinitePrefix(coeffs), support=coeffs.size, name=name)


def anti_pgd() -> ToeplitzMechanism:
    """Anti-PGD (Orvieto et al. 2022): beta = (1, -1), so C = A and gamma_T^2 = T."""
    return custom([1.0, -1.0], name="anti-pgd")


def damped_anti_pgd(nu: float) -> ToeplitzMechanism:
    """Damped anti-PGD: beta = (1, -(1 - nu)), c_t = (1 - nu)^t, anytime 1/(nu (2 - nu))."""
    nu = _check_nu(nu)
    return custom([1.0, -(1.0 - nu)], name=f"damped-anti-pgd(nu={nu:g})")


def independent() -> ToeplitzMechanism:
    """Independent noise (DP-SGD): B = C = I, sensitivity 1 per participation, O(d) state."""
    return custom([1.0], name="independent")
