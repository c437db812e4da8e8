"""Iterative private training algorithms, one module per algorithm, composed from accounting,
noise, clipping, losses and the training core. Each returns coefficients, records every
release in a ledger, and produces a per-step trace. The one-shot private statistics (private
quantile bounds and preprocessing, AdaSSP, noisy Newton, a classifier's label set) live in
:mod:`privopt.releases`.

Theorem helpers (Wang et al.'s (2022) stability bounds and step-size advisor) live in
:mod:`privopt.theory`; the names below marked as deprecated re-exports stay importable from
here for compatibility only.
"""

from privopt.algorithms.ambssgd import (
    AMBSSGDConfig,
    dp_ambssgd,
    noise_multipliers,
    practical_config,
    theory_config,
)
from privopt.algorithms.ftrl import (
    FTRLModel,
    GenericModel,
    LinearRegressionModel,
    LogisticRegressionModel,
    calibrate_ftrl_noise,
    dp_ftrl,
    ftrl_participation,
    noisy_ftrl,
)
from privopt.algorithms.ftrl_sigma import (
    calibrate_ftrl_sigma_tau,
    dp_ftrl_sigma,
    ftrl_sigma_pass,
    public_clip_constant,
)
from privopt.algorithms.gradient_perturbation import (
    Theorem11Noise,
    dp_sgd_gradient,
    rdp_gradient_noise,
    theorem11_noise,
)
from privopt.algorithms.output_perturbation import dp_sgd_output
from privopt.algorithms.projected_sgd import SGDRun, projected_sgd
from privopt.algorithms.result import FitResult, FitTrace
from privopt.algorithms.srgd import (
    SRGDParameters,
    SRGDStep,
    SRGDWarning,
    accelerated_dp_srgd,
    srgd_increment,
    srgd_parameters,
    tree_leaf_levels,
)
from privopt.algorithms.ssgd import calibrate_ssgd_noise, dp_ssgd, max_ssgd_epsilon

# -- deprecated re-exports (theory): import these from privopt.theory instead ----------------
from privopt.theory import (
    Schedule,
    StabilityBound,
    lemma13_epsilon_threshold,
    recommended_schedule,
    stability_bound,
    stability_bound_for_loss,
    uas_bound,
    uas_bound_for_loss,
)

__all__ = [
    "AMBSSGDConfig",
    "FTRLModel",
    "FitResult",
    "FitTrace",
    "GenericModel",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "SGDRun",
    "SRGDParameters",
    "SRGDStep",
    "SRGDWarning",
    "Theorem11Noise",
    "accelerated_dp_srgd",
    "calibrate_ftrl_noise",
    "calibrate_ftrl_sigma_tau",
    "calibrate_ssgd_noise",
    "dp_ambssgd",
    "dp_ftrl",
    "dp_ftrl_sigma",
    "dp_sgd_gradient",
    "dp_sgd_output",
    "dp_ssgd",
    "ftrl_participation",
    "ftrl_sigma_pass",
    "max_ssgd_epsilon",
    "noise_multipliers",
    "noisy_ftrl",
    "practical_config",
    "projected_sgd",
    "public_clip_constant",
    "rdp_gradient_noise",
    "srgd_increment",
    "srgd_parameters",
    "theorem11_noise",
    "theory_config",
    "tree_leaf_levels",
]
# deprecated re-exports (theory)
__all__ += [
    "Schedule",
    "StabilityBound",
    "lemma13_epsilon_threshold",
    "recommended_schedule",
    "stability_bound",
    "stability_bound_for_loss",
    "uas_bound",
    "uas_bound_for_loss",
]
