"""Shared fixtures of the Dask backend's tests: data, the in-memory reference, one cluster.

The whole folder is skipped without the ``dask`` extra. One 2-worker ``LocalCluster`` with
worker processes (so pickling and worker loss are real) serves every test of the session: its
start is the slow part (a few seconds).
"""

import logging

import numpy as np
import pytest

pytest.importorskip("dask")
pytest.importorskip("distributed")

import dask
from dask_helpers import N_FEATURES, N_ROWS


@pytest.fixture(scope="session")
def data():
    rng = np.random.default_rng(20240519)
    X = rng.normal(size=(N_ROWS, N_FEATURES)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -1.0]
    y = X @ np.array([1.5, -0.5, 2.0]) + 0.7 + rng.normal(size=N_ROWS)
    return X, y


@pytest.fixture
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="session")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = Client(cluster)
    yield client
    # the client's reconnect attempts during shutdown are logged (a traceback ending in
    # CancelledError, printed after the test summary, sometimes to a test's closed capture
    # stream); they are not failures. The session is over, so distributed's loggers stay quiet
    # in this process from here on: its event loop may still try once more as the process ends.
    logging.disable(logging.CRITICAL)
    try:
        client.close()
        cluster.close()
    finally:
        logging.disable(logging.NOTSET)
        for name in ("distributed", "tornado", "asyncio"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
