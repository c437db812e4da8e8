r"""Choquette-Choo, Ganesh & Thakurta's (2025) comparison: single-epoch Accelerated-DP-SRGD against
DP-SGD (issue 8).

The paper (Choquette-Choo, Ganesh & Thakurta) has no experiments (docs/theory/single-epoch-srgd.md);
this is the comparison issue 8 asks for. Each method is run at the same (epsilon, delta) under
zero-out neighbours, and its accuracy is plotted against the number of **sequential (batch) steps**:

* ``srgd``: Accelerated-DP-SRGD (:func:`privopt.algorithms.accelerated_dp_srgd`, Algorithm 1,
  recursive gradients, binary-tree noise, exact mu-GDP) with T steps of B = floor(n / T)
  records, one pass; beta and the clipping threshold are fixed per T by a validation protocol
  (:data:`HYPERPARAMETER_SELECTION`);
* ``srgd-independent``: the same accelerated method with independent noisy batch gradients
  (Theorem 15's variant), validated the same way;
* ``srgd-interior-preset`` / ``srgd-general-preset``: the library's defaults, untuned
  (:func:`privopt.algorithms.srgd_parameters`): the interior setting's practical T = ceil(n^{1/4})
  and Theorem 14's B = floor(sqrt n), T = n / B with its literal beta;
* ``dp-sgd-single-pass``: DP-SGD with the same T disjoint batches of B records, one pass: every
  batch's clipped gradient sum plus Gaussian noise. It is :func:`privopt.algorithms.dp_ftrl` with
  the independent mechanism (B = I) and one epoch, which is exactly this loop: a record is in one
  batch, so the pass is a single Gaussian mechanism of sensitivity G for it (exact GDP, no
  amplification);
* ``dp-sgd-multi-epoch``: DP-SGD with Poisson sampling at rate q = B / n for
  :data:`MULTI_EPOCHS` epochs (``MULTI_EPOCHS * T`` steps), amplification by sampling, noise
  calibrated with the PLD accountant of ``dp_accounting`` (RDP at the quick size)
  (:func:`privopt.experiments.cifar_style.dpsgd_poisson`).

Both DP-SGD baselines use a constant learning rate with a linear cool-down to 5% over the last
quarter of the steps and output the last iterate; they are unconstrained. SRGD outputs y_T and
projects onto the ball of radius R.

Problems
--------
* **Synthetic logistic regression with a known optimum.** x is uniform on the unit sphere of
  R^d (so ``||x|| = 1``: L <= 1, M = 1/4), ``P(y = 1 | x) = sigmoid(<w*, x>)`` with ``||w*|| =
  3`` and R = 4. The model is well specified, so the population risk
  ``F(w) = E[log(1 + exp(-y <w, x>))]`` is minimised exactly at w* (its gradient
  ``E[(sigmoid(<w, x>) - sigmoid(<w*, x>)) x]`` vanishes there and F is strictly convex because
  ``E[x x^T] = I / d``): the optimum is analytic. ``F(w) - F(w*) = E[KL(Ber(sigmoid(<w*,x>)) ||
  Ber(sigmoid(<w,x>)))]`` only depends on the 2-D projection of x on span(w*, w), whose law is
  known in closed form (density proportional to ``(1 - s^2 - t^2)^((d - 4) / 2)`` on the unit
  disc), so it is computed by deterministic quadrature (Gauss–Jacobi in r^2 times the trapezoid
  rule in the angle; converged to ~1e-15) instead of Monte Carlo. A Monte Carlo estimate on
  2^20 fresh points is reported as a cross-check. Each seed draws a fresh training sample.
* **Adult** (the copy bundled with privopt, :func:`privopt.datasets.load_adult`): 80/20
  train/test split (random_state=0), the public-knowledge encoding
  :func:`privopt.datasets.adult.adult_preprocessor` (105 columns in [0, 1]) plus a constant
  1, so ``||x|| <= sqrt(15)``; labels in {-1, +1}; logistic loss;
  test accuracy. R = 8 for SRGD. Each seed redraws the algorithms' randomness. Skipped (with a
  note in the JSON) when the file is missing.

Privacy: delta = 1e-6 for both problems (below 1/n: n = 65,536 synthetic, 26,048 Adult).
Every reported epsilon is read from the fit's own privacy report (SRGD and single-pass DP-SGD:
exact GDP; multi-epoch DP-SGD: the PLD / RDP accountant) and is at most the target.

Layout: the configuration and hyper-parameter tables are in
:mod:`~privopt.experiments.single_epoch_config` (the validated choices in
``single_epoch_hyperparameters.json``), the method runners in
:mod:`~privopt.experiments.single_epoch_methods`, the evaluation grid in
:mod:`~privopt.experiments.single_epoch_runs`, the validation protocol in
:mod:`~privopt.experiments.single_epoch_selection` and the figure in
:mod:`~privopt.experiments.single_epoch_plot`; this module is the entry point and re-exports
their public names.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt._validate import check_count, check_probability
from privopt.algorithms.baselines import logistic_erm
from privopt.datasets.logistic import SyntheticLogistic
from privopt.experiments._common import (
    check_dpsgd_accountant,
    check_epsilons,
    check_seeds,
    json_default,
    reproduction_environment,
)
from privopt.experiments.single_epoch_config import (
    ADULT_PATH,
    ADULT_RADIUS,
    ADULT_X_BOUND,
    COOLDOWN_FACTOR,
    COOLDOWN_FRACTION,
    DEFAULT_DELTA,
    DEFAULT_EPSILONS,
    DEFAULT_HYPERPARAMETERS,
    HYPERPARAMETER_GRID,
    HYPERPARAMETER_SELECTION,
    LABELS,
    METHODS,
    MULTI_EPOCHS,
    PRESETS,
    QUICK_STEP_EXPONENTS,
    QUICK_SYNTHETIC_N,
    STEP_EXPONENTS,
    SYNTHETIC_N,
    SYNTHETIC_RADIUS,
)
from privopt.experiments.single_epoch_config import SYNTHETIC_DIM as SYNTHETIC_DIM
from privopt.experiments.single_epoch_config import SYNTHETIC_PROBLEM_SEED as SYNTHETIC_PROBLEM_SEED
from privopt.experiments.single_epoch_config import SYNTHETIC_W_NORM as SYNTHETIC_W_NORM
from privopt.experiments.single_epoch_methods import ProblemConstants, fit_method, steps_grid
from privopt.experiments.single_epoch_plot import STYLES as STYLES
from privopt.experiments.single_epoch_plot import plot_single_epoch
from privopt.experiments.single_epoch_runs import load_adult_arrays, run_adult, run_synthetic
from privopt.experiments.single_epoch_selection import grid_edges, select_hyperparameters

__all__ = [
    "ADULT_PATH",
    "DEFAULT_EPSILONS",
    "DEFAULT_HYPERPARAMETERS",
    "HYPERPARAMETER_GRID",
    "HYPERPARAMETER_SELECTION",
    "METHODS",
    "MULTI_EPOCHS",
    "PRESETS",
    "STEP_EXPONENTS",
    "SyntheticLogistic",
    "fit_method",
    "load_adult_arrays",
    "logistic_erm",
    "reproduce_single_epoch",
    "select_hyperparameters",
    "steps_grid",
]


def reproduce_single_epoch(
    out: Path,
    *,
    quick: bool = False,
    epsilons: Sequence[float] | None = None,
    seeds: Sequence[int] | None = None,
    delta: float = DEFAULT_DELTA,
    n_synthetic: int | None = None,
    adult_path: Path | str | None = None,
    hyperparameters: dict | None = None,
    dpsgd_accountant: str | None = None,
) -> dict:
    """Write ``single_epoch.png`` and ``single_epoch.json`` into ``out``; return the payload.

    Args:
        out: output folder (created if missing).
        quick: the small size used by tests (synthetic n = 2^12, T = n^{1/4} and n^{1/2}, 2
            seeds, RDP with 1% calibration tolerance for DP-SGD); explicit arguments override
            it.
        epsilons: targets (default (0.5, 1, 4)); each must be finite and > 0.
        seeds: default 0..4 (quick 0, 1). Synthetic: seed i draws training sample i.
        delta: the target delta (default 1e-6, below 1/n for both problems).
        n_synthetic: synthetic training size (default 2^16; quick 2^12).
        adult_path: the Adult CSV (default: the copy bundled with privopt);
            a missing file skips the Adult part (noted in the JSON).
        hyperparameters: override of :data:`DEFAULT_HYPERPARAMETERS` (same layout).
        dpsgd_accountant: ``"pld"`` (default) or ``"rdp"`` (quick) for multi-epoch DP-SGD.

    Measured on 2 shared cores: default size 222-232 s (synthetic ~120 s, Adult ~100 s; the PLD
    calibration of multi-epoch DP-SGD is a large share), quick ~40 s. The JSON records the wall
    time of the run (``wall_time_s``).
    """
    start = time.perf_counter()
    epsilons = check_epsilons(DEFAULT_EPSILONS if epsilons is None else epsilons)
    seeds = check_seeds((range(2) if quick else range(5)) if seeds is None else seeds)
    delta = check_probability("delta", delta)
    n = check_count(
        "n_synthetic",
        (QUICK_SYNTHETIC_N if quick else SYNTHETIC_N) if n_synthetic is None else n_synthetic,
        minimum=16,
    )
    accountant = check_dpsgd_accountant(dpsgd_accountant, quick)
    rtol = 1e-2 if quick else 1e-3  # DP-SGD calibration; verified feasible either way
    hyper = DEFAULT_HYPERPARAMETERS if hyperparameters is None else hyperparameters
    exponents = QUICK_STEP_EXPONENTS if quick else STEP_EXPONENTS
    for name in ("synthetic", "adult"):
        for method in METHODS:
            missing = [e for e in exponents if f"{e:g}" not in hyper.get(name, {}).get(method, {})]
            if missing:
                raise ValueError(f"No hyper-parameters for {name}/{method} at exponents {missing}.")
    path = ADULT_PATH if adult_path is None else Path(adult_path)
    methods = (*METHODS, *PRESETS)
    timings: dict[str, float] = {}

    grid = {
        "methods": methods,
        "exponents": exponents,
        "epsilons": epsilons,
        "seeds": seeds,
        "delta": delta,
        "accountant": accountant,
        "calibration_rtol": rtol,
    }

    with reproduction_environment():
        t0 = time.perf_counter()
        syn = run_synthetic(n=n, data_seeds=seeds, hyper=hyper["synthetic"], **grid)
        problem: SyntheticLogistic = syn["problem"]
        erm_risks = [problem.excess_risk(logistic_erm(X, y)) for X, y in syn["train"]]
        timings["synthetic_s"] = time.perf_counter() - t0
        probe = problem.w_star * 0.5 + 0.3 / math.sqrt(problem.dim)
        mc_mean, mc_se = problem.excess_risk_monte_carlo(probe, 2**20, seed=777)
        synthetic: dict[str, Any] = {
            "problem": {
                "model": "well-specified logistic regression, P(y=1|x) = sigmoid(<w*, x>)",
                "features": "x uniform on the unit sphere of R^d (||x|| = 1)",
                "d": problem.dim,
                "n": n,
                "w_star_norm": float(np.linalg.norm(problem.w_star)),
                "radius": SYNTHETIC_RADIUS,
                "x_bound": 1.0,
                "lipschitz": ProblemConstants(1.0, SYNTHETIC_RADIUS).lipschitz,
                "smoothness": ProblemConstants(1.0, SYNTHETIC_RADIUS).smoothness,
                "training_samples": "seed i draws a fresh training sample of n rows",
            },
            "optimum": {
                "how": (
                    "analytic: the model is well specified, so the population minimiser is w* "
                    "(the gradient E[(sigmoid(<w,x>) - sigmoid(<w*,x>)) x] vanishes at w* and F "
                    "is strictly convex since E[x x^T] = I/d); ||w*|| = 3 < R = 4 (interior). "
                    "F(w) - F(w*) = E[KL(Ber(sigmoid(<w*,x>)) || Ber(sigmoid(<w,x>)))] depends "
                    "on the 2-D projection of x on span(w*, w), with density proportional to "
                    "(1 - s^2 - t^2)^((d-4)/2) on the unit disc: computed by Gauss-Jacobi (r^2) "
                    "x trapezoid (angle) quadrature"
                ),
                "quadrature_nodes": f"{problem.quadrature_nodes} x {2 * problem.quadrature_nodes}",
                "excess_risk_at_zero": problem.excess_risk(np.zeros(problem.dim)),
                "quadrature_convergence_at_zero": abs(
                    problem.excess_risk(np.zeros(problem.dim))
                    - problem.excess_risk(np.zeros(problem.dim), nodes=48)
                ),
                "monte_carlo_cross_check": {
                    "point": "0.5 w* + 0.3 / sqrt(d) (all coordinates)",
                    "quadrature": problem.excess_risk(probe),
                    "monte_carlo_2^20": mc_mean,
                    "monte_carlo_standard_error": mc_se,
                },
            },
            "steps_grid": steps_grid(n, exponents),
            "exponents": list(exponents),
            "non_private": {
                "erm_excess_risk": float(np.mean(erm_risks)),
                "erm_excess_risks": erm_risks,
                "note": "unconstrained L-BFGS minimiser of the empirical risk of each sample",
            },
            "results": syn["results"],
        }

        adult: dict[str, Any]
        if not path.exists():
            adult = {"skipped": f"{path} not found: the Adult comparison was not run"}
        else:
            t0 = time.perf_counter()
            run = run_adult(path=path, hyper=hyper["adult"], **grid)
            x_train, y_train, x_test, y_test = run["data"]
            from sklearn.linear_model import LogisticRegression

            clf = LogisticRegression(max_iter=5000, fit_intercept=False, C=1e4)
            clf.fit(x_train, y_train)
            timings["adult_s"] = time.perf_counter() - t0
            adult = {
                "dataset": {
                    "path": str(path),
                    "n_train": int(x_train.shape[0]),
                    "n_test": int(x_test.shape[0]),
                    "d": int(x_train.shape[1]),
                    "split": "80/20, random_state=0",
                    "features": "adult_preprocessor() (public encoding, 105 columns in [0, 1]) "
                    "and a constant 1; ||x|| <= sqrt(15)",
                    "radius": ADULT_RADIUS,
                    "radius_note": (
                        "R = 8 for SRGD: a public choice made after looking at the norm (about "
                        "9) of a non-private fit on the training rows, never the test rows"
                    ),
                    "lipschitz": ProblemConstants(ADULT_X_BOUND, ADULT_RADIUS).lipschitz,
                    "smoothness": ProblemConstants(ADULT_X_BOUND, ADULT_RADIUS).smoothness,
                },
                "steps_grid": steps_grid(x_train.shape[0], exponents),
                "exponents": list(exponents),
                "non_private": {
                    "accuracy": float(clf.score(x_test, y_test)),
                    "majority_accuracy": float(max(np.mean(y_test == 1), np.mean(y_test == -1))),
                    "note": "scikit-learn LogisticRegression (C = 1e4, L-BFGS), same features",
                },
                "results": run["results"],
            }

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "figure": "single_epoch",
        "quick": quick,
        "epsilons": list(epsilons),
        "delta": delta,
        "delta_note": "delta = 1e-6 for both problems (below 1/n for n = 65,536 and 26,048)",
        "neighbouring": "zero-out (every method; Poisson DP-SGD's add/remove analysis covers it)",
        "seeds": list(seeds),
        "methods": {m: LABELS[m] for m in methods},
        "method_details": {
            "srgd": "accelerated_dp_srgd, recursive variant, T batches of B = n // T, one pass, "
            "binary-tree noise, exact mu-GDP; beta = b M, clip_first = clip_difference = c L",
            "srgd-independent": "accelerated_dp_srgd, independent variant (Theorem 15), "
            "parallel composition over disjoint batches; beta = b M, clip = c L",
            "srgd-interior-preset": "srgd_parameters(setting='interior') defaults: "
            "T = ceil(n^(1/4)), beta = max(M, L/R) max(1, sqrt(d)/(eps sqrt n)), "
            "clip_difference = (12 c_M + 4) L",
            "srgd-general-preset": "srgd_parameters(setting='general') defaults (Theorem 14): "
            "B = floor(sqrt n), T = n // B, beta = (16 c_M + 8) L n^(3/2) / (R B^2)",
            "dp-sgd-single-pass": "dp_ftrl(mechanism=independent(), epochs=1): T disjoint "
            "batches of B, clipped gradient sum + N(0, (G sigma)^2), one Gaussian mechanism per "
            "record (exact GDP, no amplification); lr = a / (M T), cool-down schedule",
            "dp-sgd-multi-epoch": f"dpsgd_poisson: Poisson rate q = B / n, {MULTI_EPOCHS} T "
            f"steps ({MULTI_EPOCHS} epochs in expectation), {accountant.upper()} accountant; "
            f"lr = a / (M {MULTI_EPOCHS} T), cool-down schedule",
            "learning_rate_schedule": f"constant, then linear cool-down to {COOLDOWN_FACTOR:g} x "
            f"over the last {COOLDOWN_FRACTION:.0%} of the steps (DP-SGD only)",
            "sequential_steps": "SRGD and single-pass DP-SGD: T; multi-epoch DP-SGD: 5 T",
        },
        "multi_epochs": MULTI_EPOCHS,
        "dpsgd_accountant": accountant,
        "dpsgd_calibration_rtol": rtol,
        "hyperparameter_grid": {
            m: {k: list(v) for k, v in g.items()} for m, g in HYPERPARAMETER_GRID.items()
        },
        "hyperparameters": hyper,
        "hyperparameter_selection": HYPERPARAMETER_SELECTION,
        "hyperparameter_grid_edges": grid_edges(hyper),
        "synthetic": synthetic,
        "adult": adult,
    }
    timings["total_s"] = time.perf_counter() - start
    payload["wall_time_s"] = timings
    plot_single_epoch(out / "single_epoch.png", payload)
    payload["png"] = str(out / "single_epoch.png")
    (out / "single_epoch.json").write_text(json.dumps(payload, indent=2, default=json_default))
    return payload
