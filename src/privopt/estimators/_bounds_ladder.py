"""Which private bounds a bounds-free :class:`~privopt.estimators.DPLinearRegression` releases,
from public quantities only (m rows, d features, the GDP budget mu): a ladder that fits with
what can be released rather than refusing (issue 31).

Each exponential-mechanism release needs tens of ranks of resolution, ``m mu_each``, or it
fails (a value far from the data). With k releases sharing a fraction ``share`` of mu^2,
``mu_each = mu sqrt(share / k)``. The rungs, in order:

1. **full** bounds (:func:`~privopt.releases.quantile_bounds.private_quantile_bounds`,
   ``7 d + 6`` units) when QUANTILE_RANK_BUDGET ranks per unit fit in FULL_BOUNDS_MAX_SHARE of
   mu^2; they take between ``preprocess_fraction`` and MAX_PREPROCESS_SHARE;
2. **coarse** bounds (:func:`~privopt.releases.coarse_bounds.coarse_quantile_bounds`,
   ``2 d + 3`` units: about 1.8x fewer rows for the same ranks) at the share giving
   QUANTILE_RANK_BUDGET ranks, at most COARSE_MAX_SHARE, while that leaves MIN_COARSE_RANKS;
3. the coarse bounds at a **larger share**, the one giving MIN_COARSE_RANKS ranks on average per
   release, up to FALLBACK_MAX_SHARE: the fit keeps less of the budget (the bounds' share
   grows from at most COARSE_MAX_SHARE to at most FALLBACK_MAX_SHARE of what the quality
   release leaves, and the screen takes its shares of that on top), and a
   :class:`~privopt.estimators._utility.UtilityWarning` says so with the fit's private R^2;
4. the **intercept-only** model (:func:`~privopt.releases.coarse_bounds.intercept_only_bounds`:
   the target's median, spread and clipped mean on the whole budget) when no feature's bounds
   can be released but the target's median keeps MIN_COARSE_RANKS ranks at its share; the
   warning names the rows a model with features needs;
5. refusal, naming the rows the target's median alone needs, below that (any release would be
   noise), and for a model without intercept below rung 3 (it would predict 0).

Below MIN_COARSE_RANKS a release fails often and undetectably (the power-plant table at
epsilon = 1 with 300 rows, 12 ranks: median test R^2 -66), so no rung plans under it (on
average over the releases: the target's and the radius's take larger shares, a feature's a
little less). The units are counted in the columns whose range is not publicly known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt.estimators._private_bounds import QUANTILE_RANK_BUDGET
from privopt.releases.coarse_bounds import INTERCEPT_ONLY_SHARES
from privopt.releases.known_columns import KnownColumns

__all__ = [
    "COARSE_MAX_SHARE",
    "FALLBACK_MAX_SHARE",
    "FULL_BOUNDS_MAX_SHARE",
    "MAX_PREPROCESS_SHARE",
    "MIN_COARSE_RANKS",
    "BoundsPlan",
    "bounds_plan",
    "release_units",
]

#: the full bounds' share of mu^2 never exceeds this
MAX_PREPROCESS_SHARE = 0.3
#: the full private bounds (7 d + 6 units) are used while their rank budget needs at most this
#: share of mu^2 (they then take at most MAX_PREPROCESS_SHARE); beyond it the coarse bounds
#: (2 d + 3 units, :mod:`privopt.releases.coarse_bounds`) take at most COARSE_MAX_SHARE
FULL_BOUNDS_MAX_SHARE = 1.0
#: 0.4 (0.3 left the bounds' releases failing more often than the method's noise cost: power
#: plant, epsilon 0.1, 5,000 rows, 20 seeds, median test R^2 0.75 -> 0.84)
COARSE_MAX_SHARE = 0.4
#: fewer ranks than this per coarse release (m mu_each) is never planned. Power plant, epsilon
#: 1, d = 4, median (worst) test R^2: 300 rows (12 ranks) -66, 350 (15.8) -0.002 (-10,416), 450
#: (20.3) 0.63 (-0.07), 520 (23.5) 0.78 (-0.04), 700 (31.6) 0.84 (0.12): 23 leaves a margin
#: above the last failure seen and keeps 5,000 rows at epsilon 0.1 (26.2), 2,000 at 0.3 (29.4)
MIN_COARSE_RANKS = 23.0
#: rung 3's largest share of mu^2 for the coarse bounds (the fit keeps at least 30%)
FALLBACK_MAX_SHARE = 0.7


@dataclass(frozen=True)
class BoundsPlan:
    """``kind`` ("full", "coarse" or "intercept-only"), the share of mu^2 of its releases, and
    ``fallback``: why the usual plan did not fit (the warning's text), None on rungs 1-2."""

    kind: str
    share: float
    fallback: str | None = None

    @property
    def coarse(self) -> bool:
        return self.kind != "full"


def _rows(ranks: float, units: float, share: float, mu: float) -> int:
    """Rows for ``ranks`` per release of ``units`` releases sharing ``share`` of mu^2."""
    return math.ceil(ranks * math.sqrt(units / share) / mu)


def release_units(known: KnownColumns) -> tuple[int, int]:
    """(full, coarse) budget units of the private bounds of the columns whose range is not
    known: ``7 d + 6`` and ``2 d + 3`` with nothing known (:func:`~privopt.releases.
    quantile_bounds.release_budgets`, :func:`~privopt.releases.coarse_bounds.coarse_budgets`);
    a known feature or target spends no quantile, a public one no clip count either."""
    free = int(np.count_nonzero(~known.mask))
    counted = int(np.count_nonzero(~known.public))
    t_free, t_counted = int(known.target is None), int(not known.target_public)
    return 5 * free + 2 * counted + 2 * t_counted + 3 * t_free + 1, 2 * free + 2 * t_free + 1


def bounds_plan(
    estimator: Any, m: int, known: KnownColumns, mu: float, refuse: bool = True
) -> BoundsPlan | None:
    """The rung of the module docstring for m rows and budget mu, counted in the releases of the
    columns whose range ``known`` does not hold (public quantities: at the plan, the user's
    public ranges; after the binary screen, :func:`~privopt.estimators._partial_bounds.
    known_plan` counts its released findings too). ``estimator`` gives ``preprocess_fraction``,
    ``fit_intercept`` and the refusal (with ``refuse`` False: None instead)."""
    floor = estimator.preprocess_fraction
    full_units, k = release_units(known)
    need = (QUANTILE_RANK_BUDGET / (m * mu)) ** 2
    if need * full_units <= FULL_BOUNDS_MAX_SHARE:
        return BoundsPlan("full", min(max(need * full_units, floor), MAX_PREPROCESS_SHARE))
    share = min(max(need * k, floor), COARSE_MAX_SHARE)
    if m * mu * math.sqrt(share / k) >= MIN_COARSE_RANKS:
        return BoundsPlan("coarse", share)
    usual = _rows(MIN_COARSE_RANKS, k, COARSE_MAX_SHARE, mu)
    larger = (MIN_COARSE_RANKS * math.sqrt(k) / (m * mu)) ** 2
    if larger <= FALLBACK_MAX_SHARE:
        return BoundsPlan(
            "coarse",
            larger,
            f"{m:,} rows are fewer than the {usual:,} its private bounds need at their usual "
            f"share of the budget ({COARSE_MAX_SHARE:.0%}), so they took {larger:.0%} and the "
            "fit's noise is larger",
        )
    features = _rows(MIN_COARSE_RANKS, k, FALLBACK_MAX_SHARE, mu)
    free = int(np.count_nonzero(~known.mask))
    median_share = 1.0 if known.target is not None else INTERCEPT_ONLY_SHARES[0]
    if estimator.fit_intercept and m * mu * math.sqrt(median_share) >= MIN_COARSE_RANKS:
        return BoundsPlan(
            "intercept-only",
            1.0,
            f"{m:,} rows are too few for private bounds of {free} features (at least {features:,} "
            "needed), so the model is the intercept only: the private mean of the target, "
            "every coefficient 0",
        )
    if not refuse:
        return None
    if not estimator.fit_intercept:  # a model with neither features nor intercept predicts 0
        estimator._refuse(m, features, "private preprocessing (no public bounds given)")
    estimator._refuse(
        m,
        _rows(MIN_COARSE_RANKS, 1, median_share, mu),
        "any private fit (even the target's median alone, for an intercept-only model)",
    )
    raise AssertionError("unreachable: _refuse raises")  # pragma: no cover
