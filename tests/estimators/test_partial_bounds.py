"""Partial public bounds and one-hot tables in DPLinearRegression (issue 31)."""

from __future__ import annotations

import statistics
import warnings

import numpy as np
import pandas as pd
import pytest

from privopt import DPLinearRegression


def _one_hot(m=4_000, seed=0):
    """Two normal features and three one-hot columns; a {-1, 1} target."""
    rng = np.random.default_rng(seed)
    category = rng.choice(4, size=m, p=[0.6, 0.25, 0.1, 0.05])
    X = np.c_[rng.normal(40.0, 12.0, m), rng.normal(0.0, 3.0, m), np.eye(4)[category][:, 1:]]
    score = 0.05 * (X[:, 0] - 40.0) + 0.2 * X[:, 1] + X[:, 2:] @ [1.0, -1.0, 2.0]
    y = np.where(score + rng.normal(0.0, 1.5, m) > 0.0, 1.0, -1.0)
    return X, y


def _events(model):
    return [e.label for e in model.privacy_report_.events]


def test_partial_bounds_release_only_the_other_columns():
    """(low, high) for the one-hot columns, None for the others: no private release names a
    public column, the report states their indices, and their boxes are their ranges."""
    X, y = _one_hot()
    bounds = [None, (np.nan, np.nan), (0, 1), (0, 1), (0, 1)]
    model = DPLinearRegression(epsilon=1.0, feature_bounds=bounds, random_state=0).fit(X, y)
    labels = " ".join(_events(model))
    assert "feature 0" in labels and "feature 1" in labels
    assert not any(f"feature {j}" in labels for j in (2, 3, 4))
    assumptions = " ".join(model.privacy_report_.assumptions)
    assert "features [2, 3, 4]" in assumptions and "public ranges" in assumptions
    assert model.privacy_report_.epsilon <= 1.0
    assert "known range" in model.fit_info_["bounds"]
    assert model.fit_info_["known_ranges"].startswith("features [2, 3, 4] public")


def test_dict_names_a_subset_of_dataframe_columns():
    X, y = _one_hot()
    frame = pd.DataFrame(X, columns=["age", "score", "a", "b", "c"])
    bounds = {"a": (0, 1), "b": (0, 1), "c": (0, 1)}
    model = DPLinearRegression(epsilon=1.0, feature_bounds=bounds, random_state=0).fit(frame, y)
    assert "features ['a', 'b', 'c']" in " ".join(model.privacy_report_.assumptions)
    assert not any("feature 2" in label for label in _events(model))


def test_target_bounds_alone_and_feature_bounds_alone():
    X, y = _one_hot()
    only_target = DPLinearRegression(epsilon=1.0, target_bounds=(-1, 1), random_state=0)
    labels = " ".join(_events(only_target.fit(X, y)))
    assert "the target" not in labels and "feature 0" in labels
    ranges = np.c_[X.min(0), X.max(0)]
    only_features = DPLinearRegression(epsilon=1.0, feature_bounds=ranges, random_state=0)
    score = 3.0 * y + np.random.default_rng(1).normal(0.0, 1.0, y.size)  # not in [-1, 1]
    labels = " ".join(_events(only_features.fit(X, score)))
    assert "the target" in labels and "feature 0" not in labels


def test_complete_bounds_keep_the_public_path():
    """Every feature and the target given, as a list of pairs or an array: the public fit."""
    X, y = _one_hot()
    ranges = np.c_[X.min(0), X.max(0)]
    a = DPLinearRegression(epsilon=1.0, feature_bounds=ranges, target_bounds=(-1, 1),
                           random_state=3).fit(X, y)  # fmt: skip
    b = DPLinearRegression(epsilon=1.0, feature_bounds=[tuple(r) for r in ranges],
                           target_bounds=(-1, 1), random_state=3).fit(X, y)  # fmt: skip
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.fit_info_["bounds"].startswith("public") and "known_ranges" not in a.fit_info_


@pytest.mark.parametrize(
    ("bounds", "target", "match"),
    [
        ([None, (0, np.nan), None, None, None], None, r"feature_bounds\[1\]"),
        ([None, (1, 0), None, None, None], None, r"feature_bounds\[1\].*low < high"),
        ([None, (0, np.inf), None, None, None], None, r"feature_bounds\[1\].*finite"),
        ([None, "wide", None, None, None], None, r"feature_bounds\[1\]"),
        ([None, (0, 1)], None, "must give 5 entries"),
        ({"a": (0, 1)}, None, "needs X to be a DataFrame"),
        (None, (1, -1), "target_bounds"),
        (None, (np.nan, np.nan), "target_bounds must be a"),
    ],
)
def test_bad_partial_bounds_are_named(bounds, target, match):
    X, y = _one_hot(m=600)
    with pytest.raises(ValueError, match=match):
        DPLinearRegression(feature_bounds=bounds, target_bounds=target).fit(X, y)


def test_dict_with_an_unknown_column_is_named():
    X, y = _one_hot(m=600)
    frame = pd.DataFrame(X, columns=["age", "score", "a", "b", "c"])
    with pytest.raises(ValueError, match=r"does not have: \['d'\]"):
        DPLinearRegression(feature_bounds={"a": (0, 1), "d": (0, 1)}).fit(frame, y)


