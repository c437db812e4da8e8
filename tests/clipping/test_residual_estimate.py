"""RESIDUALEST (Private Overparameterized Linear Regression, anonymous submission, Algorithm 2;
docs/theory/overparameterised-regression.md#residualest, §3.2 item 3, §8.2, §8.3 item 7).

Option 1: l = sqrt(2 mean r_i) on public rows. Option 2: Karwa–Vadhan stability histogram of ñ
group means with geometric bins, Lap(2/(ε~ ñ)) on non-empty bins, threshold
2 log(2/δ~)/(ε~ ñ) + 1/ñ, l = sqrt(2 l_2) of the arg-max kept bin, public fallback otherwise.

Coverage tests draw Gaussian x ~ N(0, H) and labels y = <w*, x> + zeta, so the residual of w is
N(0, target) with target = ||w - w*||_H^2 + sigma_zeta^2 exactly. A set of trials "covers at
>= 99%" when the one-sided 95% Clopper–Pearson lower bound of the coverage is >= 0.99 (0 misses
in >= 299 trials).
"""

import math

import numpy as np
import pytest
from scipy import stats

from privopt.accounting.ledger import PrivacyLedger
from privopt.clipping.residual_estimate import (
    HistogramPlan,
    ResidualEstimate,
    _bin_keys,
    _bin_of,
    histogram_plan,
    per_call_budget,
    residual_estimate,
    rows_needed,
)

#: A per-call budget whose paper's m is small enough for fast tests: ñ = 753, m~ = 5, m = 3765.
EPS, DELTA, HORIZON = 1.0, 1e-6, 64


