"""RESIDUALEST (Private Overparameterized Linear Regression, anonymous submission, Algorithm 2): a
(private) upper
estimate of the residual level.

DP-FTRL-Σ clips the gradient of step t at psi_t = C l_t, where l_t estimates the root of the
target residual level of the current model w_t (docs/theory/overparameterised-regression.md, §2.2):

    target(w) = E[(y - <w, x>)^2] = ||w - w*||_H^2 + sigma_zeta^2,

from m labeled **estimating rows** (x~_i, y~_i) held out from training (or one half of a split
training set, in which case the paper's N becomes N / 2; docs/theory/overparameterised-regression.md
"Estimating data"). With r_i = (y~_i - <w, x~_i>)^2:

**Option 1** (public estimating rows, no privacy cost): l = sqrt(2 sum_i r_i / m). Lemma B.3:
l^2 >= target w.h.p. once m = Omega(log N).

**Option 2** (private estimating rows): the Karwa–Vadhan (2017, Lemma 2.3) stability histogram
of group means, as corrected in docs/theory/overparameterised-regression.md "[FIX] Correct option-2
mechanism":

1. split the rows, in the order given, into ñ groups of m~ = floor(m / ñ) consecutive rows
   (the last m - ñ m~ rows are unused) and take the group means r̄_j;
2. bin them into Ω = {0} ∪ {[2^k, 2^(k+1)) : k ∈ Z};
3. for every **non-empty** bin, p~_k = p̂_k + Lap(2 / (ε~ ñ)) where p̂_k is the fraction of group
   means in bin k; keep p~_k only if p~_k >= 2 log(2 / δ~) / (ε~ ñ) + 1 / ñ;
4. output l = sqrt(2 l_2), l_2 the right end point of the bin with the largest kept p~_k
   (l = 0 for the bin {0}); if every bin is suppressed, output the public ``fallback``.

Privacy (docs/theory/overparameterised-regression.md "Privacy of one call"). Replacing one
estimating row changes one r_i, so one group mean r̄_j: one histogram element moves, at most two bin
frequencies change by 1/ñ (l1 sensitivity 2/ñ), and Lap(2/(ε~ ñ)) makes the bins present in both
datasets ε~-DP. A bin present in one dataset only has frequency 1/ñ and passes the threshold with
probability (1/2) exp(-log(2/δ~)) = δ~/4, at most twice. So one call is (ε~, δ~)-DP (Karwa–Vadhan
state it for δ~ < 1/ñ, which is enforced) under **replace-one** neighbours, and under zero-out
neighbours (a zeroed row is a replacement by the row (0, 0)). It is not analysed under add/remove:
adding a row shifts the grouping. Only the arg-max bin is used afterwards (post-processing), and so
is the fallback, which must be public or a previous private output (e.g. l_{t-1};
docs/theory/overparameterised-regression.md). The row order must not depend on the data values
(collection order or a random permutation); the grouping is then data-independent. The
floating-point Laplace sampler carries the usual caveat (Mironov 2012;
docs/theory/overparameterised-regression.md item 7).

Constants (docs/theory/overparameterised-regression.md "[FIX] ñ formula" and table; errata in §9
item 3):

* ñ = max(⌈8 / (ε~ β) · log(4 / (δ~ α))⌉, ñ_surv): the Karwa–Vadhan accuracy condition that
  every kept frequency is within β of p̂_k with probability 1 - α, with the note's β = 1/4 and
  α = 1/N^2 (``accuracy`` and ``failure_prob``); ñ_surv = ⌊4 log(2/δ~)/ε~ + 2⌋ + 1 is the
  smallest ñ with threshold < 1/2, so a bin holding half the group means is kept (the note's
  "groups needed so a half-mass bin survives"; the accuracy condition is ~14x larger).
* m~ >= ⌈ln N⌉ rows per group (the note's m~ = ⌈ln N⌉; the paper's m~ >= O(log N)).
* The paper's m for option 2 is therefore ñ ⌈ln N⌉ (Theorem 4.2: m = Omega(log^2(N/δ~)/ε~)).
  :func:`rows_needed` computes it; fewer rows raise ``ValueError`` naming that number.
* Threshold with log(2/δ~) (Karwa–Vadhan) where the paper prints log(1/δ); group size m~ where
  the paper prints ñ.
* Option 1 needs no rows for privacy; the paper only says m = Omega(log N). :func:`rows_needed`
  fixes m = ⌈8 κ ln(1/α)⌉ with α = 1/N^2 and κ = E r^2 / (E r)^2 the residual kurtosis (3 for
  Gaussian residuals, the default): by Maurer's (2003) lower-tail bound for non-negative
  variables, P(mean r < target / 2) <= exp(-m / (8 κ)) <= α, i.e. coverage l^2 >= target in
  each of the N calls with probability 1 - 1/N^2 (1 - 1/N over a run, as in Theorem 4.2).

Accuracy (Lemma B.3 with docs/theory/overparameterised-regression.md "Why l^2 upper-bounds the
target"): in option 2, if the group means concentrate in at most two consecutive bins, the arg-max
bin's right end point l_2 satisfies 2 l_2 >= target, and l^2 <= 4(1 + C_4) target (the paper's
constant 2 is not reachable with factor-2 bins).

Accounting. One call is recorded as one (ε~, δ~)-DP event in the caller's
:class:`~privopt.accounting.ledger.PrivacyLedger` (partition ``partition``: the estimating rows
are disjoint from the training rows, so DP-FTRL-Σ records every call under one partition label,
e.g. ``"estimating"``, and the ledger composes the N calls with each other and in parallel with
the tree; docs/theory/overparameterised-regression.md items 3–4) as an
:class:`~privopt.accounting.ApproxDPEvent`; the ledger composes repeated calls exactly (privacy loss
distribution of the (ε~, δ~)-DP mechanism, self-composed). A caller making many calls may record
them as one event with ``count``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from privopt._validate import (
    check_count,
    check_design,
    check_nonnegative,
    check_positive,
    check_probability,
)
from privopt.accounting.events import ApproxDPEvent
from privopt.accounting.ledger import PrivacyLedger
from privopt.noise.rng import laplace_noise

__all__ = [
    "GAUSSIAN_KURTOSIS",
    "HistogramPlan",
    "ResidualEstimate",
    "histogram_plan",
    "per_call_budget",
    "residual_estimate",
    "rows_needed",
]

#: Residuals (and group means) that overflow float64 are mapped to this value, record by record.
_FLOAT_MAX = float(np.finfo(np.float64).max)
#: Key of the bin {0} (exact zeros) among the integer exponents k of the bins [2^k, 2^(k+1)).
_ZERO_BIN = np.iinfo(np.int64).min
#: Default kurtosis E r^2 / (E r)^2 of the squared residual r in option 1 (Gaussian residuals).
GAUSSIAN_KURTOSIS = 3.0
#: Neighbouring relations under which the stability histogram's (ε~, δ~) holds (not add/remove:
#: adding a row shifts the grouping).
HISTOGRAM_RELATIONS = ("replace-one", "zero-out")


# -- privacy event (interim) ---------------------------------------------------------------------


def _check_ledger(ledger: PrivacyLedger) -> None:
    """Fail before touching the data if ``ledger`` cannot hold the histogram's event."""
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(
            f"RESIDUALEST option 2 records its cost: expected a PrivacyLedger, got {ledger!r}."
        )
    if ledger.neighbouring.value not in HISTOGRAM_RELATIONS:
        raise ValueError(
            "The stability histogram is analysed under replace-one (or zero-out) neighbours; "
            f"this ledger uses {ledger.neighbouring.value!r}."
        )


