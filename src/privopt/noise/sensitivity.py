"""Sensitivity of an encoder C under single and multiple participation
(docs/theory/correlated-noise.md).

With one participation the l2 sensitivity is the largest column norm of C. With at most k
participations, any two at least b steps apart, it is

    sens^2 = max_P || sum_{i in P} C e_i ||^2

over such patterns P. For lower-triangular Toeplitz C whose coefficients are non-negative and
non-increasing the maximum is attained at P = {0, b, 2b, ...} (Choquette-Choo et al. 2023), an O(kT)
computation. Otherwise privopt returns an upper bound and says so with a warning.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = [
    "SensitivityUpperBoundWarning",
    "brute_force_minsep_squared",
    "dense_minsep_upper_bound_squared",
    "max_participations",
    "toeplitz_minsep_squared",
]


class SensitivityUpperBoundWarning(UserWarning):
    """The multi-participation sensitivity returned is a valid upper bound, not the exact value."""


def max_participations(steps: int, min_sep: int, participations: int) -> int:
    """Number of participations that fit in ``steps`` with separation ``min_sep``."""
    return min(participations, (steps - 1) // min_sep + 1)


def _shifted_sum(c: np.ndarray, steps: int, min_sep: int, count: int) -> np.ndarray:
    v = np.zeros(steps)
    for m in range(count):
        start = m * min_sep
        v[start:] += c[: steps - start]
    return v


def toeplitz_minsep_squared(c: np.ndarray, steps: int, min_sep: int, participations: int) -> float:
    """Min-separation sensitivity^2 of lower-triangular Toeplitz C with first column ``c``.

    Exact when ``c`` is non-negative and non-increasing. Otherwise the same formula is applied to
    the non-increasing envelope of ``|c|`` (an upper bound, since every entry of
    ``sum_{i in P} C e_i`` is then dominated entrywise) and a
    :class:`SensitivityUpperBoundWarning` is issued.
    """
    c = np.asarray(c, dtype=float)[:steps]
    if c.shape[0] < steps:
        raise ValueError(f"Need {steps} coefficients of C, got {c.shape[0]}.")
    count = max_participations(steps, min_sep, participations)
    exact = bool(np.all(c >= 0) and np.all(np.diff(c) <= 0))
    if not exact:
        warnings.warn(
            "C's coefficients are not non-negative and non-increasing: the min-separation "
            "sensitivity is an upper bound (computed on the non-increasing envelope of |c|).",
            SensitivityUpperBoundWarning,
            stacklevel=3,
        )
        c = np.maximum.accumulate(np.abs(c)[::-1])[::-1]
    return float(np.sum(_shifted_sum(c, steps, min_sep, count) ** 2))


def dense_minsep_upper_bound_squared(
    encoder: np.ndarray, min_sep: int, participations: int
) -> float:
    """Upper bound on min-separation sensitivity^2 of a general encoder C (m x T).

    ``||sum_{i in P} C e_i||^2 = sum_{i,j in P} G_ij <= k * max_i (sum of the k largest |G_ij|
    over j compatible with i)``, with G = C^T C. A warning says it is a bound.
    """
    steps = encoder.shape[1]
    count = max_participations(steps, min_sep, participations)
    gram = np.abs(encoder.T @ encoder)
    best = 0.0
    for i in range(steps):
        row = gram[i].copy()
        near = np.abs(np.arange(steps) - i) < min_sep
        near[i] = False
        row[near] = 0.0
        others = np.sort(np.delete(row, i))[::-1][: count - 1]
        best = max(best, gram[i, i] + float(np.sum(others)))
    warnings.warn(
        "Multi-participation sensitivity of a general encoder: returning an upper bound.",
        SensitivityUpperBoundWarning,
        stacklevel=3,
    )
    return count * best


def brute_force_minsep_squared(encoder: np.ndarray, min_sep: int, participations: int) -> float:
    """Exact min-separation sensitivity^2 by enumerating every pattern (small T only; tests)."""
    steps = encoder.shape[1]
    if steps > 40:
        raise ValueError("brute_force_minsep_squared is exponential; use steps <= 40.")
    best = 0.0

    def extend(pattern: list[int]) -> None:
        nonlocal best
        if pattern:
            v = encoder[:, pattern].sum(axis=1)
            best = max(best, float(v @ v))
        if len(pattern) == participations:
            return
        start = pattern[-1] + min_sep if pattern else 0
        for nxt in range(start, steps):
            extend([*pattern, nxt])

    extend([])
    return best
