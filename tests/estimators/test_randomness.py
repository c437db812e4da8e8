"""Issue 12 item 6: where a fit's noise comes from is stated, and secure mode is reachable."""

import numpy as np
import pytest

from privopt import DPLinearClassifier, DPLinearRegression, DPSGDRegressor
from privopt.estimators._base import as_generator
from privopt.noise import SECRET_SEED_ASSUMPTION, SECURE_ASSUMPTION, secure_generator


def _data(n=20_000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    return X, X @ np.array([1.0, -1.0]) + 0.1 * rng.normal(size=n)


BOUNDS = dict(feature_bounds=(-1, 1), target_bounds=(-3, 3))


def test_seeded_fit_says_the_seed_must_stay_secret():
    X, y = _data()
    seeded = DPLinearRegression(method="adassp", random_state=3, **BOUNDS).fit(X, y)
    assert SECRET_SEED_ASSUMPTION in seeded.privacy_report_.assumptions
    fresh = DPLinearRegression(method="adassp", **BOUNDS).fit(X, y)
    assert SECRET_SEED_ASSUMPTION not in fresh.privacy_report_.assumptions


@pytest.mark.parametrize(
    "estimator",
    [
        DPLinearRegression(method="adassp", secure_mode=True, **BOUNDS),
        DPSGDRegressor(secure_mode=True, steps=2000, **BOUNDS),
    ],
)
def test_secure_mode_fits_state_it_and_are_not_reproducible(estimator):
    X, y = _data()
    a = estimator.fit(X, y)
    coef = a.coef_.copy()
    assert SECURE_ASSUMPTION in a.privacy_report_.assumptions
    assert SECRET_SEED_ASSUMPTION not in a.privacy_report_.assumptions
    b = estimator.fit(X, y)
    assert not np.array_equal(coef, b.coef_)  # fresh OS-keyed noise every fit


def test_secure_mode_refuses_a_seed():
    X, y = _data(2000)
    with pytest.raises(ValueError, match="random_state must be None"):
        DPLinearRegression(secure_mode=True, random_state=0, **BOUNDS).fit(X, y)
    with pytest.raises(ValueError, match="random_state must be None"):
        DPLinearClassifier(secure_mode=True, random_state=0, feature_bounds=(-1, 1)).fit(
            X, np.sign(y)
        )
    with pytest.raises(ValueError, match="random_state"):
        as_generator(np.random.default_rng(0), secure_mode=True)


def test_secure_generator_is_chacha_and_gaussian():
    from scipy.stats import kstest

    g = secure_generator()
    assert type(g.bit_generator).__name__ == "ChaCha"
    # KS at n = 20,000: the 1e-4 level rejects a true N(0, 1) with probability 1e-4
    assert kstest(g.standard_normal(20_000), "norm").pvalue > 1e-4
    assert not np.array_equal(secure_generator().random(4), secure_generator().random(4))