def _record_histogram_cost(
    ledger: PrivacyLedger, *, epsilon: float, delta: float, partition: Hashable | None
) -> None:
    """Record one (epsilon, delta)-DP histogram release (the only place that builds the event)."""
    ledger.record(
        ApproxDPEvent(epsilon, delta, label="RESIDUALEST stability histogram"),
        partition=partition,
    )


# -- constants -----------------------------------------------------------------------------------


def per_call_budget(epsilon: float, delta: float, horizon: int) -> tuple[float, float]:
    """Theorem 4.1's per-call budget: ε~ = ε / sqrt(8 N log(2/δ)), δ~ = δ / (2N).

    With these, the N calls of one DP-FTRL-Σ run compose to (ε, δ) by advanced composition
    (docs/theory/overparameterised-regression.md, §3.2 item 3).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    horizon = check_count("horizon", horizon)
    return epsilon / math.sqrt(8.0 * horizon * math.log(2.0 / delta)), delta / (2.0 * horizon)


def _default_failure_prob(horizon: int) -> float:
    # alpha = 1/N^2 (docs/theory/overparameterised-regression.md); N = 1 would give alpha = 1, so N
    # is taken as >= 2.
    return 1.0 / max(horizon, 2) ** 2


def _option(option: str | int) -> str:
    if option in (1, "1", "public"):
        return "public"
    if option in (2, "2", "private"):
        return "private"
    raise ValueError(f"Expected option in (1, 2, 'public', 'private'), got {option!r}.")


@dataclass(frozen=True)
class HistogramPlan:
    """Public sizes and noise of option 2 for one per-call budget (nothing data-dependent).

    Attributes:
        num_groups: ñ = max(accuracy_groups, survival_groups).
        min_group_size: m~_min = ⌈ln N⌉ (at least 1), the fewest rows per group.
        rows: ñ · m~_min, the fewest estimating rows (the paper's m).
        noise_scale: b = 2 / (ε~ ñ), the Laplace scale on each bin frequency.
        threshold: 2 log(2/δ~) / (ε~ ñ) + 1/ñ, the smallest kept noisy frequency.
        accuracy_groups: ⌈8 / (ε~ β) log(4 / (δ~ α))⌉ (Karwa–Vadhan accuracy β w.p. 1 - α).
        survival_groups: smallest ñ with threshold < 1/2.
    """

    epsilon: float
    delta: float
    horizon: int
    accuracy: float
    failure_prob: float
    num_groups: int
    min_group_size: int
    rows: int
    noise_scale: float
    threshold: float
    accuracy_groups: int
    survival_groups: int


def histogram_plan(
    epsilon: float,
    delta: float,
    horizon: int,
    *,
    accuracy: float = 0.25,
    failure_prob: float | None = None,
    min_group_size: int | None = None,
) -> HistogramPlan:
    """The group count, group size and noise of option 2 (see the module docstring).

    Args:
        epsilon: ε~ > 0 of one call.
        delta: δ~ in (0, 1) of one call; Karwa–Vadhan need δ~ < 1/ñ.
        horizon: N, the number of calls in a run (training steps); sets α and m~.
        accuracy: β, the histogram accuracy (the note's 1/4: then a bin holding half the group
            means keeps a noisy frequency above 1/4, above every bin with no group mean).
        failure_prob: α (default 1/N^2).
        min_group_size: m~_min (default ⌈ln N⌉, at least 1).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    horizon = check_count("horizon", horizon)
    accuracy = check_positive("accuracy", accuracy)
    if not accuracy <= 1.0:
        raise ValueError(f"Expected accuracy in (0, 1], got {accuracy!r}.")
    alpha = (
        _default_failure_prob(horizon)
        if failure_prob is None
        else check_probability("failure_prob", failure_prob)
    )
    group = (
        max(1, math.ceil(math.log(horizon)))
        if min_group_size is None
        else check_count("min_group_size", min_group_size)
    )
    accuracy_groups = math.ceil(8.0 / (epsilon * accuracy) * math.log(4.0 / (delta * alpha)))
    survival_groups = math.floor(4.0 * math.log(2.0 / delta) / epsilon + 2.0) + 1
    groups = max(accuracy_groups, survival_groups)
    if not delta < 1.0 / groups:
        raise ValueError(
            f"The stability histogram needs delta < 1/num_groups = {1.0 / groups:.3g} "
            f"(Karwa–Vadhan), got delta={delta:g}; use a smaller delta."
        )
    return HistogramPlan(
        epsilon=epsilon,
        delta=delta,
        horizon=horizon,
        accuracy=accuracy,
        failure_prob=alpha,
        num_groups=groups,
        min_group_size=group,
        rows=groups * group,
        noise_scale=2.0 / (epsilon * groups),
        threshold=2.0 * math.log(2.0 / delta) / (epsilon * groups) + 1.0 / groups,
        accuracy_groups=accuracy_groups,
        survival_groups=survival_groups,
    )


def rows_needed(
    option: str | int = "private",
    *,
    horizon: int,
    epsilon: float | None = None,
    delta: float | None = None,
    accuracy: float = 0.25,
    failure_prob: float | None = None,
    min_group_size: int | None = None,
    kurtosis: float = GAUSSIAN_KURTOSIS,
) -> int:
    """How many estimating rows RESIDUALEST needs (the paper's m, constants of the module doc).

    Option 2 (``"private"``): ñ · ⌈ln N⌉ for the per-call (``epsilon``, ``delta``) =
    (ε~, δ~), see :func:`histogram_plan` (e.g. from :func:`per_call_budget`). Option 1
    (``"public"``): ⌈8 κ ln(1/α)⌉ with α = ``failure_prob`` (default 1/N^2) and κ = ``kurtosis``,
    the rows for l^2 >= target with probability 1 - α (not a privacy requirement).

    >>> rows_needed("private", horizon=1024, epsilon=1.0, delta=1e-6)
    6517
    >>> rows_needed("public", horizon=1024)
    333
    """
    horizon = check_count("horizon", horizon)
    if _option(option) == "public":
        alpha = (
            _default_failure_prob(horizon)
            if failure_prob is None
            else check_probability("failure_prob", failure_prob)
        )
        kurtosis = check_positive("kurtosis", kurtosis)
        if not kurtosis >= 1.0:
            raise ValueError(f"Expected kurtosis >= 1 (E r^2 >= (E r)^2), got {kurtosis!r}.")
        return math.ceil(8.0 * kurtosis * math.log(1.0 / alpha))
    need = "Option 2 (private) needs the per-call epsilon and delta."
    return _private_plan(epsilon, delta, horizon, accuracy, failure_prob, min_group_size, need).rows


def _private_plan(
    epsilon, delta, horizon, accuracy, failure_prob, min_group_size, need: str
) -> HistogramPlan:
    """Option 2's :func:`histogram_plan`; ``need`` is the error if a budget input is missing."""
    if epsilon is None or delta is None or horizon is None:
        raise ValueError(need)
    return histogram_plan(
        epsilon,
        delta,
        horizon,
        accuracy=accuracy,
        failure_prob=failure_prob,
        min_group_size=min_group_size,
    )


# -- the estimator -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResidualEstimate:
    """Output of RESIDUALEST.

    Attributes:
        level: l, the estimate (l^2 estimates an upper bound of target(w)); psi_t = C l.
        option: ``"public"`` (option 1) or ``"private"`` (option 2).
        bin: the chosen bin [l_1, l_2) = [2^k, 2^(k+1)) as (l_1, l_2), (0.0, 0.0) for the bin
            {0}; None for option 1 and when the fallback was used.
        fallback_used: every bin was suppressed and ``level`` is the public fallback.
        epsilon: ε~ spent (0.0 for option 1).
        delta: δ~ spent (0.0 for option 1).
        rows_used: rows that entered the estimate (m, or ñ m~ for option 2).
        num_groups: ñ (None for option 1).
        group_size: m~ = floor(m / ñ) (None for option 1).
        noise_scale: Laplace scale 2 / (ε~ ñ) (None for option 1).
        threshold: the kept-frequency threshold (None for option 1).
    """

    level: float
    option: str
    bin: tuple[float, float] | None
    fallback_used: bool
    epsilon: float
    delta: float
    rows_used: int
    num_groups: int | None = None
    group_size: int | None = None
    noise_scale: float | None = None
    threshold: float | None = None


def _bin_keys(values: np.ndarray) -> np.ndarray:
    """Exponent k of the bin [2^k, 2^(k+1)) of each value > 0 (exact, by frexp); {0} -> key."""
    _, exponent = np.frexp(values)  # value = mantissa 2^e with mantissa in [1/2, 1)
    keys = exponent.astype(np.int64) - 1
    return np.where(values > 0.0, keys, _ZERO_BIN)


def _bin_of(key: int) -> tuple[tuple[float, float], float]:
    """(bin, l): the bin of ``key`` and l = sqrt(2 l_2) = 2^((k + 2) / 2)."""
    if key == _ZERO_BIN:
        return (0.0, 0.0), 0.0
    with np.errstate(over="ignore"):
        upper = float(np.ldexp(1.0, key + 1))  # inf only for k = 1023 (l stays finite)
    level = math.sqrt(2.0) ** ((key + 2) % 2) * math.ldexp(1.0, (key + 2) // 2)
    return (math.ldexp(1.0, key), upper), level


def _squared_residuals(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.square(y - X @ w)
    # Record-wise map of overflow (inf, or NaN from inf - inf) to the largest float: each r_i
    # still depends on row i only, so the sensitivity argument is unchanged.
    return np.where(np.isfinite(r), r, _FLOAT_MAX)


def residual_estimate(
    X: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    *,
    option: str | int = "private",
    epsilon: float | None = None,
    delta: float | None = None,
    horizon: int | None = None,
    rng: np.random.Generator | None = None,
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    fallback: float | None = None,
    accuracy: float = 0.25,
    failure_prob: float | None = None,
    min_group_size: int | None = None,
) -> ResidualEstimate:
    """RESIDUALEST (Algorithm 2, docs/theory/overparameterised-regression.md): estimate l with l^2
    >= target(w) w.h.p.

    Args:
        X: (m, d) estimating features x~_i, disjoint from the training rows, in an order that
            does not depend on their values (option 2 groups consecutive rows).
        y: (m,) estimating labels y~_i.
        w: (d,) the current model; r_i = (y~_i - <w, x~_i>)^2.
        option: 1 / ``"public"`` (estimating rows are public) or 2 / ``"private"`` (default).
        epsilon: ε~ > 0 of this call (option 2), e.g. from :func:`per_call_budget`.
        delta: δ~ in (0, 1) of this call (option 2).
        horizon: N, the number of calls in the run (option 2: sets α = 1/N^2 and m~ >= ⌈ln N⌉).
        rng: source of the Laplace noise (option 2).
        ledger: option 2 records one (ε~, δ~) event here (replace-one or zero-out ledger);
            option 1 records no cost but adds the assumption that the rows are public.
        partition: ledger partition of the estimating rows (e.g. ``"estimating"``), for
            parallel composition with releases on the disjoint training rows; None composes
            sequentially with everything (valid, conservative).
        fallback: option 2: the level returned when every bin is suppressed; must be public or
            an earlier private output (e.g. l_{t-1}). Required: the paper specifies none.
        accuracy, failure_prob, min_group_size: β, α and m~_min of :func:`histogram_plan`.

    Returns:
        :class:`ResidualEstimate`.

    Raises:
        ValueError: bad shapes, non-finite data or model, epsilon <= 0, delta outside (0, 1),
            a ledger under add/remove neighbours, or (option 2) fewer rows than
            :func:`rows_needed` (the message gives the number).
    """
    kind = _option(option)
    X, y = check_design(X, y, "X", "y")
    w = np.asarray(w, dtype=float)
    if w.shape != (X.shape[1],):
        raise ValueError(f"Expected w of shape ({X.shape[1]},), got shape {w.shape}.")
    if not np.all(np.isfinite(w)):
        raise ValueError("w contains non-finite values (NaN or inf).")
    m = X.shape[0]

    if kind == "public":
        if ledger is not None:
            ledger.assume(
                "RESIDUALEST option 1: the labeled estimating rows are public (no privacy cost)"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            mean = float(np.mean(np.square(y - X @ w)))
        if not math.isfinite(mean):
            raise ValueError("The squared residuals overflow float64 (public option 1).")
        return ResidualEstimate(
            level=math.sqrt(2.0 * mean),
            option="public",
            bin=None,
            fallback_used=False,
            epsilon=0.0,
            delta=0.0,
            rows_used=m,
        )

    # -- option 2: validate everything public before touching the data values ----------------
    need = "Option 2 (private) needs epsilon, delta and horizon."
    plan = _private_plan(epsilon, delta, horizon, accuracy, failure_prob, min_group_size, need)
    if rng is None:
        raise ValueError("Option 2 (private) needs an rng for the Laplace noise.")
    if ledger is None:
        raise ValueError("Option 2 (private) needs a PrivacyLedger to record its cost in.")
    _check_ledger(ledger)
    if fallback is None:
        raise ValueError(
            "Option 2 (private) needs a public fallback level for when every bin is "
            "suppressed (e.g. the previous estimate l_{t-1} or a public upper bound)."
        )
    fallback = check_nonnegative("fallback", fallback)
    if m < plan.rows:
        raise ValueError(
            f"RESIDUALEST option 2 at epsilon={plan.epsilon:g}, delta={plan.delta:g}, "
            f"horizon N={plan.horizon} needs at least {plan.rows} estimating rows "
            f"({plan.num_groups} groups of {plan.min_group_size} rows), got {m}."
        )

    groups = plan.num_groups
    size = m // groups
    r = _squared_residuals(X[: groups * size], y[: groups * size], w)
    with np.errstate(over="ignore"):
        means = r.reshape(groups, size).mean(axis=1)
    means = np.where(np.isfinite(means), means, _FLOAT_MAX)
    keys, counts = np.unique(_bin_keys(means), return_counts=True)  # non-empty bins only
    noisy = counts / groups + laplace_noise(rng, plan.noise_scale, keys.size)
    kept = noisy >= plan.threshold
    _record_histogram_cost(ledger, epsilon=plan.epsilon, delta=plan.delta, partition=partition)

    common = dict(
        option="private",
        epsilon=plan.epsilon,
        delta=plan.delta,
        rows_used=groups * size,
        num_groups=groups,
        group_size=size,
        noise_scale=plan.noise_scale,
        threshold=plan.threshold,
    )
    if not np.any(kept):
        return ResidualEstimate(level=fallback, bin=None, fallback_used=True, **common)
    best = int(keys[kept][np.argmax(noisy[kept])])
    chosen, level = _bin_of(best)
    return ResidualEstimate(level=level, bin=chosen, fallback_used=False, **common)
