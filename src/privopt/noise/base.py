"""The correlated-noise protocol shared by every mechanism.

A mechanism privatises a stream of T gradient contributions by adding, at step t, the noise ``(B
w)_t`` where ``w`` stacks independent N(0, std^2 I_d) vectors (one per *noise source*) and B is
lower-triangular (causal). In the matrix-mechanism view (docs/theory/correlated-noise.md) the
release is a post-processing of the single Gaussian mechanism ``C G + W`` with ``C = B^{-1}``, so
privacy is set by the sensitivity of C: the largest l2 norm of ``sum_{i in P} C e_i`` over the
participation patterns P one record can have.

Notation
========

============  ===================================================================================
``B``         decoder: T x m, maps the m noise sources to the per-step noise (m = T for square B)
``C``         encoder: m x T, one column per step; ``B C`` reproduces the workload
``steps``     T, the number of steps (released noisy values)
``std``       per-coordinate standard deviation of each noise source w_j
============  ===================================================================================

Streams draw every noise source from a counter-based generator (Philox keyed by a seed, with the
source index in the high counter words), so the vector of source j is a pure function of
(seed, j). This makes the history and seed-regeneration modes bit-identical, makes streams
checkpointable with a few integers, and lets tests inject unit impulses.
"""

from __future__ import annotations

import math
import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg.blas import daxpy as _axpy

from privopt._validate import check_count, check_positive
from privopt.noise.covariance import CovarianceOperator

__all__ = [
    "SINGLE",
    "ImpulseSource",
    "Mechanism",
    "NoiseSource",
    "NoiseStream",
    "Participation",
    "SeededNoiseSource",
    "accumulate",
]


@dataclass(frozen=True)
class Participation:
    """How often one record contributes to the stream.

    * ``single``: at most once (one pass); sensitivity is the largest column norm of C.
    * ``anytime``: once, with an unknown horizon; the limit of the single-participation
      sensitivity as steps -> infinity (may be infinite).
    * ``multiple``: at most ``participations`` times, any two at least ``min_sep`` steps apart
      (multi-epoch training; Choquette-Choo et al. 2023).
    """

    kind: str = "single"
    min_sep: int | None = None
    participations: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("single", "anytime", "multiple"):
            raise ValueError(
                f"Expected participation kind in ('single', 'anytime', 'multiple'), "
                f"got {self.kind!r}."
            )
        if self.kind == "multiple":
            object.__setattr__(self, "min_sep", check_count("min_sep", self.min_sep))
            object.__setattr__(
                self, "participations", check_count("participations", self.participations)
            )
        elif self.min_sep is not None or self.participations is not None:
            raise ValueError("min_sep and participations apply only to kind='multiple'.")

    @classmethod
    def single(cls) -> Participation:
        return cls("single")

    @classmethod
    def anytime(cls) -> Participation:
        return cls("anytime")

    @classmethod
    def multiple(cls, min_sep: int, participations: int) -> Participation:
        return cls("multiple", min_sep, participations)

    def check_steps(self, steps: int) -> None:
        """Refuse patterns that cannot fit in ``steps`` (k participations need (k-1) b < T)."""
        if self.kind != "multiple":
            return
        assert self.min_sep is not None and self.participations is not None
        if (self.participations - 1) * self.min_sep >= steps:
            raise ValueError(
                f"participations={self.participations} with min_sep={self.min_sep} need more "
                f"than {(self.participations - 1) * self.min_sep} steps, got steps={steps}."
            )


#: The default participation pattern: each record contributes once.
SINGLE = Participation.single()


class NoiseSource(ABC):
    """Supplies the standard-normal vector of noise source ``index`` (a pure function of it)."""

    @abstractmethod
    def draw(self, index: tuple[int, int], dim: int) -> np.ndarray: ...


