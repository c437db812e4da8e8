"""DP-AMBSSGD (Varshney et al. 2022, Algorithm 2;
docs/theory/linear-regression-adaptive-clipping.md#dp-ambssgd, §4.4, §5.4 and §8).

Calibration (GDP / zCDP / the paper's alpha), Theorem 10's configuration, privacy read off the
ledger (parallel composition over the T disjoint rounds), single-pass data usage, the law of
the added noise, and faithfulness to the paper's prediction on its Gaussian model.
"""

import dataclasses
import importlib
import math
import re

import numpy as np
import pytest
from scipy import stats

from privopt.accounting import (
    GaussianEvent,
    PrivacyLedger,
    gdp_mu,
    zcdp_epsilon,
)
from privopt.algorithms import (
    AMBSSGDConfig,
    dp_ambssgd,
    noise_multipliers,
    practical_config,
    theory_config,
)
from privopt.algorithms.ambssgd import ambssgd_plan
from privopt.datasets import make_linear_regression
from privopt.training import FixedBatches, PoissonSampling, TrainingPlan

# Tests of the clipping behaviour read the non-private clip fractions on purpose.
pytestmark = pytest.mark.filterwarnings(
    "ignore::privopt.algorithms.result.NonPrivateDiagnosticsWarning"
)

ambssgd_module = importlib.import_module("privopt.algorithms.ambssgd")
thresholds_module = importlib.import_module("privopt.training.thresholds")
gradients_module = importlib.import_module("privopt.training.gradients")

DELTA = 1e-6


def small_config(**overrides) -> AMBSSGDConfig:
    params = dict(
        steps=7,  # odd on purpose: the tail average is over the last T - floor(T/2) iterates
        batch_size=10,
        stat_size=60,
        learning_rate=0.5,
        stat_noise_multiplier=1.0,
        grad_noise_multiplier=2.0,
        clip_scale=3.0,
        domain=1.0,
        stat_queries=20,
    )
    params.update(overrides)
    return AMBSSGDConfig(**params)


# -- noise multipliers -------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 4.0, 8.0])
@pytest.mark.parametrize("stat_budget", [0.1, 0.5, 0.9])
def test_gdp_calibration_is_exact(epsilon, stat_budget):
    alpha_s, alpha_g = noise_multipliers(epsilon, DELTA, stat_budget, "gdp")
    mu = math.sqrt(alpha_s**-2 + alpha_g**-2)
    # exact up to the calibration's verified rounding toward more noise (1e-12 relative steps)
    assert mu == pytest.approx(gdp_mu(epsilon, DELTA), rel=1e-11)
    # stat_budget is DP-STAT's share of mu^2
    assert alpha_s**-2 / mu**2 == pytest.approx(stat_budget, rel=1e-12)
    # verified on the round's recorded events, through a ledger, with no slack
    ledger = PrivacyLedger("replace-one")
    ledger.record(thresholds_module.DPStatThreshold(1.0, alpha_s).event())
    ledger.record(GaussianEvent(2.0, 2.0 * alpha_g))
    assert ledger.epsilon(DELTA) <= epsilon


