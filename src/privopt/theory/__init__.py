"""Theorems as computable functions, separate from the algorithms that use them.

Choquette-Choo et al. (2024): asymptotic suboptimality F_inf (mean estimation, linear regression)
and the
convex-program bound of Theorem 3.1 (:mod:`~privopt.theory.convex_bound`). Wang et al. (2022):
uniform
argument stability of projected SGD on α-Hölder losses (Theorem 7,
:mod:`~privopt.theory.holder_stability`) and the recommended (T, η) of Theorems 9, 10 and 12
(:mod:`~privopt.theory.holder_advisor`).
"""

from privopt.theory import linear_regression, mean_estimation, spectral
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
from privopt.theory.linear_regression import *  # noqa: F403 (its whole public surface)
from privopt.theory.mean_estimation import *  # noqa: F403 (its whole public surface)
from privopt.theory.spectral import *  # noqa: F403 (its whole public surface)

__all__ = [
    "ConvexBoundResult",
    "OptimizedCorrelation",
    "PowerSpectrum",
    "Schedule",
    "StabilityBound",
    "convex_program_bound",
    "lemma13_epsilon_threshold",
    "optimized_correlation",
    "recommended_schedule",
    "stability_bound",
    "stability_bound_for_loss",
    "uas_bound",
    "uas_bound_for_loss",
    # the F_inf theory of Choquette-Choo et al. (2024) and its spectral tools: every public name of
    # each module
    *linear_regression.__all__,
    *mean_estimation.__all__,
    *spectral.__all__,
]
