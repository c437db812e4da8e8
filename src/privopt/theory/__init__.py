"""Theorems as computable functions, separate from the algorithms that use them.

Seed 001: asymptotic suboptimality F_inf (mean estimation, linear regression) and the
convex-program bound of Theorem 3.1 (:mod:`~privopt.theory.convex_bound`). Seed 002: uniform
argument stability of projected SGD on α-Hölder losses (Theorem 7,
:mod:`~privopt.theory.holder_stability`) and the recommended (T, η) of Theorems 9, 10 and 12
(:mod:`~privopt.theory.holder_advisor`).
"""

from privopt.theory.convex_bound import (
    ConvexBoundResult,
    OptimizedCorrelation,
    PowerSpectrum,
    convex_program_bound,
    optimized_correlation,
)
from privopt.theory.holder_advisor import (
    Schedule,
    lemma13_epsilon_threshold,
    recommended_schedule,
)
from privopt.theory.holder_stability import (
    StabilityBound,
    stability_bound,
    stability_bound_for_loss,
    uas_bound,
    uas_bound_for_loss,
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
    "Schedule",
    "StabilityBound",
    "check_learning_rate",
    "convex_program_bound",
    "effective_dimension",
    "lemma13_epsilon_threshold",
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
    "recommended_schedule",
    "spectral_mechanism",
    "stability_bound",
    "stability_bound_for_loss",
    "toeplitz_quadratic",
    "uas_bound",
    "uas_bound_for_loss",
]
