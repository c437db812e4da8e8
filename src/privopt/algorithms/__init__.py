"""Private training algorithms, one module per algorithm, composed from accounting, noise,
clipping and losses. Each returns coefficients, records every release in a ledger, and
produces a per-step trace."""

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
from privopt.algorithms.preprocess import (
    LinearBounds,
    SecondMoment,
    private_bounds,
    private_second_moment,
    public_bounds,
)
from privopt.algorithms.result import FitResult, FitTrace
from privopt.algorithms.ssgd import calibrate_ssgd_noise, dp_ssgd, max_ssgd_epsilon

__all__ = [
    "AMBSSGDConfig",
    "FTRLModel",
    "FitResult",
    "FitTrace",
    "GenericModel",
    "LinearBounds",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "SecondMoment",
    "calibrate_ftrl_noise",
    "calibrate_ssgd_noise",
    "dp_ambssgd",
    "dp_ftrl",
    "dp_ssgd",
    "ftrl_participation",
    "max_ssgd_epsilon",
    "noise_multipliers",
    "noisy_ftrl",
    "practical_config",
    "private_bounds",
    "private_second_moment",
    "public_bounds",
    "theory_config",
]
