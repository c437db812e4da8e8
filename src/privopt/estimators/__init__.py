"""scikit-learn estimators over privopt's algorithms (one module per estimator)."""

from privopt.estimators.linear_classifier import DPLinearClassifier
from privopt.estimators.linear_regression import DPLinearRegression
from privopt.estimators.sgd_regressor import DPSGDRegressor

__all__ = ["DPLinearClassifier", "DPLinearRegression", "DPSGDRegressor"]
