"""scikit-learn estimators over privopt's algorithms (one module per estimator)."""

from privopt.estimators.linear_regression import DPLinearRegression

__all__ = ["DPLinearRegression"]
