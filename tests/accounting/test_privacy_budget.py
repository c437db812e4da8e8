"""PrivacyBudget: composition across fits, refusal before any data is read (issue 18)."""

import math

import numpy as np
import pytest

from privopt import BudgetExceededError, PrivacyBudget
from privopt.accounting import (
    ApproxDPEvent,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    gdp_epsilon,
)
from privopt.accounting.budget import compose_guarantees
from privopt.training import FixedBatches, TrainingPlan, run
from privopt.training.updates import SGD

DELTA = 1e-6


def test_gaussian_charges_compose_exactly_in_gdp():
    budget = PrivacyBudget(3.0, DELTA)
    budget.charge([GaussianEvent(1.0, 4.0)], neighbouring="zero-out")
    budget.charge([GaussianEvent(1.0, 2.0)], neighbouring="zero-out")
    # golden: mu = sqrt(0.25^2 + 0.5^2), converted by the exact GDP profile
    assert budget.spent.epsilon == pytest.approx(gdp_epsilon(math.hypot(0.25, 0.5), DELTA))
    assert budget.spent.delta == DELTA
    assert budget.remaining.epsilon == pytest.approx(3.0 - budget.spent.epsilon)


def test_refusal_changes_nothing():
    budget = PrivacyBudget(1.2, DELTA)
    budget.charge([GaussianEvent(1.0, 5.0)], neighbouring="zero-out")
    before = budget.spent
    with pytest.raises(BudgetExceededError, match=r"above its epsilon = 1\.2"):
        budget.charge([GaussianEvent(1.0, 5.0)], neighbouring="zero-out")
    assert budget.spent == before and len(budget.charges) == 1


def test_partitions_of_different_fits_combine_worst_with_worst():
    # each fit: two disjoint partitions of mu 0.3 and 0.4; a record can be in the 0.4 part of
    # both fits (independent draws), so the total is sqrt(0.4^2 + 0.4^2)-GDP, not all four
    budget = PrivacyBudget(5.0, DELTA)
    for _ in range(2):
        ledger = PrivacyLedger("replace-one")
        ledger.record(GaussianEvent(0.3, 1.0), partition="a")
        ledger.record(GaussianEvent(0.4, 1.0), partition="b")
        budget.reserve(
            ApproxDPEvent(2.0, 1e-7), neighbouring="replace-one", guarantee=(2.0, 1e-7)
        ).complete([ledger])
    assert budget.spent.epsilon == pytest.approx(gdp_epsilon(math.hypot(0.4, 0.4), DELTA))


def test_guarantee_composition_is_basic_or_better():
    pairs = [(0.5, 1e-7)] * 2
    assert compose_guarantees(pairs, DELTA) <= 1.0
    budget = PrivacyBudget(1.2, DELTA, neighbouring="replace-one")
    for _ in range(2):  # planned only (never completed): the guarantees compose
        budget.reserve(ApproxDPEvent(0.5, 1e-7), neighbouring="replace-one", guarantee=(0.5, 1e-7))
    assert budget.spent.epsilon <= 1.0 + 1e-12
    with pytest.raises(BudgetExceededError):
        budget.reserve(ApproxDPEvent(0.5, 1e-7), neighbouring="replace-one", guarantee=(0.5, 1e-7))


def test_relations_that_do_not_imply_the_budget_are_refused_or_converted():
    # issue 26: zero-out on a replace-one budget is converted (group privacy of size 2)
    budget = PrivacyBudget(5.0, DELTA, neighbouring="replace-one")
    budget.charge([PoissonSampledGaussianEvent(1.0, 0.01, 10)], neighbouring="zero-out")
    assert 0 < budget.spent.epsilon < 5.0
    zero_out = PrivacyBudget(5.0, DELTA)  # replace-one analyses bound zero-out
    zero_out.charge([GaussianEvent(1.0, 5.0)], neighbouring="replace-one")
    assert zero_out.spent.epsilon > 0
    for budget_relation, charged in [
        ("replace-one", "add-remove"),
        ("zero-out", "add-remove"),
        ("add-remove", "zero-out"),
        ("add-remove", "replace-one"),
    ]:
        other = PrivacyBudget(5.0, DELTA, neighbouring=budget_relation)
        with pytest.raises(ValueError, match="do not imply"):
            other.charge([GaussianEvent(1.0, 5.0)], neighbouring=charged)
        assert other.charges == ()


@pytest.mark.parametrize("bad", [dict(epsilon=-1.0), dict(epsilon=math.inf), dict(delta=0.0)])
def test_invalid_budgets_are_refused(bad):
    with pytest.raises(ValueError):
        PrivacyBudget(**{"epsilon": 1.0, "delta": DELTA, **bad})


class _Untouchable:
    """Stands for X: its shape and dtype may be read, never its values (any access raises)."""

    def __init__(self, X):
        self.shape, self.dtype = X.shape, X.dtype

    def __len__(self):
        return self.shape[0]

    def _refuse(self, *args, **kwargs):
        raise AssertionError("the values of X were read")

    __array__ = __getitem__ = __iter__ = _refuse


def test_training_core_charges_the_plan_event_before_reading_data():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (200, 2)), rng.uniform(-1, 1, 200)
    plan = TrainingPlan(200, FixedBatches(20, 1), clip_norm=1.0, noise_multiplier=4.0)
    budget = PrivacyBudget(gdp_epsilon(plan.event().mu * 1.2, DELTA), DELTA)
    fit = run(plan, "linear", SGD(0.1), X, y, rng=rng, delta=DELTA, budget=budget)
    assert budget.spent.epsilon == pytest.approx(fit.report.epsilon)
    with pytest.raises(BudgetExceededError):
        run(plan, "linear", SGD(0.1), _Untouchable(X), y, rng=rng, delta=DELTA, budget=budget)
    assert budget.spent.epsilon == pytest.approx(fit.report.epsilon)


def test_report_summary_is_plain_and_states_the_guarantee():
    ledger = PrivacyLedger("zero-out", ["the number of records N is public"])
    ledger.record(GaussianEvent(1.0, 5.0))
    ledger.disclose("clip fractions")
    text = ledger.report(DELTA).summary()
    sentences = [s for s in text.split(". ") if s]
    assert 2 <= len(sentences) <= 4
    assert "epsilon = 0.834" in text and "blanked out" in text and "NOT covered" in text
    assert f"{math.exp(0.834):.3g}" in text
    assert "zCDP" not in text and "GDP" not in text  # no jargon