@pytest.mark.parametrize("stat_budget", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("mu", [0.05, 0.7, 3.0])
def test_gdp_mu_target_is_met_and_tight(mu, stat_budget):
    """A GDP share (the estimator's hand-over) calibrates the round to at most mu, within an ulp
    or a nudge of it, against the plain float64 formula alpha = 1 / sqrt(share mu^2)."""
    alpha_s, alpha_g = noise_multipliers(1.0, DELTA, stat_budget, "gdp", mu=mu)
    assert math.sqrt(alpha_s**-2 + alpha_g**-2) <= mu
    assert alpha_s == pytest.approx(1.0 / math.sqrt(stat_budget * mu**2), rel=1e-11)
    assert alpha_g == pytest.approx(1.0 / math.sqrt((1.0 - stat_budget) * mu**2), rel=1e-11)


def test_noise_plan_calibration_is_the_rounds_privacy():
    """The multipliers come from one calibration of the tied round (DP-STAT + gradient step);
    the run's plan at them records, per round, exactly the calibrated round's events."""
    plan = ambssgd_module.noise_plan(0.1, 20).calibrate(mu=1.3)
    alpha_g = plan.noise_multiplier / 2.0
    alpha_s = plan.private_threshold.noise_multiplier
    assert (alpha_s, alpha_g) == noise_multipliers(1.0, DELTA, 0.1, "gdp", mu=1.3)
    round_events = [e for e, _ in plan.recorded_events()]
    cfg = practical_config(60_000, **{**PRACTICAL, "mu": 1.3})
    assert (cfg.stat_noise_multiplier, cfg.grad_noise_multiplier) == (alpha_s, alpha_g)
    recorded = ambssgd_plan(60_000, cfg).recorded_events()
    assert len(recorded) == 2 * cfg.steps
    for t in range(cfg.steps):
        assert [e for e, p in recorded if p == ("round", t)] == round_events
    ledger = PrivacyLedger("replace-one")
    for event, part in recorded:
        ledger.record(event, partition=part)
    assert ledger.mu <= 1.3


def test_tied_threshold_rules():
    """An uncalibrated tied plan has no noise yet; a tied threshold with a fixed multiplier, or
    outside rounds, is refused."""
    plan = ambssgd_module.noise_plan(0.5)
    with pytest.raises(ValueError, match="no noise multiplier yet"):
        plan.event()
    with pytest.raises(ValueError, match="noise_multiplier=None"):
        dataclasses.replace(plan, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="use Rounds"):
        dataclasses.replace(plan, batches=FixedBatches(1))
    with pytest.raises(ValueError, match="stat_budget"):
        ambssgd_module.DPStatShare(1.0, 1.0)
    with pytest.raises(ValueError, match="Gaussian events"):
        TrainingPlan(
            100, PoissonSampling(0.1, 10), clip_norm=1.0, neighbouring="zero-out"
        ).calibrate(mu=1.0)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("stat_budget", [0.2, 0.5])
def test_zcdp_calibration_round_trip(epsilon, stat_budget):
    alpha_s, alpha_g = noise_multipliers(epsilon, DELTA, stat_budget, "zcdp")
    rho = (alpha_s**-2 + alpha_g**-2) / 2.0
    assert zcdp_epsilon(rho, DELTA) == pytest.approx(epsilon, rel=1e-6)
    assert zcdp_epsilon(rho, DELTA) <= epsilon + 1e-9


# docs/theory/linear-regression-adaptive-clipping.md#ambssgd-privacy table: (epsilon, delta, sqrt(8
# L)/eps, epsilon actually achieved by it under
# the paper's conversion eps = rho + 2 sqrt(rho L) with rho = 1/alpha^2), L = ln(1/delta).
PAPER_TABLE = [
    (0.1, 1e-5, 95.9705, 0.0708),
    (0.5, 1e-5, 19.1941, 0.3563),
    (1.0, 1e-5, 9.5971, 0.7180),
    (1.0, 1e-6, 10.5130, 0.7162),
    (2.0, 1e-6, 5.2565, 1.4504),
    (4.0, 1e-6, 2.6283, 2.9732),
    (8.0, 1e-6, 1.3141, 6.2359),
    (1.0, 1e-9, 12.8758, 0.7131),
]


@pytest.mark.parametrize(("epsilon", "delta", "alpha", "achieved"), PAPER_TABLE)
def test_paper_calibration_reproduces_table(epsilon, delta, alpha, achieved):
    alpha_s, alpha_g = noise_multipliers(epsilon, delta, calibration="paper")
    assert alpha_s == alpha_g == pytest.approx(math.sqrt(8 * math.log(1 / delta)) / epsilon)
    assert round(alpha_s, 4) == alpha  # the table's four decimals
    rho = 1.0 / alpha_s**2  # Theorem 9: rho_total = 1/alpha^2
    assert round(zcdp_epsilon(rho, delta, conversion="bun-steinke"), 4) == achieved
    assert zcdp_epsilon(rho, delta) <= epsilon


def test_paper_calibration_validity_region():
    # sqrt(8 L)/eps is Theorem 9's shortcut only for eps <= L = ln(1/delta) (13.8 at 1e-6).
    noise_multipliers(13.8, DELTA, calibration="paper")
    with pytest.raises(ValueError, match=r"log\(1/delta\)"):
        noise_multipliers(14.0, DELTA, calibration="paper")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"calibration": "rdp"}, "calibration"),
        ({"stat_budget": 0.0}, "stat_budget"),
        ({"stat_budget": 1.0}, "stat_budget"),
        ({"stat_budget": math.nan}, "stat_budget"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
    ],
)
def test_noise_multipliers_bad_input(kwargs, match):
    args = {"epsilon": 1.0, "delta": DELTA, **kwargs}
    with pytest.raises(ValueError, match=match):
        noise_multipliers(**args)


