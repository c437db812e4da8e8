"""The neighbouring relation is decided before the data are read (issue 26, item 2).

Every method, ``"auto"`` included, is planned under the relation it runs; a budget in another
relation is charged the fit's guarantee converted to it, or refuses before X is read; a fit that
fails after reading data leaves no fitted attribute; private grid search composes its candidates
in one relation and checks each candidate's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privopt import (
    BudgetExceededError,
    DPLinearClassifier,
    DPLinearRegression,
    DPSGDRegressor,
    PrivacyBudget,
)
from privopt.model_selection import PrivateGridSearchCV


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, X @ np.array([1.0, -0.5, 0.25]) + 0.1 * rng.standard_normal(n)


class Untouchable:
    """An array-like whose values may not be read (its length is public)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.shape = (n, 3)

    def __len__(self) -> int:
        return self.n

    def __array__(self, *args, **kwargs):
        raise AssertionError("the data were read")


@pytest.mark.parametrize(
    ("params", "relation"),
    [
        ({}, "zero-out"),
        ({"method": "auto", "neighbouring": "replace-one"}, "replace-one"),
        ({"method": "newton"}, "zero-out"),
        ({"method": "dpsgd"}, "zero-out"),
        ({"method": "adassp"}, "replace-one"),
        ({"method": "ambssgd"}, "replace-one"),
        ({"method": "ssgd"}, "replace-one"),
        ({"method": "ftrl-sigma"}, "replace-one"),
        ({"method": "newton", "neighbouring": "zero-out"}, "zero-out"),
    ],
)
def test_planned_relation_is_the_relation_that_runs(params, relation):
    model = DPLinearRegression(**params)
    assert model._planned_relation() == relation
    if params.get("method") in (None, "auto", "newton", "dpsgd"):
        X, y = _data()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.set_params(random_state=0).fit(X, y)
        assert model.privacy_report_.neighbouring == relation


def test_issue_case_is_refused_before_reading_data():
    budget = PrivacyBudget(epsilon=1.5, delta=1e-6, neighbouring="replace-one")
    model = DPLinearRegression(epsilon=1, delta=1e-6, budget=budget)
    with pytest.raises(BudgetExceededError, match="under replace-one"):
        model.fit(Untouchable(3000), np.zeros(3000))
    assert not hasattr(model, "coef_")
    assert budget.spent.epsilon == 0.0 and budget.charges == ()


def test_a_zero_out_fit_is_charged_its_replace_one_guarantee():
    budget = PrivacyBudget(epsilon=4.0, delta=1e-5, neighbouring="replace-one")
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPLinearRegression(epsilon=1.0, delta=1e-7, random_state=0, budget=budget)
        model.fit(X, y)
    assert model.privacy_report_.neighbouring == "zero-out"  # the report states what ran
    # replace-one is two zero-out steps: the charge is about 2 mu-GDP, more than the fit's 1.0
    # at its own delta and its 0.73 at the budget's delta
    assert 1.2 < budget.spent.epsilon <= 4.0


def test_a_failed_fit_leaves_no_fitted_attribute():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (3000, 3))
    budget = PrivacyBudget(5.0, 1e-5, neighbouring="replace-one")
    model = DPLinearClassifier(feature_bounds=(-1, 1), steps=2000, random_state=0, budget=budget)
    with pytest.raises(ValueError, match="released label set holds"):
        model.fit(X, np.zeros(3000, dtype=int))  # one class: the label set release fails
    assert not any(name.endswith("_") and not name.startswith("_") for name in vars(model))
    assert budget.spent.epsilon > 0.0  # the release that ran stays charged
    # a refit that fails restores the previous fit
    y = (X[:, 0] > 0).astype(int)
    model.fit(X, y)
    coef = model.coef_.copy()
    with pytest.raises(ValueError):
        model.fit(X, np.zeros(3000, dtype=int))
    np.testing.assert_array_equal(model.coef_, coef)


def test_a_fit_that_runs_another_relation_is_withheld(monkeypatch):
    X, y = _data()
    model = DPLinearRegression(method="newton", random_state=0)
    monkeypatch.setattr(DPLinearRegression, "_planned_relation", lambda self: "replace-one")
    with pytest.raises(RuntimeError, match="planned under 'replace-one' neighbours but ran"):
        model.fit(X, y)
    assert not hasattr(model, "coef_")


def test_grid_search_reports_the_relation_its_candidates_ran():
    X, y = _data()
    bounds = {"feature_bounds": (-1, 1), "target_bounds": (-2, 2)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = PrivateGridSearchCV(
            DPLinearRegression(**bounds), {"method": ["newton", "adassp"]}, random_state=0
        ).fit(X, y)
        replace = PrivateGridSearchCV(
            DPLinearRegression(**bounds), {"method": ["adassp"]}, random_state=0
        ).fit(X, y)
    assert mixed.privacy_report_.neighbouring == "zero-out"
    assert replace.privacy_report_.neighbouring == "replace-one"


def test_grid_search_checks_each_candidates_relation(monkeypatch):
    X, y = _data()
    search = PrivateGridSearchCV(
        DPSGDRegressor(feature_bounds=(-1, 1), target_bounds=(-2, 2), steps=500),
        {"loss": ["squared"]},
        random_state=0,
    )
    monkeypatch.setattr(PrivateGridSearchCV, "_planned_relation", lambda self: "add-remove")
    with pytest.raises(ValueError, match="do not imply the search's 'add-remove' guarantee"):
        search.fit(X, y)


def test_a_public_refusal_reserves_nothing():
    """delta >= 1/N is refused from public values before the budget is touched (issue 33)."""
    X, y = _data(2000)
    budget = PrivacyBudget(1.5, 1e-2)
    with pytest.raises(ValueError, match="allow_large_delta"):
        DPLinearRegression(epsilon=0.99, delta=1e-3, budget=budget).fit(X, y)
    assert budget.spent.epsilon == 0.0 and budget.charges == ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPLinearRegression(epsilon=0.99, delta=1e-5, random_state=0, budget=budget).fit(X, y)
    assert 0.0 < budget.spent.epsilon <= 1.5
