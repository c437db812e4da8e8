r"""Seed 004's comparison: single-epoch Accelerated-DP-SRGD against DP-SGD (issue 8).

The paper (Choquette-Choo, Ganesh & Thakurta) has no experiments (notes/004.md §6); this is the
comparison issue 8 asks for. Each method is run at the same (epsilon, delta) under zero-out
neighbours, and its accuracy is plotted against the number of **sequential (batch) steps**:

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
* **Adult** (``shared/data/adult.csv``): 80/20 train/test split (random_state=0), the
  public-knowledge encoding :func:`privopt.datasets.adult.adult_preprocessor` (105 columns in
  [0, 1]) plus a constant 1, so ``||x|| <= sqrt(15)``; labels in {-1, +1}; logistic loss;
  test accuracy. R = 8 for SRGD. Each seed redraws the algorithms' randomness. Skipped (with a
  note in the JSON) when the file is missing.

Privacy: delta = 1e-6 for both problems (below 1/n: n = 65,536 synthetic, 26,048 Adult).
Every reported epsilon is read from the fit's own privacy report (SRGD and single-pass DP-SGD:
exact GDP; multi-epoch DP-SGD: the PLD / RDP accountant) and is at most the target.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privopt._validate import check_count, check_probability
from privopt.accounting import calibrate_dpsgd_noise
from privopt.algorithms.baselines import logistic_erm
from privopt.algorithms.ftrl import dp_ftrl
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.algorithms.srgd import SRGDWarning, accelerated_dp_srgd
from privopt.datasets.adult import load_adult_arrays as _load_adult_arrays
from privopt.datasets.logistic import SyntheticLogistic
from privopt.experiments._common import check_epsilons, reproduction_environment
from privopt.losses import get_loss
from privopt.noise import independent

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
COOLDOWN_FRACTION = 0.25
COOLDOWN_FACTOR = 0.05
ADULT_PATH = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "adult.csv"
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

#: Per problem, method and T exponent: the configuration chosen by :func:`select_hyperparameters`
#: on validation data (see :data:`HYPERPARAMETER_SELECTION`), in the units of
#: :data:`HYPERPARAMETER_GRID` (output of ``select_hyperparameters("synthetic")`` and
#: ``select_hyperparameters("adult")``: 765 s and 895 s on 2 shared cores).
DEFAULT_HYPERPARAMETERS: dict[str, dict[str, dict[str, dict[str, float]]]] = {
    "synthetic": {
        "srgd": {
            "0.25": {"beta": 0.0625, "clip": 1.0},
            "0.3125": {"beta": 1.0, "clip": 1.0},
            "0.375": {"beta": 1.0, "clip": 1.0},
            "0.4375": {"beta": 16.0, "clip": 1.0},
            "0.5": {"beta": 64.0, "clip": 1.0},
        },
        "srgd-independent": {
            "0.25": {"beta": 1.0, "clip": 1.0},
            "0.3125": {"beta": 4.0, "clip": 1.0},
            "0.375": {"beta": 16.0, "clip": 1.0},
            "0.4375": {"beta": 64.0, "clip": 0.5},
            "0.5": {"beta": 4.0, "clip": 0.5},
        },
        "dp-sgd-single-pass": {
            "0.25": {"lr": 128.0, "clip": 1.0},
            "0.3125": {"lr": 128.0, "clip": 1.0},
            "0.375": {"lr": 128.0, "clip": 1.0},
            "0.4375": {"lr": 64.0, "clip": 1.0},
            "0.5": {"lr": 64.0, "clip": 1.0},
        },
        "dp-sgd-multi-epoch": {
            "0.25": {"lr": 128.0, "clip": 1.0},
            "0.3125": {"lr": 256.0, "clip": 1.0},
            "0.375": {"lr": 128.0, "clip": 1.0},
            "0.4375": {"lr": 128.0, "clip": 1.0},
            "0.5": {"lr": 128.0, "clip": 1.0},
        },
    },
    "adult": {
        "srgd": {
            "0.25": {"beta": 0.25, "clip": 1.0},
            "0.3125": {"beta": 0.25, "clip": 0.5},
            "0.375": {"beta": 0.25, "clip": 0.5},
            "0.4375": {"beta": 0.25, "clip": 0.5},
            "0.5": {"beta": 1.0, "clip": 0.5},
        },
        "srgd-independent": {
            "0.25": {"beta": 0.25, "clip": 1.0},
            "0.3125": {"beta": 0.25, "clip": 0.5},
            "0.375": {"beta": 1.0, "clip": 0.5},
            "0.4375": {"beta": 4.0, "clip": 0.5},
            "0.5": {"beta": 16.0, "clip": 0.5},
        },
        "dp-sgd-single-pass": {
            "0.25": {"lr": 256.0, "clip": 0.5},
            "0.3125": {"lr": 1024.0, "clip": 0.5},
            "0.375": {"lr": 1024.0, "clip": 0.5},
            "0.4375": {"lr": 1024.0, "clip": 0.5},
            "0.5": {"lr": 256.0, "clip": 0.5},
        },
        "dp-sgd-multi-epoch": {
            "0.25": {"lr": 1024.0, "clip": 1.0},
            "0.3125": {"lr": 4096.0, "clip": 0.5},
            "0.375": {"lr": 4096.0, "clip": 0.5},
            "0.4375": {"lr": 4096.0, "clip": 0.5},
            "0.5": {"lr": 4096.0, "clip": 0.5},
        },
    },
}

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


# -- the synthetic problem ----------------------------------------------------------------------
def load_adult_arrays(
    path: Path = ADULT_PATH, split_seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`privopt.datasets.adult.load_adult_arrays` at the shared Adult file by default."""
    return _load_adult_arrays(path, split_seed)


