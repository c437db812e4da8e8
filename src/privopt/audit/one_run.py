"""Auditing in one training run (Steinke, Nasr & Jagielski 2023; Mahloujifar, Melis & Chaudhuri
2024).

The game: m canaries, each included in the training data independently with probability 1/2
(``S_i`` a fair coin), one run of the mechanism, one score per canary. The auditor guesses
"included" for the ``r`` canaries with the highest scores (abstaining on the rest; the number of
guesses is fixed before the scores are seen) and counts the ``v`` correct guesses.

**Steinke-Nasr-Jagielski (SNJ, arXiv 2305.08846, Theorem 3.1 with its delta term).** If the
mechanism is (epsilon, delta)-DP with respect to each canary, then with ``q = e^eps / (1 + e^eps)``
and ``beta = P[Bin(r, q) >= v]``::

    P[W >= v] <= beta + 2 m delta max_{1 <= i <= v} (P[Bin(r, q) >= v - i] - beta) / i.

The right-hand side is a p-value that increases with epsilon; the lower bound reported is the
largest epsilon at which it is still at most ``alpha = 1 - confidence``: the claim of every
smaller epsilon is rejected at level alpha. DP's generalisation argument gives this without a
group-privacy cost in m.

**f-DP one run (Mahloujifar et al., arXiv 2410.22235, their capped recursion).** The same game,
tested against the whole trade-off curve of the Gaussian mechanism that is exactly
(epsilon, delta)-DP: mu(epsilon, delta) = the GDP parameter whose delta(epsilon) curve passes
through (epsilon, delta) (:func:`privopt.accounting.gdp_mu`), and the "blow-up inverse"
``g(x) = Phi(Phi^-1(x) - mu)``. Start from ``P = alpha v / m`` (mass of correct guesses) and
``H = alpha (r - v) / m`` (of wrong ones) and, for ``i = v - 1, ..., 0``, raise H to
``max(H, g(P))`` and P by ``i / (r - i)`` times the increase (capped at 1), until H stops moving.
The claim is rejected iff ``P + H > r / m``. Using the whole Gaussian curve instead of one
(epsilon, delta) point makes it tighter for Gaussian mechanisms, the case of every release
path privopt trains with.

Neither bound is tight for a correct Gaussian mechanism: with m = 1000 canaries at epsilon = 2
one run certifies about 0.5 (SNJ) to 0.75 (f-DP) even with an ideal score
(``docs/theory/torch-audits-selection-dask.md`` §2.4). A lower bound above the claim is a
bug at the stated confidence; a bound below it proves nothing about the claim's tightness.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, norm

from privopt._validate import check_count, check_probability

__all__ = [
    "GUESS_FRACTIONS",
    "OneRunResult",
    "audit_one_run",
    "epsilon_one_run",
    "fdp_rejects",
    "one_run_p_value",
]

#: Pre-registered guess counts, as fractions of the canaries (Bonferroni over the grid).
GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2)
METHODS = ("fdp", "steinke")
_EPS_MAX = 60.0  # above this the binomial and GDP arithmetic saturate in float64


def _check_counts(canaries: int, guesses: int, correct: int) -> tuple[int, int, int]:
    m = check_count("canaries", canaries)
    r = check_count("guesses", guesses, minimum=0)
    v = check_count("correct", correct, minimum=0)
    if not v <= r <= m:
        raise ValueError(f"Expected correct <= guesses <= canaries, got {v}, {r}, {m}.")
    return m, r, v


def one_run_p_value(
    canaries: int, guesses: int, correct: int, epsilon: float, delta: float
) -> float:
    """SNJ's bound on P[at least ``correct`` of ``guesses`` right] under (epsilon, delta)-DP.

    >>> round(one_run_p_value(1000, 100, 50, 0.0, 0.0), 4)  # fair coins: P[Bin(100, 1/2) >= 50]
    0.5398
    """
    m, r, v = _check_counts(canaries, guesses, correct)
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-float(epsilon)))
    beta = float(binom.sf(v - 1, r, q))
    if delta <= 0.0:
        return min(1.0, beta)
    i = np.arange(1, v + 1)
    tails = binom.sf(v - i - 1, r, q)
    return float(min(1.0, beta + 2.0 * m * delta * np.max((tails - beta) / i)))


@functools.lru_cache(maxsize=256)
def _gaussian_mu(epsilon: float, delta: float) -> float:
    from privopt.accounting import gdp_mu

    return gdp_mu(epsilon, delta) if epsilon > 0 else _mu_at_zero(delta)


def _mu_at_zero(delta: float) -> float:
    # (0, delta)-DP Gaussian: delta = 2 Phi(mu / 2) - 1
    return 2.0 * float(norm.ppf((1.0 + delta) / 2.0))


def fdp_rejects(
    canaries: int, guesses: int, correct: int, epsilon: float, delta: float, alpha: float
) -> bool:
    """Whether the f-DP one-run test rejects "the mechanism is (epsilon, delta)-DP like a
    Gaussian" at level ``alpha`` (Mahloujifar et al.'s capped recursion, module docstring)."""
    m, r, v = _check_counts(canaries, guesses, correct)
    if v == 0:
        return False
    mu = _gaussian_mu(float(epsilon), float(delta))
    p = alpha * v / m
    h = alpha * (r - v) / m
    for i in range(v - 1, -1, -1):
        raised = max(h, float(norm.cdf(norm.ppf(p) - mu)))
        p = min(p + i / (r - i) * (raised - h), 1.0)
        if raised == h:
            break
        h = raised
    return p + h > r / m


