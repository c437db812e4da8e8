"""Binary tree aggregation for private prefix sums (Dwork et al. 2010; Chan et al. 2011).

The DP-FTRL-Σ paper (Algorithm 3) and Choquette-Choo, Ganesh & Thakurta (2025, Lemma 8)
release noisy prefix sums ``sum_{tau<=t} g_tau`` of a
stream. Node (k, j) covers steps [j 2^k, (j + 1) 2^k) and gets its own N(0, std^2 I) noise once
it is complete. The prefix [0, t] is the dyadic decomposition of t + 1: for every bit k set in t
+ 1 the node j = ((t + 1) >> k) - 1 of level k. So the prefix at step t uses **popcount(t + 1)**
nodes, all complete by step t (docs/theory/overparameterised-regression.md corrects the paper's
popcount(t) indexing), and its noise has per-coordinate variance std^2 popcount(t + 1).

Matrix view: ``C`` (nodes x T) is the node-membership matrix, ``B`` (T x nodes) selects the nodes
of each prefix, and ``B C = A`` (lower-triangular all-ones). A step lies in one node per level, so
the single-participation sensitivity^2 is the number of levels that hold a complete node
containing step 0: floor(log2 T) + 1 (T = 1024 gives 11).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privopt._validate import check_count
from privopt.noise.base import (
    Mechanism,
    NoiseSource,
    NoiseStream,
    Participation,
    accumulate,
)
from privopt.noise.sensitivity import dense_minsep_upper_bound_squared

__all__ = [
    "PrefixSumTree",
    "TreeAggregation",
    "TreeIncrements",
    "TreeStream",
    "as_step_noise",
    "honaker_weights",
    "prefix_nodes",
]


def prefix_nodes(t: int) -> list[tuple[int, int]]:
    """Nodes (level k, index j) whose union is [0, t], highest level first."""
    n = t + 1
    return [(k, (n >> k) - 1) for k in range(n.bit_length() - 1, -1, -1) if (n >> k) & 1]


def _complete_nodes(steps: int) -> list[tuple[int, int]]:
    return [(k, j) for k in range(steps.bit_length()) for j in range(steps >> k)]


def honaker_weights(levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bottom-up inverse-variance weights of the variance-reduced tree (Honaker 2015).

    A level-k node's estimate combines its own measurement (variance 1, in units of std^2) with
    the sum of its two children's estimates (variance 2 v_{k-1}):
    v_k = 1 / (1 + 1/(2 v_{k-1})), own weight v_k, children weight v_k / (2 v_{k-1}); the weights
    add to 1, so the estimate stays unbiased. Returns (own, children, variance) per level.
    """
    own, children, variance = np.ones(levels), np.zeros(levels), np.ones(levels)
    for k in range(1, levels):
        variance[k] = 1.0 / (1.0 + 1.0 / (2.0 * variance[k - 1]))
        own[k] = variance[k]
        children[k] = variance[k] / (2.0 * variance[k - 1])
    return own, children, variance


class TreeAggregation(Mechanism):
    """Binary-tree mechanism whose stream yields the noise of each noisy prefix sum.

    Args:
        variance_reduction: use the streaming Honaker estimate: each complete node's value is
            the inverse-variance combination of its own measurement and its children's
            estimates (bottom-up). Same measurements, so the same sensitivity; the prefix noise
            variance drops from std^2 popcount(t+1) to std^2 sum of v_k over the prefix's nodes.
    """

    def __init__(self, variance_reduction: bool = False) -> None:
        self.variance_reduction = bool(variance_reduction)
        self.name = "tree-honaker" if self.variance_reduction else "tree"

    def _node_coefficients(self, steps: int) -> dict[tuple[int, int], np.ndarray]:
        nodes = _complete_nodes(steps)
        index = {node: i for i, node in enumerate(nodes)}
        own, children, _ = honaker_weights(steps.bit_length())
        coefficients: dict[tuple[int, int], np.ndarray] = {}
        for k, j in nodes:  # level by level, so children come first
            vec = np.zeros(len(nodes))
            vec[index[(k, j)]] = 1.0
            if self.variance_reduction and k > 0:
                vec *= own[k]
                vec += children[k] * (
                    coefficients[(k - 1, 2 * j)] + coefficients[(k - 1, 2 * j + 1)]
                )
            coefficients[(k, j)] = vec
        return coefficients

    def decoder_matrix(self, steps: int) -> np.ndarray:
        steps = check_count("steps", steps)
        coefficients = self._node_coefficients(steps)
        b = np.zeros((steps, len(coefficients)))
        for t in range(steps):
            for node in prefix_nodes(t):
                b[t] += coefficients[node]
        return b

    def prefix_variance(self, t: int) -> float:
        """Per-coordinate variance of the prefix noise at step t, in units of std^2."""
        t = check_count("t", t, minimum=0)
        _, _, variance = honaker_weights((t + 1).bit_length())
        if not self.variance_reduction:
            return float(bin(t + 1).count("1"))
        return float(sum(variance[k] for k, _ in prefix_nodes(t)))

    def encoder_matrix(self, steps: int) -> np.ndarray:
        steps = check_count("steps", steps)
        nodes = _complete_nodes(steps)
        c = np.zeros((len(nodes), steps))
        for i, (k, j) in enumerate(nodes):
            c[i, j << k : (j + 1) << k] = 1.0
        return c

    @staticmethod
    def levels(steps: int) -> int:
        """floor(log2 T) + 1: the levels holding a complete node that contains step 0, the most
        complete nodes any leaf belongs to (so the single-participation sensitivity^2). The
        bound ceil(log2 T) + 1 of docs/theory/overparameterised-regression.md item 3 counts a level
        whose node containing
        step 0 never completes when T is not a power of two; both agree at powers of two."""
        return check_count("steps", steps).bit_length()

    def anytime_sensitivity_squared(self) -> float:
        return math.inf  # the number of levels grows without bound

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        if participation.kind == "single":
            return float(self.levels(steps))
        return dense_minsep_upper_bound_squared(
            self.encoder_matrix(steps),
            participation.min_sep,  # type: ignore[arg-type]
            participation.participations,  # type: ignore[arg-type]
        )

    def _prefix_workload(self, steps: int) -> np.ndarray:
        """B itself: the tree already releases prefix sums (no extra cumulative sum)."""
        return self.decoder_matrix(steps)

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return [(k + 1, j) for k, j in _complete_nodes(check_count("steps", steps))]

    def _make_stream(self, dim, std, source, covariance, **options: Any):
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return TreeStream(dim, std, source, covariance, self.variance_reduction)


