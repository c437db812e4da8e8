"""DP-STAT (Varshney et al. 2022, Algorithm 3): a private approximate maximum by a noisy doubling
search.

Given s non-negative values r_j (residuals |<x_j, w> - y_j|, or row norms), a public domain bound
B and K queries, DP-STAT tests the thresholds gamma = Delta, 2 Delta, 4 Delta, ... with
Delta = B / 2^K and stops at the first one where the noisy count #{r_j <= gamma} + N(0, K alpha^2)
reaches ``s - margin``.

Privacy. Each count has sensitivity 1 (replace-one or add/remove), and at most K counts are
released, each with variance K alpha^2, so DP-STAT is rho = K / (2 K alpha^2) = 1/(2 alpha^2)
zCDP (Lemma 12) however early it stops. Callers record it as a Gaussian event with sensitivity 1,
std ``alpha sqrt(K)`` and ``count = K``.

Changes from the paper (docs/theory/linear-regression-adaptive-clipping.md and §9 items 3–6), none
of which touches privacy:

* at most K queries (the printed loop runs K + 1, which the proof does not cover), and the output
  when the search never stops is 2^K Delta >= B;
* s values, not s + 1 (the printed index range overlaps the gradient batch);
* a practical K (default 20) instead of Delta = B / N^200, whose K ~ 200 log2 N makes the
  count noise swamp s;
* a public **margin** (default ``"auto"``: Gamma = alpha sqrt(K) sqrt(2 ln(K / beta))). With
  margin 0, once every value is below gamma the stopping test passes with probability 1/2 only,
  and the search overshoots by a geometric number of doublings
  (docs/theory/linear-regression-adaptive-clipping.md: 95th percentile 14x the maximum). With the
  margin the test passes w.h.p. as soon as all values are inside, so gamma < 2 max r_j w.h.p., while
  still #{r_j <= gamma} >= s - 2 Gamma w.h.p. The margin depends only on public constants, so the
  privacy analysis is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_nonnegative, check_positive, check_probability
from privopt.noise.rng import gaussian_noise

__all__ = ["DPStatResult", "check_margin", "dp_stat", "dp_stat_grid", "dp_stat_margin"]


def dp_stat_grid(domain: float, queries: int) -> tuple[np.ndarray, float]:
    """(the K query thresholds ``Delta 2^i``, i < K, and the output when no query stops,
    ``Delta 2^K``), Delta = B / 2^K by ``ldexp`` (no overflow of 2^K), then doubling (exact in
    floating point). Public: DP-STAT's outputs are this finite set, which lets the Dask
    rounds compute every count in one pass (:mod:`privopt.distributed.round_statistics`)."""
    gamma = math.ldexp(domain, -queries)
    grid = []
    for _ in range(queries):
        grid.append(gamma)
        gamma *= 2.0
    return np.asarray(grid, dtype=float), gamma


def dp_stat_margin(noise_multiplier: float, queries: int, failure_prob: float = 1e-3) -> float:
    """Gamma = alpha sqrt(K) sqrt(2 ln(K / beta)).

    All K count noises lie in [-Gamma, Gamma] with probability at least 1 - beta.
    """
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    queries = check_count("queries", queries)
    failure_prob = check_probability("failure_prob", failure_prob)
    return noise_multiplier * math.sqrt(queries) * math.sqrt(2.0 * math.log(queries / failure_prob))


def check_margin(margin: float | str) -> float | str:
    """A valid DP-STAT margin: ``"auto"`` or a finite number >= 0 (checked before any data)."""
    if isinstance(margin, str):
        if margin != "auto":
            raise ValueError(f"Expected margin 'auto' or a number >= 0, got {margin!r}.")
        return margin
    return check_nonnegative("margin", margin)


@dataclass(frozen=True)
class DPStatResult:
    """Output of DP-STAT.

    Attributes:
        gamma: the private threshold (on the grid B 2^(i - K)).
        queries: K, the number of count queries charged (privacy is charged for all K).
        queries_used: how many counts were actually computed before stopping.
        count_std: standard deviation alpha sqrt(K) of each count's noise.
        margin: the public margin used in the stopping test.
    """

    gamma: float
    queries: int
    queries_used: int
    count_std: float
    margin: float


def dp_stat(
    values: np.ndarray,
    *,
    domain: float,
    noise_multiplier: float,
    rng: np.random.Generator,
    queries: int = 20,
    margin: float | str = "auto",
    failure_prob: float = 1e-3,
    target: float | None = None,
) -> DPStatResult:
    """Private approximate maximum of non-negative ``values`` (DP-STAT with the margin fix).

    Args:
        values: the s values (s >= 1) from records used by no other part of the step.
        domain: public upper bound B of the search (the answer is at most 2^K Delta = B).
        noise_multiplier: alpha; the release is 1/(2 alpha^2)-zCDP.
        rng: source of the count noise.
        queries: K; the resolution is Delta = B / 2^K.
        margin: public slack in the stopping test, ``"auto"`` (Gamma at ``failure_prob``) or a
            number >= 0 (0 reproduces the paper).
        failure_prob: beta used by the automatic margin.
        target: the public count the test aims at (default s, the number of values). Pass the
            *expected* size when the number of values is itself random (records assigned to
            this release by independent draws), so that no realised count enters the test.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("DP-STAT needs a non-empty 1-D array of values.")
    if not np.all(np.isfinite(values)):
        raise ValueError("DP-STAT values must be finite.")
    domain = check_positive("domain", domain)
    alpha = check_positive("noise_multiplier", noise_multiplier)
    queries = check_count("queries", queries)
    if margin == "auto":
        slack = dp_stat_margin(alpha, queries, failure_prob)
    elif isinstance(margin, str):
        raise ValueError(f"Expected margin 'auto' or a number >= 0, got {margin!r}.")
    else:
        slack = float(margin)
        if not slack >= 0:
            raise ValueError(f"Expected margin >= 0, got {margin!r}.")
    s = float(values.size) if target is None else check_positive("target", target)
    count_std = alpha * math.sqrt(queries)
    sorted_values = np.sort(values)
    grid, last = dp_stat_grid(domain, queries)
    if grid[0] == 0.0:
        raise ValueError(
            f"DP-STAT resolution domain / 2^queries underflows to 0 (domain={domain:g}, "
            f"queries={queries}); use fewer queries or a larger domain."
        )
    for i, gamma in enumerate(grid.tolist()):
        count = int(np.searchsorted(sorted_values, gamma, side="right"))
        if count + gaussian_noise(rng, count_std) >= s - slack:
            return DPStatResult(gamma, queries, i + 1, count_std, slack)
    return DPStatResult(last, queries, queries, count_std, slack)
