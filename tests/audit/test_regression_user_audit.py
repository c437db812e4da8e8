"""A black-box audit of DPLinearRegression with users=: the canary is a whole user of 40
records, the score the released coefficient in its direction. The honest fit stays below its
claim; the planted bug (the user's records not scaled by sqrt(1/n_u), so the user counts as 40
records) is caught."""

import numpy as np

from privopt import DPLinearRegression
from privopt.audit import audit_scores
from privopt.estimators import linear_regression

EPSILON, DELTA, USERS = 1.0, 1e-4, 100


def _scores(canary: bool, runs: int, offset: int) -> np.ndarray:
    """USERS users of 5 null records (x = 0, y = 0: no contribution without an intercept) and a
    user of 40 records at the corner (x_0 = 3, y = 4) or, without the canary, null too."""
    X = np.zeros((USERS * 5 + 40, 2))
    y = np.zeros(len(X))
    if canary:
        X[-40:, 0], y[-40:] = 3.0, 4.0
    ids = np.r_[np.repeat(np.arange(USERS), 5), np.full(40, USERS)]
    out = []
    for seed in range(offset, offset + runs):
        model = DPLinearRegression(epsilon=EPSILON, delta=DELTA, fit_intercept=False,
                                   feature_bounds=(-3, 3), target_bounds=(-4, 4),
                                   random_state=seed)  # fmt: skip
        model.fit(X, y, users=ids)
        out.append(float(model.coef_[0]))
    return np.array(out)


def _audit(runs: int):
    return audit_scores(_scores(True, runs, 0), _scores(False, runs, 10**6), delta=DELTA)


def test_a_canary_user_stays_below_the_claim_and_unscaled_records_are_caught(monkeypatch):
    honest = _audit(300)
    assert honest.epsilon_lower_bound < EPSILON
    monkeypatch.setattr(linear_regression, "user_level_rows", lambda groups, Z, t, ledger: (Z, t))
    planted = _audit(300)
    assert planted.epsilon_lower_bound > 2 * EPSILON