# -- schedules and fits ------------------------------------------------------------------------
def steps_grid(n: int, exponents: Sequence[float] = STEP_EXPONENTS) -> list[int]:
    """T = round(n^e) for each exponent (e = 1/2 gives Theorem 14's n // floor(sqrt n))."""
    n = check_count("n", n, minimum=4)
    out = []
    for e in exponents:
        T = n // math.isqrt(n) if e == 0.5 else round(n**e)
        out.append(max(2, min(T, n)))
    return out


def _cooldown(base: float, steps: int):
    start = steps - round(COOLDOWN_FRACTION * steps)

    def schedule(step: int) -> float:
        if step < start or steps == start:
            return base
        return base * (1.0 - (1.0 - COOLDOWN_FACTOR) * (step - start + 1) / (steps - start))

    return schedule


@dataclass(frozen=True)
class _Problem:
    """Public constants of a problem: the data bound, the ball and the loss's L and M."""

    x_bound: float
    radius: float

    @property
    def lipschitz(self) -> float:
        return get_loss("logistic").lipschitz(self.x_bound, None, self.radius)

    @property
    def smoothness(self) -> float:
        return get_loss("logistic").holder(self.x_bound).L


def fit_method(
    method: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    steps: int | None,
    config: dict[str, float] | None,
    x_bound: float,
    radius: float,
    rng: np.random.Generator,
    accountant: str = "pld",
    cache: dict | None = None,
    calibration_rtol: float = 1e-3,
) -> dict[str, Any]:
    """Fit one method at (epsilon, delta) with T = ``steps`` batches of B = n // T records
    (``steps`` is ignored by the presets, which derive their own schedule).

    ``config`` is in the units of :data:`HYPERPARAMETER_GRID` (None for the presets). ``y`` in
    {-1, +1}. ``cache`` memoises multi-epoch DP-SGD's noise calibration and privacy report (they
    depend only on epsilon, delta, q, steps and the accountant); ``calibration_rtol`` is that
    calibration's relative tolerance (the result is verified feasible, so a looser tolerance only
    adds noise).

    Returns a dict with ``coef``, ``reported_epsilon``, ``sequential_steps``, ``batch_size``,
    ``gradient_evaluations``, ``noise`` (std / multiplier), ``clip_fraction`` and ``seconds``
    (the fit; multi-epoch DP-SGD's calibration and report, shared by every fit with the same
    epsilon, q and steps, are in ``accounting_seconds`` instead, 0 when cached).
    """
    problem = _Problem(x_bound, radius)
    L, M = problem.lipschitz, problem.smoothness
    n = X.shape[0]
    cache = {} if cache is None else cache
    start = time.perf_counter()
    if method not in PRESETS:
        T = check_count("steps", steps)
        B = n // T
    if method in ("srgd", "srgd-independent", *PRESETS):
        kwargs: dict[str, Any] = {}
        if method in PRESETS:
            kwargs["setting"] = "interior" if method == "srgd-interior-preset" else "general"
        else:
            assert config is not None
            clip = config["clip"] * L
            kwargs.update(
                setting="interior",
                batch_size=B,
                steps=T,
                beta=config["beta"] * M,
                clip_first=clip,
                variant="recursive" if method == "srgd" else "independent",
            )
            if method == "srgd":
                kwargs["clip_difference"] = clip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SRGDWarning)  # beta < M etc.: utility only
            # the clip fraction is reported as a research diagnostic (stated in the report)
            warnings.simplefilter("ignore", NonPrivateDiagnosticsWarning)
            fit = accelerated_dp_srgd(
                X,
                y,
                "logistic",
                epsilon=epsilon,
                delta=delta,
                radius=radius,
                x_bound=x_bound,
                rng=rng,
                diagnostics=True,
                **kwargs,
            )
        info = fit.info
        return {
            "coef": fit.coef,
            "reported_epsilon": float(fit.report.epsilon),
            "sequential_steps": int(info["steps"]),
            "batch_size": int(info["batch_size"]),
            "gradient_evaluations": int(info["gradient_evaluations"]),
            "noise": {
                "sigma": info["sigma"],
                "mu": info["mu"],
                "beta": info["beta"],
                "clip_first": info["clip_first"],
                "clip_difference": info["clip_difference"],
            },
            "clip_fraction": float(np.mean(fit.trace.clip_fraction)),
            "seconds": time.perf_counter() - start,
        }
    assert config is not None
    clip = config["clip"] * L
    if method == "dp-sgd-single-pass":
        lr = config["lr"] / (M * T)
        used = B * T  # the first B T rows (data-independent); dp_ftrl makes n // B batches
        with warnings.catch_warnings():
            # the clip fraction is reported as a research diagnostic (stated in the report)
            warnings.simplefilter("ignore", NonPrivateDiagnosticsWarning)
            fit = dp_ftrl(
                X[:used],
                (y[:used] + 1.0) / 2.0,
                mechanism=independent(),
                # dp_ftrl calibrates sigma at unit clip but records the event (G s, G sigma); for
                # some G the report's epsilon rounds a few 1e-13 above the target (e.g. G =
                # sigmoid(4), epsilon 4: 4.0000000000027). Aiming 1e-9 lower keeps report <= target.
                epsilon=epsilon * (1.0 - 1e-9),
                delta=delta,
                clip_norm=clip,
                learning_rate=_cooldown(lr, T),
                rng=rng,
                model="logistic",
                batch_size=B,
                epochs=1,
                diagnostics=True,
            )
        assert fit.info["steps"] == T
        return {
            "coef": fit.coef,
            "reported_epsilon": float(fit.report.epsilon),
            "sequential_steps": T,
            "batch_size": B,
            "gradient_evaluations": used,
            "noise": {
                "noise_multiplier": fit.info["noise_multiplier"],
                "clip": clip,
                "learning_rate": lr,
            },
            "clip_fraction": float(np.mean(fit.trace.clip_fraction)),
            "seconds": time.perf_counter() - start,
        }
    if method == "dp-sgd-multi-epoch":
        from privopt.experiments.cifar_style import dpsgd_poisson

        total = MULTI_EPOCHS * T
        q = B / n
        lr = config["lr"] / (M * total)
        key = (float(epsilon), float(delta), q, total, accountant)
        calibration_start = time.perf_counter()
        if key not in cache:
            cache[key] = {
                "sigma": calibrate_dpsgd_noise(
                    epsilon, delta, q, total, accountant, rtol=calibration_rtol
                )
            }
        sigma = cache[key]["sigma"]
        accounting = time.perf_counter() - calibration_start  # once per (epsilon, q, steps)
        loss = get_loss("logistic")
        w, info = dpsgd_poisson(
            X,
            y,
            grad_fn=loss.gradients,
            w0=np.zeros(X.shape[1]),
            epsilon=epsilon,
            delta=delta,
            sample_rate=q,
            steps=total,
            clip_norm=clip,
            learning_rate=_cooldown(lr, total),
            rng=rng,
            noise_multiplier=sigma,
            accountant=accountant,
        )
        if "epsilon" not in cache[key]:
            report_start = time.perf_counter()
            cache[key]["epsilon"] = float(info["ledger"].report(delta, accountant).epsilon)
            accounting += time.perf_counter() - report_start
        return {
            "coef": w,
            "reported_epsilon": cache[key]["epsilon"],
            "sequential_steps": total,
            "batch_size": B,
            "gradient_evaluations": round(q * n * total),  # expected
            "noise": {
                "noise_multiplier": sigma,
                "clip": clip,
                "learning_rate": lr,
                "sample_rate": q,
                "accountant": accountant,
            },
            "clip_fraction": None,
            "seconds": time.perf_counter() - start - accounting,
            "accounting_seconds": accounting,
        }
    raise ValueError(f"Unknown method {method!r}; expected one of {METHODS + PRESETS}.")


