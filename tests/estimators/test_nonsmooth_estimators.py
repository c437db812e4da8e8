"""DPLinearClassifier and DPSGDRegressor (Wang et al. 2022): utility, privacy reports, sklearn
contract."""

from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from privopt import DPLinearClassifier, DPSGDRegressor
from privopt.datasets import make_linear_regression


def _classification(n, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(2.0, 3.0, size=(n, d))  # not centred, not unit scale: the map must cope
    y = np.where((X - 2.0) @ np.ones(d) + rng.normal(0, 1.0, n) > 0, "yes", "no")
    return X, y


@pytest.mark.slow  # 13 s: the full Adult table
def test_adult_hinge_within_5_points_of_non_private_logistic_regression():
    """The issue's bar: 80/20 split, public bounds, epsilon = 1, delta = 1e-6.

    Measured: non-private logistic regression 0.840; private hinge 0.820 (gradient
    perturbation, RDP accounting, T = 16 n); logistic 0.806; output perturbation 0.73-0.76.
    """
    from privopt.datasets.adult import adult_preprocessor, load_adult

    data = load_adult()
    X_train, X_test, y_train, y_test = train_test_split(
        data.X, data.y, test_size=0.2, random_state=0
    )
    baseline = make_pipeline(adult_preprocessor(), LogisticRegression(max_iter=3000))
    baseline_accuracy = baseline.fit(X_train, y_train).score(X_test, y_test)
    private = make_pipeline(
        adult_preprocessor(),
        DPLinearClassifier(
            loss="hinge", epsilon=1.0, delta=1e-6, feature_bounds=(0.0, 1.0), random_state=0
        ),
    )
    accuracy = private.fit(X_train, y_train).score(X_test, y_test)
    assert accuracy >= baseline_accuracy - 0.05, (accuracy, baseline_accuracy)
    report = private[-1].privacy_report_
    assert report.epsilon <= 1.0 and report.neighbouring == "replace-one"


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_classifier_with_only_epsilon_and_delta(loss):
    X, y = _classification(20_000)
    model = DPLinearClassifier(loss=loss, epsilon=1.0, delta=1e-6, random_state=0, steps=40_000)
    model.fit(X, y)
    X_test, y_test = _classification(5000, seed=1)
    # non-private ~0.97; chance 0.5. Measured with the label set released on its own 10% slice
    # (seeds 0-3): logistic 0.848-0.898, hinge 0.920-0.939
    assert model.score(X_test, y_test) > 0.82
    report = model.privacy_report_
    assert report.epsilon <= 1.0
    assert report.accountant.startswith("auto")  # GDP preprocessing, RDP/paper for the fit
    assert report.num_partitions >= 3  # the label set and private bounds on disjoint slices
    assert set(model.classes_) == {"no", "yes"}
    assert model.fit_info_["feature_map"] == "private"


def test_squared_hinge_classifier_learns_on_average():
    # The squared hinge's gradient bound on the default ball (G = 12) makes its noise far larger
    # than the hinge's, and single fits vary widely: over random_state 0..11 the accuracy had
    # mean 0.79 (sd 0.07) with the previous per-step noise draws and 0.73 (sd 0.09) with the
    # core's noise stream (same law: plain projected SGD over 12 seeds gives 0.907 vs 0.911).
    # So the mean of three seeds is asserted: 0.6 is 2.5 sd (of a 3-seed mean, 0.05) below the
    # measured mean and 2 sd above chance (0.5).
    X, y = _classification(20_000)
    X_test, y_test = _classification(5000, seed=1)
    scores = []
    for seed in range(3):
        model = DPLinearClassifier(
            loss="squared_hinge", epsilon=1.0, delta=1e-6, random_state=seed, steps=40_000
        )
        scores.append(model.fit(X, y).score(X_test, y_test))
        assert model.privacy_report_.epsilon <= 1.0
    assert np.mean(scores) > 0.6, scores


def test_classifier_output_perturbation_and_probabilities():
    X, y = _classification(5000)
    model = DPLinearClassifier(
        perturbation="output",
        epsilon=2.0,
        delta=1e-6,
        feature_bounds=(-10.0, 15.0),
        random_state=0,
        steps=20_000,
    )
    model.fit(X, y)
    proba = model.predict_proba(X[:10])
    assert proba.shape == (10, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert model.privacy_report_.epsilon <= 2.0
    assert "sampling-failure probability" in model.privacy_report_.composition
    assert model.fit_info_["method"] == "dp-sgd-output"
    hinge = DPLinearClassifier(loss="hinge", feature_bounds=(-10, 15), steps=500).fit(X, y)
    with pytest.raises(AttributeError, match="logistic"):
        hinge.predict_proba(X)


def test_regressor_with_robust_losses():
    data = make_linear_regression(20_000, 5, sigma=1.0, rng=np.random.default_rng(0))
    trivial = data.excess_risk(np.zeros(5), intercept=0.0)
    for loss in ("absolute", "huber"):
        model = DPSGDRegressor(loss=loss, epsilon=1.0, delta=1e-6, random_state=0)
        model.fit(data.X, data.y)
        # measured 8e-4 (absolute) and 1.8e-3 (Huber) against 0.5 for the zero predictor
        assert data.excess_risk(model.coef_, intercept=model.intercept_) < 0.02 * trivial
        assert model.privacy_report_.epsilon <= 1.0


@pytest.mark.parametrize(
    ("estimator", "kwargs", "match"),
    [
        (DPLinearClassifier, {"loss": "absolute"}, "classification loss"),
        (DPLinearClassifier, {"loss": "qnorm_hinge", "q": 0.5}, "q"),
        (DPLinearClassifier, {"radius": None}, "bounded domain"),
        (DPSGDRegressor, {"loss": "hinge"}, "regression loss"),
        (DPSGDRegressor, {"loss": "qnorm", "q": 3.0}, "q"),
        (DPSGDRegressor, {"target_bounds": None}, "both"),
    ],
)
def test_bad_input(estimator, kwargs, match):
    X, labels = _classification(3000)
    y = labels if estimator is DPLinearClassifier else X[:, 0]
    params = {"feature_bounds": (-10, 15), "steps": 100}
    if estimator is DPSGDRegressor:
        params["target_bounds"] = (-10, 15)
    params.update(kwargs)
    with pytest.raises(ValueError, match=match):
        estimator(**params).fit(X, y)


# scikit-learn's estimator checks for these two estimators (same configurations) run once, in
# tests/estimators/test_sklearn_checks.py, with every other privopt estimator.


def test_srgd_method_single_epoch_accelerated():
    X, y = _classification(20_000)
    model = DPLinearClassifier(method="srgd", epsilon=1.0, delta=1e-6, random_state=0)
    model.fit(X, y)
    X_test, y_test = _classification(5000, seed=1)
    assert model.score(X_test, y_test) > 0.8  # measured 0.873 (chance 0.5)
    assert model.privacy_report_.epsilon <= 1.0
    assert model.fit_info_["method"] == "accelerated-dp-srgd"
    with pytest.raises(ValueError, match="smooth loss"):
        DPLinearClassifier(method="srgd", loss="hinge", feature_bounds=(-10, 15)).fit(X, y)


@pytest.mark.slow  # 11 s: the example on the full Adult table
def test_adult_example_runs(capsys):
    import runpy

    module = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "examples" / "adult_classifier.py")
    )
    module["main"]()
    assert "private hinge, epsilon = 1" in capsys.readouterr().out
