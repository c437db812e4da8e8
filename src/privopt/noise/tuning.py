"""Choosing nu for nu-DP-FTRL by the normalised prefix-sum error (docs/theory/correlated-noise.md).

The same data-independent objective chooses the restart period of Honaker-tree increments
(:func:`tree_restart_candidates`), for the training plans and the CIFAR-style reproduction alike.

The paper tunes nu "by minimising the squared error (3) as in prior work". Because the error of a
calibrated mechanism scales as sens(C)^2 ||A B||_F^2, that product is the scale-free objective;
:func:`tune_nu` minimises it over nu in [0, 1] (nu = 0 is optimal continual counting, nu = 1 is
DP-SGD) for a horizon and participation pattern. The search is data-independent, so it costs no
privacy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from privopt._validate import check_count
from privopt.noise.base import SINGLE, Mechanism, Participation
from privopt.noise.restarts import Restarted
from privopt.noise.sensitivity import SensitivityUpperBoundWarning
from privopt.noise.toeplitz import nu_dpftrl
from privopt.noise.tree import TreeAggregation, TreeIncrements

__all__ = ["NuChoice", "participation_pattern", "tree_restart_candidates", "tune_nu"]


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


def participation_pattern(participation: Participation) -> dict[str, int]:
    """A multiple-participation pattern as the optimisers' keyword arguments.

    ``{"min_sep": S, "participations": k}`` for :func:`tune_nu`,
    :func:`~privopt.noise.optimize_blt`, :func:`~privopt.noise.choose_bands` and
    :func:`~privopt.noise.optimize_banded_toeplitz`; ``{}`` for a single participation.
    """
    if participation.kind != "multiple":
        return {}
    assert participation.min_sep is not None and participation.participations is not None
    return {"min_sep": participation.min_sep, "participations": participation.participations}


def tree_restart_candidates(
    steps: int, participation: Participation
) -> list[tuple[float, int | None, Mechanism]]:
    """Honaker-tree increments, unrestarted and restarted every m epochs, with their objective.

    The paper's anytime baselines ("x S restarts, S tuned by (3)"): the candidates are no restart
    (``m = None``) and, for a multiple-participation pattern of k epochs of S steps, a restart
    every ``m * S`` steps for each m < k dividing k. Each comes as ``(sens^2 ||A B||_F^2, m,
    mechanism)``, in that order, its objective evaluated over ``steps`` for ``participation``
    (data-independent: no privacy cost; upper-bound sensitivity warnings are silenced, the
    objective being a comparison). ``min(..., key=lambda c: c[0])`` is the choice.
    """
    base = TreeIncrements(TreeAggregation(variance_reduction=True))
    candidates: list[tuple[Mechanism, int | None]] = [(base, None)]
    pattern = participation_pattern(participation)
    if pattern:
        per_epoch, epochs = pattern["min_sep"], pattern["participations"]
        candidates += [
            (Restarted(base, m * per_epoch), m) for m in range(1, epochs) if epochs % m == 0
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SensitivityUpperBoundWarning)
        return [(m.prefix_sum_error(steps, participation), e, m) for m, e in candidates]