# -- Theorem 10's configuration -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "kappa", "c1", "row_norm_sq", "h_norm", "residual_scale", "k2", "a"),
    [
        (1_000_000, 1.0, 1.0, 12.0, 1.0, 2.0, 1.0, 0.5),  # x ~ N(0, I_10): R^2 = d + 2
        (200_000, 3.0, 1.0, 30.0, 2.5, 1.3, 1.5, 0.5),
        (123_457, 1.0, 2.7, 7.0, 0.7, 0.4, 1.0, 1.0),  # a = 1: sub-exponential tails
        (50_000, 10.0, 0.3, 100.0, 5.0, 10.0, 2.0, 0.5),
    ],
)
def test_theory_config_formulas(n, kappa, c1, row_norm_sq, h_norm, residual_scale, k2, a):
    cfg = theory_config(
        n,
        epsilon=1.0,
        delta=DELTA,
        row_norm_sq=row_norm_sq,
        h_norm=h_norm,
        kappa=kappa,
        residual_scale=residual_scale,
        k2=k2,
        a=a,
        c1=c1,
    )
    log_n = math.log(n)
    raw_t = math.ceil(c1 * kappa * log_n)
    assert cfg.steps % 2 == 0 and cfg.steps in (raw_t, raw_t + 1)
    per_round = n // cfg.steps  # b + s = floor(N / T)
    assert cfg.stat_size + cfg.batch_size == per_round
    assert cfg.stat_size == round(per_round / 11)  # s = (b + s) / 11, i.e. s = b / 10
    assert abs(cfg.stat_size - n / cfg.steps / 11) <= 0.5 + 1.0 / 11
    assert cfg.records_needed <= n < cfg.records_needed + cfg.steps
    b = cfg.batch_size
    assert cfg.learning_rate == pytest.approx(b / (row_norm_sq + (b - 1) * h_norm), rel=1e-14)
    r_x = math.sqrt(row_norm_sq)
    assert cfg.domain == pytest.approx(k2 * r_x * residual_scale * log_n ** (2 * a), rel=1e-14)
    assert cfg.clip_scale == pytest.approx(r_x * log_n**a, rel=1e-14)
    alpha = math.sqrt(8 * math.log(1 / DELTA))  # "paper" calibration, epsilon = 1
    assert cfg.stat_noise_multiplier == cfg.grad_noise_multiplier == pytest.approx(alpha)
    assert cfg.stat_queries == 20 and cfg.margin == "auto"


def test_theory_config_paper_instance():
    # Corollary 11 set-up, N = 10^6: T = ceil(ln 10^6) = 14, b + s = 71428, s = 6493, b = 64935,
    # eta = b / (R^2 + b - 1) ~ 1 (docs/theory/linear-regression-adaptive-clipping.md#dp-ambssgd and
    # §4.3 quote s ~ 6493).
    cfg = theory_config(
        1_000_000,
        epsilon=1.0,
        delta=DELTA,
        row_norm_sq=12.0,
        h_norm=1.0,
        kappa=1.0,
        residual_scale=2.0,
    )
    assert (cfg.steps, cfg.stat_size, cfg.batch_size) == (14, 6493, 64935)
    assert cfg.learning_rate == pytest.approx(1.0, abs=2e-4)
    assert cfg.stat_noise_multiplier == pytest.approx(10.5130, abs=5e-5)


def test_theory_config_too_small():
    with pytest.raises(ValueError, match="too small"):
        theory_config(
            3, epsilon=1.0, delta=DELTA, row_norm_sq=1.0, h_norm=1.0, kappa=1.0, residual_scale=1.0
        )


# -- privacy, read off the ledger ---------------------------------------------------------------


@pytest.fixture(scope="module")
def gaussian_data():
    return make_linear_regression(30_000, 5, sigma=0.5, rng=np.random.default_rng(5))


def fit(data, cfg, seed=0, ledger=None):
    ledger = ledger if ledger is not None else PrivacyLedger("replace-one")
    w, trace, info = dp_ambssgd(
        data.X, data.y, cfg, rng=np.random.default_rng(seed), ledger=ledger, diagnostics=True
    )
    return w, trace, info, ledger


