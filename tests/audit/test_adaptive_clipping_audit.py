"""Empirical audit of adaptive clipping's new release: the noisy unclipped counts (issue 20).

Neighbouring datasets (replace-one) differ in one row: a canary whose gradient norm (50) is far
above any clip, so its unclipped bit is 0, against a zero row (bit 1, zero gradient). One batch
holds every row, so the canary participates at every step. The score is the total of the
released centred counts (the canary lowers each by 1; with count_noise_fraction = 1 the counts
carry mu = 0.17 of the run's budget). At a claimed epsilon
of 1 the lower bound must stay at or below the claim; a planted bug (the counts released without
noise, through the internal test hook, while the report still says epsilon = 1) must be caught.
"""

import dataclasses

import numpy as np
import pytest

from privopt.audit import audit_scores
from privopt.noise import nu_dpftrl
from privopt.training import SGD, FixedBatches, GenericModel, QuantileClipping, TrainingPlan, run

N, DELTA = 10, 1e-5
MODEL = GenericModel(lambda w, X, y: X, name="rows")


def _plan(count_noise=True):
    rule = QuantileClipping(count_noise_fraction=1.0, _count_noise=count_noise)
    return TrainingPlan(
        N, FixedBatches(N, 3), 1.0, mechanism=nu_dpftrl(0.2), neighbouring="replace-one",
        adaptive_clipping=rule,
    ).calibrate(1.0, DELTA)  # fmt: skip


def _scores(plan, canary: bool, seeds):
    X = np.zeros((N, 2))
    if canary:
        X[0] = (50.0, 0.0)
    out = []
    for seed in seeds:
        fit = run(plan, MODEL, SGD(1.0), X, np.zeros(N), rng=np.random.default_rng(seed),
                  delta=DELTA)  # fmt: skip
        out.append(-float(np.sum(fit.info["released_counts"])))
    return np.asarray(out)


def _bound(plan, runs):
    with_canary = _scores(plan, True, range(runs))
    without = _scores(plan, False, range(runs, 2 * runs))
    return audit_scores(with_canary, without, delta=DELTA).epsilon_lower_bound


@pytest.mark.slow
def test_count_release_passes_the_audit_and_noiseless_counts_are_caught():
    # measured (1,000 runs a side): 0.008 for the correct plan, 4.91 for the noiseless counts
    plan = _plan()
    assert plan.count_noise_std == 10.0
    assert _bound(plan, 1000) <= 1.0
    broken = dataclasses.replace(plan, adaptive_clipping=_plan(False).adaptive_clipping)
    assert broken.event() == plan.event()  # the report would claim the same epsilon
    assert _bound(broken, 1000) > 1.0
