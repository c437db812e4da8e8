"""A fitted DPLinearRegression predicts on the features it was fitted on: each feature clipped to
the box the fit clipped it to (``feature_range_``), so a feature's rare values far outside it
(an atom plus rare large values: King County's ``yr_renovated``, found binary and boxed to
[0, 1]) cannot turn into predictions off by orders of magnitude."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.releases.preprocess import LinearBounds


def _bounds(**kwargs) -> LinearBounds:
    base = dict(
        x_center=np.array([1.0, -2.0, 0.0]),
        y_center=0.0,
        x_radius=3.0,
        y_radius=1.0,
        intercept_scale=1.0,
        source="private",
    )
    return LinearBounds(**{**base, **kwargs})


def test_feature_range_follows_the_transforms_box():
    inf = math.inf
    assert np.all(_bounds().feature_range() == [[-inf, inf]] * 3)  # no box: no clip
    scalar = _bounds(x_scale=np.array([2.0, 0.5, np.inf]), x_box=4.0).feature_range()
    np.testing.assert_array_equal(scalar, [[-7.0, 9.0], [-4.0, 0.0], [-inf, inf]])
    masked = _bounds(
        x_scale=np.array([2.0, 0.5, 1.0]),
        x_box=np.array([4.0, 1.0, 2.0]),
        box_mask=np.array([True, False, True]),
    ).feature_range()
    np.testing.assert_array_equal(masked, [[-7.0, 9.0], [-inf, inf], [-2.0, 2.0]])
    # a row inside the range is unchanged by the box clip of transform, one outside is moved
    bounds = _bounds(x_scale=np.array([2.0, 0.5, 1.0]), x_box=4.0, x_radius=1e9)
    low, high = bounds.feature_range().T
    rows = np.array([[8.9, -3.9, 3.9], [50.0, -40.0, 9.0]])
    np.testing.assert_allclose(
        bounds.transform(rows)[:, :3], bounds.transform(np.clip(rows, low, high))[:, :3]
    )


def _renovation_table(n: int, seed: int):
    """A feature that is 0 in 96% of rows and a year (1950-2015) in the rest, whose effect is
    an indicator (renovated or not), and two continuous features."""
    rng = np.random.default_rng(seed)
    renovated = rng.random(n) < 0.04
    year = np.where(renovated, rng.integers(1950, 2016, n), 0).astype(float)
    area = rng.lognormal(7.5, 0.4, n)
    age = rng.uniform(0, 100, n)
    X = np.c_[area, year, age]
    y = 200.0 * area + 8e4 * renovated - 500.0 * age + rng.normal(0.0, 1e5, n)
    return X, y


@pytest.mark.parametrize("epsilon", [0.3, 1.0])
def test_rare_large_values_never_mispredict(epsilon):
    worst, linear_worst = np.inf, np.inf
    for seed in range(3):
        X, y = _renovation_table(12_000, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=epsilon, random_state=seed).fit(X[:9600], y[:9600])
        low, high = model.feature_range_.T
        prediction = model.predict(X[9600:])
        np.testing.assert_allclose(
            prediction, np.clip(X[9600:], low, high) @ model.coef_ + model.intercept_
        )
        test = y[9600:]
        worst = min(worst, 1.0 - np.mean((test - prediction) ** 2) / np.var(test))
        linear = X[9600:] @ model.coef_ + model.intercept_
        linear_worst = min(linear_worst, 1.0 - np.mean((test - linear) ** 2) / np.var(test))
    assert worst > 0.5, worst  # measured 0.70-0.72 (OLS about 0.73)
    if epsilon == 0.3:  # the control: the linear form extrapolates the indicator by ~2000x
        assert linear_worst < -100.0, linear_worst


def test_public_bounds_do_not_clip_predictions():
    X, y = _renovation_table(3000, 0)
    model = DPLinearRegression(
        epsilon=1.0,
        feature_bounds=[(0, 5000), (0, 2020), (0, 100)],
        target_bounds=(-1e6, 2e6),
        random_state=0,
    ).fit(X, y)
    assert np.all(np.isinf(model.feature_range_))
    np.testing.assert_allclose(model.predict(X), X @ model.coef_ + model.intercept_)
    assert "feature_range_" in DPLinearRegression._private_outputs


def test_cli_model_file_carries_the_range_and_predict_clips(capsys, tmp_path):
    from cli_runner import run

    X, y = _renovation_table(6000, 1)
    data = tmp_path / "houses.csv"
    np.savetxt(data, np.c_[X, y], delimiter=",", header="area,year,age,price", comments="")
    out = tmp_path / "model.json"
    code, _, stderr = run(capsys, "fit", data, "--target", "price", "--out", out)
    assert code == 0, stderr
    saved = json.loads(out.read_text())
    assert len(saved["feature_range"]) == 3
    assert any(pair != [None, None] for pair in saved["feature_range"])  # private boxes
    low = np.array([np.nan if p[0] is None else p[0] for p in saved["feature_range"]])
    high = np.array([np.nan if p[1] is None else p[1] for p in saved["feature_range"]])
    code, stdout, stderr = run(capsys, "predict", out, data)
    assert code == 0, stderr
    predicted = np.loadtxt(stdout.splitlines()[1:])
    clipped = np.clip(X, np.nan_to_num(low, nan=-np.inf), np.nan_to_num(high, nan=np.inf))
    np.testing.assert_allclose(predicted, clipped @ saved["coef"] + saved["intercept"], rtol=1e-8)
    # a file written before the range existed predicts with the linear form
    del saved["feature_range"]
    out.write_text(json.dumps(saved))
    code, stdout, _ = run(capsys, "predict", out, data)
    linear = X @ saved["coef"] + saved["intercept"]
    np.testing.assert_allclose(np.loadtxt(stdout.splitlines()[1:]), linear, rtol=1e-8)
    # a tampered range is one line naming the field
    saved["feature_range"] = [[1.0, 0.0]] * 3
    out.write_text(json.dumps(saved))
    code, _, stderr = run(capsys, "predict", out, data)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "feature_range" in stderr
