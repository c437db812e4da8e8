"""DPLinearRegression with users=: AdaSSP on sufficient statistics whose records are scaled by
sqrt(1 / n_u), so a whole user moves every release by at most one record's bound; the quality
release weighted by user; the refusals; nothing else depends on a user's number of records."""

import math

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.accounting import PrivacyLedger
from privopt.estimators._users import user_groups, user_level_rows
from privopt.releases.fit_quality import private_r2
from privopt.releases.preprocess import public_bounds

BOUNDS = dict(feature_bounds=(-3, 3), target_bounds=(-4, 4))
COEF = np.array([1.0, -0.5, 0.25])


def _data(users=200, heavy=40, seed=0):
    """users - 1 users of 1-9 records, then one user of ``heavy`` records; ids shuffled."""
    rng = np.random.default_rng(seed)
    counts = np.r_[rng.integers(1, 10, size=users - 1), heavy]
    ids = np.repeat(np.arange(users), counts)
    order = rng.permutation(ids.size)
    X = rng.normal(size=(ids.size, 3))
    y = X @ COEF + 0.3 * rng.normal(size=ids.size)
    return X[order], y[order], ids[order]


def _statistics(X, y, ids, *, by_user=True):
    bounds = public_bounds(np.tile([-3.0, 3.0], (3, 1)), (-4.0, 4.0), True)
    Z, t = bounds.transform(X, y)
    if by_user:
        Z, t = user_level_rows(user_groups(ids, len(ids)), Z, t, PrivacyLedger("zero-out"))
    return Z.T @ Z, Z.T @ t, bounds


def test_a_whole_user_moves_the_sufficient_statistics_by_at_most_one_records_bound():
    X, y, ids = _data()
    heavy = ids == 199
    gram, moment, bounds = _statistics(X, y, ids)
    gram_out, moment_out, _ = _statistics(X[~heavy], y[~heavy], ids[~heavy])
    r, t_bound = bounds.row_bound, bounds.y_radius
    assert np.linalg.norm(gram - gram_out) <= r**2 * (1 + 1e-12)
    assert np.linalg.norm(moment - moment_out) <= r * t_bound * (1 + 1e-12)
    # without the factors the 40 records move the Gram by far more than one record's R^2
    plain, _, _ = _statistics(X, y, ids, by_user=False)
    plain_out, _, _ = _statistics(X[~heavy], y[~heavy], ids[~heavy], by_user=False)
    assert np.linalg.norm(plain - plain_out) > 5 * np.linalg.norm(gram - gram_out)


def test_the_quality_release_is_weighted_by_user():
    X, y, ids = _data()
    groups = user_groups(ids, len(ids))
    bounds = public_bounds(np.tile([-3.0, 3.0], (3, 1)), (-4.0, 4.0), True)
    heavy = ids == 199

    def exact(rows, weights):  # the release at mu -> infinity: the exact statistic
        ledger = PrivacyLedger("zero-out")
        r2, _ = private_r2(COEF, 0.0, bounds, lambda r: (X[rows][r], y[rows][r]), rows.size,
                           mu=1e12, rng=np.random.default_rng(0), ledger=ledger,
                           weights=weights)  # fmt: skip
        return r2

    full = exact(np.arange(len(ids)), groups.record_weights())
    rest = np.flatnonzero(~heavy)
    without = exact(rest, user_groups(ids[rest], rest.size).record_weights())
    assert 0.5 < full <= 1.0 and abs(full - without) < 0.05  # one user of 200 moves little
    ones = exact(np.arange(len(ids)), np.ones(len(ids)))  # unit weights: the record-level value
    assert ones == pytest.approx(exact(np.arange(len(ids)), None), abs=1e-9)