# -- evaluation grid ---------------------------------------------------------------------------
def _accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.where(X @ w >= 0.0, 1.0, -1.0) == y))


def _t_halfwidth(values: Sequence[float]) -> float | None:
    from scipy.stats import t as student_t

    if len(values) < 2:
        return None
    spread = float(np.std(values, ddof=1))
    return float(student_t.ppf(0.975, len(values) - 1) * spread / math.sqrt(len(values)))


def _summary(values: list[float], log: bool) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    out: dict[str, Any] = {
        "values": [float(v) for v in arr],
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "ci95_halfwidth": _t_halfwidth(list(arr)),
    }
    if log:
        out["geometric_mean"] = float(np.exp(np.mean(np.log(np.maximum(arr, 1e-300)))))
    return out


def _run_problem(
    *,
    train: list[tuple[np.ndarray, np.ndarray]],
    score,
    log_score: bool,
    x_bound: float,
    radius: float,
    methods: Sequence[str],
    hyper: dict[str, dict[str, dict[str, float]]] | None,
    exponents: Sequence[float],
    epsilons: Sequence[float],
    seeds: Sequence[int],
    delta: float,
    accountant: str,
    grids: dict[str, list[dict[str, float]]] | None = None,
    calibration_rtol: float = 1e-3,
) -> dict[str, Any]:
    """Run every (method, epsilon, T, config, seed); ``train[i]`` is seed i's training data.

    With ``grids`` (method -> list of configs), every config is run (validation); otherwise
    ``hyper[method][f"{e:g}"]`` is the one config per exponent.
    """
    n = train[0][0].shape[0]
    grid_T = steps_grid(n, exponents)
    cache: dict = {}
    results: dict[str, Any] = {}
    for method in methods:
        per_eps: dict[str, Any] = {}
        for epsilon in epsilons:
            points = []
            pairs = (
                [(None, None)] if method in PRESETS else list(zip(exponents, grid_T, strict=True))
            )
            for exponent, T in pairs:
                if method in PRESETS:
                    configs: list[dict[str, float] | None] = [None]
                elif grids is not None:
                    configs = list(grids[method])
                else:
                    assert hyper is not None
                    configs = [hyper[method][f"{exponent:g}"]]
                for config in configs:
                    values, reported, runs = [], [], []
                    for s_index, seed in enumerate(seeds):
                        X, y = train[s_index]
                        rng = np.random.default_rng(_run_seed(seed, method, epsilon, T, config))
                        run = fit_method(
                            method,
                            X,
                            y,
                            epsilon=epsilon,
                            delta=delta,
                            steps=T,
                            config=config,
                            x_bound=x_bound,
                            radius=radius,
                            rng=rng,
                            accountant=accountant,
                            cache=cache,
                            calibration_rtol=calibration_rtol,
                        )
                        values.append(score(run["coef"], s_index))
                        reported.append(run["reported_epsilon"])
                        runs.append(run)
                    first = runs[0]
                    points.append(
                        {
                            "exponent": exponent,
                            "sequential_steps": first["sequential_steps"],
                            "batch_size": first["batch_size"],
                            "gradient_evaluations": first["gradient_evaluations"],
                            "config": config,
                            **_summary(values, log_score),
                            "reported_epsilons": reported,
                            "reported_epsilon": float(max(reported)),
                            "noise": first["noise"],
                            "clip_fraction": (
                                None
                                if first["clip_fraction"] is None
                                else float(np.mean([r["clip_fraction"] for r in runs]))
                            ),
                            "seconds_per_fit": float(np.mean([r["seconds"] for r in runs])),
                        }
                    )
            per_eps[f"{epsilon:g}"] = points
        results[method] = per_eps
    return results


