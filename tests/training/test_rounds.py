"""Varshney et al.'s (2022) rounds and the clip sources on the training core (issue 13, item 2).

* contract: DP-AMBSSGD and DP-FTRL-Σ run through ``execute`` and the ledger holds exactly the
  plan's ``recorded_events()`` (event and partition), with epsilon unchanged from the events
  the pre-core loops recorded;
* the law of the noise: the added noise has the plan's std (unit-clip stream times the released
  threshold; the tree's popcount law at psi_max);
* equality: the ``Rounds`` strategy reproduces the pre-core layout of the permutation, the
  DP-STAT clip source equals a direct DP-STAT call, and a fit equals the paper's loop written
  out by hand with the same draws.
"""

import math

import numpy as np
import pytest

from privopt.accounting import ApproxDPEvent, GaussianEvent, PrivacyLedger
from privopt.algorithms import AMBSSGDConfig, dp_ambssgd, dp_ftrl_sigma
from privopt.algorithms.ambssgd import ambssgd_plan
from privopt.algorithms.ftrl_sigma import ftrl_sigma_plan
from privopt.clipping import clip_factors, dp_stat
from privopt.datasets import make_linear_regression, make_overparameterised_regression
from privopt.noise import IdentityCovariance, TreeAggregation, independent
from privopt.training import (
    SGD,
    DPStatThreshold,
    FixedBatches,
    FixedClip,
    ResidualThreshold,
    Round,
    Rounds,
    RowData,
    TrainingPlan,
    execute,
)
from privopt.training.gradients import LinearRegressionModel, SigmaNormLinearModel

DELTA = 1e-6


def small_config(**overrides) -> AMBSSGDConfig:
    params = dict(
        steps=5,
        batch_size=40,
        stat_size=20,
        learning_rate=0.3,
        stat_noise_multiplier=1.0,
        grad_noise_multiplier=2.0,
        clip_scale=2.0,
        domain=8.0,
        stat_queries=12,
    )
    return AMBSSGDConfig(**(params | overrides))


# -- the batch strategy -----------------------------------------------------------------------


def test_rounds_reproduce_the_permutation_layout_of_algorithm_2():
    """Round t reads order[t(s+b) : t(s+b)+s] as stat rows and the next b as gradient rows,
    sorted; the permutation is the first draw of rng; left-over rows are never scheduled."""
    rounds = Rounds(4, batch_size=7, stat_size=3)
    n = rounds.records_needed + 5
    got = rounds.rounds(n, np.random.default_rng(11))
    order = np.random.default_rng(11).permutation(n)
    assert len(got) == 4 and rounds.steps(n) == 4 and rounds.divisor(n) == 7.0
    for t, step in enumerate(got):
        start = 10 * t
        np.testing.assert_array_equal(step.stat, np.sort(order[start : start + 3]))
        np.testing.assert_array_equal(step.rows, np.sort(order[start + 3 : start + 10]))
        assert len(step) == 7 and Rounds.partition(t) == ("round", t)
    used = np.concatenate([np.r_[s.stat, s.rows] for s in got])
    assert np.unique(used).size == used.size == 40
    assert set(order[40:]).isdisjoint(used)
    assert rounds.participation(n).kind == "single"


def test_contiguous_rounds_are_views_in_the_given_order():
    rounds = Rounds(3, batch_size=4, stat_size=2, shuffle="none")
    got = rounds.rounds(20, np.random.default_rng(0))
    assert [(s.stat, s.rows) for s in got] == [
        (slice(0, 2), slice(2, 6)),
        (slice(6, 8), slice(8, 12)),
        (slice(12, 14), slice(14, 18)),
    ]
    assert [len(s) for s in got] == [4, 4, 4]
    X = np.arange(40.0).reshape(20, 2)
    assert np.shares_memory(X[got[1].rows], X)  # no copy


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_rounds": 0, "batch_size": 2}, "num_rounds"),
        ({"num_rounds": 2, "batch_size": 0}, "batch_size"),
        ({"num_rounds": 2, "batch_size": 2, "stat_size": -1}, "stat_size"),
        ({"num_rounds": 2, "batch_size": 2, "shuffle": "blocks"}, "shuffle"),
    ],
)
def test_rounds_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Rounds(**kwargs)


