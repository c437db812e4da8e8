"""``DPLinearRegression.fit`` on Dask inputs: the estimator's flow with cluster statistics.

:func:`fit_linear_regression` follows :meth:`privopt.estimators.DPLinearRegression.fit` step by
step (the same public checks, the same draws from the fit's generator in the same order, the
same releases in the same ledger), replacing each access to the rows by its partitioned form:

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

from privopt._validate import check_delta_for_rows
from privopt.distributed import DASK_METHODS
from privopt.distributed.ftrl import ftrl_sigma_dask
from privopt.distributed.methods import adassp_dask, dpsgd_dask, newton_dask
from privopt.distributed.rounds import ambssgd_dask
from privopt.distributed.rows import PartitionedRows

__all__ = ["fit_linear_regression", "resolve_method"]


def resolve_method(method: str, n: int, d: int, epsilon: float, delta: float, intercept: bool):
    """The method a fit of (n, d) runs ("auto" resolved from public quantities), refused with
    the list of Dask methods when it has no Dask path."""
    from privopt.estimators._regression_methods import choose_method

    if method == "auto":
        method = choose_method(n, d, epsilon, delta, intercept)
    if method not in DASK_METHODS:
        raise ValueError(
            f"method={method!r} does not run on Dask; the methods that do are "
            f"{', '.join(DASK_METHODS)} (and 'auto', which picks newton or dpsgd). Use one of "
            "them, or fit in memory (--backend numpy)."
        )
    return method


def fit_linear_regression(
    est: Any,
    X: Any,
    y: Any = None,
    sample_weight: Any = None,
    *,
    callback: Callable[[Any], None] | None = None,
) -> Any:
    """Fit ``est`` (a :class:`~privopt.estimators.DPLinearRegression`) on Dask inputs.

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
    if not math.isfinite(est.epsilon):
        raise ValueError(f"Expected epsilon to be finite, got {est.epsilon!r}.")
    rows = X if isinstance(X, PartitionedRows) else PartitionedRows.from_dask(X, y)
    n, d = rows.n_rows, rows.n_features
    if n < 2:
        raise ValueError(f"Expected at least 2 rows, got {n}.")
    check_delta_for_rows(est.delta, n, allow_large=est.allow_large_delta)
    method = resolve_method(est.method, n, d, est.epsilon, est.delta, est.fit_intercept)
    est.n_features_in_ = d
    if rows.feature_names is not None:
        est.feature_names_in_ = np.asarray(rows.feature_names, dtype=object)
    ledger, rng, mu, bounds = est._start_fit(method, d)
    bounds, mu_main, excluded = est._preprocess(method, n, d, bounds, mu, rng, ledger, rows.take)
    n_main = n - excluded.size
    w, trace, info, reasons = _run(
        est, method, rows, excluded, bounds, mu_main, rng, ledger, n_main, callback
    )
    est._finish_fit(method, w, trace, info, reasons, bounds, ledger)  # DP-AMBSSGD's _bounds
    est.fit_info_["backend"] = "dask"
    return est


def _run(est, method, rows, excluded, bounds, mu, rng, ledger, n_main, callback):
    """The method on the cluster, with the in-memory runner's public utility checks."""
    from privopt.estimators import _regression_methods as rm

    p = bounds.transform(np.zeros((1, rows.n_features))).shape[1]
    if method == "adassp":
        w, info = adassp_dask(
            rows, excluded, bounds, mu=mu, rng=rng, ledger=ledger, budget_split=rm.ADASSP_SPLIT
        )
        return rm.adassp_result(w, info, (n_main, p), bounds)
    if method == "newton":
        w, info = newton_dask(
            rows, excluded, bounds, mu=mu, rng=rng, ledger=ledger, public_n=float(n_main)
        )
        return rm.newton_result(w, info, (n_main, p), bounds)
    if method == "ambssgd":
        from privopt.estimators.linear_regression import AMBSSGD_MOMENT_SHARE

        w, trace, info, h_norm = ambssgd_dask(
            rows,
            excluded,
            bounds,
            epsilon=est.epsilon,
            delta=est.delta,
            mu=mu,
            moment_mu=mu * math.sqrt(AMBSSGD_MOMENT_SHARE),
            rng=rng,
            ledger=ledger,
            diagnostics=est.diagnostics,
        )
        return w, trace, info, rm.rounds_reasons(info["learning_rate"], h_norm, info["steps"])
    if method == "ftrl-sigma":
        w, trace, info = ftrl_sigma_dask(
            rows,
            excluded,
            bounds,
            epsilon=est.epsilon,
            delta=est.delta,
            public_X=est.public_X,
            rng=rng,
            ledger=ledger,
            diagnostics=est.diagnostics,
        )
        return w, trace, info, []
    w, trace, info = dpsgd_dask(
        rows,
        excluded,
        bounds,
        epsilon=rm.capped_dpsgd_epsilon(est.epsilon, stacklevel=4),
        delta=est.delta,
        rng=rng,
        ledger=ledger,
        public_n=float(n_main),
        diagnostics=est.diagnostics,
        callback=callback,
    )
    return rm.dpsgd_result(w, trace, info, p, bounds)