def _run_seed(
    seed: int, method: str, epsilon: float, steps: int | None, config: dict[str, float] | None
) -> list[int]:
    """Entropy of one fit's generator: a function of the seed and the run's own settings only,
    so adding grid points or epsilons never changes the other runs."""
    values = [] if config is None else [round(v * 4096) for v in config.values()]
    return [seed, (*METHODS, *PRESETS).index(method), round(epsilon * 1e6), steps or 0, *values]


def _grid_edges(hyper: dict) -> list[str]:
    """The chosen values lying on an edge of :data:`HYPERPARAMETER_GRID` (worth knowing: the
    optimum may lie beyond the grid)."""
    out = []
    for problem, per_method in hyper.items():
        for method, per_exponent in per_method.items():
            grid = HYPERPARAMETER_GRID.get(method, {})
            for exponent, config in per_exponent.items():
                for key, value in config.items():
                    values = grid.get(key, ())
                    if key == "clip" and value >= 1.0 and method != "srgd":
                        continue  # clipping above L is a no-op for plain gradients
                    if len(values) > 1 and value in (min(values), max(values)):
                        side = "lower" if value == min(values) else "upper"
                        out.append(
                            f"{problem}/{method}/T = n^{exponent}: {key} = {value:g} is on the "
                            f"grid's {side} edge"
                        )
    return out


