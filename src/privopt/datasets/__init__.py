"""Datasets: synthetic generators with exact oracle quantities, and CSV/Parquet loaders.

- :func:`make_linear_regression` draws the linear-regression model of Varshney et al. (2022)
  (docs/theory/linear-regression-adaptive-clipping.md) and returns the sample with its population
  oracle (:class:`LinearRegressionData`: ``H``, ``mu``, ``kappa``, ``R_x_squared``,
  ``excess_risk``...).
- :func:`make_overparameterised_regression` draws the DP-FTRL-Σ paper's (Private Overparameterized
Linear Regression, anonymous submission) over-parameterised model
  (implicit diagonal covariance, d up to 1e5, public unlabeled rows, O(d) excess risk).
- :mod:`privopt.datasets.adult` reads the UCI Adult table and encodes it with public knowledge.
- :func:`load_power_plant` and :func:`load_adult` return the small public tables bundled with
  privopt (UCI Combined Cycle Power Plant, 9,568 rows; UCI Adult, 32,561 rows) as a `Table`
  with ``description`` and ``source``.
- :func:`load_table` and :func:`load_features` read numeric CSV/Parquet tables into float64
  arrays, refusing missing, non-numeric or non-finite columns with a clear error.
"""

from privopt.datasets.adult import load_adult
from privopt.datasets.bundled import load_power_plant
from privopt.datasets.loaders import Table, load_features, load_table
from privopt.datasets.overparameterised import (
    OverparameterisedData,
    make_overparameterised_regression,
    spectrum_eigenvalues,
)
from privopt.datasets.synthetic import LinearRegressionData, make_linear_regression

__all__ = [
    "LinearRegressionData",
    "OverparameterisedData",
    "Table",
    "load_adult",
    "load_features",
    "load_power_plant",
    "load_table",
    "make_linear_regression",
    "make_overparameterised_regression",
    "spectrum_eigenvalues",
]
