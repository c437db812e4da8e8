"""Restarted mechanisms: B block-diagonal with identical blocks ("×S restarts").

Choquette-Choo et al. (2024), Appendix G.

Restarting a mechanism every ``block`` steps makes B (and C) block-diagonal: the noise history
resets at block boundaries. Columns in different blocks have disjoint row supports, so:

* single participation: the worst column is in a full block, sens^2 = base sens^2 at horizon
  min(T, block) (column norms of a lower-triangular C grow with the horizon);
* anytime: sens^2 = base sens^2 at horizon ``block`` (finite even for optimal CC);
* k participations with min-separation b: sens^2 = max over splits (m_1, m_2, ...) of
  sum_s f_s(m_s), where f_s(m) is the base min-separation sensitivity^2 inside block s. Ignoring
  the separation constraint across block boundaries makes this an upper bound; it is exact when
  the base value is exact (non-negative, non-increasing Toeplitz C) and ``block`` is a multiple of
  b, because the per-block optimal patterns then concatenate into a valid global pattern.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy.linalg import block_diag

from privopt._validate import check_count
from privopt.noise.base import Mechanism, NoiseSource, NoiseStream, Participation
from privopt.noise.sensitivity import SensitivityUpperBoundWarning, max_participations

__all__ = ["BlockRestarts", "Restarted"]

#: source indices of block s are the base indices with s * _BLOCK_STRIDE added to the first word
_BLOCK_STRIDE = 1 << 24


class Restarted(Mechanism):
    """``base`` restarted every ``block`` steps (S = ceil(T / block) identical blocks)."""

    def __init__(self, base: Mechanism, block: int) -> None:
        if not isinstance(base, Mechanism):
            raise TypeError(f"Expected a Mechanism, got {type(base).__name__}.")
        self.base = base
        self.block = check_count("block", block)
        self.name = f"{base.name} restarted every {self.block}"

    def _lengths(self, steps: int) -> list[int]:
        full, rest = divmod(check_count("steps", steps), self.block)
        return [self.block] * full + ([rest] if rest else [])

    def decoder_matrix(self, steps: int) -> np.ndarray:
        return block_diag(*(self.base.decoder_matrix(n) for n in self._lengths(steps)))

    def encoder_matrix(self, steps: int) -> np.ndarray:
        return block_diag(*(self.base.encoder_matrix(n) for n in self._lengths(steps)))

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        out = []
        for s, n in enumerate(self._lengths(steps)):
            out.extend((a + s * _BLOCK_STRIDE, b) for a, b in self.base.source_indices(n))
        return out

    def anytime_sensitivity_squared(self) -> float:
        return self.base.sensitivity_squared(self.block)

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        lengths = self._lengths(steps)
        if participation.kind == "single":
            return self.base.sensitivity_squared(max(lengths))
        b, k = participation.min_sep, participation.participations
        assert b is not None and k is not None
        exact = self.block % b == 0
        best = np.full(k + 1, -math.inf)  # best[j]: largest total using j participations
        best[0] = 0.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SensitivityUpperBoundWarning)
            for n in lengths:
                cap = max_participations(n, b, k)
                gains = [0.0] + [
                    self.base.sensitivity_squared(n, Participation.multiple(b, m))
                    for m in range(1, cap + 1)
                ]
                new = best.copy()
                for used in range(k + 1):
                    if best[used] == -math.inf:
                        continue
                    for m in range(1, min(cap, k - used) + 1):
                        new[used + m] = max(new[used + m], best[used] + gains[m])
                best = new
        exact = exact and not any(
            issubclass(w.category, SensitivityUpperBoundWarning) for w in caught
        )
        if not exact:
            warnings.warn(
                "Restarted mechanism: the multi-participation sensitivity is an upper bound "
                "(block is not a multiple of min_sep, or the base value is a bound).",
                SensitivityUpperBoundWarning,
                stacklevel=3,
            )
        return float(np.max(best))

    def _make_stream(self, dim, std, source, covariance, **options: Any):
        return RestartedStream(self, dim, std, source, covariance, options)


class _BlockSource(NoiseSource):
    """The parent source seen by block s: first index word shifted by s * stride."""

    def __init__(self, parent: NoiseSource, block_index: int) -> None:
        self.parent = parent
        self.block_index = block_index

    def draw(self, index: tuple[int, int], dim: int) -> np.ndarray:
        return self.parent.draw((index[0] + self.block_index * _BLOCK_STRIDE, index[1]), dim)


class BlockRestarts:
    """The block bookkeeping of a restarted stream, numpy (:class:`RestartedStream`) or torch.

    One inner stream of the base mechanism per block of ``mechanism.block`` steps, built on
    entering the block by :meth:`_new_inner` (unit std, its source shifted by the block index),
    kept in step with the outer stream, and checkpointed as (block, inner stream's state).
    """

    mechanism: Restarted
    _inner: Any = None
    _inner_block: int = -1

    def _new_inner(self, block_index: int) -> Any:
        raise NotImplementedError

    def _inner_for(self, block_index: int) -> Any:
        if self._inner is None or self._inner_block != block_index:
            self._inner = self._new_inner(block_index)
            self._inner_block = block_index
        return self._inner

    def _inner_at(self, t: int) -> tuple[Any, int]:
        """Step t's block stream and t's step within the block (that stream's next step)."""
        block_index, local = divmod(t, self.mechanism.block)
        inner = self._inner_for(block_index)
        if inner.step != local:
            raise RuntimeError("Restarted stream lost synchronisation with its block.")
        return inner, local

    def _buffers(self) -> dict[str, Any]:
        if self._inner is None:
            return {}
        return {"block": self._inner_block, "inner": self._inner.state()}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._inner, self._inner_block = None, -1
        if "inner" in state:
            inner = self._inner_for(int(state["block"]))
            inner.step = int(state["inner"]["step"])
            inner._restore_buffers(state["inner"])


class RestartedStream(BlockRestarts, NoiseStream):
    """Runs a fresh base stream in each block; state is the current block's stream."""

    def __init__(self, mechanism: Restarted, dim, std, source, covariance, options) -> None:
        super().__init__(dim, std, source, covariance)
        self.mechanism = mechanism
        self._options = options

    def _new_inner(self, block_index: int) -> NoiseStream:
        source = _BlockSource(self.source, block_index)
        return self.mechanism.base._make_stream(self.dim, 1.0, source, None, **self._options)

    def _combine(self, t: int) -> np.ndarray:
        inner, _ = self._inner_at(t)
        return inner.next()
