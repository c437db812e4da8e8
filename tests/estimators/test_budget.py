"""Estimators drawing from a PrivacyBudget (issue 18): refused before X is read, refits charge."""

import numpy as np
import pytest

from privopt import (
    BudgetExceededError,
    DPLinearClassifier,
    DPLinearRegression,
    DPSGDRegressor,
    PrivacyBudget,
)

BOUNDS = dict(feature_bounds=(-1, 1), target_bounds=(-4, 4))


def _data(n=5000):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(n, 3))
    return X, X @ np.ones(3) + 0.1 * rng.standard_normal(n)


class _Untouchable:
    """Stands for X: its shape and dtype may be read, never its values (any access raises)."""

    def __init__(self, X):
        self.shape, self.dtype = X.shape, X.dtype

    def __len__(self):
        return self.shape[0]

    def _refuse(self, *args, **kwargs):
        raise AssertionError("the values of X were read")

    __array__ = __getitem__ = __iter__ = _refuse


def _untouchable(X):
    out = _Untouchable(X)
    assert out.shape == X.shape and out.dtype == X.dtype
    with pytest.raises(AssertionError):
        np.asarray(out)  # the guard works
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda b: DPLinearRegression(method="adassp", budget=b, random_state=0, **BOUNDS),
        lambda b: DPLinearRegression(method="ftrl-sigma", budget=b, random_state=0, **BOUNDS),
        lambda b: DPLinearClassifier(feature_bounds=(-1, 1), steps=2000, budget=b, random_state=0),
        lambda b: DPSGDRegressor(steps=2000, budget=b, random_state=0, **BOUNDS),
    ],
    ids=["adassp", "ftrl-sigma", "classifier", "sgd-regressor"],
)
def test_second_fit_is_refused_without_reading_x(make):
    # the bar: budget (1.2, 1e-6); a fit at (1, 1e-6) passes, the second is refused
    X, y = _data()
    target = y if not isinstance(make(None), DPLinearClassifier) else y > 0
    budget = PrivacyBudget(1.2, 1e-6)
    model = make(budget).fit(X, target)
    spent = budget.spent
    assert 0 < spent.epsilon <= 1.0 + 1e-9 and spent.delta == 1e-6
    assert spent.epsilon == pytest.approx(model.privacy_report_.epsilon, rel=1e-6)
    with pytest.raises(BudgetExceededError, match="Nothing was read"):
        make(budget).fit(_untouchable(X), target)
    assert budget.spent == spent
    assert budget.remaining.epsilon == pytest.approx(1.2 - spent.epsilon)


def test_refitting_charges_again_and_composes_tightly():
    X, y = _data()
    budget = PrivacyBudget(2.0, 1e-5)
    model = DPLinearRegression(method="adassp", epsilon=0.5, budget=budget, **BOUNDS)
    model.fit(X, y)
    one = budget.spent.epsilon
    model.fit(X, y)
    two = budget.spent.epsilon
    # AdaSSP is mu-GDP: two fits are sqrt(2) mu-GDP, far below basic composition (2 x 0.5)
    assert one < two < 2 * one
    assert len(budget.charges) == 2


def test_invalid_parameters_are_not_charged():
    X, y = _data()
    budget = PrivacyBudget(1.2, 1e-6)
    with pytest.raises(ValueError):
        DPLinearRegression(method="nope", budget=budget).fit(X, y)
    # the default runs under zero-out: against a replace-one budget its guarantee counts twice
    # over (group privacy), which this budget cannot hold: refused before X is read
    with pytest.raises(BudgetExceededError, match="under replace-one"):
        DPLinearRegression(budget=PrivacyBudget(1.0, 1e-6, neighbouring="replace-one")).fit(X, y)
    assert budget.spent.epsilon == 0.0 and budget.charges == ()
