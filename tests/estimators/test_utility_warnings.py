"""No silent garbage: public-quantity checks warn on configurations that cannot learn."""

import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.datasets import load_power_plant, make_linear_regression
from privopt.estimators._utility import (
    UtilityWarning,
    check_binary_labels,
    optimisation_progress,
    output_noise_reasons,
    sgd_noise_ratio,
    warn_if_useless,
)


@pytest.fixture(scope="module")
def ccpp():
    table = load_power_plant()
    return table.X[:7654], table.y[:7654]


def test_ssgd_on_ccpp_warns_with_reason_and_fix(ccpp):
    # measured test R^2 -3 to -39 at epsilon = 1 (one pass of noisy single-example steps)
    X, y = ccpp
    with pytest.warns(UtilityWarning, match=r"ssgd.*noise.*Fix: .*method='auto'"):
        DPLinearRegression(epsilon=1.0, method="ssgd", random_state=0).fit(X, y)


def test_healthy_fits_do_not_warn(ccpp):
    X, y = ccpp
    data = make_linear_regression(60_000, 5, sigma=1.0, rng=np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        DPLinearRegression(epsilon=1.0, random_state=0).fit(X, y)
        DPLinearRegression(epsilon=1.0, random_state=0).fit(data.X, data.y)
        DPLinearRegression(epsilon=2.0, method="dpsgd", random_state=0).fit(data.X, data.y)


def test_noisy_gram_warns_when_the_data_are_too_few_for_newton():
    # d = 40 on 3,000 rows at epsilon = 0.2 (public bounds, else too few rows are refused):
    # the Gram noise swamps N R^2 / p
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 40))
    y = X @ rng.normal(size=40) / 6 + rng.normal(size=3000)
    bounds = {"feature_bounds": (-5, 5), "target_bounds": (-20, 20)}
    with pytest.warns(UtilityWarning, match="Gram"):
        DPLinearRegression(epsilon=0.2, method="newton", random_state=0, **bounds).fit(X, y)


def test_noise_ratio_and_progress_formulas():
    # stationary prediction variance s^2 / (2 eta) per direction, averaged over K eta L / 2
    assert sgd_noise_ratio(0.1, 0.5, 1.0, 4, 1, 1.0) == pytest.approx(0.1)
    assert sgd_noise_ratio(0.1, 0.5, 1.0, 400, 4, 1.0) == pytest.approx(0.2 / 10)
    assert optimisation_progress(0.01, 2.0, 30) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        ([0, 1, 1, 0], r"\{0, 1\}.*expects \{-1, 1\}.*2 \* y - 1"),
        ([1, 1, 1], "one class"),
        ([-1, 0, 1], "3 distinct"),
    ],
)
def test_labels_are_validated(labels, match):
    with pytest.raises(ValueError, match=match):
        check_binary_labels(np.array(labels))
    assert check_binary_labels(np.array([-1, 1, 1])).tolist() == [-1.0, 1.0, 1.0]


def test_output_noise_reasons_and_the_warning_text():
    assert output_noise_reasons(0.1, 4, 1.0) == []
    reasons = output_noise_reasons(2.0, 4, 1.0)
    assert len(reasons) == 1 and "4 times the radius" in reasons[0]
    with pytest.warns(UtilityWarning, match=r"X: .*radius.*Fix: more epsilon; or public bounds"):
        warn_if_useless("X", reasons, ["more epsilon", "public bounds"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        warn_if_useless("X", [], ["more epsilon"])


def test_classifier_warns_when_the_noise_walk_swamps_the_ball():
    # issue 16's silent garbage: the squared hinge's gradient bound on the default ball makes
    # the noise's random walk 5.5 radii (accuracy 0.69 here, the majority class on Adult); the
    # hinge's stays inside the ball (0.93) and must not warn
    import warnings

    from privopt import DPLinearClassifier, UtilityWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 5))
    y = np.where(X @ np.ones(5) + 0.3 * rng.normal(size=6000) > 0, "yes", "no")
    with pytest.warns(UtilityWarning, match="random walk"):
        DPLinearClassifier(loss="squared_hinge", epsilon=1.0, delta=1e-6, random_state=0,
                           feature_bounds=(-4, 4), steps=20_000).fit(X, y)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        DPLinearClassifier(loss="hinge", epsilon=1.0, delta=1e-6, random_state=0,
                           feature_bounds=(-4, 4), steps=20_000).fit(X, y)  # fmt: skip
