"""The evaluation grid of Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison (issue
8; docs/theory/single-epoch-srgd.md): every
(method, epsilon, T, configuration, seed) on the synthetic logistic problem and on Adult, with
the per-point summaries the JSON reports. The experiment is described in
:mod:`privopt.experiments.single_epoch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt.datasets.adult import load_adult_arrays as _load_adult_arrays
from privopt.datasets.logistic import SyntheticLogistic
from privopt.experiments._common import t_halfwidth
from privopt.experiments.single_epoch_config import (
    ADULT_PATH,
    ADULT_RADIUS,
    ADULT_X_BOUND,
    METHODS,
    PRESETS,
    SYNTHETIC_PROBLEM_SEED,
    SYNTHETIC_RADIUS,
)
from privopt.experiments.single_epoch_methods import fit_method, steps_grid

__all__ = ["load_adult_arrays", "run_adult", "run_problem", "run_synthetic"]


# -- the data ----------------------------------------------------------------------------------
def load_adult_arrays(
    path: Path = ADULT_PATH, split_seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`privopt.datasets.adult.load_adult_arrays` at the shared Adult file by default."""
    return _load_adult_arrays(path, split_seed)


# -- evaluation grid ---------------------------------------------------------------------------
def _accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.where(X @ w >= 0.0, 1.0, -1.0) == y))


def _summary(values: list[float], log: bool) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    out: dict[str, Any] = {
        "values": [float(v) for v in arr],
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "ci95_halfwidth": t_halfwidth(list(arr)),
    }
    if log:
        out["geometric_mean"] = float(np.exp(np.mean(np.log(np.maximum(arr, 1e-300)))))
    return out


def run_problem(
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


# -- the two problems --------------------------------------------------------------------------
def run_synthetic(*, n: int, data_seeds: Sequence[int], **grid: Any) -> dict[str, Any]:
    """The grid on the synthetic problem: seed i's training data is a fresh sample of ``n`` rows
    drawn with ``data_seeds[i]``; the score is the excess population risk.

    ``grid`` holds :func:`run_problem`'s keyword arguments about the grid (``methods``,
    ``hyper``, ``exponents``, ``epsilons``, ``seeds``, ``delta``, ``accountant`` and optionally
    ``grids``, ``calibration_rtol``). Returns the problem, the training samples and the results.
    """
    problem = SyntheticLogistic.make(seed=SYNTHETIC_PROBLEM_SEED)
    train = [problem.sample(n, [data_seed, n]) for data_seed in data_seeds]
    results = run_problem(
        train=train,
        score=lambda w, _: problem.excess_risk(w),
        log_score=True,
        x_bound=1.0,
        radius=SYNTHETIC_RADIUS,
        **grid,
    )
    return {"problem": problem, "train": train, "results": results}


def run_adult(*, path: Path, validation: bool = False, **grid: Any) -> dict[str, Any]:
    """The grid on Adult (every seed trains on the same rows); the score is the test accuracy,
    or with ``validation`` the accuracy on 20% of the training rows held out (random_state=1),
    the model being trained on the other 80%. ``grid`` is as in :func:`run_synthetic`. Returns
    the data and the results.
    """
    x_train, y_train, x_test, y_test = load_adult_arrays(path)
    if validation:
        from sklearn.model_selection import train_test_split

        x_train, x_test, y_train, y_test = train_test_split(
            x_train, y_train, test_size=0.2, random_state=1
        )
    results = run_problem(
        train=[(x_train, y_train)] * len(grid["seeds"]),
        score=lambda w, _: _accuracy(w, x_test, y_test),
        log_score=False,
        x_bound=ADULT_X_BOUND,
        radius=ADULT_RADIUS,
        **grid,
    )
    return {"data": (x_train, y_train, x_test, y_test), "results": results}
