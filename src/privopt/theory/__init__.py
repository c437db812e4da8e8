"""Theory of seed 001: asymptotic suboptimality F_inf (mean estimation, linear regression)."""

from privopt.theory.linear_regression import (
    linear_regression_f_inf,
    linear_regression_f_inf_lti,
)
from privopt.theory.mean_estimation import (
    check_learning_rate,
    mean_estimation_f_inf,
    mean_estimation_f_inf_dpsgd,
    mean_estimation_f_inf_optimal,
    optimal_to_dpsgd_ratio,
    toeplitz_quadratic,
)
from privopt.theory.spectral import min_phase_beta

__all__ = [
    "check_learning_rate",
    "linear_regression_f_inf",
    "linear_regression_f_inf_lti",
    "mean_estimation_f_inf",
    "mean_estimation_f_inf_dpsgd",
    "mean_estimation_f_inf_optimal",
    "min_phase_beta",
    "optimal_to_dpsgd_ratio",
    "toeplitz_quadratic",
]
