"""Black-box auditing over many runs (Jagielski et al. 2020; Nasr et al. 2021).

The auditor runs a mechanism ``n`` times on a dataset with a canary record and ``n`` times on its
neighbour without it, computes a scalar score from each release, and thresholds the score. For a
threshold test with ``tp`` of ``n_positive`` positives and ``fp`` of ``n_negative`` negatives
flagged, an (epsilon, delta)-DP mechanism satisfies (hypothesis-testing form of DP, Kairouz, Oh &
Viswanath 2015)::

    TPR <= e^epsilon FPR + delta        and        1 - FPR <= e^epsilon (1 - TPR) + delta.

With a one-sided Clopper-Pearson lower bound ``TPR_lo`` and upper bound ``FPR_hi``, each at level
``(1 - confidence) / 2`` (Bonferroni over the two rates), the true epsilon is at least
``log((TPR_lo - delta) / FPR_hi)`` with probability at least ``confidence`` (and likewise from the
complements); the larger of the two bounds is reported, floored at 0.

Choosing the threshold on the same runs that are then used for the bound would bias it upward, so
:func:`audit_scores` selects the threshold (and the direction of the test) on a first share of the
runs and bounds the rates on the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from privopt._validate import check_count, check_probability

__all__ = ["AuditResult", "audit_scores", "epsilon_lower_bound"]


def _cp_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound at level alpha (exact binomial)."""
    return 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))


def _cp_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound at level alpha (exact binomial)."""
    return (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha, successes + 1, trials - successes))
    )


def _log_ratio(numerator: float, denominator: float) -> float:
    if numerator <= 0.0:
        return 0.0
    if denominator <= 0.0:
        return math.inf
    return max(0.0, math.log(numerator / denominator))


def epsilon_lower_bound(
    true_positives: int,
    n_positive: int,
    false_positives: int,
    n_negative: int,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> float:
    """Lower bound on epsilon at ``confidence`` from one threshold test's counts.

    Args:
        true_positives: runs with the canary that the test flagged (of ``n_positive``).
        false_positives: runs without the canary that the test flagged (of ``n_negative``).
        delta: the delta of the claim being audited (a lower bound on epsilon at that delta).
        confidence: probability that the bound holds, over the auditor's runs.

    >>> round(epsilon_lower_bound(950, 1000, 50, 1000), 3)
    2.66
    >>> epsilon_lower_bound(500, 1000, 500, 1000)
    0.0
    """
    n_positive = check_count("n_positive", n_positive)
    n_negative = check_count("n_negative", n_negative)
    tp = check_count("true_positives", true_positives, minimum=0)
    fp = check_count("false_positives", false_positives, minimum=0)
    if tp > n_positive or fp > n_negative:
        raise ValueError("Expected true_positives <= n_positive and false_positives <= n_negative.")
    if not 0.0 <= float(delta) < 1.0 or math.isnan(float(delta)):
        raise ValueError(f"Expected delta in [0, 1), got {delta!r}.")
    alpha = (1.0 - check_probability("confidence", confidence)) / 2.0
    tpr_lo = _cp_lower(tp, n_positive, alpha)
    fpr_hi = _cp_upper(fp, n_negative, alpha)
    tnr_lo = _cp_lower(n_negative - fp, n_negative, alpha)
    fnr_hi = _cp_upper(n_positive - tp, n_positive, alpha)
    return max(_log_ratio(tpr_lo - delta, fpr_hi), _log_ratio(tnr_lo - delta, fnr_hi))


@dataclass(frozen=True)
class AuditResult:
    """Outcome of a black-box audit.

    Attributes:
        epsilon_lower_bound: epsilon the mechanism has at least, with probability ``confidence``.
        confidence: the confidence of the bound.
        delta: the delta at which the bound is stated.
        threshold: the score threshold chosen on the selection runs.
        direction: +1 if a score above the threshold says "canary present", -1 if below.
        true_positive_rate, false_positive_rate: observed on the evaluation runs.
        runs: (with canary, without canary) evaluation runs.
    """

    epsilon_lower_bound: float
    confidence: float
    delta: float
    threshold: float
    direction: int
    true_positive_rate: float
    false_positive_rate: float
    runs: tuple[int, int]


def _best_threshold(
    pos: np.ndarray, neg: np.ndarray, delta: float, confidence: float
) -> tuple[float, int]:
    """Threshold and direction with the largest Clopper-Pearson bound on the selection runs.

    Candidates are up to 200 quantiles of the pooled scores (robust: an extreme threshold that
    happens to separate a few runs gets a wide interval, not a large ratio).
    """
    pooled = np.concatenate([pos, neg])
    candidates = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, 201)))
    best = (-1.0, float(candidates[0]), 1)
    for direction in (1, -1):
        for c in candidates:
            tp = int(np.count_nonzero(direction * pos >= direction * c))
            fp = int(np.count_nonzero(direction * neg >= direction * c))
            value = epsilon_lower_bound(
                tp, pos.size, fp, neg.size, delta=delta, confidence=confidence
            )
            if value > best[0]:
                best = (value, float(c), direction)
    return best[1], best[2]


def audit_scores(
    with_canary: np.ndarray,
    without_canary: np.ndarray,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    selection_share: float = 0.5,
) -> AuditResult:
    """Epsilon lower bound from the scores of runs with and without the canary.

    The first ``selection_share`` of each score array picks the threshold and the direction of the
    test; the remaining runs give the Clopper-Pearson bound (so the bound is valid at
    ``confidence`` whatever the selection did). Scores must come from independent runs.
    """
    pos = np.asarray(with_canary, dtype=float).ravel()
    neg = np.asarray(without_canary, dtype=float).ravel()
    if pos.size < 4 or neg.size < 4:
        raise ValueError("Expected at least 4 runs on each side.")
    if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(neg))):
        raise ValueError("Scores must be finite.")
    if not 0.0 < selection_share < 1.0:
        raise ValueError(f"Expected selection_share in (0, 1), got {selection_share!r}.")
    kp = max(1, min(pos.size - 1, int(pos.size * selection_share)))
    kn = max(1, min(neg.size - 1, int(neg.size * selection_share)))
    threshold, direction = _best_threshold(pos[:kp], neg[:kn], delta, confidence)
    eval_pos, eval_neg = direction * pos[kp:], direction * neg[kn:]
    tp = int(np.count_nonzero(eval_pos >= direction * threshold))
    fp = int(np.count_nonzero(eval_neg >= direction * threshold))
    bound = epsilon_lower_bound(
        tp, eval_pos.size, fp, eval_neg.size, delta=delta, confidence=confidence
    )
    return AuditResult(
        epsilon_lower_bound=bound,
        confidence=confidence,
        delta=float(delta),
        threshold=float(threshold),
        direction=direction,
        true_positive_rate=tp / eval_pos.size,
        false_positive_rate=fp / eval_neg.size,
        runs=(int(eval_pos.size), int(eval_neg.size)),
    )
