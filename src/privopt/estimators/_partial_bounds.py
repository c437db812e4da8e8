"""Public bounds for some columns only, and the private bounds' plan once some ranges are known.

A statistician often knows some ranges and not others: the 0/1 columns a one-hot encoder made
are in [0, 1] by construction, a percentage in [0, 100], while an income's range is not known.
:class:`~privopt.estimators.DPLinearRegression` accepts such partial public bounds
(:func:`resolve_partial_bounds`): ``feature_bounds`` as

* a sequence of n_features entries, each a (low, high) pair or None (or (nan, nan)): unknown;
* an (n_features, 2) array with (nan, nan) rows for the unknown features;
* a dict naming a subset of a DataFrame's columns (the others unknown);

and ``target_bounds`` a (low, high) pair or None. The columns with public ranges are clipped to
them (centre (low + high) / 2, scale (high - low) / 2, box 1) and the private bounds are
released for the others only (:mod:`privopt.releases.known_columns`), so the preprocessing
budget is split over fewer releases. The ledger states which columns' bounds were public (their
indices, or names for a dict; never data values). Complete public bounds (every feature and the
target) keep the public path unchanged (:func:`~privopt.estimators._base.public_linear_bounds`).

:func:`known_plan` chooses, once the ranges of some columns are known (public, or found binary
by the private screen), between the full and the coarse private bounds for the other columns,
and their share of mu^2, by the rule of
:func:`~privopt.estimators._bounds_ladder.bounds_plan` counted in the releases that are
left: at most the share planned from public d (so the refusal stays a public decision).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privopt.accounting import PrivacyLedger
from privopt.estimators._base import fitted_columns, public_linear_bounds
from privopt.estimators._bounds_ladder import bounds_plan
from privopt.releases.known_columns import KnownColumns
from privopt.releases.preprocess import LinearBounds

__all__ = ["known_plan", "resolve_partial_bounds"]


def _pair(value: Any, what: str) -> tuple[float, float] | None:
    """A (low, high) pair of finite floats with low < high, or None for None / (nan, nan)."""
    if value is None:
        return None
    try:
        pair = np.asarray(value, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a (low, high) pair or None, got {value!r}.") from None
    if pair.shape != (2,):
        raise ValueError(f"{what} must be a (low, high) pair or None, got {value!r}.")
    if np.all(np.isnan(pair)):
        return None
    low, high = float(pair[0]), float(pair[1])
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(
            f"{what} must be finite with low < high (or None / (nan, nan) for unknown), "
            f"got {value!r}."
        )
    return low, high


def _feature_pairs(feature_bounds: Any, n_features: int) -> tuple[list, list[str] | None]:
    """(pairs or None per feature, the DataFrame's column names for a dict, else None)."""
    if feature_bounds is None:
        return [None] * n_features, None
    if isinstance(feature_bounds, Mapping):
        columns = fitted_columns()
        unknown = [k for k in feature_bounds if k not in columns]
        if unknown:
            raise ValueError(f"feature_bounds names columns that X does not have: {unknown}.")
        pairs = [
            _pair(feature_bounds.get(c), f"feature_bounds[{c!r}]") if c in feature_bounds else None
            for c in columns
        ]
        return pairs, list(columns)
    try:
        array = np.asarray(feature_bounds, dtype=float)
    except (TypeError, ValueError):
        array = None  # a sequence with None entries
    if array is not None and array.shape == (2,):  # one pair for every feature
        pair = _pair(array, "feature_bounds")
        return [pair] * n_features, None
    entries = list(feature_bounds) if array is None else list(array)
    if len(entries) != n_features:
        raise ValueError(
            f"feature_bounds must give {n_features} entries (a (low, high) pair or None per "
            f"feature), got {len(entries)}."
        )
    return [_pair(e, f"feature_bounds[{j}]") for j, e in enumerate(entries)], None


def resolve_partial_bounds(
    feature_bounds: Any,
    target_bounds: Any,
    n_features: int,
    fit_intercept: bool,
    ledger: PrivacyLedger,
) -> LinearBounds | KnownColumns | None:
    """The public bounds of a fit: None (nothing public), complete
    :class:`~privopt.releases.preprocess.LinearBounds` (every feature and the target: the
    public path), or :class:`~privopt.releases.known_columns.KnownColumns` (some columns; the
    others' bounds are released privately). Validation errors name the entry."""
    if feature_bounds is None and target_bounds is None:
        return None
    pairs, names = _feature_pairs(feature_bounds, n_features)
    target = _pair(target_bounds, "target_bounds")
    if target_bounds is not None and target is None:
        raise ValueError(f"target_bounds must be a (low, high) pair, got {target_bounds!r}.")
    given = [j for j, p in enumerate(pairs) if p is not None]
    if len(given) == n_features and target is not None:
        return public_linear_bounds(
            feature_bounds, target_bounds, n_features, fit_intercept, ledger
        )
    low = np.array([np.nan if p is None else p[0] for p in pairs])
    high = np.array([np.nan if p is None else p[1] for p in pairs])
    public = np.isfinite(low)
    labels = [names[j] for j in given] if names is not None else given
    what = [f"features {labels}"] if given else []
    what += ["the target"] if target is not None else []
    if what:
        ledger.assume(
            f"{' and '.join(what)} clipped to the public ranges given by the user; the other "
            "columns' bounds are released privately"
        )
    return KnownColumns(low, high, public, target, target is not None)


def known_plan(estimator: Any, m: int, known: KnownColumns, mu: float, cap: float) -> tuple:
    """(coarse, share of mu^2) of the private bounds of the columns whose range is not known
    (public, or found by the screen), on m rows: :func:`~privopt.estimators._bounds_ladder.
    bounds_plan` counted in the releases left, at most ``cap`` (the share planned before the
    screen, less what it found: never more). Public quantities and released ones only."""
    plan = bounds_plan(estimator, m, known, mu)  # fewer units than planned: never a lower rung
    return plan.coarse, min(plan.share, cap)