def test_rounds_refuse_too_few_rows_and_correlated_noise():
    with pytest.raises(ValueError, match="need 30 rows, got 29"):
        Rounds(3, batch_size=8, stat_size=2).rounds(29, np.random.default_rng(0))
    with pytest.raises(ValueError, match="parallel"):
        TrainingPlan(100, Rounds(3, 10), 1.0, 1.0, mechanism=TreeAggregation())


# -- clip sources --------------------------------------------------------------------------------


def test_dp_stat_source_equals_a_direct_dp_stat_call():
    rng_data = np.random.default_rng(3)
    X, y = rng_data.normal(size=(50, 3)), rng_data.normal(size=50)
    w = np.array([0.5, -1.0, 2.0])
    rule = DPStatThreshold(domain=16.0, noise_multiplier=0.7, queries=15, scale=3.0)
    source = rule.start(np.random.default_rng(9))
    stat_rows = np.arange(10, 40)
    data = RowData(LinearRegressionModel(), X, y)
    zeta = source.threshold(0, w, data, stat_rows)
    direct = dp_stat(
        np.abs(X[stat_rows] @ w - y[stat_rows]),
        domain=16.0,
        noise_multiplier=0.7,
        rng=np.random.default_rng(9),
        queries=15,
    )
    assert zeta == 3.0 * direct.gamma and source.gammas == [direct.gamma]
    assert rule.event() == GaussianEvent(
        1.0, 0.7 * math.sqrt(15), count=15, label="DP-STAT residual bound"
    )


def test_fixed_clip_passes_the_stream_through_and_threshold_sources_scale_it():
    stream_a = independent().noise_stream(4, 1.5, seed=7)
    stream_b = independent().noise_stream(4, 1.5, seed=7)
    assert np.array_equal(FixedClip(2.0).noise(stream_a, 2.0), stream_b.next())
    source = DPStatThreshold(1.0, 1.0).start(np.random.default_rng(0))
    assert np.array_equal(source.noise(stream_a, 0.25), 0.25 * stream_b.next())


def test_residual_threshold_draws_tree_nodes_at_the_running_maximum():
    """The increments sum to the tree's prefix noise with every node drawn at psi_max of its
    completion step (TreeStream.next_scaled), so an SGD update on them is the FTRL update."""
    psis = [1.0, 3.0, 2.0, 0.5, 4.0, 1.0, 1.0]
    rule = ResidualThreshold(lambda t, w: psis[t])
    stream = rule.open_stream(TreeAggregation(), 3, 0.8, None, noise_seed=5)
    reference = TreeAggregation().noise_stream(3, 0.8, seed=5)
    source = rule.start()
    total = np.zeros(3)
    for t in range(len(psis)):
        assert source.threshold(t, np.zeros(3), None, None) == psis[t]
        total += source.noise(stream, psis[t])
        np.testing.assert_allclose(
            total, reference.next_scaled(max(psis[: t + 1])), rtol=1e-12, atol=1e-14
        )
    assert source.scales == [1.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0]
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="finite psi > 0"):
            ResidualThreshold(lambda t, w, b=bad: b).start().threshold(0, None, None, None)


def test_private_threshold_plans_are_checked():
    rule = DPStatThreshold(1.0, 1.0)
    with pytest.raises(ValueError, match="unit clip"):
        TrainingPlan(100, Rounds(3, 10, 5), 2.0, 1.0, private_threshold=rule)
    for batches in (Rounds(3, 10), FixedBatches(10)):  # DP-STAT needs each round's stat rows
        with pytest.raises(ValueError, match="stat rows"):
            TrainingPlan(100, batches, 1.0, 1.0, private_threshold=rule)
    from privopt.training import PoissonSampling

    with pytest.raises(ValueError, match="rounds and fixed batches"):
        TrainingPlan(
            100,
            PoissonSampling(0.1, 5),
            1.0,
            1.0,
            private_threshold=rule,
        )


# -- the contract: what runs is what the plan's events say ---------------------------------------


