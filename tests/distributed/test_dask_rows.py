"""Partitioned rows: global indices, the fixed reduction tree, lazy imports (issue 19)."""

import subprocess
import sys

import dask
import numpy as np
from dask_helpers import as_dask

from privopt.distributed import PartitionedRows
from privopt.distributed.statistics import gram_moment
from privopt.estimators._base import public_linear_bounds


def test_core_privopt_does_not_import_dask():
    code = (
        "import sys, privopt, privopt.estimators, privopt.cli, privopt.distributed;"
        "print('dask' in sys.modules or 'distributed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_take_returns_the_global_rows_whatever_the_partitioning(synchronous, data):
    X, y = data
    rows = np.array([0, 5, 6, 1200, 1201, 2499])
    for partitions in (1, 3, 17):
        Xs, ys = PartitionedRows.from_dask(*as_dask(X, y, partitions)).take(rows)
        np.testing.assert_array_equal(Xs, X[rows])
        np.testing.assert_array_equal(ys, y[rows])


def test_take_fetches_in_bounded_groups_with_the_same_rows(synchronous, data, monkeypatch):
    """Gathered rows are fetched in groups of at most TAKE_GROUP_BYTES (each partition read
    once), so workers never hold a whole round; the rows are the same as in one fetch."""
    import privopt.distributed.rows as rows_module

    X, y = data
    rows = np.arange(0, X.shape[0], 3)
    partitioned = PartitionedRows.from_dask(*as_dask(X, y, 17))
    calls = []
    real = rows_module.compute
    monkeypatch.setattr(rows_module, "compute", lambda *a: calls.append(len(a)) or real(*a))
    monkeypatch.setattr(rows_module, "TAKE_GROUP_BYTES", 8 * 4 * 60)  # 60 rows of 3 + 1 columns
    Xs, ys = partitioned.take(rows)
    np.testing.assert_array_equal(Xs, X[rows])
    np.testing.assert_array_equal(ys, y[rows])
    assert sum(calls) == 17 and len(calls) > 5  # every partition once, in several groups


def test_the_reduction_is_bitwise_the_same_on_every_scheduler(data, client):
    from privopt.accounting import PrivacyLedger

    X, y = data
    bounds = public_linear_bounds([(-4, 4)] * 3, (-15, 15), 3, True, PrivacyLedger("zero-out"))
    rows = PartitionedRows.from_dask(*as_dask(X, y, 17))
    args = (gram_moment, np.empty(0, np.int64), bounds, bounds.row_bound, bounds.y_radius)
    on_cluster = rows.map_reduce(*args)
    results = [on_cluster]
    for scheduler in ("synchronous", "threads"):
        with dask.config.set(scheduler=scheduler):
            results.append(rows.map_reduce(*args))
    for gram, moment in results[1:]:
        np.testing.assert_array_equal(gram, results[0][0])
        np.testing.assert_array_equal(moment, results[0][1])
    # and it is the in-memory product up to summation order
    Z, t = bounds.transform(X, y)
    np.testing.assert_allclose(results[0][0], Z.T @ Z, rtol=1e-12)
    np.testing.assert_allclose(results[0][1], Z.T @ t, rtol=1e-12)