# -- the two problems --------------------------------------------------------------------------
def _synthetic(
    *,
    n,
    exponents,
    epsilons,
    seeds,
    delta,
    accountant,
    hyper,
    methods,
    grids=None,
    data_seeds,
    rtol=1e-3,
) -> dict[str, Any]:
    problem = SyntheticLogistic.make(seed=SYNTHETIC_PROBLEM_SEED)
    train = [problem.sample(n, [data_seed, n]) for data_seed in data_seeds]
    results = _run_problem(
        train=train,
        score=lambda w, _: problem.excess_risk(w),
        log_score=True,
        x_bound=1.0,
        radius=SYNTHETIC_RADIUS,
        methods=methods,
        hyper=hyper,
        exponents=exponents,
        epsilons=epsilons,
        seeds=seeds,
        delta=delta,
        accountant=accountant,
        grids=grids,
        calibration_rtol=rtol,
    )
    return {"problem": problem, "train": train, "results": results}


def _adult(
    *,
    path,
    exponents,
    epsilons,
    seeds,
    delta,
    accountant,
    hyper,
    methods,
    grids=None,
    validation=False,
    rtol=1e-3,
) -> dict[str, Any]:
    x_train, y_train, x_test, y_test = load_adult_arrays(path)
    if validation:
        from sklearn.model_selection import train_test_split

        x_train, x_test, y_train, y_test = train_test_split(
            x_train, y_train, test_size=0.2, random_state=1
        )
    results = _run_problem(
        train=[(x_train, y_train)] * len(seeds),
        score=lambda w, _: _accuracy(w, x_test, y_test),
        log_score=False,
        x_bound=ADULT_X_BOUND,
        radius=ADULT_RADIUS,
        methods=methods,
        hyper=hyper,
        exponents=exponents,
        epsilons=epsilons,
        seeds=seeds,
        delta=delta,
        accountant=accountant,
        grids=grids,
        calibration_rtol=rtol,
    )
    return {"data": (x_train, y_train, x_test, y_test), "results": results}


def _configs(method: str) -> list[dict[str, float]]:
    grid = HYPERPARAMETER_GRID[method]
    keys = list(grid)
    out: list[dict[str, float]] = [{}]
    for key in keys:
        out = [{**c, key: v} for c in out for v in grid[key]]
    return out