def epsilon_one_run(
    canaries: int,
    guesses: int,
    correct: int,
    *,
    delta: float,
    confidence: float = 0.95,
    method: str = "fdp",
) -> float:
    """Largest epsilon whose (epsilon, delta) claim the counts reject at ``confidence``.

    0.0 when even epsilon = 0 is not rejected. ``method`` is ``"fdp"`` (Gaussian trade-off
    curve) or ``"steinke"`` (SNJ's binomial bound).
    """
    m, r, v = _check_counts(canaries, guesses, correct)
    if method not in METHODS:
        raise ValueError(f"Expected method in {METHODS}, got {method!r}.")
    delta = float(delta)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"Expected delta in [0, 1), got {delta!r}.")
    alpha = 1.0 - check_probability("confidence", confidence)
    if method == "steinke":

        def rejected(eps: float) -> bool:
            return one_run_p_value(m, r, v, eps, delta) <= alpha
    else:

        def rejected(eps: float) -> bool:
            return fdp_rejects(m, r, v, eps, delta, alpha)

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > _EPS_MAX:
            return lo
    while hi - lo > 1e-6 * max(1.0, lo):  # bisection: rejection is monotone in epsilon
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class OneRunResult:
    """Outcome of a one-run audit.

    Attributes:
        epsilon_lower_bound: the mechanism is not (epsilon, delta)-DP for any smaller epsilon,
            with probability ``confidence`` over the canary coins and the run.
        confidence, delta, method: as requested.
        canaries: m; guesses, correct: r and v at the guess count that gave the bound.
        guess_counts: the pre-registered guess counts (the bound is Bonferroni-corrected over
            them).
    """

    epsilon_lower_bound: float
    confidence: float
    delta: float
    method: str
    canaries: int
    guesses: int
    correct: int
    guess_counts: tuple[int, ...]


def audit_one_run(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    method: str = "fdp",
    guess_fractions: tuple[float, ...] = GUESS_FRACTIONS,
) -> OneRunResult:
    """One-run epsilon lower bound from per-canary scores (higher = "included").

    For each pre-registered guess count ``r = ceil(f m)`` the top-r canaries are guessed
    "included"; each count is tested at level ``(1 - confidence) / len(guess_fractions)``
    (Bonferroni), so the reported maximum holds at ``confidence``. ``included`` holds the
    canaries' secret coins (the auditor's ground truth, used only to count correct guesses).
    """
    s = np.asarray(scores, dtype=float).ravel()
    inc = np.asarray(included).ravel()
    if s.size != inc.size or s.size < 2:
        raise ValueError("Expected one score per canary and at least 2 canaries.")
    if inc.dtype != bool:
        if not np.all(np.isin(inc, (0, 1))):
            raise ValueError("included must hold booleans (the canaries' coins).")
        inc = inc.astype(bool)
    if not np.all(np.isfinite(s)):
        raise ValueError("Scores must be finite.")
    if not guess_fractions or not all(0.0 < f <= 1.0 for f in guess_fractions):
        raise ValueError(f"Expected guess fractions in (0, 1], got {guess_fractions!r}.")
    check_probability("confidence", confidence)
    m = s.size
    level = 1.0 - (1.0 - confidence) / len(guess_fractions)
    order = np.argsort(-s, kind="stable")
    counts = tuple(sorted({max(1, math.ceil(f * m)) for f in guess_fractions}))
    best = (0.0, counts[0], int(np.count_nonzero(inc[order[: counts[0]]])))
    for r in counts:
        v = int(np.count_nonzero(inc[order[:r]]))
        bound = epsilon_one_run(m, r, v, delta=delta, confidence=level, method=method)
        if bound > best[0]:
            best = (bound, r, v)
    return OneRunResult(
        epsilon_lower_bound=best[0],
        confidence=float(confidence),
        delta=float(delta),
        method=method,
        canaries=m,
        guesses=best[1],
        correct=best[2],
        guess_counts=counts,
    )