def test_screen_finds_the_one_hot_columns_without_bounds():
    """No bounds at all: the binary-column screen gives the one-hot columns and the {-1, 1}
    target their ranges (boxes of 1, target radius 1), one screen event in the ledger."""
    X, y = _one_hot()
    model = DPLinearRegression(epsilon=1.0, random_state=0).fit(X, y)
    labels = _events(model)
    assert sum("screen" in label for label in labels) == 1
    assert not any(f"feature {j}" in " ".join(labels) for j in (2, 3, 4))
    assert "known range" in model.fit_info_["bounds"]
    assert "|y| <= 1," in model.fit_info_["bounds"] + ","
    assert (
        model.fit_info_["known_ranges"]
        == "features [2, 3, 4] found binary; the target found binary"
    )


def _adult(rows, columns, seed):
    from privopt.datasets.adult import load_adult_arrays

    Xtr, ytr, Xte, yte = load_adult_arrays()
    keep = [j for j in range(Xtr.shape[1]) if np.ptp(Xtr[:, j]) > 0]
    Xtr, Xte = Xtr[:, keep], Xte[:, keep]
    chosen = np.random.default_rng(0).choice(Xtr.shape[1], columns, replace=False)
    sample = np.random.default_rng(50 + seed).choice(len(ytr), rows, replace=False)
    ranges = np.c_[Xtr.min(0), Xtr.max(0)][chosen]
    return Xtr[sample][:, chosen], ytr[sample], Xte[:, chosen], yte, ranges


def _r2(y, prediction):
    return 1.0 - np.mean((y - prediction) ** 2) / np.var(y)


@pytest.mark.slow
@pytest.mark.parametrize(("rows", "columns"), [(4_000, 10), (15_000, 25)])
def test_one_hot_adult_without_bounds_matches_public_bounds(rows, columns):
    """One-hot Adult, 4,000 rows x 10 columns and 15,000 x 25, epsilon = 1 (3 seeds): the
    bounds-free median test R^2 is at least 0.9x that of the default given the columns' public
    ranges (4,000 x 10 before the screen: -1.38 against 0.215; 15,000 x 25 before the screen's
    [0, 1] counts kept the min-max scaled capital gain: 0.84x)."""
    free, public = [], []
    for seed in range(3):
        X, y, Xt, yt, ranges = _adult(rows, columns, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=1.0, random_state=seed).fit(X, y)
            free.append(_r2(yt, model.predict(Xt)))
            model = DPLinearRegression(epsilon=1.0, feature_bounds=ranges, target_bounds=(-1, 1),
                                       random_state=seed).fit(X, y)  # fmt: skip
            public.append(_r2(yt, model.predict(Xt)))
    assert statistics.median(public) > 0.15
    assert statistics.median(free) >= 0.9 * statistics.median(public)


def test_screen_that_finds_nothing_leaves_the_bounds_releases_unchanged(monkeypatch):
    """The screen's noise comes from a spawned child stream and its share from the method, so
    on a table with no two-valued column the private bounds are those of a fit without it."""
    import privopt.estimators.linear_regression as module

    rng = np.random.default_rng(3)
    X = rng.normal(size=(5_000, 3))
    y = X @ [1.0, -1.0, 0.5] + rng.normal(size=5_000)
    released = []
    original = module.DPLinearRegression._private_bounds

    def tap(self, *args):
        released.append(original(self, *args))
        return released[-1]

    monkeypatch.setattr(module.DPLinearRegression, "_private_bounds", tap)
    with_screen = DPLinearRegression(epsilon=1.0, random_state=4).fit(X, y)
    assert any("screen" in label for label in _events(with_screen))
    monkeypatch.setattr(module, "screen_runs", lambda *args: False)
    DPLinearRegression(epsilon=1.0, random_state=4).fit(X, y)
    a, b = released
    for field in ("x_center", "x_scale", "x_radius", "y_center", "y_radius"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_known_plan_counts_only_the_releases_left():
    """All features and the target screened: the full bounds count 2 d + 2 + 1 units (the clip
    counts and the radius) instead of 7 d + 6; never more than the cap planned from public d."""
    from privopt.estimators._partial_bounds import known_plan
    from privopt.releases.known_columns import KnownColumns

    d = 20
    known = KnownColumns(np.zeros(d), np.ones(d), np.zeros(d, dtype=bool), (-1.0, 1.0), False)
    model = DPLinearRegression(preprocess_fraction=0.1)
    coarse, share = known_plan(model, 4_000, known, 0.2, cap=0.3)
    assert not coarse and share == pytest.approx((45.0 / (4_000 * 0.2)) ** 2 * (2 * d + 3))
    assert known_plan(model, 40_000, known, 0.2, cap=0.3)[1] == pytest.approx(0.1)  # the floor
    coarse, share = known_plan(model, 4_000, KnownColumns.none(d), 0.02, cap=0.25)
    assert coarse and share == pytest.approx(0.25)