def select_hyperparameters(
    problem: str,
    *,
    methods: Sequence[str] = METHODS,
    exponents: Sequence[float] = STEP_EXPONENTS,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    seeds: Sequence[int] = (1000, 1001, 1002),
    delta: float = DEFAULT_DELTA,
    n: int = SYNTHETIC_N,
    adult_path: Path = ADULT_PATH,
    accountant: str = "pld",
) -> dict[str, Any]:
    """Run the validation protocol of :data:`HYPERPARAMETER_SELECTION` for ``problem``
    (``"synthetic"`` or ``"adult"``) and return ``{"chosen": method -> exponent -> config,
    "scores": the full validation results}``. Takes minutes; its output is
    :data:`DEFAULT_HYPERPARAMETERS`."""
    epsilons = check_epsilons(epsilons)
    grids = {m: _configs(m) for m in methods}
    with reproduction_environment():
        if problem == "synthetic":
            run = _synthetic(
                n=n,
                exponents=exponents,
                epsilons=epsilons,
                seeds=seeds,
                delta=delta,
                accountant=accountant,
                hyper=None,
                methods=methods,
                grids=grids,
                data_seeds=seeds,
            )
            better = min
        elif problem == "adult":
            run = _adult(
                path=adult_path,
                exponents=exponents,
                epsilons=epsilons,
                seeds=seeds,
                delta=delta,
                accountant=accountant,
                hyper=None,
                methods=methods,
                grids=grids,
                validation=True,
            )
            better = max
        else:
            raise ValueError(f"Expected problem in ('synthetic', 'adult'), got {problem!r}.")
    results = run["results"]
    chosen: dict[str, dict[str, dict[str, float]]] = {}
    for method in methods:
        chosen[method] = {}
        for exponent in exponents:
            pooled: dict[int, list[float]] = {}
            for points in results[method].values():
                mine = [p for p in points if p["exponent"] == exponent]
                for c_index, point in enumerate(mine):
                    values = point["values"]
                    if problem == "synthetic":
                        values = list(np.log(np.maximum(values, 1e-300)))
                    pooled.setdefault(c_index, []).extend(values)
            scores = {c: float(np.mean(v)) for c, v in pooled.items()}
            best = better(scores, key=lambda c: scores[c])
            chosen[method][f"{exponent:g}"] = grids[method][best]
    return {"chosen": chosen, "scores": results}


# -- plot and entry point ----------------------------------------------------------------------
LABELS = {
    "srgd": "Accelerated-DP-SRGD (validated)",
    "srgd-independent": "Accelerated, independent batch gradients (validated)",
    "dp-sgd-single-pass": "DP-SGD, single pass, same T",
    "dp-sgd-multi-epoch": f"DP-SGD, Poisson, {MULTI_EPOCHS} epochs",
    "srgd-interior-preset": "SRGD interior preset (T = n^1/4, untuned)",
    "srgd-general-preset": "SRGD Theorem 14 preset (B = T = sqrt n, untuned)",
}
STYLES = {
    "srgd": ("C0", "o-"),
    "srgd-independent": ("C2", "s--"),
    "dp-sgd-single-pass": ("C1", "^-"),
    "dp-sgd-multi-epoch": ("C3", "v-"),
    "srgd-interior-preset": ("C4", "D"),
    "srgd-general-preset": ("C5", "P"),
}


