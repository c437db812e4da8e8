"""``DPLinearRegression.fit`` on Dask inputs: the estimator's flow with cluster statistics.

:func:`fit_linear_regression` follows :meth:`privopt.estimators.DPLinearRegression.fit` step by
step (the same public checks, the same draws from the fit's generator in the same order, the
same releases in the same ledger), replacing each access to the rows by its partitioned form:

* the private preprocessing subset (``rng.choice(N, m)``, or the first m of ``rng.permutation(N)``
  for a disjoint slice) is a set of global row indices drawn on the client without looking at
  the data; those m <= 20,000 rows are gathered to the client (:meth:`PartitionedRows.take`) and
  the in-memory quantile code runs on them unchanged;
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
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from privopt._validate import check_delta_for_rows
from privopt.accounting import PrivacyLedger, gdp_mu
from privopt.algorithms.quantile_bounds import QUANTILE_ROWS, tighten_public_bounds
from privopt.algorithms.result import FitTrace
from privopt.distributed import DASK_METHODS
from privopt.distributed.ftrl import ftrl_sigma_dask
from privopt.distributed.methods import adassp_dask, dpsgd_dask, newton_dask
from privopt.distributed.rounds import ambssgd_dask
from privopt.distributed.rows import PartitionedRows

__all__ = ["fit_linear_regression", "resolve_method"]

#: uniforms drawn per call when replaying the estimator's N secret row labels
_UNIFORM_BLOCK = 1 << 20


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
    from privopt.estimators._base import public_linear_bounds
    from privopt.estimators.linear_regression import (
        MIN_TIGHTEN_ROWS,
        SEQUENTIAL,
        TIGHTEN_SHARE,
        TIGHTENED,
    )

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
    ledger = PrivacyLedger(est._relation(method))
    rng = est._generator(ledger)
    mu = gdp_mu(est.epsilon * (1.0 - 1e-9), est.delta)
    ledger.assume("the number of records N is public")
    bounds = public_linear_bounds(
        est.feature_bounds, est.target_bounds, d, est.fit_intercept, ledger
    )
    excluded = np.empty(0, dtype=np.int64)
    mu_main = mu
    if bounds is not None and method in TIGHTENED and n >= MIN_TIGHTEN_ROWS:
        m = min(n, QUANTILE_ROWS)
        subset = np.sort(rng.choice(n, m, replace=False)) if m < n else np.arange(n)
        Xs, ys = rows.take(subset)
        bounds = tighten_public_bounds(
            bounds, Xs, ys, np.arange(m), mu=mu * math.sqrt(TIGHTEN_SHARE), rng=rng, ledger=ledger
        )
        mu_main = mu * math.sqrt(1.0 - TIGHTEN_SHARE)
    elif bounds is not None:
        for start in range(0, n, _UNIFORM_BLOCK):  # the in-memory fit's rng.random(n)
            rng.random(min(_UNIFORM_BLOCK, n - start))
    elif method in SEQUENTIAL:
        m = min(n, QUANTILE_ROWS)
        share = est._preprocessing_share(m, d, mu)
        subset = np.sort(rng.choice(n, m, replace=False)) if m < n else np.arange(n)
        Xs, ys = rows.take(subset)
        bounds = est._quantile_bounds(
            Xs, ys, np.arange(m), mu * math.sqrt(share), rng, ledger, None
        )
        mu_main = mu * math.sqrt(1.0 - share)
    else:
        m = est._slice_rows(n, d, mu)
        order = rng.permutation(n)
        excluded = np.sort(order[:m]).astype(np.int64)
        del order
        Xs, ys = rows.take(excluded)
        bounds = est._quantile_bounds(Xs, ys, np.arange(m), mu, rng, ledger, "preprocess")
    n_main = n - excluded.size
    w, trace, info, reasons = _run(
        est, method, rows, excluded, bounds, mu_main, rng, ledger, n_main, callback
    )
    bounds = info.pop("_bounds", bounds)  # DP-AMBSSGD rescales the intercept column
    from privopt.estimators._regression_methods import describe, method_fixes
    from privopt.estimators._utility import warn_if_useless

    warn_if_useless(f"DPLinearRegression(method={method!r})", reasons, method_fixes(method))
    est.coef_, est.intercept_ = bounds.to_original(w)
    est.privacy_report_ = ledger.report(est.delta)
    est.fit_trace_ = trace
    est.fit_info_ = {"method": method, "bounds": bounds.describe(), **describe(info)}
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
        noise = 2 * math.sqrt(p) * info["gram_std"]
        return w, FitTrace.empty(), info, rm._gram_reasons(n_main, p, bounds.row_bound, noise)
    if method == "newton":
        w, info = newton_dask(
            rows, excluded, bounds, mu=mu, rng=rng, ledger=ledger, public_n=float(n_main)
        )
        noise = 2 * math.sqrt(p) * info["gram_std"]
        reasons = rm._gram_reasons(n_main, p, bounds.row_bound, noise)
        last_signal = n_main * bounds.row_bound * info["residual_clips"][-1] / math.sqrt(p)
        ratio = rm.noise_to_signal(info["gradient_stds"][-1], p, last_signal)
        if ratio > rm.NOISE_TO_SIGNAL_LIMIT:
            reasons.append(f"the last gradient's noise is {ratio:.3g} times its signal")
        return w, FitTrace.empty(), info, reasons
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
        progress = rm.optimisation_progress(info["learning_rate"], h_norm, info["steps"])
        reasons = []
        if progress < rm.PROGRESS_LIMIT:
            reasons.append(f"eta * ||H|| * rounds = {progress:.3g} < {rm.PROGRESS_LIMIT:g}")
        return w, trace, info, reasons
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
    epsilon = est.epsilon
    if epsilon > rm.DPSGD_MAX_EPSILON:
        warnings.warn(
            f"epsilon={epsilon:g} capped at {rm.DPSGD_MAX_EPSILON:g} for DP-SGD (more noise, a "
            "stronger guarantee; larger epsilon costs time without improving the fit: see "
            "DPSGD_MAX_EPSILON).",
            stacklevel=4,
        )
    w, trace, info = dpsgd_dask(
        rows,
        excluded,
        bounds,
        epsilon=min(epsilon, rm.DPSGD_MAX_EPSILON),
        delta=est.delta,
        rng=rng,
        ledger=ledger,
        public_n=float(n_main),
        diagnostics=est.diagnostics,
        callback=callback,
    )
    steps = int(trace.steps) if trace.steps else 0
    eta, curvature = info["learning_rate"], bounds.row_bound**2 / p
    step_std = eta * float(np.median(trace.noise_std)) if steps else math.inf
    reasons = rm._iterate_noise(step_std, eta, curvature, steps - steps // 2, p, bounds)
    progress = rm.optimisation_progress(eta, curvature, steps)
    if progress < rm.PROGRESS_LIMIT:
        reasons.append(f"eta * curvature * steps = {progress:.3g} < {rm.PROGRESS_LIMIT:g}")
    return w, trace, info, reasons
