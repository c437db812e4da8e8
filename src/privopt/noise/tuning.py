"""Choosing nu for nu-DP-FTRL by the normalised prefix-sum error (notes/001.md §2.2, §6.1).

The paper tunes nu "by minimising the squared error (3) as in prior work". Because the error of a
calibrated mechanism scales as sens(C)^2 ||A B||_F^2, that product is the scale-free objective;
:func:`tune_nu` minimises it over nu in [0, 1] (nu = 0 is optimal continual counting, nu = 1 is
DP-SGD) for a horizon and participation pattern. The search is data-independent, so it costs no
privacy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_count
from privopt.noise.base import SINGLE, Participation
from privopt.noise.toeplitz import nu_dpftrl

__all__ = ["NuChoice", "tune_nu"]


@dataclass(frozen=True)
class NuChoice:
    """The tuned nu and its normalised prefix-sum error (``loss``)."""

    nu: float
    loss: float


def tune_nu(
    steps: int,
    min_sep: int | None = None,
    participations: int | None = None,
    *,
    grid_size: int = 41,
) -> NuChoice:
    """nu in [0, 1] minimising sens^2 ||A B||_F^2 of nu-DP-FTRL.

    Args:
        steps: horizon T.
        min_sep, participations: the multi-participation pattern (both or neither).
        grid_size: log-spaced grid points in [1e-5, 1) before local refinement.

    >>> choice = tune_nu(2000, min_sep=100, participations=20)
    >>> round(choice.nu, 4), round(choice.loss / 1e5, 2)
    (0.0037, 9.94)
    """
    steps = check_count("steps", steps)
    if (min_sep is None) != (participations is None):
        raise ValueError("Give both min_sep and participations, or neither.")
    pattern = (
        SINGLE if min_sep is None else Participation.multiple(min_sep, participations)  # type: ignore[arg-type]
    )
    pattern.check_steps(steps)

    def loss(nu: float) -> float:
        return nu_dpftrl(nu).prefix_sum_error(steps, pattern)

    candidates = [0.0, 1.0, *np.logspace(-5, 0, grid_size, endpoint=False)]
    values = [loss(nu) for nu in candidates]
    best = int(np.argmin(values))
    nu_best, loss_best = candidates[best], values[best]
    if 0.0 < nu_best < 1.0:
        log_nu = math.log10(nu_best)
        step = 5.0 / grid_size
        res = minimize_scalar(
            lambda x: loss(10.0**x),
            bounds=(log_nu - step, min(log_nu + step, -1e-9)),
            method="bounded",
            options={"xatol": 1e-4},
        )
        if res.fun < loss_best:
            nu_best, loss_best = float(10.0**res.x), float(res.fun)
    return NuChoice(float(nu_best), float(loss_best))