def theory(data, epsilon, calibration):
    return theory_config(
        data.n_samples,
        epsilon=epsilon,
        delta=DELTA,
        row_norm_sq=data.R_x_squared,
        h_norm=data.H_norm,
        kappa=data.kappa,
        residual_scale=data.w_star_H_norm + data.sigma,
        calibration=calibration,
    )


def check_rounds(ledger, steps):
    assert ledger.num_partitions == steps
    per_round = {}
    for entry in ledger.entries:
        assert isinstance(entry.event, GaussianEvent)
        per_round.setdefault(entry.partition, []).append(entry.event)
    assert set(per_round) == {("round", t) for t in range(steps)}
    assert all(len(events) == 2 for events in per_round.values())
    return per_round


@pytest.mark.parametrize("calibration", ["gdp", "zcdp", "paper"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_ledger_privacy(gaussian_data, calibration, epsilon):
    cfg = theory(gaussian_data, epsilon, calibration)
    _, trace, info, ledger = fit(gaussian_data, cfg)
    per_round = check_rounds(ledger, cfg.steps)
    assert ledger.mu == pytest.approx(cfg.mu, rel=1e-12)
    assert info["mu"] == pytest.approx(cfg.mu, rel=1e-15)
    assert ledger.epsilon(DELTA) <= epsilon + 1e-9
    # The two releases of round t: DP-STAT (K counts, sensitivity 1, std alpha_s sqrt(K)) and the
    # gradient step on the unit-clip stream (replace-one sensitivity 2, std 2 alpha_g: the
    # contributions divided by the public zeta_t have norm <= 1), which the update scales by
    # eta zeta_t / b: the noise on w has std 2 eta zeta_t alpha_g / b.
    for step in range(cfg.steps):
        stat, grad = per_round[("round", step)]
        assert stat.count == cfg.stat_queries and stat.sensitivity == 1.0
        assert stat.std == pytest.approx(cfg.stat_noise_multiplier * math.sqrt(cfg.stat_queries))
        assert grad.sensitivity == 2.0 and grad.count == 1
        assert grad.std == pytest.approx(grad.sensitivity * cfg.grad_noise_multiplier, rel=1e-14)
        assert grad.mu == pytest.approx(1.0 / cfg.grad_noise_multiplier, rel=1e-14)
        zeta = trace.clip_threshold[step]
        assert trace.noise_std[step] == pytest.approx(
            2 * cfg.learning_rate * zeta * cfg.grad_noise_multiplier / cfg.batch_size, rel=1e-14
        )
    if calibration == "paper":
        # rho_total = 1/alpha^2 whatever T, b and zeta_t
        # (docs/theory/linear-regression-adaptive-clipping.md#ambssgd-privacy and §8 item 5).
        assert ledger.rho == pytest.approx(1.0 / cfg.stat_noise_multiplier**2, rel=1e-12)
        assert ledger.epsilon(DELTA, "zcdp") <= epsilon


def test_ledger_rho_independent_of_configuration(gaussian_data):
    alpha = 3.0
    for steps, b, s, scale in [(2, 5000, 2000, 1.0), (6, 3000, 500, 10.0), (20, 1000, 400, 0.1)]:
        cfg = AMBSSGDConfig(steps, b, s, 0.5, alpha, alpha, scale, 20.0)
        _, _, _, ledger = fit(gaussian_data, cfg)
        check_rounds(ledger, steps)
        assert ledger.rho == pytest.approx(1.0 / alpha**2, rel=1e-12)
        assert ledger.mu == pytest.approx(math.sqrt(2) / alpha, rel=1e-12)


def test_practical_config_fit_privacy(gaussian_data):
    cfg = practical_config(
        gaussian_data.n_samples,
        epsilon=1.0,
        delta=DELTA,
        row_bound=5.0,
        target_bound=5.0,
        h_norm=1.0,
        row_norm_sq=gaussian_data.R_x_squared,
    )
    _, trace, info, ledger = fit(gaussian_data, cfg)
    check_rounds(ledger, cfg.steps)
    assert ledger.mu == pytest.approx(gdp_mu(1.0, DELTA), rel=1e-9)
    assert ledger.epsilon(DELTA) <= 1.0 + 1e-9
    assert info["unused_rows"] == gaussian_data.n_samples - cfg.records_needed
    assert trace.steps == cfg.steps
    np.testing.assert_array_equal(trace.clip_threshold, cfg.clip_scale * trace.extra["gamma"])
    assert np.all((trace.clip_fraction >= 0) & (trace.clip_fraction <= 1))


# -- data usage (white box) ----------------------------------------------------------------------


def test_each_record_used_at_most_once(monkeypatch):
    """Every record is read in one round only, as a DP-STAT or a gradient record, never both.

    White-box: ``dp_stat`` and ``clip_factors`` are wrapped in the algorithm's module to record
    their inputs. Row i is (1e-30, 0) with target i + 1, so a DP-STAT value is
    |1e-30 w_1 - (i + 1)| = i + 1 and a per-example gradient norm is (i + 1) 1e-30: both reveal
    the index (|w| stays below 1e6 here, so the 1e-30 w term is far below the rounding to
    integers). The permutation is the first draw of ``rng`` (``order = rng.permutation(n)``), so
    an identical Generator reproduces it and fixes which rows each round must read.
    """
    stat_calls, grad_calls = [], []
    real_dp_stat, real_clip = thresholds_module.dp_stat, gradients_module.clip_factors

    def spy_stat(values, **kw):
        stat_calls.append(np.rint(np.asarray(values)).astype(int) - 1)
        return real_dp_stat(values, **kw)

    def spy_clip(norms, threshold):
        grad_calls.append(np.rint(np.asarray(norms) / 1e-30).astype(int) - 1)
        return real_clip(norms, threshold)

    # DP-AMBSSGD runs on the training core: DP-STAT is called by its clip source, the clipping
    # by the linear model's clipped sum
    monkeypatch.setattr(thresholds_module, "dp_stat", spy_stat)
    monkeypatch.setattr(gradients_module, "clip_factors", spy_clip)

    cfg = small_config(steps=5, batch_size=30, stat_size=12, domain=4096.0, clip_scale=1.0)
    n = cfg.records_needed + 23  # 23 rows left over
    Z = np.zeros((n, 2))
    Z[:, 0] = 1e-30
    t = np.arange(1.0, n + 1.0)
    seed = 77
    w, _, info, _ = fit_arrays(Z, t, cfg, seed)
    assert np.all(np.abs(w) < 1e6)
    assert info["unused_rows"] == 23

    assert len(stat_calls) == len(grad_calls) == cfg.steps
    used = np.concatenate(stat_calls + grad_calls)
    assert used.size == cfg.records_needed
    assert np.unique(used).size == used.size  # no record is read twice
    assert np.all((used >= 0) & (used < n))
    order = np.random.default_rng(seed).permutation(n)
    b, s = cfg.batch_size, cfg.stat_size
    for step, (stat_rows, grad_rows) in enumerate(zip(stat_calls, grad_calls, strict=True)):
        assert stat_rows.size == s and grad_rows.size == b
        assert not set(stat_rows) & set(grad_rows)
        start = step * (b + s)
        assert set(stat_rows) == set(order[start : start + s])
        assert set(grad_rows) == set(order[start + s : start + s + b])
    assert set(order[cfg.records_needed :]).isdisjoint(used)


def fit_arrays(Z, t, cfg, seed):
    ledger = PrivacyLedger("replace-one")
    w, trace, info = dp_ambssgd(
        Z, t, cfg, rng=np.random.default_rng(seed), ledger=ledger, diagnostics=True
    )
    return w, trace, info, ledger


def test_leftover_rows_are_never_read():
    # Black-box complement: NaN in the rows the permutation leaves over would make DP-STAT or the
    # clipping raise if they were read.
    cfg = small_config(steps=4, batch_size=20, stat_size=10)
    n = cfg.records_needed + 50
    rng_data = np.random.default_rng(1)
    Z, t = rng_data.normal(size=(n, 3)), rng_data.normal(size=n)
    seed = 3
    leftover = np.random.default_rng(seed).permutation(n)[cfg.records_needed :]
    Z[leftover] = np.nan
    t[leftover] = np.nan
    w, _, _, _ = fit_arrays(Z, t, cfg, seed)
    assert np.all(np.isfinite(w))


@pytest.mark.parametrize("where", ["stat target", "gradient feature"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN arithmetic on purpose
def test_refuses_non_finite_used_rows(where):
    # A NaN/inf in a record that a round reads is refused (ValueError), never turned into a
    # NaN iterate that escapes the clipping bound.
    cfg = small_config(steps=4, batch_size=20, stat_size=10)
    n = cfg.records_needed
    rng_data = np.random.default_rng(1)
    Z, t = rng_data.normal(size=(n, 3)), rng_data.normal(size=n)
    order = np.random.default_rng(3).permutation(n)
    if where == "stat target":
        t[order[(cfg.batch_size + cfg.stat_size) * 2]] = np.nan  # round 2, first stat record
    else:
        Z[order[cfg.stat_size], 1] = np.inf  # round 0, first gradient record
    with pytest.raises(ValueError, match="finite"):
        fit_arrays(Z, t, cfg, 3)


def test_seeded_fit_is_reproducible(gaussian_data):
    cfg = theory(gaussian_data, 1.0, "gdp")
    w1, tr1, _, _ = fit(gaussian_data, cfg, seed=4)
    w2, tr2, _, _ = fit(gaussian_data, cfg, seed=4)
    assert np.array_equal(w1, w2) and np.array_equal(tr1.noise_std, tr2.noise_std)


# -- the law of the noise --------------------------------------------------------------------------


def tail_average_std(noise_std: np.ndarray) -> float:
    """Std of the tail average when w_0 = 0 and w_{k+1} = w_k + N(0, std_k^2 I).

    w_k = sum_{j<k} g_j and the output averages w_{k0+1}, ..., w_T (k0 = floor(T/2),
    M = T - k0 iterates), so noise g_j enters with weight min(M, T - j) / M.
    """
    steps = noise_std.size
    m = steps - steps // 2
    weights = np.minimum(m, steps - np.arange(steps)) / m
    return float(np.sqrt(np.sum((weights * noise_std) ** 2)))


def test_tail_average_weights():
    # T = 4: the output is (w_3 + w_4) / 2 = g_0 + g_1 + g_2 + g_3 / 2.
    assert tail_average_std(np.ones(4)) == pytest.approx(math.sqrt(3 + 0.25))
    # T = 5: (w_3 + w_4 + w_5) / 3 = g_0 + g_1 + g_2 + 2/3 g_3 + 1/3 g_4.
    assert tail_average_std(np.ones(5)) == pytest.approx(math.sqrt(3 + 4 / 9 + 1 / 9))


@pytest.fixture(scope="module")
def zero_data_runs():
    """R runs with Z = 0, t = 0: gradients and residuals vanish, so w is a pure random walk.

    Returns the tail averages divided by the std implied by each run's trace, pooled over runs and
    coordinates (R * p = 3000 values that must be N(0, 1)), and the per-run sum of squares
    (R values that must be chi-square with p degrees of freedom).
    """
    cfg = small_config()
    p, reps = 10, 300
    Z, t = np.zeros((cfg.records_needed, p)), np.zeros(cfg.records_needed)
    rng = np.random.default_rng(2718)
    normalised, sums = [], []
    for _ in range(reps):
        w, trace, _ = dp_ambssgd(
            Z, t, cfg, rng=rng, ledger=PrivacyLedger("replace-one"), diagnostics=True
        )
        # The trace's noise std is the gradient step's 2 eta zeta_t alpha_g / b.
        np.testing.assert_allclose(
            trace.noise_std,
            2
            * cfg.learning_rate
            * trace.clip_threshold
            * cfg.grad_noise_multiplier
            / cfg.batch_size,
            rtol=1e-14,
        )
        assert np.all(trace.clip_fraction == 0.0)
        x = w / tail_average_std(trace.noise_std)
        normalised.append(x)
        sums.append(float(x @ x))
    return np.concatenate(normalised), np.array(sums), p


def test_noise_scale_ks(zero_data_runs):
    # KS of 3000 values: at the true scale the test accepts (fixed seed; level 1e-3); at 0.67x
    # and 1.5x the KS distance is about 0.13, 6x the 1e-6 critical value 0.049 (sqrt(7.3/3000)).
    # Measured with this seed: p = 0.38 at the true scale, 2e-29 and 3e-30 at the wrong ones;
    # the chi-square version below gives p = 0.94.
    x, _, _ = zero_data_runs
    assert stats.kstest(x, "norm").pvalue > 1e-3
    for wrong in (0.67, 1.5):
        assert stats.kstest(x, "norm", args=(0.0, wrong)).pvalue < 1e-6


def test_noise_scale_chi_square(zero_data_runs):
    _, sums, p = zero_data_runs
    assert stats.kstest(sums, "chi2", args=(p,)).pvalue > 1e-3
    for wrong in (0.67, 1.5):
        assert stats.kstest(sums / wrong**2, "chi2", args=(p,)).pvalue < 1e-6


# -- faithfulness to Theorem 10 on the paper's model ---------------------------------------------


def faithfulness_run(n: int, seed: int):
    """x ~ N(0, I_10), ||w*|| = 1, sigma = 1, epsilon = 4, delta = 1e-6, oracle inputs."""
    data = make_linear_regression(n, 10, w_norm=1.0, sigma=1.0, rng=np.random.default_rng(seed))
    cfg = theory_config(
        n,
        epsilon=4.0,
        delta=DELTA,
        row_norm_sq=data.R_x_squared,
        h_norm=data.H_norm,
        kappa=data.kappa,
        residual_scale=data.w_star_H_norm + data.sigma,
        calibration="paper",
    )
    w, trace, _ = dp_ambssgd(
        data.X,
        data.y,
        cfg,
        rng=np.random.default_rng(1000 + seed),
        ledger=PrivacyLedger("replace-one"),
        diagnostics=True,
    )
    ols = np.linalg.lstsq(data.X, data.y, rcond=None)[0]
    return data.excess_risk(w), data.excess_risk(ols), float(trace.clip_fraction.max())


def test_faithfulness_excess_risk_close_to_ols():
    """The issue's "Must hold": median excess risk over 3 seeds <= 10 x OLS's at N = 10^6.

    Measured (seeds 0-19, ratio DP-AMBSSGD / OLS excess risk per seed): median 3.7, range
    0.8-12.4, one seed of 20 above 10; seeds 0, 1, 2 give 2.9, 6.3, 0.8 (median 2.9). The
    median of 3 exceeds 10 only if two seeds do (about 3 * 0.05^2 ~ 1% for fresh seeds).
    Theorem 10 predicts 8.8 sigma^2 d / N against OLS's ~sigma^2 d / (2N) in expectation
    at eps >> sqrt(d / N); the tuned-down Delta, margin and eta = b / (R^2 + (b-1)||H||) do
    better. Max clip fraction was 0 in every measured run (Theorem 10's no-clipping event).
    About 5 s in total.
    """
    runs = [faithfulness_run(1_000_000, seed) for seed in range(3)]
    ratios = [risk / ols for risk, ols, _ in runs]
    assert np.median(ratios) <= 10.0
    assert max(frac for _, _, frac in runs) <= 0.01


# -- refusals ------------------------------------------------------------------------------------


PRACTICAL = dict(
    epsilon=1.0, delta=DELTA, row_bound=5.0, target_bound=5.0, h_norm=1.0, row_norm_sq=12.0
)


def rows_needed_from_error(n: int) -> int:
    with pytest.raises(ValueError, match=r"too small .* at least \d+ rows") as info:
        practical_config(n, **PRACTICAL)
    return int(re.search(r"at least (\d+) rows", str(info.value)).group(1))


@pytest.mark.parametrize("n", [500, 2000, 8000])
def test_practical_config_names_rows_needed(n):
    """The refusal names a number of rows that is enough.

    T = max(4, ceil(0.5 ln N)) (even) grows with N, so the count must be computed at the larger N:
    at N = 2000, epsilon = 1 the rounds need s = ceil(4 Gamma) = 1064 DP-STAT rows each
    (Gamma = dp_stat_margin(alpha_s, 20), alpha_s for 10% of the GDP budget); 4 rounds would
    need 8512 rows but N = 8512 has T = 6 rounds, so at least 6 * 2 * 1064 = 12768 are needed.
    """
    needed = rows_needed_from_error(n)
    alpha_s, _ = noise_multipliers(1.0, DELTA, 0.1, "gdp")
    s = math.ceil(4 * ambssgd_module.dp_stat_margin(alpha_s, 20))
    assert s == 1064
    assert needed >= 6 * 2 * s  # T = 6 for every N between 2981 and 22025
    cfg = practical_config(needed, **PRACTICAL)  # the named count suffices
    assert cfg.batch_size >= cfg.stat_size >= 4 * ambssgd_module.dp_stat_margin(alpha_s, 20)
    assert cfg.records_needed <= needed


def test_practical_config_rows_needed_is_not_far_off():
    # The named count is within a few percent of the true minimum (12768 here: 6 rounds of
    # 1064 + 1064 rows; the search may overshoot by its 5% step).
    needed = rows_needed_from_error(2000)
    assert 12768 <= needed <= 1.06 * 12768
    with pytest.raises(ValueError, match="too small"):
        practical_config(12767, **PRACTICAL)
    practical_config(12768, **PRACTICAL)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("steps", 1),
        ("steps", 0),
        ("batch_size", 0),
        ("stat_size", 0),
        ("learning_rate", 0.0),
        ("learning_rate", math.inf),
        ("stat_noise_multiplier", 0.0),
        ("grad_noise_multiplier", -1.0),
        ("clip_scale", 0.0),
        ("domain", math.nan),
        ("stat_queries", 0),
        ("steps", 2.5),
    ],
)
def test_config_validation(field, value):
    with pytest.raises(ValueError, match=field):
        small_config(**{field: value})


def test_config_properties():
    cfg = small_config(steps=2)
    assert cfg.records_needed == 2 * 70
    assert cfg.mu == pytest.approx(math.sqrt(1.0 + 0.25))


@pytest.mark.parametrize("margin", ["bogus", "AUTO", -1.0, math.nan, math.inf])
def test_config_validates_margin(margin):
    # A bad margin is refused when the configuration is built, not at the first DP-STAT call.
    with pytest.raises(ValueError, match="margin"):
        small_config(margin=margin)


@pytest.mark.parametrize("margin", ["auto", 0.0, 12.5])
def test_config_accepts_margin(margin):
    assert small_config(margin=margin).margin == margin


def test_refuses_add_remove_ledger():
    cfg = small_config()
    Z, t = np.zeros((cfg.records_needed, 2)), np.zeros(cfg.records_needed)
    ledger = PrivacyLedger("add-remove")
    with pytest.raises(ValueError, match="replace-one"):
        dp_ambssgd(Z, t, cfg, rng=np.random.default_rng(0), ledger=ledger)
    assert ledger.entries == ()
    # zero-out: the replace-one sensitivities bound zero-out's, recorded unchanged and stated
    replace, zero = PrivacyLedger("replace-one"), PrivacyLedger("zero-out")
    dp_ambssgd(Z, t, cfg, rng=np.random.default_rng(0), ledger=replace)
    dp_ambssgd(Z, t, cfg, rng=np.random.default_rng(0), ledger=zero)
    assert zero.events == replace.events
    assert any("bound zero-out" in a for a in zero.assumptions)


def test_refuses_too_few_rows():
    cfg = small_config()
    n = cfg.records_needed - 1
    ledger = PrivacyLedger("replace-one")
    with pytest.raises(ValueError, match=rf"needs {cfg.records_needed} rows, got {n}"):
        dp_ambssgd(np.zeros((n, 2)), np.zeros(n), cfg, rng=np.random.default_rng(0), ledger=ledger)
    assert ledger.entries == ()


def test_contiguous_rounds_mode_same_privacy_and_utility():
    """shuffle="none" reads contiguous rounds (views) of already-shuffled rows.

    The ledger is identical (privacy rests on parallel composition over a data-independent
    partition) and on exchangeable data the accuracy matches the shuffled mode's.
    """
    data = make_linear_regression(200_000, 10, sigma=1.0, rng=np.random.default_rng(7))
    row_bound = float(np.max(np.linalg.norm(data.X, axis=1)))
    config = practical_config(
        200_000,
        epsilon=4.0,
        delta=1e-6,
        row_bound=row_bound,
        target_bound=6.0,
        h_norm=1.0,
        row_norm_sq=12.0,
    )
    risks, mus = {}, {}
    for mode in ("rows", "none"):
        ledger = PrivacyLedger("replace-one")
        w, trace, _ = dp_ambssgd(
            data.X,
            data.y,
            config,
            rng=np.random.default_rng(3),
            ledger=ledger,
            shuffle=mode,
            diagnostics=True,
        )
        risks[mode] = data.excess_risk(w)
        mus[mode] = ledger.mu
        assert ledger.num_partitions == config.steps
        assert trace.clip_fraction.max() <= 0.01
    assert mus["rows"] == pytest.approx(mus["none"], rel=1e-12)
    # both within a small factor of the non-private rate sigma^2 d / N = 5e-5
    assert risks["rows"] < 20 * data.bayes_rate and risks["none"] < 20 * data.bayes_rate
    with pytest.raises(ValueError, match="shuffle"):
        dp_ambssgd(
            data.X,
            data.y,
            config,
            rng=np.random.default_rng(0),
            ledger=PrivacyLedger("replace-one"),
            shuffle="blocks",
        )
