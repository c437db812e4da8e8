"""Mechanism noise streams drawn on a torch device (GPU or CPU), for :mod:`privopt.torch`.

Each stream yields, step after step, the per-step noise ``std * (B z)_t`` of a
:mod:`privopt.noise` mechanism as one flat tensor on the parameters' device, with the law of the
mechanism's numpy stream (tests compare impulse responses with the columns of B, and the
empirical covariance with ``std^2 B B^T``). The buffers live on the device too: BLT's
``buffers x dim`` state, the tree's O(log T) nodes, the Toeplitz history.

====================================  ============================================  =============
mechanism                             stream                                        device state
====================================  ============================================  =============
independent (B = I)                   z_t                                           none
Toeplitz (nu-DP-FTRL, optimal CC,     sum_{k<=t} beta_k z_{t-k}, one matrix-vector  history
anti-PGD, custom Toeplitz B)          product over a (t, dim) history               t x dim
banded C (``privopt.noise.banded``)   forward substitution over the last L - 1      (L-1) x dim
                                      outputs
BLT (:class:`BLTMechanism`)           x_t = z_t - omega^T S, S <- theta S + x_t     buffers x dim
tree (prefix sums / increments)       the nodes of the dyadic decomposition         log T x dim
:class:`Restarted`                    a fresh inner stream per block                inner's
anything else (dense, ...)    row t of the dense B over regenerated z_j     none
====================================  ============================================  =============

Randomness (counter-based, keyed by a secret). Source ``(a, b)`` of a mechanism (see
``Mechanism.source_indices``) is the standard-normal vector ``torch.randn(dim)`` drawn by a
``torch.Generator`` on the device seeded with ``BLAKE2b(key, (a, b))`` truncated to 63 bits,
where ``key`` is a secret 128-bit integer. So every source vector is a pure function of (key,
index): a stream is checkpointed by its key, its step and its buffers, and a replay of step t
regenerates the same noise. The generator is torch's (Philox4x32-10 on CUDA, MT19937 on the
CPU): statistically sound, **not** cryptographic; anyone who knows the key can regenerate and
subtract the noise, so the key (and any checkpoint holding it) must stay secret and serve one
run. torch is imported lazily: ``privopt.noise`` itself never imports it.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.noise.base import Mechanism
from privopt.noise.blt import BLTMechanism
from privopt.noise.restarts import _BLOCK_STRIDE, BlockRestarts, Restarted
from privopt.noise.toeplitz import ToeplitzMechanism
from privopt.noise.tree import TreeAggregation, TreeIncrements, honaker_weights, prefix_nodes

__all__ = [
    "TORCH_NOISE_ASSUMPTION",
    "TorchImpulseSource",
    "TorchNoiseSource",
    "TorchNoiseStream",
    "TorchSeededSource",
    "torch_noise_stream",
]

#: Stated in the report of every run whose noise comes from :class:`TorchSeededSource`.
TORCH_NOISE_ASSUMPTION = (
    "noise drawn on the device by torch's generator (Philox on CUDA, MT19937 on CPU) seeded per "
    "noise source from a secret 128-bit key by keyed BLAKE2b; the key (and any checkpoint, which "
    "holds it) is secret and serves this run only; the generator is not cryptographic"
)


def _torch():
    import torch

    return torch


# -- sources ------------------------------------------------------------------------------------
class TorchNoiseSource(ABC):
    """Supplies the standard-normal vector of source ``index`` (a pure function of it)."""

    @abstractmethod
    def draw(self, index: tuple[int, int], dim: int, device: Any, dtype: Any) -> Any: ...


class TorchSeededSource(TorchNoiseSource):
    """Source (a, b) = ``torch.randn(dim)`` from a device generator seeded with
    BLAKE2b(key, a, b) (63 bits). ``key`` is a secret integer in [0, 2^128)."""

    def __init__(self, key: int) -> None:
        key = int(key)
        if not 0 <= key < 2**128:
            raise ValueError(f"Expected key in [0, 2^128), got {key}.")
        self.key = key
        self._key_bytes = key.to_bytes(16, "little")
        self._generators: dict[str, Any] = {}

    def seed_of(self, index: tuple[int, int]) -> int:
        a, b = (int(i) for i in index)
        if a < 0 or b < 0:
            raise ValueError(f"Expected a non-negative source index, got {index}.")
        message = a.to_bytes(16, "little") + b.to_bytes(16, "little")
        digest = hashlib.blake2b(message, key=self._key_bytes, digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    def draw(self, index, dim, device, dtype):
        torch = _torch()
        device = torch.device(device)
        generator = self._generators.get(str(device))
        if generator is None:
            generator = self._generators[str(device)] = torch.Generator(device=device)
        generator.manual_seed(self.seed_of(index))
        return torch.randn(dim, generator=generator, device=device, dtype=dtype)


class TorchImpulseSource(TorchNoiseSource):
    """1 for one source index and 0 elsewhere (tests read B's columns off a stream)."""

    def __init__(self, index: tuple[int, int]) -> None:
        self.index = tuple(index)

    def draw(self, index, dim, device, dtype):
        value = 1.0 if tuple(index) == self.index else 0.0
        return _torch().full((dim,), value, device=device, dtype=dtype)


class _BlockSource(TorchNoiseSource):
    """The parent source as seen by block s of a restarted mechanism (as in numpy)."""

    def __init__(self, parent: TorchNoiseSource, block_index: int) -> None:
        self.parent = parent
        self.block_index = block_index

    def draw(self, index, dim, device, dtype):
        shifted = (index[0] + self.block_index * _BLOCK_STRIDE, index[1])
        return self.parent.draw(shifted, dim, device, dtype)


# -- streams ------------------------------------------------------------------------------------
class TorchNoiseStream(ABC):
    """``next()`` is the flat noise ``std * (B z)_t`` of the next step, on ``device``."""

    def __init__(self, dim: int, std: float, source: TorchNoiseSource, device, dtype) -> None:
        self.dim = check_count("dim", dim)
        self.std = check_positive("std", std)
        self.source = source
        self.device = device
        self.dtype = dtype
        self.step = 0

    def _draw(self, index: tuple[int, int]):
        return self.source.draw(index, self.dim, self.device, self.dtype)

    @abstractmethod
    def _combine(self, t: int):
        """The unscaled noise (B z)_t."""

    def next(self):
        out = self._combine(self.step)
        self.step += 1
        return out.mul_(self.std)  # _combine returns a fresh tensor: the stream keeps none

    def _key(self) -> Any:
        """The seeded source's key, which a checkpoint must match (None: an unseeded source)."""
        return self.source.key if isinstance(self.source, TorchSeededSource) else None

    def state(self) -> dict[str, Any]:
        """Step counter, key and buffers (tensors on the device); restore with :meth:`restore`."""
        return {"step": self.step, "key": self._key(), **self._buffers()}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("key") != self._key():
            raise ValueError("Checkpoint was taken with a different noise key.")
        self.step = check_count("step", int(state["step"]), minimum=0)
        self._restore_buffers(state)

    def _buffers(self) -> dict[str, Any]:
        return {}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        return None

    def _tensor(self, value):
        return _torch().as_tensor(value, device=self.device, dtype=self.dtype).clone()


class _Independent(TorchNoiseStream):
    def _combine(self, t):
        return self._draw((0, t))


class _Toeplitz(TorchNoiseStream):
    """sum_{k<=t} beta_k z_{t-k}: a history matrix (or a ring of ``support`` rows) on the device,
    combined by one matrix-vector product per step."""

    def __init__(self, mechanism: ToeplitzMechanism, *args) -> None:
        super().__init__(*args)
        self.mechanism = mechanism
        self.window = mechanism.support
        self._beta = np.asarray(mechanism.beta(64), dtype=float)
        self._history = None  # (capacity, dim); row tau holds z_tau (ring slot tau mod window)

    def _coefficients(self, n: int) -> np.ndarray:
        if self._beta.shape[0] < n:
            self._beta = np.asarray(self.mechanism.beta(max(n, 2 * self._beta.shape[0])))
        return self._beta[:n]

    def _ensure(self, rows: int) -> None:
        torch = _torch()
        if self._history is None or self._history.shape[0] < rows:
            capacity = rows if self.window is not None else max(rows, 2 * (rows - 1), 16)
            grown = torch.zeros((capacity, self.dim), device=self.device, dtype=self.dtype)
            if self._history is not None:
                grown[: self._history.shape[0]] = self._history
            self._history = grown

    def _combine(self, t):
        z = self._draw((0, t))
        if self.window is not None:
            w = self.window
            self._ensure(w)
            self._history[t % w] = z
            weights = np.zeros(w)
            for k in range(min(t + 1, w)):
                weights[(t - k) % w] = self._coefficients(w)[k]
            return self._tensor(weights) @ self._history
        self._ensure(t + 1)
        self._history[t] = z
        weights = self._coefficients(t + 1)[::-1].copy()
        return self._tensor(weights) @ self._history[: t + 1]

    def _buffers(self):
        return {} if self._history is None else {"history": self._history.clone()}

    def _restore_buffers(self, state):
        self._history = None if "history" not in state else state["history"].clone()


class _BLT(TorchNoiseStream):
    """x_t = z_t - sum_j omega_j S_j, then S_j <- theta_j S_j + x_t (buffers on the device)."""

    def __init__(self, mechanism: BLTMechanism, *args) -> None:
        super().__init__(*args)
        self._theta = self._tensor(mechanism.buf_decay)[:, None]
        self._omega = self._tensor(mechanism.output_scale)
        torch = _torch()
        self._state = torch.zeros(
            (mechanism.buffers, self.dim), device=self.device, dtype=self.dtype
        )

    def _combine(self, t):
        z = self._draw((0, t))
        if self._omega.numel() == 0:
            return z
        x = z.sub_(self._omega @ self._state)
        self._state.mul_(self._theta).add_(x)
        return x

    def _buffers(self):
        return {"buffers": self._state.clone()}

    def _restore_buffers(self, state):
        if tuple(state["buffers"].shape) != tuple(self._state.shape):
            raise ValueError(
                f"Checkpoint buffers have shape {tuple(state['buffers'].shape)}, expected "
                f"{tuple(self._state.shape)}."
            )
        self._state = state["buffers"].to(device=self.device, dtype=self.dtype).clone()


class _Banded(TorchNoiseStream):
    """L-banded C (``privopt.noise.banded``): x_t = (z_t - sum_s C[t, t-s] x_{t-s}) / C[t, t]
    over a ring of the last L - 1 outputs on the device (one matrix-vector product per step)."""

    def __init__(self, mechanism, *args) -> None:
        super().__init__(*args)
        self.mechanism = mechanism
        self._lag = int(mechanism.bands) - 1
        torch = _torch()
        self._ring = torch.zeros((self._lag, self.dim), device=self.device, dtype=self.dtype)

    def _combine(self, t):
        row = np.asarray(self.mechanism.band_row(t), dtype=float)
        z = self._draw((0, t))
        if self._lag > 0:
            weights = np.empty(self._lag)
            weights[(t - np.arange(1, self._lag + 1)) % self._lag] = row[1 : self._lag + 1]
            z.sub_(self._tensor(weights) @ self._ring)
        if row[0] != 1.0:
            z.div_(float(row[0]))
        if self._lag > 0:
            self._ring[t % self._lag] = z
        return z

    def _buffers(self):
        return {"ring": self._ring.clone()}

    def _restore_buffers(self, state):
        if tuple(state["ring"].shape) != tuple(self._ring.shape):
            raise ValueError(f"Checkpoint ring has shape {tuple(state['ring'].shape)}.")
        self._ring = state["ring"].to(device=self.device, dtype=self.dtype).clone()


class _Tree(TorchNoiseStream):
    """Noise of the noisy prefix sum at step t: the popcount(t + 1) nodes of its dyadic
    decomposition (Honaker-combined with ``variance_reduction``), kept on the device."""

    def __init__(self, variance_reduction: bool, *args) -> None:
        super().__init__(*args)
        self.variance_reduction = variance_reduction
        self._nodes: dict[tuple[int, int], Any] = {}

    def _node(self, node):
        k, j = node
        return self._draw((k + 1, j))

    def _combine(self, t):
        wanted = prefix_nodes(t)
        if self.variance_reduction:
            n = t + 1
            levels = (n & -n).bit_length()
            own, children, _ = honaker_weights(levels)
            for k in range(levels):  # nodes completing at t, lowest level first
                j = (n >> k) - 1
                value = self._node((k, j))
                if k > 0:
                    left, right = self._nodes[(k - 1, 2 * j)], self._nodes[(k - 1, 2 * j + 1)]
                    value = value * own[k] + (left + right) * children[k]
                self._nodes[(k, j)] = value
        self._nodes = {n: self._nodes[n] if n in self._nodes else self._node(n) for n in wanted}
        out = _torch().zeros(self.dim, device=self.device, dtype=self.dtype)
        for node in wanted:
            out += self._nodes[node]
        return out

    def _buffers(self):
        return {"nodes": {f"{k},{j}": v.clone() for (k, j), v in self._nodes.items()}}

    def _restore_buffers(self, state):
        nodes = {}
        for name, value in state["nodes"].items():
            k, j = (int(x) for x in name.split(","))
            nodes[(k, j)] = value.to(device=self.device, dtype=self.dtype).clone()
        self._nodes = nodes


class _Increments(TorchNoiseStream):
    """(B z)_t - (B z)_{t-1} of a prefix-sum stream (the tree as per-step noise)."""

    def __init__(self, inner: TorchNoiseStream, *args) -> None:
        super().__init__(*args)
        self.inner = inner
        self._previous = _torch().zeros(self.dim, device=self.device, dtype=self.dtype)

    def _combine(self, t):
        current = self.inner._combine(t)
        out = current - self._previous
        self._previous = current
        return out

    def _buffers(self):
        return {"inner": self.inner._buffers(), "previous": self._previous.clone()}

    def _restore_buffers(self, state):
        self.inner._restore_buffers(state["inner"])
        self._previous = state["previous"].to(device=self.device, dtype=self.dtype).clone()


class _Restarted(BlockRestarts, TorchNoiseStream):
    """A fresh inner stream per block of ``mechanism.block`` steps (block-diagonal B)."""

    def __init__(self, mechanism: Restarted, steps: int | None, *args) -> None:
        super().__init__(*args)
        self.mechanism = mechanism
        self._steps = steps

    def _new_inner(self, block_index: int) -> TorchNoiseStream:
        source = _BlockSource(self.source, block_index)
        horizon = self.mechanism.block
        return _make(self.mechanism.base, self.dim, 1.0, source, self.device, self.dtype, horizon)

    def _combine(self, t):
        inner, local = self._inner_at(t)
        inner.step += 1
        return inner._combine(local)


class _Decoder(TorchNoiseStream):
    """Any mechanism: row t of its dense B (T x m) applied to regenerated sources (no state but
    the step; O(nnz(B_t) dim) work per step). Used for dense and future mechanisms."""

    def __init__(self, mechanism: Mechanism, steps: int, *args) -> None:
        super().__init__(*args)
        self.steps = check_count("steps", steps)
        self._b = np.asarray(mechanism.decoder_matrix(self.steps), dtype=float)
        self._indices = mechanism.source_indices(self.steps)

    def _combine(self, t):
        if t >= self.steps:
            raise ValueError(f"Stream exhausted: the mechanism was materialised for {self.steps}.")
        out = _torch().zeros(self.dim, device=self.device, dtype=self.dtype)
        row = self._b[t]
        for j in np.flatnonzero(row):
            out.add_(self._draw(self._indices[j]), alpha=float(row[j]))
        return out


def _make(mechanism, dim, std, source, device, dtype, steps) -> TorchNoiseStream:
    args = (dim, std, source, device, dtype)
    if hasattr(mechanism, "band_row") and hasattr(mechanism, "bands"):  # privopt.noise.banded
        return _Banded(mechanism, *args)
    if isinstance(mechanism, BLTMechanism):
        return _BLT(mechanism, *args)
    if isinstance(mechanism, ToeplitzMechanism):
        if mechanism.support == 1 and mechanism.beta(1)[0] == 1.0:
            return _Independent(*args)
        return _Toeplitz(mechanism, *args)
    if isinstance(mechanism, TreeIncrements):
        inner = _Tree(mechanism.tree.variance_reduction, *args)
        return _Increments(inner, *args)
    if isinstance(mechanism, TreeAggregation):
        return _Tree(mechanism.variance_reduction, *args)
    if isinstance(mechanism, Restarted):
        return _Restarted(mechanism, steps, *args)
    if steps is None:
        raise ValueError(
            f"{mechanism.name}: a generic mechanism is streamed from its dense B, which needs "
            "steps (the horizon)."
        )
    return _Decoder(mechanism, steps, *args)


def torch_noise_stream(
    mechanism: Mechanism,
    dim: int,
    std: float,
    *,
    key: int | None = None,
    source: TorchNoiseSource | None = None,
    device: Any = "cpu",
    dtype: Any = None,
    steps: int | None = None,
) -> TorchNoiseStream:
    """The noise stream of ``mechanism`` on ``device``: ``next()`` is ``std (B z)_t``.

    Args:
        mechanism: any :mod:`privopt.noise` mechanism (per-step noise: pass a tree through
            :func:`privopt.noise.as_step_noise`, as a :class:`~privopt.training.TrainingPlan`
            does).
        dim: the number of coordinates (all trainable parameters, flattened).
        std: the per-coordinate std of every noise source (sigma G).
        key: the secret 128-bit key of :class:`TorchSeededSource` (exactly one of ``key`` and
            ``source``).
        source: a :class:`TorchNoiseSource` (tests pass :class:`TorchImpulseSource`).
        device, dtype: where and in which precision the noise and its buffers live (default
            float32: the noise is added in fp32 even when the model computes in bf16).
        steps: the horizon; needed only by the generic dense-B stream.
    """
    if (key is None) == (source is None):
        raise ValueError("Give exactly one of key or source to torch_noise_stream.")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"Expected a privopt.noise Mechanism, got {type(mechanism).__name__}.")
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    if not dtype.is_floating_point:
        raise ValueError(f"Expected a floating-point noise dtype, got {dtype}.")
    std = check_positive("std", std)
    if not math.isfinite(std):
        raise ValueError(f"Expected a finite std, got {std!r}.")
    source = TorchSeededSource(key) if source is None else source
    return _make(mechanism, dim, std, source, torch.device(device), dtype, steps)
