"""Binary tree aggregation for private prefix sums (Dwork et al. 2010; Chan et al. 2011).

Seeds 003 (Algorithm 3) and 004 (Lemma 8) release noisy prefix sums ``sum_{tau<=t} g_tau`` of a
stream. Node (k, j) covers steps [j 2^k, (j + 1) 2^k) and gets its own N(0, std^2 I) noise once
it is complete. The prefix [0, t] is the dyadic decomposition of t + 1: for every bit k set in t
+ 1 the node j = ((t + 1) >> k) - 1 of level k. So the prefix at step t uses **popcount(t + 1)**
nodes, all complete by step t (notes/003.md §2.3 corrects the paper's popcount(t) indexing), and
its noise has per-coordinate variance std^2 popcount(t + 1).

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
from privopt.noise.base import SINGLE, Mechanism, NoiseSource, NoiseStream, Participation
from privopt.noise.sensitivity import dense_minsep_upper_bound_squared

__all__ = ["TreeAggregation", "TreeStream", "prefix_nodes"]


def prefix_nodes(t: int) -> list[tuple[int, int]]:
    """Nodes (level k, index j) whose union is [0, t], highest level first."""
    n = t + 1
    return [(k, (n >> k) - 1) for k in range(n.bit_length() - 1, -1, -1) if (n >> k) & 1]


def _complete_nodes(steps: int) -> list[tuple[int, int]]:
    return [(k, j) for k in range(steps.bit_length()) for j in range(steps >> k)]


class TreeAggregation(Mechanism):
    """Binary-tree mechanism whose stream yields the noise of each noisy prefix sum."""

    name = "tree"

    def decoder_matrix(self, steps: int) -> np.ndarray:
        steps = check_count("steps", steps)
        nodes = {node: i for i, node in enumerate(_complete_nodes(steps))}
        b = np.zeros((steps, len(nodes)))
        for t in range(steps):
            for node in prefix_nodes(t):
                b[t, nodes[node]] = 1.0
        return b

    def encoder_matrix(self, steps: int) -> np.ndarray:
        steps = check_count("steps", steps)
        nodes = _complete_nodes(steps)
        c = np.zeros((len(nodes), steps))
        for i, (k, j) in enumerate(nodes):
            c[i, j << k : (j + 1) << k] = 1.0
        return c

    def anytime_sensitivity_squared(self) -> float:
        return math.inf  # the number of levels grows without bound

    def _horizon_sensitivity_squared(self, steps: int, participation: Participation) -> float:
        if participation.kind == "single":
            return float(steps.bit_length())  # floor(log2 T) + 1 levels contain step 0
        return dense_minsep_upper_bound_squared(
            self.encoder_matrix(steps),
            participation.min_sep,  # type: ignore[arg-type]
            participation.participations,  # type: ignore[arg-type]
        )

    def prefix_sum_error(self, steps: int, participation: Participation = SINGLE) -> float:
        """sens^2 * ||B||_F^2: B already releases prefix sums (no extra cumulative sum)."""
        b = self.decoder_matrix(steps)
        return float(self.sensitivity_squared(steps, participation) * np.sum(b**2))

    def _make_stream(self, dim, std, source, shape, **options: Any):
        if options:
            raise TypeError(f"Unexpected stream options: {sorted(options)}.")
        return TreeStream(dim, std, source, shape)


class TreeStream(NoiseStream):
    """Noise of the noisy prefix sum at each step; keeps only the O(log T) nodes in use."""

    def __init__(self, dim: int, std: float, source: NoiseSource, shape=None) -> None:
        super().__init__(dim, std, source, shape)
        self._nodes: dict[tuple[int, int], np.ndarray] = {}

    def _combine(self, t: int) -> np.ndarray:
        wanted = prefix_nodes(t)
        self._nodes = {
            node: self._nodes[node] if node in self._nodes else self._draw(node) for node in wanted
        }
        out = np.zeros(self.dim)
        for node in wanted:
            out += self._nodes[node]
        return out

    def _draw(self, node: tuple[int, int]) -> np.ndarray:
        k, j = node
        return self.source.draw((k + 1, j), self.dim)

    def _buffers(self) -> dict[str, Any]:
        return {"nodes": {node: v.copy() for node, v in self._nodes.items()}}

    def _restore_buffers(self, state: dict[str, Any]) -> None:
        self._nodes = {
            tuple(n): np.asarray(v, dtype=float).copy() for n, v in state["nodes"].items()
        }
