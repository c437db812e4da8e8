"""``DPLinearRegression.fit`` on Dask inputs: the estimator's flow with cluster statistics.

:class:`DaskRowSource` is the estimator's row source (:mod:`privopt.estimators._row_source`):
the estimator runs its own flow (:func:`~privopt.estimators._row_source.fit_row_source`: the
same public checks, the same draws from the fit's generator in the same order, the same
releases in the same ledger as in memory), and every access to the rows takes its partitioned
form here:

* the private preprocessing subset (``rng.choice(N, m)``, or the first m of ``rng.permutation(N)``
  for a disjoint slice) is a set of global row indices drawn on the client without looking at
  the data; those m <= 20,000 rows are gathered to the client (:meth:`PartitionedRows.take`)
  and the estimator's own preprocessing (``DPLinearRegression._preprocess``) runs on them;
* the main rows (all rows, or all but the slice) are transformed inside the tasks;
* the method runs on the cluster (:mod:`privopt.distributed.methods`).

So the fitted model and the privacy report equal the in-memory fit of the same rows with the
same seed, up to floating-point summation order (tests/distributed). Methods:
:data:`privopt.distributed.DASK_METHODS`; ``sample_weight`` is not supported on Dask.

The one client-side cost that grows with N is the estimator's own: a disjoint slice (DP-SGD
with private bounds) draws ``rng.permutation(N)`` (8 N bytes), and public bounds without
tightening draw N uniforms (in blocks of 2^20), as the in-memory fit does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privopt.distributed import DASK_METHODS
from privopt.distributed.ftrl import ftrl_sigma_dask
from privopt.distributed.methods import adassp_dask, dpsgd_dask, newton_dask
from privopt.distributed.rounds import ambssgd_dask
from privopt.distributed.rows import PartitionedRows

__all__ = ["DaskRowSource", "fit_linear_regression"]


class DaskRowSource:
    """Partitioned rows as the estimator's row source
    (:class:`privopt.estimators._row_source.RowSource`): rows gathered by global index
    (:meth:`PartitionedRows.take`), methods run on the cluster (:mod:`.methods`, :mod:`.rounds`,
    :mod:`.ftrl`) with the in-memory runners' public utility checks."""

    backend = "dask"
    methods = DASK_METHODS

    def __init__(self, rows: PartitionedRows, callback: Callable[[Any], None] | None = None):
        self.rows = rows
        self.callback = callback

    @classmethod
    def from_inputs(cls, X: Any, y: Any = None) -> DaskRowSource:
        """From Dask inputs or :class:`PartitionedRows` (then y is ignored)."""
        return cls(X if isinstance(X, PartitionedRows) else PartitionedRows.from_dask(X, y))

    @property
    def n_rows(self) -> int:
        return self.rows.n_rows

    @property
    def n_features(self) -> int:
        return self.rows.n_features

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        return self.rows.feature_names

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.rows.take(rows)

    def run_method(self, request: Any) -> tuple:
        r = request
        return _run(
            r.estimator,
            r.method,
            self.rows,
            r.excluded,
            r.bounds,
            r.budget,
            r.rng,
            r.ledger,
            r.n_main,
            self.callback,
        )


def fit_linear_regression(
    est: Any,
    X: Any,
    y: Any = None,
    sample_weight: Any = None,
    *,
    callback: Callable[[Any], None] | None = None,
) -> Any:
    """Fit ``est`` (a :class:`~privopt.estimators.DPLinearRegression`) on Dask inputs: its own
    ``fit`` on a :class:`DaskRowSource` (the estimator's flow, budget and checks).

    Args:
        est: the estimator; its parameters are read, its fitted attributes set.
        X: a Dask array or dataframe of features, or a :class:`PartitionedRows` (then y is
            ignored).
        y: the target (Dask array or series of the same partitions).
        sample_weight: must be None (not supported on Dask).
        callback: called after every DP-SGD step (progress; public values only).
    """
    if sample_weight is not None:
        raise ValueError("sample_weight is not supported with Dask inputs; fit in memory.")
    source = DaskRowSource.from_inputs(X, y)
    source.callback = callback
    return est.fit(source, None)


def _run(est, method, rows, excluded, bounds, budget, rng, ledger, n_main, callback):
    """The method on the cluster, with the in-memory runner's public utility checks."""
    from privopt.estimators import _regression_methods as rm

    p = bounds.transform(np.zeros((1, rows.n_features))).shape[1]
    if method == "adassp":
        w, info = adassp_dask(
            rows,
            excluded,
            bounds,
            mu=budget.mu,
            rng=rng,
            ledger=ledger,
            budget_split=rm.ADASSP_SPLIT,
        )
        return rm.adassp_result(w, info, (n_main, p), bounds)
    if method == "newton":
        w, info = newton_dask(
            rows, excluded, bounds, mu=budget.mu, rng=rng, ledger=ledger, public_n=float(n_main)
        )
        return rm.newton_result(w, info, (n_main, p), bounds)
    if method == "ambssgd":
        from privopt.estimators.linear_regression import AMBSSGD_MOMENT_SHARE

        w, trace, info, h_norm = ambssgd_dask(
            rows,
            excluded,
            bounds,
            epsilon=budget.epsilon,  # the fit's target, for the refusal's message only
            delta=budget.delta,
            mu=budget.mu,
            moment_mu=budget.mu * math.sqrt(AMBSSGD_MOMENT_SHARE),
            rng=rng,
            ledger=ledger,
            diagnostics=est.diagnostics,
        )
        return w, trace, info, rm.rounds_reasons(info["learning_rate"], h_norm, info["steps"])
    if method == "ftrl-sigma":
        epsilon, delta = budget.target(method)
        w, trace, info = ftrl_sigma_dask(
            rows,
            excluded,
            bounds,
            epsilon=epsilon,
            delta=delta,
            public_X=est.public_X,
            rng=rng,
            ledger=ledger,
            diagnostics=est.diagnostics,
        )
        return w, trace, info, []
    epsilon, delta = budget.target(method)
    w, trace, info = dpsgd_dask(
        rows,
        excluded,
        bounds,
        epsilon=rm.capped_dpsgd_epsilon(epsilon, stacklevel=4),
        delta=delta,
        rng=rng,
        ledger=ledger,
        public_n=float(n_main),
        diagnostics=est.diagnostics,
        callback=callback,
    )
    return rm.dpsgd_result(w, trace, info, p, bounds)
