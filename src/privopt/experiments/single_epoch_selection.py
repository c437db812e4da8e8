"""Hyper-parameter selection of Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison
(issue 8; docs/theory/single-epoch-srgd.md):
the validation protocol of :data:`~privopt.experiments.single_epoch_config.HYPERPARAMETER_SELECTION`
over :data:`~privopt.experiments.single_epoch_config.HYPERPARAMETER_GRID`, whose output is
``single_epoch_hyperparameters.json``. The experiment is described in
:mod:`privopt.experiments.single_epoch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt.experiments._common import check_epsilons, reproduction_environment
from privopt.experiments.single_epoch_config import (
    ADULT_PATH,
    DEFAULT_DELTA,
    DEFAULT_EPSILONS,
    HYPERPARAMETER_GRID,
    METHODS,
    STEP_EXPONENTS,
    SYNTHETIC_N,
)
from privopt.experiments.single_epoch_runs import run_adult, run_synthetic

__all__ = ["grid_edges", "select_hyperparameters"]


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
    grid = {
        "methods": methods,
        "hyper": None,
        "exponents": exponents,
        "epsilons": epsilons,
        "seeds": seeds,
        "delta": delta,
        "accountant": accountant,
        "grids": grids,
    }
    with reproduction_environment():
        if problem == "synthetic":
            run = run_synthetic(n=n, data_seeds=seeds, **grid)
            better = min
        elif problem == "adult":
            run = run_adult(path=adult_path, validation=True, **grid)
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


def grid_edges(hyper: dict) -> list[str]:
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
