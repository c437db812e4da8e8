"""User-level privacy in the scikit-learn estimators: ``fit(X, y, users=ids)`` (issue 30).

The clipped per-user sums are compared with a plain float64 loop over users; a user with many
records moves a step's clipped sum by at most G (and a planted per-record clipping by far
more); the report names the user as the unit and N the number of users; record-level fits are
bit-identical to the fits before ``users=`` existed.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from sklearn.base import clone

from privopt import DPLinearClassifier, DPLinearRegression, DPSGDRegressor, PrivacyBudget
from privopt.estimators._users import (
    record_factors,
    record_weights,
    sufficient_statistics_assumption,
    user_groups,
)
from privopt.losses import get_loss
from privopt.training import LossModel
from privopt.training.users import UserGroups, UserModel, UserRows

BOUNDS = dict(feature_bounds=(-3, 3), target_bounds=(-4, 4))


def _data(n=600, users=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + 0.1 * rng.normal(size=n)
    ids = rng.integers(0, users, size=n)
    ids[:users] = np.arange(users)  # every user present
    return X, y, ids


def _loop_clipped_sum(w, X, y, ids, batch, loss, clip, reduction):
    """sum over the batch's users of clip_G(sum or mean of its records' gradients), in a
    plain float64 loop (ids: each record's user code)."""
    total = np.zeros(X.shape[1])
    for u in batch:
        rows = np.flatnonzero(ids == u)
        g = np.zeros(X.shape[1])
        for i in rows:
            g += float(loss.derivative(np.array([X[i] @ w]), np.array([y[i]]))[0]) * X[i]
        if reduction == "mean":
            g /= rows.size
        norm = np.sqrt(np.sum(g**2))
        total += g * min(1.0, clip / norm) if norm > 0 else g
    return total


# -- the core's user-level clipped sums ---------------------------------------------------------
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_user_clipped_sum_equals_a_float64_loop_over_users(reduction):
    rng = np.random.default_rng(1)
    n = 200
    ids = rng.integers(0, 12, size=n)
    ids[:40] = 3  # a user with many records
    X = rng.normal(size=(n, 4)) / 3
    y = rng.uniform(-1, 1, size=n)
    loss = get_loss("huber", delta=0.5)
    groups = UserGroups(ids, n)
    rows = UserRows.build(X, y, groups)
    model = UserModel(LossModel(loss), reduction)
    codes = groups.codes
    w = rng.normal(size=4)
    for batch in ([3], [0, 3, 5, 3], list(range(groups.num_users))):
        got, _ = model.batch_gradient_sum(w, rows, rows, np.array(batch), 0.3)
        want = _loop_clipped_sum(w, X, y, codes, batch, loss, 0.3, reduction)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    unclipped, _ = model.batch_gradient_sum(w, rows, rows, np.array([3]), None)
    want = _loop_clipped_sum(w, X, y, codes, [3], loss, np.inf, reduction)
    np.testing.assert_allclose(unclipped, want, rtol=1e-12)


def test_a_user_with_forty_records_moves_the_clipped_sum_by_at_most_g():
    """Zeroing out one user of 40 aligned records changes the step's sum by <= G; the same
    records clipped one by one (the planted bug) move it by 40 times more."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(100, 3)) / 4
    y = rng.uniform(-1, 1, size=100)
    X[:40] = [0.5, 0.1, 0.0]  # one user's 40 records, gradients aligned
    y[:40] = 1.0
    ids = np.concatenate([np.zeros(40, dtype=int), 1 + np.arange(60) % 10])
    loss, clip, w = get_loss("absolute"), 0.2, np.zeros(3)
    model = UserModel(LossModel(loss), "sum")
    rows = UserRows.build(X, y, UserGroups(ids, 100))
    everyone = np.arange(11)
    with_user, _ = model.batch_gradient_sum(w, rows, rows, everyone, clip)
    without, _ = model.batch_gradient_sum(w, rows, rows, everyone[1:], clip)
    assert np.linalg.norm(with_user - without) <= clip * (1 + 1e-12)
    assert np.linalg.norm(with_user - without) >= 0.99 * clip  # the user's sum was clipped
    per_record = LossModel(loss)  # the planted bug: each record clipped on its own
    planted, _ = per_record.clipped_gradient_sum(w, X[:40], y[:40], clip)
    assert np.linalg.norm(planted) > 30 * clip


def test_user_groups_validation_and_numbering():
    groups = UserGroups(["b", "a", "b", "c", "a", "b"], 6)
    np.testing.assert_array_equal(groups.codes, [0, 1, 0, 2, 1, 0])  # first appearance
    np.testing.assert_array_equal(groups.counts, [3, 2, 1])
    positions, starts, counts = groups.gather(np.array([2, 0]))
    np.testing.assert_array_equal(groups.order[positions], [3, 0, 2, 5])
    np.testing.assert_array_equal(starts, [0, 1])
    np.testing.assert_array_equal(counts, [1, 3])
    np.testing.assert_array_equal(UserGroups(np.array([7.0, 2.0, 7.0]), 3).codes, [0, 1, 0])
    np.testing.assert_array_equal(UserGroups([5, "x", 5], 3).codes, [0, 1, 0])


@pytest.mark.parametrize(
    "ids",
    [
        ["alice-secret", None, "bob-secret", None],
        np.array([1.0, np.nan, 2.0, np.nan]),
        ["alice-secret", "", "bob-secret", "  "],
        np.array(["alice-secret", "", "bob-secret", " "]),
        [1, float("nan"), 2, None],
    ],
)
def test_missing_ids_are_refused_by_count_never_quoting_an_id(ids):
    with pytest.raises(ValueError, match=r"^2 of 4 records have no user id") as info:
        user_groups(ids, 4)
    assert "secret" not in str(info.value)
    assert "\n" not in str(info.value)


def test_user_helpers_for_the_sufficient_statistics():
    """record_factors: each user's Gram and cross terms are within one record's bounds."""
    rng = np.random.default_rng(3)
    ids = np.repeat(np.arange(5), [1, 2, 7, 40, 3])
    X = np.tile([[0.6, 0.8]], (ids.size, 1))  # ||x|| = 1 = R, all aligned (the worst case)
    y = np.ones(ids.size)
    groups = user_groups(rng.permutation(ids), ids.size)
    f = record_factors(groups)
    for u in range(groups.num_users):
        mine = groups.codes == u
        gram = (X[mine] * f[mine, None]).T @ (X[mine] * f[mine, None])
        cross = (X[mine] * f[mine, None]).T @ (y[mine] * f[mine])
        assert np.linalg.norm(gram) <= 1.0 + 1e-12  # R^2
        assert np.linalg.norm(gram) >= 1.0 - 1e-12  # tight: not a looser scaling
        assert np.linalg.norm(cross) <= 1.0 + 1e-12  # R |y|_max
        assert np.isclose(record_weights(groups)[mine].sum(), 1.0)
    assert "sqrt(1 / n_u)" in sufficient_statistics_assumption()


# -- the estimators -----------------------------------------------------------------------------
def test_regressor_user_level_report_plan_and_fit_info():
    X, y, ids = _data()
    m = DPSGDRegressor(**BOUNDS, epsilon=2.0, random_state=1).fit(X, y, users=ids)
    report = m.privacy_report_
    assert report.privacy_unit == "user"
    assert report.neighbouring == "user-level replace-one"
    assert report.epsilon <= 2.0
    (event,) = report.events
    assert event.parameters["population"] == 60  # N is the number of users
    assert m.fit_info_["plan"].num_records == 60
    assert m.fit_info_["users_fitted"] == 60
    assert "rows_fitted" not in m.fit_info_
    assert m.fit_info_["steps"] == 16 * 60  # the default schedule counts users
    assert "per-user sum" in m.fit_info_["model"]
    assert not any("records N is public" in a for a in report.assumptions)
    assert any("privacy unit: the user" in a for a in report.assumptions)
    assert np.all(np.isfinite(m.coef_))


def test_user_level_fits_are_useful():
    X, y, ids = _data(n=4000, users=400)
    m = DPSGDRegressor(**BOUNDS, epsilon=4.0, random_state=0).fit(X, y, users=ids)
    assert m.score(X, y) > 0.8
    labels = (X[:, 0] - X[:, 1] > 0).astype(int)
    c = DPLinearClassifier(
        feature_bounds=(-3, 3), classes=[0, 1], epsilon=4.0, random_state=0, user_clipping="mean"
    ).fit(X, labels, users=ids)
    assert c.score(X, labels) > 0.85
    assert c.privacy_report_.epsilon <= 4.0


def test_the_estimators_steps_clip_a_forty_record_user_as_one_vector(monkeypatch):
    """Inside a DPSGDRegressor fit: every step is one user's clipped sum (norm <= G), equal to
    the float64 loop over that user's records at the step's w; the 40-record user is clipped."""
    X, y, ids = _data()
    ids[100:140] = 7  # user 7: 40 records or more
    X[100:140] = [2.0, 1.0, 0.5]  # aligned rows: its summed gradient is far above G
    y[100:140] = -3.0
    seen = []
    original = UserModel.batch_gradient_sum

    def spy(self, w, rows, y_, batch, clip, prepared=None):
        total, fraction = original(self, w, rows, y_, batch, clip, prepared)
        seen.append((w.copy(), np.array(batch), total, clip, rows))
        return total, fraction

    monkeypatch.setattr(UserModel, "batch_gradient_sum", spy)
    m = DPSGDRegressor(**BOUNDS, loss="absolute", steps=400, random_state=3)
    m.fit(X, y, users=ids)
    G = m.fit_info_["gradient_bound"]
    assert len(seen) == 400 and all(batch.size == 1 and clip == G for _, batch, _, clip, _ in seen)
    rows = seen[0][4]  # the records as the fit saw them (mapped to the unit ball), by user
    codes = np.repeat(np.arange(rows.groups.num_users), rows.groups.counts)
    big = rows.groups.codes[100]
    loss = get_loss("absolute")
    clipped_big = 0
    for w, batch, total, clip, _ in seen:
        assert np.linalg.norm(total) <= G * (1 + 1e-12)
        want = _loop_clipped_sum(w, rows.X, rows.y, codes, batch, loss, clip, "sum")
        np.testing.assert_allclose(total, want, rtol=1e-12, atol=1e-15)
        if batch[0] == big:
            unclipped = _loop_clipped_sum(w, rows.X, rows.y, codes, batch, loss, np.inf, "sum")
            clipped_big += np.linalg.norm(unclipped) > 10 * G
    assert clipped_big >= 1  # the 40-record user was drawn and its sum clipped to G


def test_classifier_one_vs_rest_with_users_merges_user_ledgers():
    X, _, ids = _data()
    labels = np.digitize(X[:, 0], [-0.5, 0.5])
    c = DPLinearClassifier(feature_bounds=(-3, 3), classes=[0, 1, 2], epsilon=3.0, random_state=2)
    c.fit(X, labels, users=ids)
    report = c.privacy_report_
    assert report.neighbouring == "user-level replace-one"
    assert report.privacy_unit == "user"
    assert report.epsilon <= 3.0
    assert sum(e.releases for e in report.events) == 3  # one fit per class
    assert all(e.parameters["population"] == 60 for e in report.events)


def test_nothing_depends_on_a_users_number_of_records():
    """Same seed, user 0's records replaced by more records: every public output is equal."""
    X, y, ids = _data()
    extra = np.random.default_rng(9).normal(size=(25, 3))
    X2 = np.vstack([X[ids != 0], extra])
    y2 = np.concatenate([y[ids != 0], extra[:, 0]])
    ids2 = np.concatenate([ids[ids != 0], np.zeros(25, dtype=int)])
    fits = [
        DPSGDRegressor(**BOUNDS, random_state=5).fit(a, b, users=u)
        for a, b, u in ((X, y, ids), (X2, y2, ids2))
    ]
    info = [{k: v for k, v in f.fit_info_.items() if k != "plan"} for f in fits]
    assert info[0] == info[1]
    plans = [f.fit_info_["plan"] for f in fits]
    for field in dataclasses.fields(plans[0]):
        if field.name != "mechanism":
            assert getattr(plans[0], field.name) == getattr(plans[1], field.name), field.name
    assert plans[0].mechanism.name == plans[1].mechanism.name
    assert fits[0].privacy_report_ == fits[1].privacy_report_


def test_wrong_length_and_missing_ids_are_refused_before_the_budget_is_charged():
    X, y, ids = _data()
    budget = PrivacyBudget(10.0, 1e-5, "replace-one")
    m = DPSGDRegressor(**BOUNDS, budget=budget, random_state=0)
    with pytest.raises(ValueError, match="one user id per record: the data has 600 records"):
        m.fit(X, y, users=ids[:-1])
    bad = ids.astype(float)
    bad[[3, 8, 9]] = np.nan
    with pytest.raises(ValueError, match=r"^3 of 600 records have no user id"):
        m.fit(X, y, users=bad)
    with pytest.raises(ValueError, match="at least 2 users"):
        m.fit(X, y, users=np.zeros(600))
    assert budget.charges == ()
    assert not hasattr(m, "coef_")


@pytest.mark.parametrize(
    "estimator, match",
    [
        (DPSGDRegressor(), "needs public feature_bounds and target_bounds"),
        (DPSGDRegressor(feature_bounds=(-3, 3), target_bounds=None), "needs public"),
        (DPSGDRegressor(**BOUNDS, perturbation="output"), "perturbation='gradient' only"),
        (DPSGDRegressor(**BOUNDS, method="srgd"), "method='sgd'"),
        (DPLinearClassifier(classes=[0, 1]), "needs public feature_bounds"),
        (DPLinearClassifier(feature_bounds=(-3, 3)), "the public label set classes="),
        (DPLinearRegression(), "needs public feature_bounds and target_bounds"),
        (DPLinearRegression(**BOUNDS, method="newton"), "supports method='adassp'"),
    ],
)
def test_releases_without_a_user_level_version_are_refused_by_name(estimator, match):
    X, y, ids = _data()
    target = (y > 0).astype(int) if isinstance(estimator, DPLinearClassifier) else y
    with pytest.raises(ValueError, match=match):
        estimator.fit(X, target, users=ids)


def test_user_clipping_is_a_validated_parameter_and_clones():
    m = DPSGDRegressor(**BOUNDS, user_clipping="mean")
    assert m.get_params()["user_clipping"] == "mean"
    assert clone(m).user_clipping == "mean"
    assert DPLinearClassifier().get_params()["user_clipping"] == "sum"
    X, y, ids = _data()
    with pytest.raises(ValueError, match="user_clipping"):
        DPSGDRegressor(**BOUNDS, user_clipping="max").fit(X, y, users=ids)


def test_users_with_metadata_routing_in_a_pipeline():
    from sklearn import config_context
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X, y, ids = _data()
    with config_context(enable_metadata_routing=True):
        reg = DPSGDRegressor(**BOUNDS, random_state=0).set_fit_request(users=True)
        pipe = make_pipeline(FunctionTransformer(), reg).fit(X, y, users=ids)
    assert pipe[-1].privacy_report_.privacy_unit == "user"


#: coefficients (float.hex) of record-level fits made before ``users=`` existed (same seeds)
BEFORE_USERS = {
    "reg_huber": ["0x1.4f2d98f57bd39p-2", "0x1.5e4a59915f8ddp-3", "0x1.46f0aa78cea3dp-5"],
    "reg_rdp": ["0x1.41788c0a6afabp-2", "0x1.29d0737751e24p-4", "0x1.0ad999d32c062p-4"],
    "clf_pub": ["0x1.0e16b66bd26b7p+0", "-0x1.ad7609c9e94e9p-2", "0x1.338e1dd3fa0e1p-1"],
    "clf_out": ["0x1.5d584d0407f92p+5", "0x1.a9fe0c7b50cdcp+3", "0x1.357386052fa4ep+4"],
}


def test_record_level_fits_are_bit_identical_to_before_users_existed():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + 0.1 * rng.normal(size=400)
    labels = (X[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(int)
    fb = (-3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = {
            "reg_huber": DPSGDRegressor(**BOUNDS, steps=3000, random_state=1).fit(X, y),
            "reg_rdp": DPSGDRegressor(
                loss="absolute", accounting="rdp", **BOUNDS, steps=1500, random_state=2
            ).fit(X, y, users=None),
            "clf_pub": DPLinearClassifier(
                classes=[0, 1], feature_bounds=fb, steps=3000, random_state=3
            ).fit(X, labels),
            "clf_out": DPLinearClassifier(
                perturbation="output", classes=[0, 1], feature_bounds=fb, steps=2000,
                random_state=4,
            ).fit(X, labels, users=None),
        }  # fmt: skip
    for name, fit in fits.items():
        assert [float(v).hex() for v in np.ravel(fit.coef_)] == BEFORE_USERS[name], name
        assert fit.privacy_report_.privacy_unit == "record"
        assert "rows_fitted" in fit.fit_info_


# -- a one-run audit of the core's user-level clipping, each canary a whole user ----------------
AUDIT_DELTA, AUDIT_CLAIM, AUDIT_RECORDS, AUDIT_FILLERS = 1e-5, 2.0, 10, 20


def _user_audit(canaries: int, seed: int):
    """One step over all users (the plan's own calibration to epsilon 2, zero-out over users)
    of absolute-loss SGD from w = 0. Canary user j (a fair coin) has 10 records x = e_j,
    y = 1: its summed gradient is -10 e_j, its user-level clipped contribution -G e_j; an
    excluded canary user keeps 10 null records (x = 0). Canary j's score is the released
    coordinate j: N(G, (sigma G)^2) when included, N(0, (sigma G)^2) when not (Steinke, Nasr &
    Jagielski 2023, arXiv:2305.08846, one-run audit)."""
    from privopt.accounting import PrivacyLedger
    from privopt.audit import audit_one_run
    from privopt.training import SGD, FixedBatches, TrainingPlan, execute

    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    d = canaries + 1
    fillers = 2 * AUDIT_FILLERS
    X = np.zeros((fillers + canaries * AUDIT_RECORDS, d))
    X[:fillers, 0] = rng.uniform(-1, 1, size=fillers)
    owner = np.repeat(np.arange(canaries), AUDIT_RECORDS)
    X[fillers + np.flatnonzero(included[owner]), 1 + owner[included[owner]]] = 1.0
    y = np.ones(X.shape[0])
    ids = np.concatenate([np.repeat(np.arange(AUDIT_FILLERS), 2), AUDIT_FILLERS + owner])
    groups = UserGroups(ids, X.shape[0])
    n = groups.num_users
    plan = TrainingPlan(n, FixedBatches(n, 1), clip_norm=1.0, neighbouring="zero-out")
    plan = plan.calibrate(AUDIT_CLAIM, AUDIT_DELTA)
    ledger = PrivacyLedger("zero-out", unit="user")
    rows = UserRows.build(X, y, groups)
    w, _, _ = execute(
        plan, UserModel(LossModel(get_loss("absolute"))), SGD(1.0), rows, rows,
        rng=rng, ledger=ledger,
    )  # fmt: skip
    scores = w[1:] * plan.divisor  # w_1 = -(sum + noise) / D, the canaries' sums are -G e_j
    return audit_one_run(scores, included, delta=AUDIT_DELTA), ledger, scores, included


#: measured lower bounds (honest / planted per-record clipping): 0.74 / 4.18 with 300 canary
#: users, 0.83 / 6.04 with 1,000 (10,000 canary records); the claim is 2
@pytest.mark.parametrize("canaries, seed", [(300, 2), (1000, 1)])
def test_user_level_audit_below_claim_and_per_record_clipping_caught(canaries, seed, monkeypatch):
    honest, ledger, scores, included = _user_audit(canaries, seed)
    report = ledger.report(AUDIT_DELTA)
    assert report.epsilon <= AUDIT_CLAIM + 1e-9
    assert report.neighbouring == "user-level zero-out"
    assert honest.epsilon_lower_bound < AUDIT_CLAIM

    def per_record(self, w, X, y, batch, clip, prepared=None):  # the planted bug
        positions, _, _ = X.groups.gather(batch)
        return self.base.clipped_gradient_sum(w, X.X[positions], X.y[positions], clip)

    monkeypatch.setattr(UserModel, "batch_gradient_sum", per_record)
    broken, _, buggy, _ = _user_audit(canaries, seed)
    # the same noise: an included canary user now moves its coordinate by R G instead of G
    np.testing.assert_allclose(buggy - scores, included * (AUDIT_RECORDS - 1.0), atol=1e-8)
    assert broken.epsilon_lower_bound > AUDIT_CLAIM
