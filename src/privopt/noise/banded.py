"""Banded correlated noise: an encoder C with L bands, streamed with L - 1 model-sized buffers.

docs/theory/blt-and-adaptive-clipping.md. C is lower-triangular with ``C[t, i] = 0`` for
``t - i >= L`` ("L-banded": L non-zero diagonals, the main one included). The per-step noise is
``(C^-1 z)_t`` (privopt's ``B = C^-1``, :mod:`privopt.noise.base`), computed by forward
substitution over the last L - 1 outputs (§4.1, [Band23] Alg. 9):

    x_t = (z_t - sum_{s=1}^{L-1} C[t, t-s] x_{t-s}) / C[t, t],

one matrix-vector product per step over a ring buffer of (L - 1) x d floats: no history, no
horizon-sized state.

**Why band C, not B.** Banding the encoder is what makes the min-separation sensitivity exact
for any coefficients: if every two participations are at least ``min_sep >= L`` steps apart,
the columns ``C e_i`` of one record have disjoint row supports ([i, i + L)), so

    ||sum_{i in P} C e_i||^2 = sum_{i in P} ||C e_i||^2,

and the worst pattern is the best sum of at most k column norms^2 with gaps >= min_sep (an O(n k)
dynamic programme, [Band23] Alg. 3; exact). For L > min_sep the cross terms return: a banded
Toeplitz C with non-negative, non-increasing coefficients is still exact by the shifted-sum formula
of §3.1, anything else gets the warned upper bound of :mod:`privopt.noise.sensitivity`.

The other route, banding the *noise* ``B = Toeplitz(beta)`` (BISR, §4.2), is what
``custom(nu_beta(nu, L))`` builds: L past draws in the history stream, but C = 1/beta(x) is dense,
so no min-separation makes its columns disjoint; its sensitivity is the §3.1 formula, exact only
when 1/beta(x) has non-negative, non-increasing coefficients (otherwise a warned bound). Prefer
:func:`banded_toeplitz` when participations are separated.

Mechanisms here:

* :class:`BandedToeplitz` (:func:`banded_toeplitz`, :func:`optimize_banded_toeplitz`): Toeplitz C
  with coefficients c_0 = 1, c_1..c_{L-1}; any Toeplitz family truncated to L bands (e.g. the
  square root of A, "BSR" [KL24], = optimal CC, or nu-DP-FTRL's ``nu_c``), or coefficients
  optimised for the run ([McK24] §3.2). Horizon-free (anytime sensitivity ||c||^2).
  :func:`choose_bands` picks L for a run.
* :class:`BandedMatrixMechanism` (:func:`column_normalized_banded`): a general L-banded C for a
  fixed horizon n (n x L free entries); column-normalised DP-BandMF ([Band23] §4, [McK24] §3.1)
  scales every column to unit norm (single-participation sensitivity 1; with min_sep >= L,
  sens^2 = k_eff, the same as DP-SGD without amplification).

**Amplification by sampling.** dp_accounting 0.6.0 has no banded-MF event (its ``dp_event``
module offers Gaussian, Poisson-sampled, self-composed, mixture-of-Gaussians and
truncated-subsampled events; ``mechanism_calibration`` only bisects a noise parameter). The sound
analysis is the reduction of [Band23] Thm 4: with **cyclic Poisson sampling** (records split into
``groups`` fixed parts, step t samples part t mod groups with probability q), ``L <= groups`` and
columns of norm <= 1, a record's participations touch disjoint rows, and the run is as private as
DP-SGD for ceil(n / groups) steps at rate q, i.e. dp_accounting's
``SelfComposed(PoissonSampled(q, Gaussian(z)), ceil(n / groups))``.
:func:`cyclic_poisson_event` returns exactly that as privopt's
:class:`~privopt.accounting.events.PoissonSampledGaussianEvent` (add/remove or zero-out), checked
against jax_privacy's ``DpsgdTrainingAccountant(cycle_length=groups)`` in the tests. The
training core's :class:`~privopt.training.CyclicPoissonSampling` records it as the plan's event
(the noise scaled by C's largest column norm); ``privopt.torch``'s ``mechanism="banded"`` and
``privopt.federated``'s ``sampling="cyclic-poisson"`` run it. Fixed batches with a banded
mechanism get the unamplified Gaussian event with the min-separation sensitivity above.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import minimize
from scipy.signal import fftconvolve

from privopt._validate import check_count, check_positive, check_sample_rate
from privopt.noise._checks import (
    check_coefficient_vector,
    check_within_horizon,
    restored_array,
)
from privopt.noise.base import SINGLE, Mechanism, NoiseSource, NoiseStream, Participation
from privopt.noise.sensitivity import (
    SensitivityUpperBoundWarning,
    dense_minsep_upper_bound_squared,
    max_participations,
    toeplitz_minsep_squared,
)
from privopt.noise.toeplitz import ToeplitzMechanism, inverse_coefficients, optimal_cc

__all__ = [
    "BandChoice",
    "BandedMatrixMechanism",
    "BandedStream",
    "BandedToeplitz",
    "banded_toeplitz",
    "choose_bands",
    "column_normalized_banded",
    "cyclic_poisson_event",
    "optimize_banded_toeplitz",
    "separated_column_sum",
]


def separated_column_sum(column_norms_squared: np.ndarray, min_sep: int, count: int) -> float:
    """max over index sets P (|P| <= count, gaps >= min_sep) of sum_{i in P} v_i, v >= 0.

    The dynamic programme of [Band23] Alg. 3: best_j(i) = max_{i' >= i} (v_{i'} +
    best_{j-1}(i' + min_sep)), O(n count). It is the exact sensitivity^2 of an L-banded C
    under min-separation >= L (columns with disjoint supports).
    """
    v = np.asarray(column_norms_squared, dtype=float)
    n = v.size
    best = np.zeros(n + min_sep)
    for _ in range(count):
        candidate = v + best[min_sep : min_sep + n]
        best = np.concatenate([np.maximum.accumulate(candidate[::-1])[::-1], np.zeros(min_sep)])
    return float(best[0])


def _banded_sensitivity(norms2, bands, encoder, steps, participation) -> float:
    """Single: the largest column norm^2. min_sep >= bands: the exact separated sum. Otherwise
    ``encoder()`` (dense C) gives the warned upper bound of the sensitivity module."""
    if participation.kind == "single":
        return float(np.max(norms2))
    b, k = participation.min_sep, participation.participations
    if b >= bands:
        return separated_column_sum(norms2, b, max_participations(steps, b, k))
    return dense_minsep_upper_bound_squared(encoder(), b, k)


class BandedStream(NoiseStream):
    """(C^-1 z)_t for an L-banded C by forward substitution over a ring buffer of the last L - 1
    outputs: one matrix-vector product per step, state (L - 1) x dim floats."""

    def __init__(self, mechanism, dim: int, std: float, source: NoiseSource, covariance=None):
        super().__init__(dim, std, source, covariance)
        self.mechanism = mechanism
        self._lag = mechanism.bands - 1
        self._ring = np.zeros((self._lag, self.dim))

    def _combine(self, t: int) -> np.ndarray:
        row = self.mechanism.band_row(t)  # C[t, t], C[t, t-1], ..., C[t, t-L+1]
        z = self.source.draw((0, t), self.dim)
        if self._lag == 0:
            return z / row[0] if row[0] != 1.0 else z
        weights = np.empty(self._lag)
        # output x_{t-s} sits in ring row (t - s) mod (L - 1); rows not yet written are zero
        weights[(t - np.arange(1, self._lag + 1)) % self._lag] = row[1:]
        x = z - weights @ self._ring
        if row[0] != 1.0:
            x /= row[0]
        self._ring[t % self._lag] = x
        return x

    def _buffers(self) -> dict[str, Any]:
        return {"ring": self._ring.copy()}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._ring = restored_array(state, "ring", self._ring)


def _check_coefficients(coefficients) -> np.ndarray:
    c = np.atleast_1d(np.asarray(coefficients, dtype=float))
    c = check_coefficient_vector(c, "band coefficients", "The band coefficient c_0", "C")
    return c / c[0]


class BandedToeplitz(ToeplitzMechanism):
    """Lower-triangular Toeplitz C with L bands ``c = (1, c_1, ..., c_{L-1})``; B = C^-1.

    ``beta`` (privopt's per-step noise coefficients) are those of 1/c(x), infinite; the stream is
    the banded recursion (:class:`BandedStream`), not a history. Sensitivity: single
    participation ``sum_{t < min(n, L)} c_t^2`` (column 0 is the longest), anytime ||c||^2,
    min-separation exact for min_sep >= L (any signs) or for non-negative non-increasing c (§3.1),
    a warned upper bound otherwise. Losses in O(n L) (inherited ``prefix_losses``).
    """

    def __init__(self, coefficients, name: str | None = None) -> None:
        c = _check_coefficients(coefficients)
        self.coefficients = c
        self.bands = int(c.size)
        super().__init__(
            lambda n: inverse_coefficients(c, n),
            self._padded,
            anytime_squared=float(np.sum(c**2)),
            name=name or f"banded-toeplitz(L={c.size})",
        )

    def _padded(self, n: int) -> np.ndarray:
        out = np.zeros(n)
        m = min(n, self.bands)
        out[:m] = self.coefficients[:m]
        return out

    def band_row(self, t: int) -> np.ndarray:
        return self.coefficients

    def column_norms_squared(self, steps: int) -> np.ndarray:
        """||C e_i||^2 = sum_{s < min(L, n - i)} c_s^2 (non-increasing in i)."""
        cum = np.cumsum(self.coefficients**2)
        return cum[np.minimum(self.bands, steps - np.arange(steps)) - 1]

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        if participation.kind == "multiple" and participation.min_sep < self.bands:  # type: ignore[operator]
            return toeplitz_minsep_squared(
                self.c(steps),
                steps,
                participation.min_sep,  # type: ignore[arg-type]
                participation.participations,  # type: ignore[arg-type]
            )
        return _banded_sensitivity(
            self.column_norms_squared(steps), self.bands, None, steps, participation
        )

    def _make_stream(self, dim, std, source, covariance, **options: Any) -> BandedStream:
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return BandedStream(self, dim, std, source, covariance)


def banded_toeplitz(family: ToeplitzMechanism | np.ndarray | list[float], bands: int):
    """``family``'s encoder coefficients c_0..c_{L-1} (normalised to c_0 = 1) as a banded C.

    ``family`` is a Toeplitz mechanism (its ``c(bands)``: e.g. ``optimal_cc()`` gives BSR, the
    truncated square root of A [KL24]; ``nu_dpftrl(nu)`` gives nu_c) or the coefficients
    themselves (only the first ``bands`` are kept).
    """
    bands = check_count("bands", bands)
    if isinstance(family, Mechanism):
        if not isinstance(family, ToeplitzMechanism):
            raise ValueError(f"{family.name} is not a Toeplitz family (no coefficients c).")
        return BandedToeplitz(family.c(bands), name=f"banded[{family.name}](L={bands})")
    coeffs = np.atleast_1d(np.asarray(family, dtype=float))
    if coeffs.size < bands:
        raise ValueError(f"Need {bands} coefficients, got {coeffs.size}.")
    return BandedToeplitz(coeffs[:bands])


@dataclass(frozen=True)
class BandChoice:
    """The band count chosen for a run and the loss it reaches."""

    bands: int
    loss: float
    candidates: dict[int, float]


def choose_bands(
    steps: int,
    min_sep: int | None = None,
    participations: int | None = None,
    *,
    error: str = "max",
    family: ToeplitzMechanism | None = None,
    max_bands: int | None = None,
) -> BandChoice:
    """L minimising ``family``'s banded loss (default BSR, ``optimal_cc()``) for a run.

    Candidates: 1, 2, 4, ... up to the cap, and the cap itself, where the cap is
    min(steps, min_sep (when given: keeps the sensitivity exact for any banded C and allows
    cyclic-Poisson amplification), max_bands (a memory budget: L - 1 model-sized buffers)).
    """
    steps = check_count("steps", steps)
    participation = _pattern(steps, min_sep, participations)
    if error not in ("max", "mean"):
        raise ValueError(f"Expected error in ('max', 'mean'), got {error!r}.")
    cap = steps if min_sep is None else min(steps, min_sep)
    if max_bands is not None:
        cap = min(cap, check_count("max_bands", max_bands))
    family = family or optimal_cc()
    coeffs = family.c(cap)
    grid = sorted({*(2**j for j in range(int(math.log2(cap)) + 1)), cap})
    losses = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SensitivityUpperBoundWarning)
        for bands in grid:
            max_loss, mean_loss = BandedToeplitz(coeffs[:bands]).prefix_losses(steps, participation)
            losses[bands] = max_loss if error == "max" else mean_loss
    best = min(losses, key=lambda b: (losses[b], b))
    return BandChoice(best, losses[best], losses)


def _pattern(steps: int, min_sep: int | None, participations: int | None) -> Participation:
    if (min_sep is None) != (participations is None):
        raise ValueError("Give both min_sep and participations, or neither.")
    if min_sep is None:
        return SINGLE
    pattern = Participation.multiple(min_sep, participations)  # type: ignore[arg-type]
    pattern.check_steps(steps)
    return pattern


def _banded_objective(x: np.ndarray, steps: int, weights: np.ndarray, multiplicity: np.ndarray):
    """log(sens^2) + log(err) of the banded Toeplitz c = (1, x) and its gradient.

    y = 1/c(x) (n coefficients), beta = cumsum(y), err = sum_t w_t beta_t^2; dy_t/dc_s =
    -(y * y)_{t-s}, so d err/d c_s = -sum_t g_t (y * y)_{t-s} with g = reverse cumsum of
    2 w beta. sens^2 = sum_s m_s c_s^2 with m_s the participations whose column reaches row
    offset s (exact for min_sep >= L).
    """
    c = np.concatenate([[1.0], x])
    with np.errstate(all="ignore"):
        y = inverse_coefficients(c, steps)
        beta = np.cumsum(y)
        err = float(np.sum(weights * beta**2))
        sens2 = float(np.sum(multiplicity * c**2))
        if not (math.isfinite(err) and err > 0 and np.all(np.isfinite(y))):
            return 1e300, np.zeros_like(x)
        g = np.cumsum((2.0 * weights * beta)[::-1])[::-1]
        yy = fftconvolve(y, y)[:steps]
        grad_err = np.array([-(g[s:] @ yy[: steps - s]) for s in range(1, c.size)])
    grad = grad_err / err + 2.0 * multiplicity[1:] * x / sens2
    return math.log(sens2) + math.log(err), grad


def optimize_banded_toeplitz(
    steps: int,
    bands: int,
    *,
    min_sep: int | None = None,
    participations: int | None = None,
    error: str = "max",
) -> BandedToeplitz:
    """Banded Toeplitz coefficients minimising sens^2 * MaxErr or MeanErr ([McK24] §3.2).

    L-BFGS-B in float64 over c_1..c_{L-1} (c_0 = 1) with the analytic gradient of
    :func:`_banded_objective`, started from BSR (the truncated square root of A). The sensitivity
    in the objective is exact for any signs, so ``bands <= min_sep`` is required under
    min-separation. Deterministic.
    """
    steps = check_count("steps", steps)
    bands = check_count("bands", bands)
    participation = _pattern(steps, min_sep, participations)
    if error not in ("max", "mean"):
        raise ValueError(f"Expected error in ('max', 'mean'), got {error!r}.")
    if bands > steps:
        raise ValueError(f"Expected bands <= steps={steps}, got {bands}.")
    if min_sep is not None and bands > min_sep:
        raise ValueError(f"Expected bands <= min_sep={min_sep} (exact sensitivity), got {bands}.")
    weights = np.ones(steps) if error == "max" else (steps - np.arange(steps)) / steps
    offsets = np.arange(bands)
    if participation.kind == "single":
        multiplicity = np.ones(bands)
    else:
        k = max_participations(steps, min_sep, participations)  # type: ignore[arg-type]
        starts = np.arange(k) * min_sep  # type: ignore[operator]
        multiplicity = np.sum(offsets[None, :] < steps - starts[:, None], axis=0).astype(float)
    start = optimal_cc().c(bands)[1:]
    if bands == 1:
        return BandedToeplitz([1.0])
    res = minimize(
        _banded_objective,
        start,
        args=(steps, weights, multiplicity),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 500, "maxcor": 20, "ftol": 1e-14, "gtol": 1e-9},
    )
    x = res.x if res.fun <= _banded_objective(start, steps, weights, multiplicity)[0] else start
    return BandedToeplitz(np.concatenate([[1.0], x]), name=f"banded-toeplitz-opt(L={bands})")


class BandedMatrixMechanism(Mechanism):
    """A general L-banded lower-triangular encoder C for a horizon n (DP-BandMF).

    Args:
        band: array (n, L) with ``band[t, s] = C[t, t - s]`` (entries with s > t must be 0);
            ``band[t, 0] != 0``.

    Only horizons ``steps <= n`` are defined (leading blocks, as for :class:`DenseMechanism`).
    Sensitivity: single participation the largest column norm^2; min-separation >= L the exact
    separated sum of column norms^2; min_sep < L a warned upper bound. Losses are dense
    (``steps`` x ``steps``; small n).
    """

    def __init__(self, band: np.ndarray, name: str = "banded-mf") -> None:
        band = np.asarray(band, dtype=float)
        if band.ndim != 2 or band.shape[0] == 0 or band.shape[1] == 0:
            raise ValueError(f"Expected a non-empty (n, L) band array, got shape {band.shape}.")
        if not np.all(np.isfinite(band)):
            raise ValueError("Expected finite band entries.")
        n, bands = band.shape
        if np.any(np.triu(np.ones((n, bands), bool), 1) & (band != 0.0)):
            raise ValueError("band[t, s] must be 0 for s > t (C is lower-triangular).")
        if np.any(band[:, 0] == 0.0):
            raise ValueError("C must be invertible (band[:, 0] non-zero).")
        self.band = band
        self.horizon = n
        self.bands = bands
        self.name = name

    def _check(self, steps: int) -> int:
        return check_within_horizon(steps, self.horizon, "banded C")

    def band_row(self, t: int) -> np.ndarray:
        if t >= self.horizon:
            raise ValueError(f"Stream exhausted: the banded C has horizon {self.horizon}.")
        return self.band[t]

    def encoder_matrix(self, steps: int) -> np.ndarray:
        steps = self._check(steps)
        c = np.zeros((steps, steps))
        for s in range(min(self.bands, steps)):
            idx = np.arange(s, steps)
            c[idx, idx - s] = self.band[idx, s]
        return c

    def decoder_matrix(self, steps: int) -> np.ndarray:
        c = self.encoder_matrix(steps)
        return solve_triangular(c, np.eye(c.shape[0]), lower=True)

    def column_norms_squared(self, steps: int) -> np.ndarray:
        steps = self._check(steps)
        out = np.zeros(steps)
        for s in range(min(self.bands, steps)):
            out[: steps - s] += self.band[s:steps, s] ** 2
        return out

    def anytime_sensitivity_squared(self) -> float:
        raise ValueError("A banded MF C has a finite horizon: anytime use is undefined.")

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        steps = self._check(steps)
        return _banded_sensitivity(
            self.column_norms_squared(steps),
            self.bands,
            lambda: self.encoder_matrix(steps),
            steps,
            participation,
        )

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return [(0, tau) for tau in range(self._check(steps))]

    def _make_stream(self, dim, std, source, covariance, **options: Any) -> BandedStream:
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return BandedStream(self, dim, std, source, covariance)


def column_normalized_banded(
    family: ToeplitzMechanism | np.ndarray | list[float], bands: int, steps: int
) -> BandedMatrixMechanism:
    """Column-normalised banded C for horizon ``steps`` from a Toeplitz family (§4.1, §4.3).

    ``C[t, i] = c_{t-i} / ||c_{0:min(L, n-i)}||``: every column has unit norm, so the last L - 1
    columns (truncated by the horizon) are scaled up, which shrinks the late rows of C^-1 (less
    noise at the end) and leaves single-participation sensitivity at 1 and, for
    min_sep >= L, sens^2 = k_eff (DP-SGD's without amplification).
    """
    toeplitz = banded_toeplitz(family, bands)
    steps = check_count("steps", steps)
    c = toeplitz.coefficients
    norms = np.sqrt(toeplitz.column_norms_squared(steps))
    band = np.zeros((steps, toeplitz.bands))
    for s in range(min(toeplitz.bands, steps)):
        band[s:, s] = c[s] / norms[: steps - s]
    return BandedMatrixMechanism(band, name=f"banded-mf(L={toeplitz.bands}, n={steps})")


def cyclic_poisson_event(
    mechanism: BandedToeplitz | BandedMatrixMechanism,
    steps: int,
    *,
    groups: int,
    sample_rate: float,
    noise_multiplier: float,
    label: str = "banded MF, cyclic Poisson sampling",
) -> Any:
    """The amplified event of an L-banded mechanism under cyclic Poisson sampling ([Band23] Thm 4).

    Records are split into ``groups`` fixed parts; step t includes each record of part
    t mod groups independently with probability ``sample_rate``; the stream's std is
    ``noise_multiplier * clip * mechanism.sensitivity(steps)`` (the largest column norm, so the
    rescaled C has columns of norm <= 1). Requires L <= groups. Then the run is
    ceil(steps / groups) Poisson-sampled Gaussian steps: dp_accounting's
    ``SelfComposed(PoissonSampled(q, Gaussian(z)), ceil(steps / groups))``, add/remove or zero-out,
    returned as a :class:`privopt.accounting.events.PoissonSampledGaussianEvent`.
    """
    steps = check_count("steps", steps)
    groups = check_count("groups", groups)
    sample_rate = check_sample_rate("sample_rate", sample_rate)
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    if mechanism.bands > groups:
        raise ValueError(
            f"Amplification needs bands <= groups; got bands={mechanism.bands}, groups={groups}."
        )
    mechanism.sensitivity(steps)  # validates the horizon
    # imported here: privopt.noise does not depend on accounting at import time
    from privopt.accounting.events import PoissonSampledGaussianEvent

    return PoissonSampledGaussianEvent(
        noise_multiplier, sample_rate, count=math.ceil(steps / groups), label=label
    )