@pytest.mark.parametrize("relation", ["replace-one", "zero-out"])
def test_ambssgd_runs_on_the_core_and_records_the_plans_events(relation):
    cfg = small_config()
    data = make_linear_regression(cfg.records_needed + 7, 3, rng=np.random.default_rng(1))
    ledger = PrivacyLedger(relation)
    _, trace, info = dp_ambssgd(data.X, data.y, cfg, rng=np.random.default_rng(2), ledger=ledger)
    plan = info["plan"]
    built = ambssgd_plan(data.n_samples, cfg)  # from the configuration alone
    assert (plan.batches, plan.private_threshold) == (built.batches, built.private_threshold)
    assert plan.recorded_events() == built.recorded_events()
    assert isinstance(plan.batches, Rounds) and isinstance(plan.private_threshold, DPStatThreshold)
    expected = plan.recorded_events()
    assert [(e.event, e.partition) for e in ledger.entries] == expected
    if relation == "zero-out":  # replace-one events recorded in a zero-out ledger, and said so
        assert any("bound zero-out" in text for text in ledger.assumptions)
    # per round partition: DP-STAT's K counts, then the unit-clip gradient step
    for t in range(cfg.steps):
        stat, grad = expected[2 * t][0], expected[2 * t + 1][0]
        assert expected[2 * t][1] == expected[2 * t + 1][1] == ("round", t)
        assert (stat.sensitivity, stat.std, stat.count) == (1.0, math.sqrt(12), 12)
        assert (grad.sensitivity, grad.std) == (2.0, 4.0)
    # the epsilon the pre-core loop reported: its events had sensitivity 2 eta zeta_t / b and
    # std alpha_g times that, i.e. the same mu per round (rounding aside)
    old = PrivacyLedger("replace-one")
    for t, zeta in enumerate(trace.clip_threshold):
        old.record(GaussianEvent(1.0, math.sqrt(12), count=12), partition=("round", t))
        sens = 2 * cfg.learning_rate * zeta / cfg.batch_size
        old.record(GaussianEvent(sens, 2.0 * sens), partition=("round", t))
    assert ledger.epsilon(DELTA) == pytest.approx(old.epsilon(DELTA), rel=1e-9)
    assert ledger.mu == pytest.approx(cfg.mu, rel=1e-12)


@pytest.mark.parametrize("residual", ["fixed", "private"])
def test_ftrl_sigma_runs_on_the_core_and_records_the_plans_events(residual):
    data = make_overparameterised_regression(64, 6, r=2.0, rng=np.random.default_rng(0))
    kwargs = {"threshold": 1.0} if residual == "fixed" else {"clip_constant": 2.0}
    if residual == "private":
        kwargs["estimating_data"] = data.sample(6000, np.random.default_rng(5))
    ledger = PrivacyLedger("replace-one")
    fit = dp_ftrl_sigma(
        data.X,
        data.y,
        epsilon=8.0,
        delta=1e-5,
        learning_rate=0.01,
        rng=np.random.default_rng(0),
        residual=residual,
        ledger=ledger,
        residual_every=64,
        **kwargs,
    )
    plan = fit.info["plan"]
    assert isinstance(plan.batches, FixedBatches) and plan.batches.batch_size == 1
    assert isinstance(plan.private_threshold, ResidualThreshold)
    partition = "training" if residual == "private" else None
    assert [(e.event, e.partition) for e in ledger.entries] == plan.recorded_events(partition)
    tree = ledger.entries[0].event
    assert tree.sensitivity == pytest.approx(2 * math.sqrt(7), rel=1e-15)  # k = 7 at N = 64
    assert tree.std == fit.info["tau"]
    if residual == "private":
        (histogram,) = [e for e in ledger.entries if isinstance(e.event, ApproxDPEvent)]
        assert histogram.partition == "estimating" and histogram.event.count == 1
        assert fit.info["residual_calls"] == 1


# -- the law of the noise -----------------------------------------------------------------------