class TreeStream(NoiseStream):
    """Noise of the noisy prefix sum at each step; keeps only the O(log T) nodes in use.

    A node enters the prefix decomposition when it completes and stays until its parent
    completes, so the nodes of the current decomposition are all the state needed, including
    the left children that the variance-reduced estimate combines into their parents.
    """

    def __init__(
        self,
        dim: int,
        std: float,
        source: NoiseSource,
        covariance=None,
        variance_reduction: bool = False,
    ) -> None:
        super().__init__(dim, std, source, covariance)
        self.variance_reduction = variance_reduction
        self._nodes: dict[tuple[int, int], np.ndarray] = {}
        self._node_scale = 1.0

    def next_scaled(self, scale: float) -> np.ndarray:
        """:meth:`next` with the nodes completing at this step drawn at ``scale`` times ``std``.

        A node's noise is drawn once, when it completes, so a caller that passes a running
        maximum of per-step scales (the DP-FTRL-Σ paper's (Private Overparameterized Linear
        Regression, 2024) ``tau psi_max``) gives every node a scale that
        covers all of its leaves. Earlier nodes keep the scale they were drawn with.
        """
        scale = float(scale)
        if not (scale >= 0.0 and math.isfinite(scale)):
            raise ValueError(f"Expected a finite node scale >= 0, got {scale!r}.")
        self._node_scale = scale
        try:
            return self.next()
        finally:
            self._node_scale = 1.0

    def _combine(self, t: int) -> np.ndarray:
        wanted = prefix_nodes(t)
        if self.variance_reduction:
            self._complete_nodes_at(t)
        fresh = {node: self._nodes.get(node) for node in wanted}
        self._nodes = {
            node: value if value is not None else self._draw(node) for node, value in fresh.items()
        }
        return accumulate(((1.0, self._nodes[node]) for node in wanted), self.dim)

    def _complete_nodes_at(self, t: int) -> None:
        """Variance reduction: estimate every node completing at step t, lowest level first."""
        n = t + 1
        levels = (n & -n).bit_length()  # nodes of levels 0..v complete, 2^v the largest power
        own, children, _ = honaker_weights(levels)
        for k in range(levels):
            j = (n >> k) - 1
            value = self._draw((k, j))
            if k > 0:
                left, right = self._nodes[(k - 1, 2 * j)], self._nodes[(k - 1, 2 * j + 1)]
                terms = ((own[k], value), (children[k], left), (children[k], right))
                value = accumulate(terms, self.dim)
            self._nodes[(k, j)] = value

    def _draw(self, node: tuple[int, int]) -> np.ndarray:
        k, j = node
        value = self.source.draw((k + 1, j), self.dim)
        return value if self._node_scale == 1.0 else self._node_scale * value

    def _buffers(self) -> dict[str, Any]:
        return {"nodes": {node: v.copy() for node, v in self._nodes.items()}}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._nodes = {
            tuple(n): np.asarray(v, dtype=float).copy() for n, v in state["nodes"].items()
        }


class _IncrementStream(NoiseStream):
    """Increments ``(B z)_t - (B z)_{t-1}`` of a prefix-sum noise stream."""

    def __init__(self, inner: NoiseStream, dim, std, source, covariance) -> None:
        super().__init__(dim, std, source, covariance)
        self.inner = inner
        self._previous = np.zeros(dim)

    def _combine(self, t: int) -> np.ndarray:
        current = self.inner._combine(t)
        out = current - self._previous
        self._previous = current
        return out

    def _buffers(self) -> dict[str, Any]:
        return {"inner": self.inner._buffers(), "previous": self._previous.copy()}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self.inner._restore_buffers(state["inner"])
        self._previous = np.asarray(state["previous"], dtype=float).copy()


