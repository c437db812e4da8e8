"""Configuration of the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous
submission)
reproduction (docs/theory/overparameterised-regression.md, plan E1/E2): the spectra, the
methods, the N grids, the step-size pilot's candidates and the public constants of the law. The
experiment is described in :mod:`privopt.experiments.overparam`.
"""

from __future__ import annotations

__all__ = [
    "BOUND_SDS",
    "DEFAULT_N_GRID",
    "DEFAULT_SEEDS",
    "DESIGNS",
    "METHODS",
    "NOISE_STD",
    "PILOT_CONSTANTS",
    "PRIVATE_METHODS",
    "QUICK_N_GRID",
    "QUICK_SPECTRA",
    "RELATIVE_TARGET",
    "RESIDUAL_EVERY",
    "SIGMA_Z2",
    "SPECTRA",
]

#: spectrum key -> (kind, r) for
#: :func:`privopt.datasets.make_overparameterised_regression`.
SPECTRA: dict[str, tuple[str, float | None]] = {
    "poly_r1.5": ("polynomial", 1.5),
    "poly_r2": ("polynomial", 2.0),
    "poly_r3": ("polynomial", 3.0),
    "exponential": ("exponential", None),
}
METHODS = ("ftrl_identity", "ftrl_designed", "dpsgd", "ambssgd", "nonprivate_sgd")
PRIVATE_METHODS = ("ftrl_identity", "ftrl_designed", "dpsgd", "ambssgd")
DESIGNS = {"ftrl_identity": "identity", "ftrl_designed": "designed"}
DEFAULT_N_GRID = (256, 512, 1024, 2048)
QUICK_N_GRID = (128, 256, 512)
QUICK_SPECTRA = ("poly_r2", "exponential")
DEFAULT_SEEDS = 4
#: Candidate constants c of eta = c * eta_corollary (chosen on a separate public draw).
PILOT_CONSTANTS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
RESIDUAL_EVERY = 10
NOISE_STD = 0.5
#: Gaussian z: sigma_z^2 = 8/3 under the paper's sub-Gaussian definition
#: (docs/theory/overparameterised-regression.md).
SIGMA_Z2 = 8.0 / 3.0
#: Public per-feature bound in units of sqrt(lambda_i) (and of the target's standard deviation).
BOUND_SDS = 4.0
RELATIVE_TARGET = 0.1  # "asymptotic regime": the corollary's bound below 10% of the null risk