def test_user_level_fit_report_and_utility():
    X, y, ids = _data(users=2000)  # about 10,000 records
    model = DPLinearRegression(epsilon=2.0, delta=1e-5, random_state=0, **BOUNDS)
    model.fit(X, y, users=ids)
    report = model.privacy_report_
    assert report.privacy_unit == "user" and report.neighbouring == "user-level zero-out"
    assert report.epsilon <= 2.0
    text = " ".join(report.assumptions)
    assert "sqrt(1 / n_u)" in text and "number of records N is public" not in text
    assert model.fit_info_["method"] == "adassp"
    assert all("quantile" not in str(event) for event in report.events)  # no record counts
    assert np.linalg.norm(model.coef_ - COEF) < 0.15
    assert model.score(X, y) > 0.9  # OLS: 0.94
    assert 0.7 < model.private_r2_ <= 1.0


def test_nothing_but_the_releases_depends_on_a_users_number_of_records():
    X, y, ids = _data(heavy=40)
    X2, y2, ids2 = _data(heavy=3)  # the same users, the last one with 3 records instead of 40
    fits = []
    for data in ((X, y, ids), (X2, y2, ids2)):
        model = DPLinearRegression(epsilon=1.0, delta=1e-5, random_state=4, **BOUNDS)
        model.fit(data[0], data[1], users=data[2])
        fits.append(model)
    a, b = (f.privacy_report_ for f in fits)
    assert a.epsilon == b.epsilon and a.assumptions == b.assumptions
    assert [e for e in a.events] == [e for e in b.events]
    public = ("method", "bounds", "gram_std", "moment_std", "lambda_min_std", "sensitivities")
    for key in public:
        assert fits[0].fit_info_.get(key) == fits[1].fit_info_.get(key), key


@pytest.mark.parametrize(
    "params, match",
    [
        ({}, "needs public feature_bounds and target_bounds"),
        ({"feature_bounds": [(-3, 3), None, (-3, 3)], "target_bounds": (-4, 4)}, "needs public"),
        ({**BOUNDS, "method": "newton"}, "supports method='adassp'"),
        ({**BOUNDS, "method": "dpsgd"}, "supports method='adassp'"),
        ({**BOUNDS, "delta": 0.01}, "delta"),
    ],
)
def test_refusals_name_what_has_no_user_level_version(params, match):
    X, y, ids = _data()
    with pytest.raises(ValueError, match=match):
        DPLinearRegression(**{"epsilon": 1.0, "delta": 1e-5, **params}).fit(X, y, users=ids)


def test_delta_is_checked_against_the_public_number_of_users():
    # 200 users write about 1,000 records: delta 1e-3 is below 1/N users = 5e-3 though above
    # 1/records; the record count is private under user-level neighbours and not used
    X, y, ids = _data()
    assert len(ids) > 1000
    model = DPLinearRegression(epsilon=1.0, delta=1e-3, random_state=0, **BOUNDS)
    model.fit(X, y, users=ids)
    assert math.isfinite(model.privacy_report_.epsilon)
    with pytest.raises(ValueError, match="delta"):
        DPLinearRegression(epsilon=1.0, delta=1e-3, **BOUNDS).fit(X, y)


def test_the_fit_hands_adassp_user_scaled_rows(monkeypatch):
    from privopt.estimators import _regression_methods

    seen = []
    original = _regression_methods._at_bounds

    def spy(method, Z, t, *args, **kwargs):
        seen.append((Z.T @ Z, Z.T @ t))
        return original(method, Z, t, *args, **kwargs)

    monkeypatch.setattr(_regression_methods, "_at_bounds", spy)
    X, y, ids = _data()
    heavy = ids == 199
    for rows in (np.arange(len(ids)), np.flatnonzero(~heavy)):
        model = DPLinearRegression(epsilon=1.0, delta=1e-5, random_state=0, **BOUNDS)
        model.fit(X[rows], y[rows], users=ids[rows])
    (gram, moment), (gram_out, moment_out) = seen
    assert "clipped to l2 norm 5.196" in model.fit_info_["bounds"]  # R^2 = 27
    assert np.linalg.norm(gram - gram_out) <= 27.0 * (1 + 1e-9)
    assert np.linalg.norm(moment - moment_out) <= math.sqrt(27.0) * 4.0 * (1 + 1e-9)
    # the intercept entry counts users: the 40-record user adds s0^2 = 9 once (not 40 times)
    assert gram[-1, -1] - gram_out[-1, -1] == pytest.approx(9.0)