class TreeIncrements(Mechanism):
    """Binary-tree aggregation as per-step noise for DP-FTRL (Kairouz et al. 2021).

    :class:`~privopt.noise.TreeAggregation`'s B releases noisy **prefix sums** (B C = A, the
    all-ones lower-triangular matrix). DP-FTRL's update ``theta_{t+1} = theta_0 - lr * (prefix
    sum of gradients + prefix noise)`` is the SGD form with per-step noise equal to the
    increment of the prefix noise, i.e. decoder ``A^{-1} B``: then ``A^{-1} B C = I`` and the
    trajectory is a post-processing of the same ``C G + W``, so the sensitivity is the tree's
    (C is unchanged). Feeding the tree's stream straight into :func:`dp_ftrl` would instead add
    a whole prefix noise to every step (the noise then accumulates over the steps).
    """

    def __init__(self, tree: TreeAggregation | None = None) -> None:
        self.tree = TreeAggregation() if tree is None else tree
        if not isinstance(self.tree, TreeAggregation):
            raise TypeError(f"Expected a TreeAggregation, got {type(self.tree).__name__}.")
        self.name = f"{self.tree.name}-increments"

    def decoder_matrix(self, steps: int) -> np.ndarray:
        b = self.tree.decoder_matrix(steps)
        return np.diff(b, axis=0, prepend=np.zeros((1, b.shape[1])))

    def encoder_matrix(self, steps: int) -> np.ndarray:
        return self.tree.encoder_matrix(steps)

    def anytime_sensitivity_squared(self) -> float:
        return self.tree.anytime_sensitivity_squared()

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        return self.tree.sensitivity_squared(steps, participation)

    def source_indices(self, steps: int) -> list[tuple[int, int]]:
        return self.tree.source_indices(steps)

    def _make_stream(self, dim, std, source, covariance, **options: Any):
        inner = self.tree._make_stream(dim, std, source, None, **options)
        return _IncrementStream(inner, dim, std, source, covariance)


def as_step_noise(mechanism: Mechanism) -> Mechanism:
    """The mechanism whose stream is per-step noise (workload I) for an SGD/FTRL-style update.

    Mechanisms releasing noisy prefix sums (workload A: the tree) are turned into their
    increments (:class:`TreeIncrements`), also inside :class:`~privopt.noise.Restarted`;
    per-step mechanisms (Toeplitz, dense) are returned unchanged. Privacy is unchanged: the
    encoder C is the same.
    """
    from privopt.noise.restarts import Restarted

    if isinstance(mechanism, TreeAggregation):
        return TreeIncrements(mechanism)
    if isinstance(mechanism, Restarted) and isinstance(mechanism.base, TreeAggregation):
        return Restarted(TreeIncrements(mechanism.base), mechanism.block)
    return mechanism


class PrefixSumTree:
    """Streaming noisy prefix sums with a per-node noise scale (Private Overparameterized Linear
    Regression, 2024, Algorithm 3).

    ``add(g, std)`` takes the step's vector and returns the noisy prefix sum sum_{j<=t} g_j plus
    the noises of the popcount(t + 1) complete nodes of the dyadic decomposition of [0, t]
    (docs/theory/overparameterised-regression.md [FIX] and its streaming form). It is
    :class:`TreeAggregation`'s stream (one tree implementation): a node draws its noise once, when
    it completes, from N(0, std^2 Σ) with the ``std`` passed at that step
    (:meth:`TreeStream.next_scaled`); callers pass a running maximum so a node's scale covers all of
    its leaves. Memory O(d log T); the exact running sum is internal and never released. The noise
    key is drawn from ``rng``.

    Args:
        dim: d.
        rng: draws the 128-bit key of the counter-based noise source.
        covariance: Σ (a :mod:`privopt.noise` covariance operator), None for the identity.
        batch: unused (kept for compatibility: node noises are drawn per node).
    """

    def __init__(
        self,
        dim: int,
        rng: np.random.Generator,
        covariance: Any = None,
        batch: int = 64,
    ) -> None:
        self.dim = check_count("dim", dim)
        check_count("batch", batch)
        if covariance is not None and getattr(covariance, "dim", dim) != dim:
            raise ValueError(f"covariance has dimension {covariance.dim}, expected {dim}.")
        self.covariance = covariance
        self._stream = TreeAggregation().noise_stream(self.dim, 1.0, rng, covariance=covariance)
        self.total = np.zeros(self.dim)
        self.steps = 0

    def add(self, g: np.ndarray, std: float) -> np.ndarray:
        """Accept step t's vector; return the noisy prefix sum through step t."""
        self.total += g
        self.steps += 1
        return self.total + self._stream.next_scaled(std)

    @staticmethod
    def levels(steps: int) -> int:
        """Tree levels a leaf's noise can come from: :meth:`TreeAggregation.levels`."""
        return TreeAggregation.levels(steps)