def _plot(path: Path, payload: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = [("synthetic", "excess population risk")]
    if "results" in payload["adult"]:
        rows.append(("adult", "Adult test accuracy"))
    epsilons = payload["epsilons"]
    fig, axes = plt.subplots(
        len(rows), len(epsilons), figsize=(4.6 * len(epsilons), 3.9 * len(rows)), squeeze=False
    )
    for r, (name, ylabel) in enumerate(rows):
        block = payload[name]
        reference = block["non_private"]["erm_excess_risk" if name == "synthetic" else "accuracy"]
        for c, epsilon in enumerate(epsilons):
            ax = axes[r][c]
            lowest = reference
            for method, per_eps in block["results"].items():
                points = per_eps[f"{epsilon:g}"]
                colour, fmt = STYLES[method]
                steps = [p["sequential_steps"] for p in points]
                means = [p["mean"] for p in points]
                if method in METHODS:
                    lowest = min(lowest, *(p["mean"] - p["std"] for p in points))
                ax.errorbar(
                    steps,
                    means,
                    yerr=[p["std"] for p in points],
                    fmt=fmt,
                    color=colour,
                    capsize=3,
                    ms=5,
                    label=LABELS[method],
                )
            ax.axhline(
                reference,
                color="k",
                ls=":",
                lw=1,
                label="non-private (synthetic: ERM on the same n; Adult: logistic regression)",
            )
            if name == "synthetic":
                ax.set_yscale("log")
            else:
                # presets far below the validated methods are marked at the bottom edge
                bottom = lowest - 0.01
                ax.set_ylim(bottom, max(reference, lowest) + 0.006)
                for method in PRESETS:
                    (point,) = block["results"][method][f"{epsilon:g}"]
                    if point["mean"] < bottom:
                        colour, _ = STYLES[method]
                        x = point["sequential_steps"]
                        ax.plot([x], [bottom + 0.002], "v", color=colour, ms=7)
                        ax.annotate(
                            f"{point['mean']:.3f}",
                            (x, bottom + 0.004),
                            color=colour,
                            fontsize=7,
                            ha="center",
                        )
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("sequential (batch) steps")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, epsilon = {epsilon:g}, delta = {payload['delta']:g}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(
        "Seed 004: single-epoch Accelerated-DP-SRGD vs DP-SGD (mean ± 1 sd over seeds; "
        "Adult presets below the axis are marked with their accuracy)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
        adult_path: the Adult CSV (default ``shared/data/adult.csv`` next to the repository);
            a missing file skips the Adult part (noted in the JSON).
        hyperparameters: override of :data:`DEFAULT_HYPERPARAMETERS` (same layout).
        dpsgd_accountant: ``"pld"`` (default) or ``"rdp"`` (quick) for multi-epoch DP-SGD.

    Measured on 2 shared cores: default size 222-232 s (synthetic ~120 s, Adult ~100 s; the PLD
    calibration of multi-epoch DP-SGD is a large share), quick ~40 s. The JSON records the wall
    time of the run (``wall_time_s``).
    """
    start = time.perf_counter()
    epsilons = check_epsilons(DEFAULT_EPSILONS if epsilons is None else epsilons)
    seeds = tuple(range(2) if quick else range(5)) if seeds is None else tuple(seeds)
    if not seeds:
        raise ValueError("Expected at least one seed.")
    seeds = tuple(check_count("seed", s, minimum=0) for s in seeds)
    delta = check_probability("delta", delta)
    n = check_count(
        "n_synthetic",
        (QUICK_SYNTHETIC_N if quick else SYNTHETIC_N) if n_synthetic is None else n_synthetic,
        minimum=16,
    )
    accountant = ("rdp" if quick else "pld") if dpsgd_accountant is None else dpsgd_accountant
    if accountant not in ("pld", "rdp"):
        raise ValueError(f"Expected dpsgd_accountant in ('pld', 'rdp'), got {accountant!r}.")
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

    with reproduction_environment():
        t0 = time.perf_counter()
        syn = _synthetic(
            n=n,
            exponents=exponents,
            epsilons=epsilons,
            seeds=seeds,
            delta=delta,
            accountant=accountant,
            hyper=hyper["synthetic"],
            methods=methods,
            data_seeds=seeds,
            rtol=rtol,
        )
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
                "lipschitz": _Problem(1.0, SYNTHETIC_RADIUS).lipschitz,
                "smoothness": _Problem(1.0, SYNTHETIC_RADIUS).smoothness,
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
            run = _adult(
                path=path,
                exponents=exponents,
                epsilons=epsilons,
                seeds=seeds,
                delta=delta,
                accountant=accountant,
                hyper=hyper["adult"],
                methods=methods,
                rtol=rtol,
            )
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
                    "lipschitz": _Problem(ADULT_X_BOUND, ADULT_RADIUS).lipschitz,
                    "smoothness": _Problem(ADULT_X_BOUND, ADULT_RADIUS).smoothness,
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
        "hyperparameter_grid_edges": _grid_edges(hyper),
        "synthetic": synthetic,
        "adult": adult,
    }
    timings["total_s"] = time.perf_counter() - start
    payload["wall_time_s"] = timings
    _plot(out / "single_epoch.png", payload)
    payload["png"] = str(out / "single_epoch.png")
    (out / "single_epoch.json").write_text(json.dumps(payload, indent=2, default=_json_default))
    return payload


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer | np.floating):
        return value.item()
    raise TypeError(f"Not JSON serialisable: {type(value).__name__}")