def coverage_lower_bound(misses: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper–Pearson lower confidence bound of the coverage probability."""
    return float(stats.beta.ppf(1.0 - confidence, trials - misses, misses + 1))


def draw(rng, m, target):
    """(X, y, w) with d = 2, H = diag(1, 1/4), residual law N(0, target), half from w - w*."""
    lam = np.array([1.0, 0.25])
    X = rng.standard_normal((m, 2)) * np.sqrt(lam)
    w_star = rng.standard_normal(2)
    step = rng.standard_normal(2)
    step *= math.sqrt(0.5 * target / np.sum(lam * step**2))  # ||w - w*||_H^2 = target / 2
    y = X @ w_star + math.sqrt(0.5 * target) * rng.standard_normal(m)
    return X, y, w_star + step


def private(X, y, w, *, ledger=None, seed=0, fallback=123.0, **kw):
    kw = {"epsilon": EPS, "delta": DELTA, "horizon": HORIZON, **kw}
    return residual_estimate(
        X,
        y,
        w,
        option="private",
        rng=kw.pop("rng", None) or np.random.default_rng(seed),
        ledger=PrivacyLedger("replace-one") if ledger is None else ledger,
        fallback=fallback,
        **kw,
    )


def rows_from_group_means(means, group_size):
    """X = 0 (d = 1), w = 0 and y chosen so every row of group j has r = means[j]."""
    r = np.repeat(np.asarray(means, dtype=float), group_size)
    return np.zeros((r.size, 1)), np.sqrt(r), np.zeros(1)


# -- constants: the paper's m as the note fixes it -----------------------------------------------


@pytest.mark.parametrize(
    ("horizon", "epsilon", "eps_tilde", "groups", "rows"),
    # docs/theory/overparameterised-regression.md#residualest practicality table (delta = 1e-5), as
    # printed (2 significant digits)
    [
        (1024, 1.0, 3.2e-3, 25_000, 176_000),
        (4096, 1.0, 1.6e-3, 54_000, 483_000),
        (4096, 8.0, 1.3e-2, 6_700, 60_000),
        (2**20, 1.0, 9.9e-5, 1_080_000, 15_000_000),
    ],
)
def test_survival_groups_reproduce_the_note_table(horizon, epsilon, eps_tilde, groups, rows):
    e, d = per_call_budget(epsilon, 1e-5, horizon)
    assert float(f"{e:.2g}") == eps_tilde
    assert d == 1e-5 / (2 * horizon)
    plan = histogram_plan(e, d, horizon)
    # The note's column is the ñ at which a half-mass bin survives; its m is ñ ⌈ln N⌉.
    assert plan.survival_groups == pytest.approx(groups, rel=0.01)
    assert plan.survival_groups * plan.min_group_size == pytest.approx(rows, rel=0.015)
    assert plan.min_group_size == math.ceil(math.log(horizon))
    # The paper's m uses the (larger) Karwa–Vadhan accuracy condition with β = 1/4, α = 1/N².
    assert plan.num_groups == plan.accuracy_groups > plan.survival_groups
    assert rows_needed("private", horizon=horizon, epsilon=e, delta=d) == plan.rows


def test_histogram_plan_formulas():
    plan = histogram_plan(EPS, DELTA, HORIZON)
    assert isinstance(plan, HistogramPlan)
    n = math.ceil(8 / (EPS * 0.25) * math.log(4 / (DELTA / HORIZON**2)))
    assert plan.num_groups == n == 753
    assert plan.min_group_size == 5 and plan.rows == 5 * n
    assert plan.noise_scale == pytest.approx(2 / (EPS * n), rel=1e-15)
    assert plan.threshold == pytest.approx(2 * math.log(2 / DELTA) / (EPS * n) + 1 / n, rel=1e-15)
    assert plan.threshold < 0.5  # a bin holding half the group means survives
    # Explicit constants override the defaults.
    custom = histogram_plan(EPS, DELTA, HORIZON, accuracy=0.5, failure_prob=1e-3, min_group_size=9)
    assert custom.num_groups == math.ceil(16 * math.log(4 / (DELTA * 1e-3)))
    assert custom.rows == 9 * custom.num_groups


def test_rows_needed_decreases_with_the_budget():
    rows = [rows_needed(horizon=256, epsilon=e, delta=1e-7) for e in (0.1, 0.5, 1.0, 4.0)]
    assert rows == sorted(rows, reverse=True) and len(set(rows)) == 4
    rows = [rows_needed(horizon=256, epsilon=1.0, delta=d) for d in (1e-12, 1e-9, 1e-6)]
    assert rows == sorted(rows, reverse=True) and len(set(rows)) == 3


@pytest.mark.parametrize("horizon", [2, 64, 1024, 10**4])
def test_public_rows_bound_is_valid_for_gaussian_residuals(horizon):
    # Option 1 fixes m = ⌈8 κ ln N²⌉ (κ = 3) from Maurer's bound exp(-m / (8κ)) <= 1/N². For
    # Gaussian residuals the exact miss probability is P(χ²_m < m/2), which must be below 1/N².
    m = rows_needed("public", horizon=horizon)
    assert m == math.ceil(24 * math.log(horizon**2))
    assert stats.chi2.cdf(m / 2, m) <= 1 / horizon**2
    assert rows_needed("public", horizon=horizon, failure_prob=1e-3, kurtosis=9) == math.ceil(
        72 * math.log(1e3)
    )


# -- option 1 --------------------------------------------------------------------------------


def test_option1_is_the_papers_formula_and_costs_nothing():
    rng = np.random.default_rng(1)
    X, y, w = draw(rng, 50, 1.0)
    ledger = PrivacyLedger("add-remove")  # any relation: nothing is charged
    out = residual_estimate(X, y, w, option=1, ledger=ledger)
    assert isinstance(out, ResidualEstimate)
    assert out.level == pytest.approx(math.sqrt(2 * np.mean((y - X @ w) ** 2)), rel=1e-14)
    assert (out.option, out.bin, out.fallback_used) == ("public", None, False)
    assert (out.epsilon, out.delta, out.rows_used) == (0.0, 0.0, 50)
    assert ledger.events == () and len(ledger.assumptions) == 1
    assert residual_estimate(X, y, w, option="public") == out


def test_option1_coverage_at_the_papers_m():
    # m = 200 at N = 64. Expected misses: P(χ²_200 < 100) ~ 1e-9 per trial, so 0 of 2000;
    # l² / target = 2 χ²_m / m is below 3 unless χ²_200 > 300 (~5 sd, ~1e-6 per trial).
    rng = np.random.default_rng(2)
    m = rows_needed("public", horizon=HORIZON)
    assert m == 200
    trials = 2000
    ratios = np.empty(trials)
    for i in range(trials):
        target = 2.0 ** rng.uniform(-4, 4)
        X, y, w = draw(rng, m, target)
        ratios[i] = residual_estimate(X, y, w, option=1).level ** 2 / target
    misses = int(np.sum(ratios < 1.0))
    assert coverage_lower_bound(misses, trials) >= 0.99
    assert ratios.max() <= 3.0
    # The check has power: with m = 4 rows the miss probability is P(χ²_4 < 2) = 1 - 2/e = 0.26.
    small = [residual_estimate(*draw(rng, 4, 1.0), option=1).level ** 2 for _ in range(500)]
    assert np.mean(np.array(small) < 1.0) == pytest.approx(1 - 2 / math.e, abs=0.06)


# -- option 2: coverage ----------------------------------------------------------------------


def run_coverage(epsilon, delta, horizon, trials, seed):
    rng = np.random.default_rng(seed)
    m = rows_needed("private", horizon=horizon, epsilon=epsilon, delta=delta)
    ledger = PrivacyLedger("replace-one")
    ratios = np.empty(trials)
    for i in range(trials):
        target = 2.0 ** rng.uniform(-4, 4)  # all alignments of the target with the bins
        X, y, w = draw(rng, m, target)
        out = residual_estimate(
            X,
            y,
            w,
            epsilon=epsilon,
            delta=delta,
            horizon=horizon,
            rng=rng,
            ledger=ledger,
            partition="estimating",
            fallback=0.0,  # never used (asserted); it would count as a miss
        )
        assert not out.fallback_used and out.rows_used == m
        ratios[i] = out.level**2 / target
    assert len(ledger.events) == trials
    return ratios


def check_coverage(ratios):
    """l² >= target in >= 99% of trials; l² <= 6 target in all.

    Upper constant: for Gaussian residuals the two most populated bins of the group-mean law
    give l² / target in [1.29, 5.23] at every alignment and m~ >= 1 (computed from the χ²
    law), inside the note's 4(1 + C_4) with C_4 <= 1/2.
    """
    misses = int(np.sum(ratios < 1.0))
    assert coverage_lower_bound(misses, ratios.size) >= 0.99, (misses, ratios.size)
    assert ratios.max() <= 6.0


def test_option2_coverage_at_the_papers_m():
    # ñ = 753 groups of m~ = 5 rows (m = 3765); 600 trials, ~2 s.
    check_coverage(run_coverage(EPS, DELTA, HORIZON, trials=600, seed=3))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("horizon", "epsilon", "trials"),
    [(64, 8.0, 600), (1024, 1.0, 300)],  # m = 41,220 and m = 2,435,699 rows (~3 min)
)
def test_option2_coverage_at_theorem_41_budget(horizon, epsilon, trials):
    e, d = per_call_budget(epsilon, 1e-5, horizon)
    check_coverage(run_coverage(e, d, horizon, trials=trials, seed=horizon))


# -- option 2: mechanism details -------------------------------------------------------------


def test_result_fields_and_unused_rows():
    plan = histogram_plan(EPS, DELTA, HORIZON)
    m = plan.rows + 2 * plan.num_groups + 7  # m~ = 7; the last 7 rows are unused
    X, y, w = draw(np.random.default_rng(4), m, 3.0)
    ledger = PrivacyLedger("replace-one")
    out = private(X, y, w, ledger=ledger, seed=5)
    assert out.num_groups == plan.num_groups and out.group_size == plan.min_group_size + 2
    assert out.rows_used == out.num_groups * out.group_size == m - 7
    assert (out.noise_scale, out.threshold) == (plan.noise_scale, plan.threshold)
    assert (out.epsilon, out.delta) == (EPS, DELTA) and not out.fallback_used
    lo, hi = out.bin
    assert hi == 2 * lo and out.level == pytest.approx(math.sqrt(2 * hi), rel=1e-15)
    with pytest.raises(AttributeError):
        out.level = 0.0  # frozen
    # Deterministic under a seed; the unused rows do not matter.
    assert private(X, y, w, seed=5) == out
    y2 = y.copy()
    y2[-7:] = 1e6
    assert private(X, y2, w, seed=5) == out


def test_bins_are_exact_powers_of_two():
    tiny = 5e-324  # smallest subnormal, 2^-1074
    values = np.array([1.0, 2.0, np.nextafter(2.0, 0.0), 0.75, 2.0**-1022, tiny, 0.0, 2.0**1023])
    keys = _bin_keys(values)
    assert list(keys[:6]) == [0, 1, 0, -1, -1022, -1074] and keys[7] == 1023
    assert _bin_of(int(keys[6])) == ((0.0, 0.0), 0.0)
    for k in (-1074, -3, 0, 1, 5, 1022):
        (lo, hi), level = _bin_of(k)
        assert (lo, hi) == (2.0**k, 2.0 ** (k + 1))
        assert level == pytest.approx(math.sqrt(2) * math.sqrt(hi), rel=1e-15)
    (lo, hi), level = _bin_of(1023)  # right end point overflows, l = 2^512.5 does not
    assert lo == 2.0**1023 and hi == math.inf and level == pytest.approx(2**512 * math.sqrt(2))


@pytest.mark.parametrize("k", [-6, 0, 4])
def test_all_group_means_in_one_bin(k):
    plan = histogram_plan(EPS, DELTA, HORIZON)
    X, y, w = rows_from_group_means(np.full(plan.num_groups, 2.0**k), plan.min_group_size)
    out = private(X, y, w)
    assert out.bin == (2.0**k, 2.0 ** (k + 1))
    assert out.level**2 == pytest.approx(2.0 ** (k + 2), rel=1e-15)


def test_zero_residuals_choose_the_zero_bin():
    rng = np.random.default_rng(6)
    m = rows_needed(horizon=HORIZON, epsilon=EPS, delta=DELTA)
    X = rng.standard_normal((m, 3))
    w = np.array([0.5, -1.0, 2.0])
    out = private(X, X @ w, w)
    assert (out.bin, out.level, out.fallback_used) == ((0.0, 0.0), 0.0, False)


def test_overflowing_residuals_are_capped_not_raised():
    # Finite data whose squared residuals overflow: mapped record-wise to the largest float
    # (a data-dependent exception would leak), landing in the top bin [2^1023, inf).
    plan = histogram_plan(EPS, DELTA, HORIZON)
    X, _, w = rows_from_group_means(np.ones(plan.num_groups), plan.min_group_size)
    y = np.full(X.shape[0], 1e200)
    out = private(X, y, w)
    assert out.bin == (2.0**1023, math.inf) and math.isfinite(out.level)
    with pytest.raises(ValueError, match="overflow"):
        residual_estimate(X, y, w, option="public")  # public rows may raise


# -- option 2: the fallback ------------------------------------------------------------------


def test_fallback_when_every_bin_is_suppressed_still_records_the_cost():
    # Every group mean in its own bin (1.5 · 2^(j - ñ/2)), so every frequency is 1/ñ. A bin is
    # kept only if its Laplace noise exceeds threshold - 1/ñ = 2 log(2/δ~)/(ε~ ñ), i.e.
    # log(2/δ~) = 14.5 scales: probability δ~/4 each, ñ δ~/4 = 2e-4 for all 753 bins.
    plan = histogram_plan(EPS, DELTA, HORIZON)
    n = plan.num_groups
    means = 1.5 * 2.0 ** (np.arange(n) - n // 2)
    assert np.unique(_bin_keys(means)).size == n
    X, y, w = rows_from_group_means(means, plan.min_group_size)
    for seed, fallback in [(0, 2.5), (1, 0.0), (2, 7.0)]:
        ledger = PrivacyLedger("replace-one")
        out = private(X, y, w, ledger=ledger, seed=seed, fallback=fallback, partition="est")
        assert out.fallback_used and out.bin is None and out.level == fallback
        assert (out.epsilon, out.delta) == (EPS, DELTA)
        (entry,) = ledger.entries
        assert (entry.event.epsilon, entry.event.delta, entry.event.count) == (EPS, DELTA, 1)
        assert entry.partition == "est"


# -- option 2: privacy -----------------------------------------------------------------------


def test_ledger_holds_the_histograms_stated_cost():
    rng = np.random.default_rng(7)
    m = rows_needed(horizon=HORIZON, epsilon=EPS, delta=DELTA)
    ledger = PrivacyLedger("zero-out")  # zero-out pairs are replace-one pairs
    calls = 5
    for _ in range(calls):
        X, y, w = draw(rng, m, 1.0)
        out = private(X, y, w, ledger=ledger, rng=rng, partition="estimating")
        assert (out.epsilon, out.delta) == (EPS, DELTA)
    assert len(ledger.entries) == calls and ledger.num_partitions == 1
    for entry in ledger.entries:
        assert entry.partition == "estimating"
        assert (entry.event.epsilon, entry.event.delta, entry.event.count) == (EPS, DELTA, 1)
        assert entry.event.mechanism == "approximate-dp"
    # One call composed alone must give back its stated (ε~, δ~).
    single = PrivacyLedger("replace-one")
    private(*draw(rng, m, 1.0), ledger=single)
    eps = single.epsilon(DELTA)
    assert EPS * (1 - 1e-9) <= eps <= EPS * 1.01
    # The calls of one run compose exactly (PLD): below the basic-composition sum.
    assert ledger.epsilon(calls * DELTA * 2) < calls * EPS


def test_add_remove_ledger_is_refused_before_the_data_are_read():
    X, y, w = draw(np.random.default_rng(8), 10, 1.0)  # far too few rows: refused first anyway
    ledger = PrivacyLedger("add-remove")
    with pytest.raises(ValueError, match="replace-one"):
        private(X, y, w, ledger=ledger)
    assert ledger.events == ()


def test_laplace_race_between_two_bins_matches_the_stated_noise():
    """Neighbouring datasets, Monte Carlo
    (docs/theory/overparameterised-regression.md#implementation item 7).

    D: 377 group means in bin A = [1, 2), 376 in bin B = [4, 8). D': one row of one A group is
    replaced so that the group's mean moves to B. Both bins are kept (frequency ~ 1/2 >> the
    threshold 0.04), so A wins iff Lap_B - Lap_A < ±1/ñ. The difference of two Lap(b) has
    CDF 1 - exp(-t/b)(1 + t/(2b))/2 for t >= 0, and t/b = ε~/2, so P_D(A) = 1 - 0.625 e^-0.5 =
    0.6209 and P_D'(A) = 0.3791 (ratio 1.64 <= e^ε~ = 2.72). A Laplace scale off by 2x either
    way gives 0.724 or 0.562 (> 6 sd away at 3000 runs, sd 0.009).
    """
    plan = histogram_plan(EPS, DELTA, HORIZON)
    n, size = plan.num_groups, plan.min_group_size
    assert n == 753 and size == 5
    means = np.array([1.5] * 377 + [6.0] * 376)
    X, y, w = rows_from_group_means(means, size)
    y_neighbour = y.copy()
    y_neighbour[0] = math.sqrt(1.5 + size * (6.0 - 1.5))  # group 0's mean: 1.5 -> 6.0
    assert np.count_nonzero(y_neighbour != y) == 1
    runs = 3000
    rng = np.random.default_rng(9)
    wins = []
    for labels in (y, y_neighbour):
        bins = [private(X, labels, w, rng=rng).bin for _ in range(runs)]
        assert set(bins) <= {(1.0, 2.0), (4.0, 8.0)}
        wins.append(np.mean([b == (1.0, 2.0) for b in bins]))
    p_a = 1 - 0.625 * math.exp(-0.5)
    assert wins[0] == pytest.approx(p_a, abs=0.04)
    assert wins[1] == pytest.approx(1 - p_a, abs=0.04)
    # The (ε~, δ~)-DP inequality on both outputs, with the estimates' 4-sd slack.
    slack = 4 * math.sqrt(0.25 / runs)
    assert wins[0] <= math.exp(EPS) * (wins[1] + slack) + DELTA + slack
    assert (1 - wins[1]) <= math.exp(EPS) * (1 - wins[0] + slack) + DELTA + slack


# -- bad input -------------------------------------------------------------------------------


def test_too_few_rows_names_the_number_needed():
    needed = rows_needed(horizon=HORIZON, epsilon=EPS, delta=DELTA)
    X, y, w = draw(np.random.default_rng(10), needed - 1, 1.0)
    with pytest.raises(ValueError, match=rf"needs at least {needed} estimating rows"):
        private(X, y, w)
    X, y, w = draw(np.random.default_rng(10), needed, 1.0)
    assert private(X, y, w).rows_used == needed


@pytest.mark.parametrize("where", ["X", "y", "w"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_data_is_refused(where, bad):
    m = rows_needed(horizon=HORIZON, epsilon=EPS, delta=DELTA)
    X, y, w = draw(np.random.default_rng(11), m, 1.0)
    {"X": X[3], "y": y[3:4], "w": w[1:]}[where][0] = bad
    for option in ("private", "public"):
        with pytest.raises(ValueError, match="non-finite"):
            if option == "private":
                private(X, y, w)
            else:
                residual_estimate(X, y, w, option=option)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_bad_epsilon(epsilon):
    X, y, w = draw(np.random.default_rng(12), 4000, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        private(X, y, w, epsilon=epsilon)
    with pytest.raises(ValueError, match="epsilon"):
        rows_needed(horizon=HORIZON, epsilon=epsilon, delta=DELTA)


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-6, 1.5, math.nan])
def test_bad_delta(delta):
    X, y, w = draw(np.random.default_rng(13), 4000, 1.0)
    with pytest.raises(ValueError, match="delta"):
        private(X, y, w, delta=delta)
    with pytest.raises(ValueError, match="delta"):
        rows_needed(horizon=HORIZON, epsilon=EPS, delta=delta)


def test_delta_must_be_below_one_over_the_group_count():
    # ε~ = 50, N = 2: ñ = 3 groups, so Karwa–Vadhan need δ~ < 1/3.
    assert histogram_plan(50.0, 0.2, 2).num_groups == 3
    with pytest.raises(ValueError, match="delta < 1/num_groups"):
        histogram_plan(50.0, 0.5, 2)


def test_other_bad_arguments():
    X, y, w = draw(np.random.default_rng(14), 4000, 1.0)
    with pytest.raises(ValueError, match="shape"):
        private(X, y, np.zeros(3))
    with pytest.raises(ValueError, match="option"):
        residual_estimate(X, y, w, option=3)
    with pytest.raises(ValueError, match="fallback"):
        private(X, y, w, fallback=None)
    with pytest.raises(ValueError, match="fallback"):
        private(X, y, w, fallback=-1.0)
    with pytest.raises(ValueError, match="rng"):
        residual_estimate(
            X, y, w, epsilon=EPS, delta=DELTA, horizon=HORIZON, fallback=1.0,
            ledger=PrivacyLedger("replace-one"),
        )  # fmt: skip
    with pytest.raises(ValueError, match="PrivacyLedger"):
        residual_estimate(
            X, y, w, epsilon=EPS, delta=DELTA, horizon=HORIZON, fallback=1.0,
            rng=np.random.default_rng(0),
        )  # fmt: skip
    with pytest.raises(ValueError, match="horizon"):
        residual_estimate(X, y, w, epsilon=EPS, delta=DELTA)
    with pytest.raises(ValueError, match="horizon"):
        private(X, y, w, horizon=0)
    with pytest.raises(ValueError, match="epsilon and delta"):
        rows_needed("private", horizon=HORIZON)
    with pytest.raises(ValueError, match="kurtosis"):
        rows_needed("public", horizon=HORIZON, kurtosis=0.5)
    with pytest.raises(ValueError, match="accuracy"):
        histogram_plan(EPS, DELTA, HORIZON, accuracy=2.0)
