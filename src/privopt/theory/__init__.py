"""Theory of seed 001: asymptotic suboptimality F_inf (mean estimation, linear regression)."""

from privopt.theory.convex_bound import (
    ConvexBoundResult,
    OptimizedCorrelation,
    PowerSpectrum,
    convex_program_bound,
    optimized_correlation,
)
from privopt.theory.linear_regression import (
    effective_dimension,
    linear_regression_best_lower_bound,
    linear_regression_f_inf,
    linear_regression_f_inf_lti,
    linear_regression_lower_bound,
    linear_regression_upper_bound,
    lower_bound_mechanism,
)
from privopt.theory.mean_estimation import (
    check_learning_rate,
    mean_estimation_f_inf,
    mean_estimation_f_inf_dpsgd,
    mean_estimation_f_inf_optimal,
    optimal_to_dpsgd_ratio,
    toeplitz_quadratic,
)
from privopt.theory.spectral import min_phase_beta, spectral_mechanism

__all__ = [
    "ConvexBoundResult",
    "OptimizedCorrelation",
    "PowerSpectrum",
    "check_learning_rate",
    "convex_program_bound",
    "effective_dimension",
    "linear_regression_best_lower_bound",
    "linear_regression_f_inf",
    "linear_regression_f_inf_lti",
    "linear_regression_lower_bound",
    "linear_regression_upper_bound",
    "lower_bound_mechanism",
    "mean_estimation_f_inf",
    "mean_estimation_f_inf_dpsgd",
    "mean_estimation_f_inf_optimal",
    "min_phase_beta",
    "optimal_to_dpsgd_ratio",
    "optimized_correlation",
    "spectral_mechanism",
    "toeplitz_quadratic",
]
