"""Configuration of Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison (issue 8;
docs/theory/single-epoch-srgd.md): the methods,
the privacy targets, the T grid, the two problems' public constants and the hyper-parameter
tables. The experiment itself is described in :mod:`privopt.experiments.single_epoch`.

The validated hyper-parameters (:data:`DEFAULT_HYPERPARAMETERS`) are data: the output of
:func:`privopt.experiments.single_epoch.select_hyperparameters`, stored in
``single_epoch_hyperparameters.json`` next to this module and read by
:func:`load_default_hyperparameters`.
"""

from __future__ import annotations

import json
import math
from importlib import resources

from privopt.datasets.bundled import bundled_path
from privopt.experiments._common import COOLDOWN_FACTOR, COOLDOWN_FRACTION

__all__ = [
    "ADULT_PATH",
    "ADULT_RADIUS",
    "ADULT_X_BOUND",
    "COOLDOWN_FACTOR",
    "COOLDOWN_FRACTION",
    "DEFAULT_DELTA",
    "DEFAULT_EPSILONS",
    "DEFAULT_HYPERPARAMETERS",
    "HYPERPARAMETERS_FILE",
    "HYPERPARAMETER_GRID",
    "HYPERPARAMETER_SELECTION",
    "LABELS",
    "METHODS",
    "MULTI_EPOCHS",
    "PRESETS",
    "QUICK_STEP_EXPONENTS",
    "QUICK_SYNTHETIC_N",
    "STEP_EXPONENTS",
    "SYNTHETIC_DIM",
    "SYNTHETIC_N",
    "SYNTHETIC_PROBLEM_SEED",
    "SYNTHETIC_RADIUS",
    "SYNTHETIC_W_NORM",
    "load_default_hyperparameters",
]

#: Validated methods, run at every T of the grid (plot order).
METHODS = ("srgd", "srgd-independent", "dp-sgd-single-pass", "dp-sgd-multi-epoch")
#: The library's untuned Accelerated-DP-SRGD defaults (one T each).
PRESETS = ("srgd-interior-preset", "srgd-general-preset")
DEFAULT_EPSILONS = (0.5, 1.0, 4.0)
DEFAULT_DELTA = 1e-6
#: The T grid: T = n^e for these exponents, from the interior setting's n^{1/4} to Theorem
#: 14's sqrt(n) (the last one is n // floor(sqrt n)). Hyper-parameters are keyed by exponent.
STEP_EXPONENTS = (0.25, 0.3125, 0.375, 0.4375, 0.5)
QUICK_STEP_EXPONENTS = (0.25, 0.5)
#: Epochs of the multi-epoch DP-SGD baseline (fixed in advance, not tuned).
MULTI_EPOCHS = 5
#: The Adult table bundled with privopt (privopt.datasets.load_adult).
ADULT_PATH = bundled_path("adult.csv.gz")
ADULT_RADIUS = 8.0
#: ||x|| <= sqrt(15) for the Adult encoding: 6 numeric columns in [0, 1], 8 one-hot blocks with
#: at most one 1 each, and the constant 1.
ADULT_X_BOUND = math.sqrt(15.0)
SYNTHETIC_DIM = 20
SYNTHETIC_W_NORM = 3.0
SYNTHETIC_RADIUS = 4.0
SYNTHETIC_N = 2**16
QUICK_SYNTHETIC_N = 2**12
#: Seed of the direction of w* (the problem itself, shared by every run).
SYNTHETIC_PROBLEM_SEED = 20_040

#: Legend of each method (plot and JSON).
LABELS = {
    "srgd": "Accelerated-DP-SRGD (validated)",
    "srgd-independent": "Accelerated, independent batch gradients (validated)",
    "dp-sgd-single-pass": "DP-SGD, single pass, same T",
    "dp-sgd-multi-epoch": f"DP-SGD, Poisson, {MULTI_EPOCHS} epochs",
    "srgd-interior-preset": "SRGD interior preset (T = n^1/4, untuned)",
    "srgd-general-preset": "SRGD Theorem 14 preset (B = T = sqrt n, untuned)",
}

#: The validation grid. SRGD: beta = b * M and clip_first = clip_difference = c * L; DP-SGD:
#: learning rate lr = a / (M * steps) (steps = the method's number of steps) and clip norm c * L,
#: with L = the logistic loss's gradient bound on the ball and M = x_bound^2 / 4.
HYPERPARAMETER_GRID: dict[str, dict[str, tuple[float, ...]]] = {
    "srgd": {"beta": (1 / 64, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0), "clip": (0.5, 1.0, 2.0)},
    "srgd-independent": {"beta": (1 / 64, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0), "clip": (0.5, 1.0)},
    "dp-sgd-single-pass": {
        "lr": (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0),
        "clip": (0.5, 1.0),
    },
    "dp-sgd-multi-epoch": {
        "lr": (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0),
        "clip": (0.5, 1.0),
    },
}

#: The file holding :data:`DEFAULT_HYPERPARAMETERS` (next to this module).
HYPERPARAMETERS_FILE = "single_epoch_hyperparameters.json"


def load_default_hyperparameters() -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """problem -> method -> T exponent (``f"{e:g}"``) -> config, read from
    :data:`HYPERPARAMETERS_FILE` (a fresh copy on every call; values as floats)."""
    text = resources.files("privopt.experiments").joinpath(HYPERPARAMETERS_FILE).read_text("utf-8")
    table = json.loads(text)
    return {
        problem: {
            method: {
                exponent: {key: float(value) for key, value in config.items()}
                for exponent, config in per_exponent.items()
            }
            for method, per_exponent in per_method.items()
        }
        for problem, per_method in table.items()
    }


#: Per problem, method and T exponent: the configuration chosen by
#: :func:`~privopt.experiments.single_epoch.select_hyperparameters` on validation data (see
#: :data:`HYPERPARAMETER_SELECTION`), in the units of :data:`HYPERPARAMETER_GRID` (output of
#: ``select_hyperparameters("synthetic")`` and ``select_hyperparameters("adult")``: 765 s and
#: 895 s on 2 shared cores).
DEFAULT_HYPERPARAMETERS: dict[str, dict[str, dict[str, dict[str, float]]]] = (
    load_default_hyperparameters()
)

HYPERPARAMETER_SELECTION = (
    "fixed in advance by select_hyperparameters(): for each problem, method and T exponent, the "
    "grid point of HYPERPARAMETER_GRID with the best validation score pooled over epsilon in "
    "(0.5, 1, 4) and seeds (1000, 1001, 1002), delta 1e-6. Synthetic: a separate validation "
    "draw of the same distribution (training sample seeds 1000-1002, never used for the "
    "reported runs), score = mean log excess risk. Adult: the training rows split 80/20 "
    "(random_state=1), fit on the 80%, score = mean accuracy on the 20%; the test rows were "
    "never used. The quick size reuses the choices made at the default size (same exponents). "
    "The selection itself is not privacy-accounted (as is usual in DP benchmarks)."
)
