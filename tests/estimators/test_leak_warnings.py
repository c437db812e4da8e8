"""PrivacyLeakWarning: fired where private data reach a fit without a private mechanism."""

import warnings

import numpy as np
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MinMaxScaler,
    OneHotEncoder,
    StandardScaler,
)

from privopt import DPLinearRegression, PrivacyLeakWarning
from privopt.model_selection import PrivateGridSearchCV

BOUNDS = dict(feature_bounds=(-1, 1), target_bounds=(-4, 4))


def _data(n=3000):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(n, 3))
    return X, X @ np.ones(3) + 0.1 * rng.standard_normal(n)


def _model():
    return DPLinearRegression(method="adassp", random_state=0, **BOUNDS)


@pytest.mark.parametrize("scaler", [StandardScaler(), MinMaxScaler()])
def test_a_fitted_scaler_before_a_private_estimator_warns(scaler):
    X, y = _data()
    with pytest.warns(PrivacyLeakWarning, match=f"{type(scaler).__name__}.*without a private"):
        make_pipeline(scaler, _model()).fit(X, y)


def test_a_scaler_nested_in_a_column_transformer_warns():
    X, y = _data()
    columns = ColumnTransformer(
        [("scaled", StandardScaler(), [0]), ("kept", "passthrough", [1, 2])]
    )
    with pytest.warns(PrivacyLeakWarning, match="StandardScaler"):
        make_pipeline(columns, _model()).fit(X, y)


def test_grid_search_and_cross_validation_warn_and_point_to_the_private_search():
    X, y = _data()
    with pytest.warns(PrivacyLeakWarning, match="PrivateGridSearchCV"):
        GridSearchCV(_model(), {"epsilon": [0.5, 1.0]}, cv=2).fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="sklearn.model_selection"):
        cross_val_score(_model(), X, y, cv=2)


def _no_leak_warning(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        fit()


def test_clean_uses_do_not_warn():
    X, y = _data()
    _no_leak_warning(lambda: _model().fit(X, y))
    public = FunctionTransformer(lambda Z: Z / 2.0)  # public constants: learns nothing
    _no_leak_warning(lambda: make_pipeline(public, _model()).fit(X, y))
    codes = np.random.default_rng(1).integers(0, 3, size=(len(y), 1)).astype(float)
    encoder = ColumnTransformer(
        [
            ("codes", OneHotEncoder(categories=[[0.0, 1.0, 2.0]], sparse_output=False), [3]),
            ("kept", "passthrough", [0, 1, 2]),
        ]
    )
    _no_leak_warning(lambda: make_pipeline(encoder, _model()).fit(np.hstack([X, codes]), y))
    search = PrivateGridSearchCV(_model(), {"feature_bounds": [(-1, 1), (-2, 2)]}, random_state=0)
    _no_leak_warning(lambda: search.fit(X, y))


def test_encoder_learning_categories_from_the_data_warns():
    X, y = _data()
    codes = np.random.default_rng(1).integers(0, 3, size=(len(y), 1)).astype(float)
    encoder = ColumnTransformer(
        [("codes", OneHotEncoder(sparse_output=False), [3]), ("kept", "passthrough", [0, 1, 2])]
    )
    with pytest.warns(PrivacyLeakWarning, match="OneHotEncoder"):
        make_pipeline(encoder, _model()).fit(np.hstack([X, codes]), y)
