"""Rows the estimator does not hold: the row-source protocol a backend implements (issue 28).

:class:`~privopt.estimators.DPLinearRegression` fits rows in memory, or rows held elsewhere (a
Dask cluster, :mod:`privopt.distributed`) through a :class:`RowSource`: what a fit needs from
the data, and nothing of the estimator's internals.

* ``n_rows``, ``n_features``, ``feature_names``: public shape and column names;
* ``take(rows)``: the rows with the given sorted global indices, gathered as ``(X, y)`` arrays
  (the private preprocessing's secret subset or disjoint slice);
* ``run_method(request)``: the method on the main rows (all rows except ``request.excluded``),
  transformed by ``request.bounds``, as the backend computes it (sums over row blocks there,
  noise drawn here through ``request.rng`` into ``request.ledger``); returns ``(w, trace,
  info, reasons)`` as the in-memory runners of :mod:`privopt.estimators._regression_methods`.

The estimator owns the flow (public checks, the ledger and generator, the preprocessing, the
fitted attributes, :func:`fit_row_source`); the backend owns the rows. A backend makes its
inputs fittable by registering an adapter (:func:`register_row_source`), so this package never
imports a backend (no import circle: privopt.distributed imports privopt.estimators, never the
reverse).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privopt._validate import check_delta_for_rows
from privopt.accounting import PrivacyLedger
from privopt.releases.preprocess import LinearBounds

__all__ = [
    "MethodRequest",
    "RowSource",
    "as_row_source",
    "fit_row_source",
    "is_partitioned_input",
    "register_row_source",
]


@dataclass(frozen=True)
class MethodRequest:
    """What a backend needs to run a method on its main rows: the public configuration, the
    method's one budget (:class:`~privopt.estimators._regression_methods.MethodBudget`) and
    the fit's generator and ledger. ``estimator`` is read for its parameters only."""

    method: str
    estimator: Any
    excluded: np.ndarray
    bounds: LinearBounds
    budget: Any
    rng: np.random.Generator
    ledger: PrivacyLedger
    n_main: int


@runtime_checkable
class RowSource(Protocol):
    """Rows held outside the estimator (module docstring)."""

    #: the backend's name, written to ``fit_info_["backend"]``
    backend: str
    #: the DPLinearRegression methods the backend runs ("auto" resolves to one of them)
    methods: tuple[str, ...]

    @property
    def n_rows(self) -> int: ...

    @property
    def n_features(self) -> int: ...

    @property
    def feature_names(self) -> tuple[str, ...] | None: ...

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def run_method(self, request: MethodRequest) -> tuple: ...


#: adapters ``(X, y) -> RowSource | None`` registered by backends, tried in order
_ADAPTERS: list[Callable[[Any, Any], RowSource | None]] = []


def register_row_source(adapter: Callable[[Any, Any], RowSource | None]) -> None:
    """Let ``fit(X, y)`` accept the inputs ``adapter`` turns into a :class:`RowSource` (it
    returns None for inputs it does not handle). Registering twice is a no-op."""
    if adapter not in _ADAPTERS:
        _ADAPTERS.append(adapter)


def is_partitioned_input(obj: Any) -> bool:
    """True for a :class:`RowSource`, a backend's partitioned rows, or a Dask collection (array,
    dataframe, series), recognised without importing dask: ``len()`` of a Dask frame would read
    it all."""
    if isinstance(obj, RowSource) or getattr(type(obj), "__privopt_partitioned__", False):
        return True
    return hasattr(obj, "__dask_graph__") and callable(obj.__dask_graph__)


def as_row_source(X: Any, y: Any) -> RowSource:
    """``X`` itself if it is a :class:`RowSource`, else the first registered adapter's source;
    refused with the way out when no backend handles it."""
    if isinstance(X, RowSource):
        return X
    for adapter in _ADAPTERS:
        source = adapter(X, y)
        if source is not None:
            return source
    raise ValueError(
        f"{type(X).__name__} holds rows on a cluster; its backend is not loaded: "
        "import privopt.distributed (pip install 'privopt[dask]'), or compute the data into "
        "memory first."
    )


def fit_row_source(est: Any, source: RowSource, sample_weight: Any = None) -> Any:
    """:meth:`DPLinearRegression.fit` on a row source: the same public checks, the same draws
    from the fit's generator in the same order, the same releases in the same ledger, with the
    rows gathered by ``source.take`` and the method run by ``source.run_method``."""
    from privopt.estimators._regression_methods import choose_method
    from privopt.estimators.linear_regression import _CONSTANT

    if sample_weight is not None:
        raise ValueError(
            f"sample_weight is not supported with {source.backend} inputs; fit in memory."
        )
    if not math.isfinite(est.epsilon):
        raise ValueError(f"Expected epsilon to be finite, got {est.epsilon!r}.")
    n, d = source.n_rows, source.n_features
    if n < 2:
        raise ValueError(f"Expected at least 2 rows, got {n}.")
    check_delta_for_rows(est.delta, n, allow_large=est.allow_large_delta)
    method = est.method
    if method == "auto":  # public quantities only
        method = choose_method(n, d, est.epsilon, est.delta, est.fit_intercept)
    if method not in source.methods:
        raise ValueError(
            f"method={method!r} does not run on {source.backend}; the methods that do are "
            f"{', '.join(source.methods)} (and 'auto', which picks newton or dpsgd). Use one of "
            "them, or fit in memory (--backend numpy)."
        )
    est.n_features_in_ = d
    if source.feature_names is not None:
        est.feature_names_in_ = np.asarray(source.feature_names, dtype=object)
    ledger, rng, mu, bounds = est._start_fit(method, d)
    bounds, mu_main, excluded = est._preprocess(method, n, d, bounds, mu, rng, ledger, source.take)
    if est.__dict__.pop("_intercept_only", False):  # too few rows for any feature's bounds
        est._finish_fit("intercept-only", np.zeros(d + 1), *_CONSTANT, bounds, ledger)
    else:
        budget = est._method_budget(method, mu_main)
        n_main = n - excluded.size
        request = MethodRequest(method, est, excluded, bounds, budget, rng, ledger, n_main)
        w, trace, info, reasons = source.run_method(request)
        est._finish_fit(method, w, trace, info, reasons, bounds, ledger)  # AMBSSGD's _bounds
    est.fit_info_["backend"] = source.backend
    return est
