"""Cyclic Poisson sampling: amplified banded matrix factorisation on the core (issue 14)."""

import math

import numpy as np
import pytest

from privopt.accounting import PoissonSampledGaussianEvent, PrivacyLedger
from privopt.noise import (
    column_normalized_banded,
    cyclic_poisson_event,
    independent,
    optimal_cc,
    optimize_banded_toeplitz,
)
from privopt.training import (
    SGD,
    CyclicPoissonSampling,
    FixedBatches,
    PoissonSampling,
    TrainingPlan,
    run,
)

DELTA = 1e-6


def test_one_group_and_independent_noise_is_dpsgd():
    # docs/theory/blt-and-adaptive-clipping.md item 8: one band (B = I) and one group is DP-SGD with
    # the same q and T
    cyclic = TrainingPlan(1000, CyclicPoissonSampling(1, 0.05, 80), 1.0, noise_multiplier=1.3)
    poisson = TrainingPlan(1000, PoissonSampling(0.05, 80), 1.0, noise_multiplier=1.3)
    assert cyclic.event().parameters() == poisson.event().parameters()
    assert cyclic.noise_std == poisson.noise_std
    assert cyclic.divisor == poisson.divisor == 50.0


def test_banded_event_is_the_amplified_one_and_std_scales_with_the_column_norm():
    mech = optimize_banded_toeplitz(60, 4, min_sep=10, participations=6, error="mean")
    plan = TrainingPlan(1000, CyclicPoissonSampling(10, 0.2, 60), 2.0, mechanism=mech).calibrate(
        2.0, DELTA
    )
    expected = cyclic_poisson_event(
        mech, 60, groups=10, sample_rate=0.2, noise_multiplier=plan.noise_multiplier
    )
    assert isinstance(plan.event(), PoissonSampledGaussianEvent)
    assert plan.event().parameters() == expected.parameters()
    assert plan.event().count == math.ceil(60 / 10)
    assert plan.noise_std == pytest.approx(plan.noise_multiplier * 2.0 * mech.sensitivity(60))
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(1000, 3)), rng.normal(size=1000)
    ledger = PrivacyLedger("zero-out")
    fit = run(plan, "linear", SGD(0.1), X, y, rng=rng, delta=DELTA, ledger=ledger)
    assert ledger.events == (plan.event(),) and fit.report.epsilon <= 2.0


def test_column_normalised_mf_has_unit_columns_so_dpsgd_std():
    mech = column_normalized_banded(optimal_cc(), 5, 40)
    plan = TrainingPlan(800, CyclicPoissonSampling(8, 0.1, 40), 1.0, mechanism=mech,
                        noise_multiplier=1.0)  # fmt: skip
    assert plan.noise_std == pytest.approx(1.0, rel=1e-9)


def test_schedule_reads_only_the_steps_part():
    strategy = CyclicPoissonSampling(4, 0.5, 12)
    batches = list(strategy.schedule(103, np.random.default_rng(1)))
    parts = [set(np.concatenate(batches[g::4])) for g in range(4)]
    for g in range(4):
        for h in range(g + 1, 4):
            assert not parts[g] & parts[h]  # the parts are disjoint
    assert sum(len(p) for p in parts) <= 100  # 3 left-over records are never read
    sizes = np.array([len(b) for b in strategy.schedule(10_000, np.random.default_rng(2))])
    # Bin(2500, 0.5) per step: mean 1250, sd 25; 12 steps, a 5 sd band on the mean
    assert abs(sizes.mean() - 1250) < 5 * 25 / math.sqrt(12)


def test_refusals():
    with pytest.raises(ValueError, match="banded mechanisms"):
        TrainingPlan(1000, CyclicPoissonSampling(4, 0.1, 20), 1.0, mechanism=optimal_cc())
    mech = optimize_banded_toeplitz(40, 8, error="mean")
    with pytest.raises(ValueError, match="at most `groups` bands"):
        TrainingPlan(1000, CyclicPoissonSampling(4, 0.1, 40), 1.0, mechanism=mech)
    with pytest.raises(ValueError, match="zero-out"):
        TrainingPlan(1000, CyclicPoissonSampling(4, 0.1, 20), 1.0, mechanism=independent(),
                     neighbouring="replace-one")  # fmt: skip
    with pytest.raises(ValueError, match="larger than"):
        list(CyclicPoissonSampling(200, 0.1, 3).schedule(100, np.random.default_rng(0)))
    assert FixedBatches(10).rows_per_step == 10
