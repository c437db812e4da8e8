"""A worker lost mid-fit (issue 19): killed while its task runs, the fit completes with the same
model (the scheduler recomputes the exact statistic; the noise lives on the client and is drawn
once); with no failures allowed it stops with DaskFitError and releases nothing."""

import itertools
import os
import signal
import sys
import threading
import time

import cloudpickle
import numpy as np
import pytest
from dask import delayed
from dask_helpers import assert_same_fit, estimator, reference

from privopt.distributed import PartitionedRows
from privopt.distributed.rows import DaskFitError, check_block

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: every partition task sleeps this long, so that a kill lands while tasks run
TASK_SECONDS = 0.6


def _slow_block(X, y, seconds):
    time.sleep(seconds)
    return check_block(X, y, "slow partition")


def slow_rows(X, y, partitions=4):
    cuts = np.linspace(0, X.shape[0], partitions + 1).astype(int)
    parts = tuple(
        delayed(_slow_block, pure=True)(X[a:b], y[a:b], TASK_SECONDS)
        for a, b in itertools.pairwise(cuts)
    )
    return PartitionedRows(parts, cuts.astype(np.int64), X.shape[1])


def kill_one_worker_soon(client, delay=0.3):
    """SIGKILL one worker process after ``delay`` seconds (its nanny restarts it)."""
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    timer = threading.Timer(delay, os.kill, (victim, signal.SIGKILL))
    timer.start()
    return timer, victim


def test_fit_survives_a_killed_worker_with_the_same_model(client, data):
    X, y = data
    timer, victim = kill_one_worker_soon(client)
    fitted = estimator("adassp", public=True).fit(slow_rows(X, y))
    timer.join()
    assert_same_fit(reference("adassp", True, X, y), fitted)
    client.wait_for_workers(2, timeout=30)
    assert victim not in client.run(os.getpid).values()  # the kill happened


def test_fit_fails_cleanly_when_no_failure_is_allowed(client, data):
    X, y = data

    def set_allowed(dask_scheduler, value):
        old = dask_scheduler.allowed_failures
        dask_scheduler.allowed_failures = value
        return old

    client.wait_for_workers(2, timeout=30)
    old = client.run_on_scheduler(set_allowed, value=0)
    model = estimator("adassp", public=True)
    try:
        timer, _ = kill_one_worker_soon(client)
        with pytest.raises(DaskFitError, match="before any private value was released"):
            model.fit(slow_rows(X, y))
        timer.join()
    finally:
        client.run_on_scheduler(set_allowed, value=old)
        client.wait_for_workers(2, timeout=30)
    assert not hasattr(model, "coef_") and not hasattr(model, "privacy_report_")
