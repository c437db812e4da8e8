"""Private quantile bounds on a disjoint secret slice, shared by the estimators that take them.

Without public bounds, :class:`~privopt.estimators.DPLinearRegression` (for the methods that
calibrate themselves) and the Wang et al. (2022) estimators (below DP-STAT's minimum rows) release
:func:`~privopt.releases.quantile_bounds.private_quantile_bounds` on a slice of m secret rows,
drawn by a permutation independent of the data, and fit on the other rows: the slice and the
fit are disjoint, so each spends the full budget (parallel composition). m and the refusal
depend on public N, d and mu only.
"""

from __future__ import annotations

import math

import numpy as np

from privopt.accounting import PrivacyLedger
from privopt.releases.preprocess import LinearBounds
from privopt.releases.quantile_bounds import (
    QUANTILE_ROWS,
    private_quantile_bounds,
    quantile_releases,
)

__all__ = [
    "PUBLIC_BOUNDS_HINT",
    "QUANTILE_RANK_BUDGET",
    "PrivateBoundsMixin",
    "quantile_slice_rows",
]

#: each budget unit of the private preprocessing gets m * mu_each >= this (m rows, GDP
#: mu_each): at N = 2,000, epsilon = 1 the quartiles of CCPP's features are then within a few
#: percent (measured), and a release fails (a value far outside the data) in under 1% of
#: draws. 45 (60 when there were 3 d + 4 units, all quantiles): the 7 d + 6 units now include
#: 3 d + 2 units of Gaussian counts, and 2,000 rows with d = 10 still fit at epsilon = 1
QUANTILE_RANK_BUDGET = 45.0
PUBLIC_BOUNDS_HINT = (
    "Give public bounds to skip private preprocessing: feature_bounds= and target_bounds= in "
    "Python, --bounds FILE with privopt fit."
)


def quantile_slice_rows(n: int, d: int, mu: float, fraction: float) -> int:
    """Rows m of a disjoint secret slice for :func:`private_quantile_bounds` at the full budget
    mu (parallel composition with the fit on the other rows): enough for QUANTILE_RANK_BUDGET
    ranks of resolution per release (m mu / sqrt(7 d + 6) >= QUANTILE_RANK_BUDGET), at least
    ``fraction`` N, at most QUANTILE_ROWS. Public quantities only; the caller refuses when
    2 m > N."""
    needed = math.ceil(QUANTILE_RANK_BUDGET * math.sqrt(quantile_releases(d)) / mu)
    return min(max(needed, int(fraction * n)), QUANTILE_ROWS)


class PrivateBoundsMixin:
    """The refusal, the disjoint slice and the quantile release of an estimator with
    ``epsilon``, ``delta``, ``preprocess_fraction`` and ``fit_intercept`` parameters (after
    ``validate_data``, which sets ``n_features_in_``)."""

    epsilon: float
    delta: float
    preprocess_fraction: float
    fit_intercept: bool
    n_features_in_: int

    def _refuse(self, n: int, needed: int, what: str) -> None:
        raise ValueError(
            f"Too few rows: {what} needs at least {needed} rows at epsilon={self.epsilon:g}, "
            f"delta={self.delta:g} with {self.n_features_in_} features; {n} are available. "
            + PUBLIC_BOUNDS_HINT
        )

    def _slice_rows(self, n: int, d: int, mu: float) -> int:
        """Rows of the disjoint preprocessing slice (at the full budget), at most half of N."""
        m = quantile_slice_rows(n, d, mu, self.preprocess_fraction)
        if 2 * m > n:
            self._refuse(n, 2 * m, "private preprocessing on a disjoint slice")
        return m

    def _quantile_slice(self, n: int, d: int, mu: float, rng: np.random.Generator) -> np.ndarray:
        """Sorted indices of the disjoint secret slice: the first m of a permutation drawn from
        ``rng``, independent of the data."""
        m = self._slice_rows(n, d, mu)
        return np.sort(rng.permutation(n)[:m]).astype(np.int64)

    def _quantile_bounds(
        self,
        X: np.ndarray,
        y: np.ndarray,
        rows: np.ndarray,
        mu: float,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        partition: object,
    ) -> LinearBounds:
        return private_quantile_bounds(
            X,
            y,
            rows,
            mu=mu,
            rng=rng,
            ledger=ledger,
            partition=partition,
            fit_intercept=self.fit_intercept,
        )
