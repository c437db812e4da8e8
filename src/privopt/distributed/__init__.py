"""Dask backend: private linear regression on data partitioned over a cluster (extra ``dask``).

The design in one paragraph (notes: torch_audit_selection_dask.md §4). Tasks compute only
*exact, deterministic* statistics of their partition (clipped Gram blocks, clipped gradient
sums, rank counts against a public grid, or the rows of a data-independent subset), which are
summed along a fixed tree (:func:`privopt.distributed.rows.tree_sum`). The client then records
the release in the fit's :class:`~privopt.accounting.PrivacyLedger` and adds the noise, drawn by
:mod:`privopt.noise` on the client only: a task that a worker loss or a retry runs twice
recomputes the same exact statistic and never draws noise. Which rows go to which release is
decided on the client from the public N and the secret generator, as functions of *global* row
indices (the row's position in the ordered concatenation of the partitions), never of the
partitioning or of the data; so a fit on any partitioning equals the in-memory fit of
:class:`~privopt.estimators.DPLinearRegression` on the same rows with the same seed, up to the
order of floating-point sums (tested to 1e-8).

Methods on dask: :data:`DASK_METHODS`. The estimator reaches the rows through its row-source
protocol (:mod:`privopt.estimators._row_source`): importing this package registers the adapter
that turns Dask inputs into a :class:`~privopt.distributed.estimator.DaskRowSource`; it does not
import dask (the submodules do), and privopt.estimators never imports this package.
"""

from __future__ import annotations

from typing import Any

from privopt.estimators._row_source import register_row_source

__all__ = [
    "DASK_METHODS",
    "PartitionedRows",
    "fit_linear_regression",
    "is_dask_input",
    "read_directory",
]

#: the DPLinearRegression methods that run on Dask ("auto" resolves to one of them)
DASK_METHODS = ("adassp", "ambssgd", "dpsgd", "ftrl-sigma", "newton")


def is_dask_input(obj: Any) -> bool:
    """True for a Dask collection (array, dataframe, series) or a :class:`PartitionedRows`,
    without importing dask."""
    if getattr(type(obj), "__privopt_partitioned__", False):
        return True
    return hasattr(obj, "__dask_graph__") and callable(obj.__dask_graph__)


def _dask_row_source(X: Any, y: Any) -> Any:
    """The estimators' adapter for Dask inputs (:func:`privopt.estimators._row_source.
    register_row_source`): a :class:`~privopt.distributed.estimator.DaskRowSource`, or None."""
    if not is_dask_input(X):
        return None
    from privopt.distributed.estimator import DaskRowSource

    return DaskRowSource.from_inputs(X, y)


register_row_source(_dask_row_source)


def __getattr__(name: str) -> Any:  # lazy: dask is imported on first use only
    if name == "PartitionedRows":
        from privopt.distributed.rows import PartitionedRows

        return PartitionedRows
    if name == "fit_linear_regression":
        from privopt.distributed.estimator import fit_linear_regression

        return fit_linear_regression
    if name == "read_directory":
        from privopt.distributed.files import read_directory

        return read_directory
    raise AttributeError(f"module 'privopt.distributed' has no attribute {name!r}")