class SeededNoiseSource(NoiseSource):
    """Counter-based source: sources come in blocks of K consecutive indices.

    Source ``(a, b)`` is row ``b mod K`` of the (K, dim) standard-normal block drawn from
    Philox(key=seed, counter=(0, 0, a, b // K)), with K = min(1024, max(1, 2^14 // dim)) (a
    block is at most 128 KB; K = 1 for models of 16,384 parameters or more). The low counter
    words advance while a block is drawn and the high words name it, so no two sources overlap
    (until 2^128 draws per block), and every source is a pure function of (seed, index, dim).
    Streams visit consecutive indices, so one generator re-key serves K steps (the re-key costs
    more than drawing a small vector); recent blocks are kept in a small cache.
    """

    #: largest block (floats) and number of cached blocks
    BLOCK_FLOATS = 2**14
    CACHED_BLOCKS = 64

    def __init__(self, seed: int) -> None:
        seed = int(seed)
        if not 0 <= seed < 2**128:
            raise ValueError(f"Expected seed in [0, 2^128), got {seed}.")
        self.seed = seed
        # One bit generator, re-pointed at each block's counter: bit-identical to a fresh
        # Philox(key=seed, counter=(0, 0, a, B)) per block, about 5x cheaper per call.
        self._bitgen = np.random.Philox(key=seed)
        self._generator = np.random.Generator(self._bitgen)
        self._state = self._bitgen.state
        self._blocks: dict[tuple[int, int, int], np.ndarray] = {}
        self._last: tuple[tuple[int, int, int], np.ndarray] | None = None  # the hot block

    @classmethod
    def block_rows(cls, dim: int) -> int:
        """K, the number of consecutive sources drawn together at dimension ``dim``."""
        return min(1024, max(1, cls.BLOCK_FLOATS // max(1, int(dim))))

    def _block(self, a: int, block: int, rows: int, dim: int) -> np.ndarray:
        key = (a, block, dim)
        cached = self._blocks.pop(key, None)
        if cached is None:
            state = self._state
            state["state"]["counter"][:] = (0, 0, a, block)
            state["buffer_pos"] = 4  # empty output buffer, no cached 32-bit half
            state["has_uint32"] = 0
            self._bitgen.state = state
            cached = self._generator.standard_normal((rows, dim))
            if len(self._blocks) >= self.CACHED_BLOCKS:
                del self._blocks[next(iter(self._blocks))]  # least recently used
        self._blocks[key] = cached  # most recently used last
        return cached

    def draw_run(self, index: tuple[int, int], count: int, dim: int) -> np.ndarray:
        """Sources (a, b), (a, b + 1), ..., (a, b + count - 1) as a (count, dim) array: the
        same values as ``count`` calls of :meth:`draw`, taken from whole blocks."""
        a, b = int(index[0]), int(index[1])
        rows = self.block_rows(dim)
        parts, end = [], b + count
        while b < end:
            block, row = divmod(b, rows)
            take = min(rows - row, end - b)
            parts.append(self._block(a, block, rows, dim)[row : row + take])
            b += take
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def draw(self, index: tuple[int, int], dim: int) -> np.ndarray:
        rows = self.block_rows(dim)
        block, row = divmod(int(index[1]), rows)
        key = (int(index[0]), block, dim)
        last = self._last
        if last is None or last[0] != key:  # a stream's consecutive steps share one block
            last = self._last = (key, self._block(key[0], block, rows, dim))
        return last[1][row].copy()


class ImpulseSource(NoiseSource):
    """A deterministic source that is 1 for one source index and 0 elsewhere (for tests)."""

    def __init__(self, index: tuple[int, int]) -> None:
        self.index = index

    def draw(self, index: tuple[int, int], dim: int) -> np.ndarray:
        return np.full(dim, 1.0 if tuple(index) == tuple(self.index) else 0.0)


def accumulate(terms, dim: int) -> np.ndarray:
    """sum_k a_k v_k in float64, in the given order, skipping zero coefficients.

    The tree and dense streams combine their sources through this one function (an in-place
    BLAS axpy per term); the Toeplitz stream uses one BLAS matrix-vector product per block of
    its history instead (:class:`~privopt.noise.toeplitz.ToeplitzStream`). Either way, two modes
    that make the same calls on the same terms in the same order are bit-identical.
    """
    out = np.zeros(dim)
    for coefficient, vector in terms:
        if coefficient != 0.0:
            out = _axpy(vector, out, a=coefficient)
    return out


class NoiseStream(ABC):
    """Stateful generator of correlated noise: ``next()`` returns the noise of the next step.

    Args:
        dim: dimension d of each noise vector.
        std: standard deviation of every noise source.
        source: where the standard-normal source vectors come from.
        covariance: optional Σ operator: every source becomes N(0, std^2 Σ). Σ^{1/2} is applied
            to each step's combined vector; it is linear and per step, so it commutes with B.
    """

    def __init__(
        self,
        dim: int,
        std: float,
        source: NoiseSource,
        covariance: CovarianceOperator | None = None,
    ) -> None:
        self.dim = check_count("dim", dim)
        self.std = check_positive("std", std)
        if covariance is not None and covariance.dim != self.dim:
            raise ValueError(f"covariance has dimension {covariance.dim}, expected dim={self.dim}.")
        self.source = source
        self.covariance = covariance
        self.step = 0

    @abstractmethod
    def _combine(self, t: int) -> np.ndarray:
        """The unscaled noise (B z)_t of step t from standard-normal sources z."""

    def next(self) -> np.ndarray:
        noise = self._combine(self.step)
        self.step += 1
        if self.covariance is not None:
            noise = self.covariance.sqrt_apply(noise)
        return self.std * noise

    def next_many(self, count: int) -> np.ndarray:
        """The next ``count`` steps' noise as a (count, dim) array (fresh, writable), equal to
        ``count`` calls of :meth:`next`; streams whose sources allow it draw them at once."""
        return np.stack([self.next() for _ in range(check_count("count", count))])

    def state(self) -> dict[str, Any]:
        """A checkpoint: step counter, seed, and any buffers (restore with :meth:`restore`)."""
        seed = self.source.seed if isinstance(self.source, SeededNoiseSource) else None
        return {"step": self.step, "seed": seed, **self._buffers()}

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state` (same mechanism, dim, std and seed)."""
        seed = self.source.seed if isinstance(self.source, SeededNoiseSource) else None
        if state.get("seed") != seed:
            raise ValueError("Checkpoint was taken with a different noise seed.")
        self.step = check_count("step", state["step"], minimum=0)
        self._restore_buffers(state)

    def _buffers(self) -> dict[str, Any]:
        return {}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        return None


class Mechanism(ABC):
    """A correlated-noise mechanism: B and C = B^{-1} described implicitly.

    Subclasses provide the dense matrices for a horizon (for tests and small T), the sensitivity
    under each participation pattern, and a streaming generator within their memory class.
    """

    #: short name used in reports and the CLI
    name: str = "mechanism"

    @abstractmethod
    def decoder_matrix(self, steps: int) -> np.ndarray:
        """Dense B for ``steps`` steps (T x m)."""

    @abstractmethod
    def encoder_matrix(self, steps: int) -> np.ndarray:
        """Dense C for ``steps`` steps (m x T) with B C equal to the mechanism's workload."""

    @abstractmethod
    def anytime_sensitivity_squared(self) -> float:
        """lim_{T -> inf} of the single-participation sensitivity^2 (``inf`` if unbounded)."""

    @abstractmethod
    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        """Sensitivity^2 for a finite horizon (single or multiple participation)."""

    def sensitivity_squared(
        self, steps: int | None, participation: Participation = SINGLE
    ) -> float:
        """Squared l2 sensitivity of C (per unit contribution) under ``participation``.

        Raises ``ValueError`` for anytime use of a mechanism whose anytime sensitivity is
        infinite (its noise cannot be calibrated without a horizon), and when a finite-horizon
        pattern is asked for without ``steps``.
        """
        if participation.kind == "anytime":
            value = self.anytime_sensitivity_squared()
            if math.isinf(value):
                raise ValueError(
                    f"{self.name} has infinite anytime sensitivity: it cannot be used without a "
                    "known horizon; give a finite number of steps."
                )
            return value
        if steps is None:
            raise ValueError(f"{self.name}: steps is required for {participation.kind} use.")
        steps = check_count("steps", steps)
        participation.check_steps(steps)
        return self._horizon_sensitivity_squared(steps, participation)

    def sensitivity(self, steps: int | None = None, participation: Participation = SINGLE) -> float:
        """l2 sensitivity of C per unit contribution; may be ``inf`` for anytime use."""
        return math.sqrt(self.sensitivity_squared(steps, participation))

    @abstractmethod
    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        """The noise-source index of each column of ``decoder_matrix(steps)``, in order."""

    @abstractmethod
    def _make_stream(
        self,
        dim: int,
        std: float,
        source: NoiseSource,
        covariance: CovarianceOperator | None,
        **options: Any,
    ) -> NoiseStream: ...

    def noise_stream(
        self,
        dim: int,
        std: float,
        rng: np.random.Generator | None = None,
        *,
        seed: int | None = None,
        source: NoiseSource | None = None,
        secure: bool = False,
        covariance: CovarianceOperator | None = None,
        **options: Any,
    ) -> NoiseStream:
        """A streaming generator of this mechanism's noise.

        Exactly one of ``rng`` (a 128-bit key is drawn from it), ``seed``, ``source`` or
        ``secure=True`` (a 128-bit key from the operating system's CSPRNG, for releases whose
        noise must not be reproducible by anyone) must be given: privopt never draws randomness
        silently. ``covariance`` shapes every source as
        N(0, std^2 Σ); ``options`` are mechanism-specific (e.g. Toeplitz ``mode``).
        """
        given = sum(x is not None for x in (rng, seed, source)) + bool(secure)
        if given != 1:
            raise ValueError(
                "Give exactly one of rng, seed, source or secure=True to noise_stream."
            )
        if source is None:
            if secure:
                seed = secrets.randbits(128)
            elif rng is not None:
                high, low = (int(x) for x in rng.integers(0, 2**64, size=2, dtype=np.uint64))
                seed = (high << 64) | low
            source = SeededNoiseSource(int(seed))  # type: ignore[arg-type]
        return self._make_stream(dim, std, source, covariance, **options)

    def prefix_sum_error(self, steps: int, participation: Participation = SINGLE) -> float:
        """Objective (3) of docs/theory/correlated-noise.md normalised by sensitivity: sens^2 * ||A
        B||_F^2.

        A is the T x T lower-triangular all-ones (prefix-sum) matrix. For the tree mechanism, whose
        B already releases prefix sums, A B is replaced by B itself (its ``_prefix_workload``).
        """
        ab = self._prefix_workload(steps)
        return float(self.sensitivity_squared(steps, participation) * np.sum(ab**2))

    def prefix_losses(
        self, steps: int, participation: Participation = SINGLE
    ) -> tuple[float, float]:
        """(max loss, mean loss) for the prefix-sum workload: sens^2 times the largest and the
        mean squared row norm of A B (docs/theory/blt-and-adaptive-clipping.md; the mean loss is
        :meth:`prefix_sum_error` / T). Dense here; Toeplitz and BLT mechanisms override it."""
        rows = np.sum(self._prefix_workload(steps) ** 2, axis=1)
        sens2 = self.sensitivity_squared(steps, participation)
        return float(sens2 * rows.max()), float(sens2 * rows.sum() / steps)

    def prefix_errors(self, steps: int, participation: Participation = SINGLE) -> np.ndarray:
        """Expected squared error of each released prefix sum, steps 1..T (unit clip norm).

        Entry t is sens^2 times the squared norm of row t of A B, so its maximum and mean are
        :meth:`prefix_losses`. Materialised (O(T^2) memory): meant for plots and small T.
        """
        rows = np.sum(self._prefix_workload(steps) ** 2, axis=1)
        return self.sensitivity_squared(steps, participation) * rows

    def _prefix_workload(self, steps: int) -> np.ndarray:
        """A B: the noise of the released prefix sums (materialised, small T)."""
        return np.cumsum(self.decoder_matrix(steps), axis=0)
