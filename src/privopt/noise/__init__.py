"""Correlated-noise mechanisms (the DP-FTRL core): streaming generators and their sensitivity.

``noise`` knows nothing of models or accounting. An algorithm picks a mechanism, asks for its
sensitivity under the record's participation pattern, calibrates the noise std with
:mod:`privopt.accounting`, and draws per-step noise from ``mechanism.noise_stream(...)``.
"""

from privopt.noise.banded import (
    BandChoice,
    BandedMatrixMechanism,
    BandedToeplitz,
    banded_toeplitz,
    choose_bands,
    column_normalized_banded,
    cyclic_poisson_event,
    optimize_banded_toeplitz,
)
from privopt.noise.base import (
    ImpulseSource,
    Mechanism,
    NoiseSource,
    NoiseStream,
    Participation,
    SeededNoiseSource,
)
from privopt.noise.blt import BLTMechanism, BLTStream, optimize_blt, toeplitz_prefix_losses
from privopt.noise.covariance import (
    CovarianceOperator,
    DiagonalCovariance,
    IdentityCovariance,
    LowRankPlusRidgeCovariance,
)
from privopt.noise.dense import DenseMechanism
from privopt.noise.restarts import Restarted
from privopt.noise.rng import (
    SECRET_SEED_ASSUMPTION,
    SECURE_ASSUMPTION,
    gaussian_noise,
    laplace_noise,
    secure_generator,
)
from privopt.noise.selection import exponential_mechanism, gumbel_noise
from privopt.noise.sensitivity import SensitivityUpperBoundWarning, brute_force_minsep_squared
from privopt.noise.toeplitz import (
    ToeplitzMechanism,
    anti_pgd,
    custom,
    damped_anti_pgd,
    independent,
    inverse_coefficients,
    mean_estimation_optimal,
    nu_beta,
    nu_c,
    nu_dpftrl,
    optimal_cc,
)
from privopt.noise.tree import (
    PrefixSumTree,
    TreeAggregation,
    TreeIncrements,
    as_step_noise,
    honaker_weights,
    prefix_nodes,
)
from privopt.noise.tuning import NuChoice, tune_nu

__all__ = [
    "SECRET_SEED_ASSUMPTION",
    "SECURE_ASSUMPTION",
    "BLTMechanism",
    "BLTStream",
    "BandChoice",
    "BandedMatrixMechanism",
    "BandedToeplitz",
    "CovarianceOperator",
    "DenseMechanism",
    "DiagonalCovariance",
    "IdentityCovariance",
    "ImpulseSource",
    "LowRankPlusRidgeCovariance",
    "Mechanism",
    "NoiseSource",
    "NoiseStream",
    "NuChoice",
    "Participation",
    "PrefixSumTree",
    "Restarted",
    "SeededNoiseSource",
    "SensitivityUpperBoundWarning",
    "ToeplitzMechanism",
    "TreeAggregation",
    "TreeIncrements",
    "anti_pgd",
    "as_step_noise",
    "banded_toeplitz",
    "brute_force_minsep_squared",
    "choose_bands",
    "column_normalized_banded",
    "custom",
    "cyclic_poisson_event",
    "damped_anti_pgd",
    "exponential_mechanism",
    "gaussian_noise",
    "gumbel_noise",
    "honaker_weights",
    "independent",
    "inverse_coefficients",
    "laplace_noise",
    "mean_estimation_optimal",
    "nu_beta",
    "nu_c",
    "nu_dpftrl",
    "optimal_cc",
    "optimize_banded_toeplitz",
    "optimize_blt",
    "prefix_nodes",
    "secure_generator",
    "toeplitz_prefix_losses",
    "tune_nu",
]