def test_ambssgd_noise_has_the_plans_std():
    """Zero data: every step is noise only, N(0, (eta zeta_t sigma / b)^2) with sigma the plan's
    unit-clip std 2 alpha_g and zeta_t the released threshold. 40 runs x 5 steps x 50
    coordinates = 10,000 standardised draws: their variance is 1 within 5 standard errors
    (5 sqrt(2 / 10^4) = 7%); 0.85 or 1.15 times the std would be rejected."""
    cfg = small_config()
    p, n = 50, cfg.records_needed
    plan = ambssgd_plan(n, cfg)
    values = []
    for seed in range(40):
        ws = [np.zeros(p)]
        _, trace, _ = execute(
            plan,
            "linear",
            SGD(cfg.learning_rate),
            np.zeros((n, p)),
            np.zeros(n),
            rng=np.random.default_rng(seed),
            ledger=PrivacyLedger("replace-one"),
            callback=lambda step, ws=ws: ws.append(step.w),
        )
        increments = np.diff(np.asarray(ws), axis=0)
        std = cfg.learning_rate * trace.clip_threshold * plan.noise_std / cfg.batch_size
        np.testing.assert_allclose(
            cfg.learning_rate * trace.noise_std, std, rtol=1e-15
        )  # the trace states it
        values.append(increments / std[:, None])
    variance = float(np.mean(np.square(values)))
    assert abs(variance - 1.0) < 5 * math.sqrt(2 / 10_000)
    for wrong in (0.85, 1.15):
        assert abs(variance / wrong**2 - 1.0) > 5 * math.sqrt(2 / 10_000)


def test_ftrl_sigma_noise_has_the_plans_std():
    """Zero data, a fixed psi: w_T = -eta P_{T-1}, whose T = 7 prefix holds popcount(7) = 3
    nodes of std tau psi each (identity Σ): 40 runs x 250 coordinates = 10,000 draws."""
    n, d, tau, psi, eta = 7, 250, 1.3, 0.6, 0.5
    rule = ResidualThreshold(lambda t, w: psi)
    plan = ftrl_sigma_plan(n, tau, rule)
    values = []
    for seed in range(40):
        last = []
        execute(
            plan,
            SigmaNormLinearModel(IdentityCovariance(d)),
            SGD(eta),
            np.zeros((n, d)),
            np.zeros(n),
            rng=np.random.default_rng(seed),
            averaging="inputs",
            ledger=PrivacyLedger("replace-one"),
            callback=lambda step, last=last: last.append(step.w),
        )
        values.append(last[-1] / (eta * plan.noise_std * psi * math.sqrt(3)))
    variance = float(np.mean(np.square(values)))
    assert abs(variance - 1.0) < 5 * math.sqrt(2 / 10_000)
    for wrong in (0.85, 1.15):
        assert abs(variance / wrong**2 - 1.0) > 5 * math.sqrt(2 / 10_000)


# -- equality with the paper's loop written out -------------------------------------------------


def paper_loop(Z, t, cfg, seed):
    """Algorithm 2 by hand with the core's draw order: permutation, the unit-clip stream's key,
    then each round's DP-STAT counts; clip, unit noise times zeta_t, tail average."""
    rng = np.random.default_rng(seed)
    n, p = Z.shape
    order = rng.permutation(n)
    stream = independent().noise_stream(p, 2 * cfg.grad_noise_multiplier, rng)
    w, tail, b, s = np.zeros(p), np.zeros(p), cfg.batch_size, cfg.stat_size
    for step in range(cfg.steps):
        start = step * (b + s)
        stat = np.sort(order[start : start + s])
        grad = np.sort(order[start + s : start + s + b])
        gamma = dp_stat(
            np.abs(Z[stat] @ w - t[stat]),
            domain=cfg.domain,
            noise_multiplier=cfg.stat_noise_multiplier,
            rng=rng,
            queries=cfg.stat_queries,
        ).gamma
        zeta = cfg.clip_scale * gamma
        r = Z[grad] @ w - t[grad]
        clipped = Z[grad].T @ (r * clip_factors(np.abs(r) * np.linalg.norm(Z[grad], axis=1), zeta))
        w = w - cfg.learning_rate * (clipped + stream.next() * zeta) / b
        if step >= cfg.steps // 2:
            tail += w
    return tail / (cfg.steps - cfg.steps // 2)


def test_ambssgd_equals_the_papers_loop_with_the_same_draws():
    cfg = small_config(steps=6)
    data = make_linear_regression(cfg.records_needed + 3, 4, rng=np.random.default_rng(4))
    w, _, _ = dp_ambssgd(
        data.X, data.y, cfg, rng=np.random.default_rng(21), ledger=PrivacyLedger("replace-one")
    )
    np.testing.assert_allclose(w, paper_loop(data.X, data.y, cfg, 21), rtol=1e-12, atol=1e-14)


def test_a_round_is_a_batch_of_its_gradient_rows():
    assert len(Round(np.arange(5), np.arange(5, 8))) == 5
    assert len(Round(slice(10, 14))) == 4
