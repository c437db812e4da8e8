"""``privopt fit --backend numpy|dask``: where the training rows come from.

``--backend numpy`` (default) reads a file, a directory or a glob of Parquet/CSV files into
memory; ``--backend dask`` reads the same files lazily, one partition per file, on the local
threaded scheduler, on ``--workers N`` local worker processes, or on the cluster at
``--scheduler ADDRESS``. Both list and check the files the same way
(:func:`privopt.distributed.files.list_table_files`), so a seeded fit gives the same model on
either backend (up to the order of floating-point sums). dask is imported only for
``--backend dask``; a cluster started here is closed when the command ends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = [
    "BackendOption",
    "DataArgument",
    "FitData",
    "SchedulerOption",
    "WorkersOption",
    "load_training_data",
]

DataArgument = typer.Argument(
    help="Training data: a .csv, .csv.gz or .parquet file, a directory of them, or a glob "
    "(quote it)."
)
BackendOption = Annotated[
    str,
    typer.Option(
        "--backend",
        help="numpy (read into memory) or dask (lazy, one partition per file; methods adassp, "
        "ambssgd, dpsgd, ftrl-sigma, newton, auto).",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option("--scheduler", help="With --backend dask: address of a running Dask scheduler."),
]
WorkersOption = Annotated[
    int | None,
    typer.Option("--workers", help="With --backend dask: start a local cluster of N processes."),
]


@dataclass(frozen=True)
class FitData:
    """What ``privopt fit`` trains on: arrays (numpy) or partitioned rows (dask, y None)."""

    X: Any
    y: Any
    feature_names: tuple[str, ...]
    target: str


#: Seconds a local cluster may take to start, or a scheduler to answer, before the command
#: gives up (a cluster that cannot start would otherwise hang the command).
CLUSTER_START_TIMEOUT_S = 60.0
#: Seconds ``--scheduler ADDRESS`` may take to answer.
SCHEDULER_CONNECT_TIMEOUT_S = 15.0


def max_workers() -> int:
    """The stated limit of ``--workers``: the machine's CPU count (at least 4); more local
    processes of one thread each only compete for the same cores."""
    return max(4, os.cpu_count() or 1)


def _start_cluster(workers: int) -> tuple[Any, Any]:
    """(cluster, client) of a local cluster of ``workers`` processes, started within
    :data:`CLUSTER_START_TIMEOUT_S` or refused (a start that hangs is left to its thread,
    whose worker processes end with this one)."""
    import threading

    from distributed import Client, LocalCluster

    started: dict[str, Any] = {}

    def start() -> None:
        try:
            cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
            )
            started["cluster"], started["client"] = cluster, Client(cluster)
        except BaseException as error:  # reported by the caller
            started["error"] = error

    thread = threading.Thread(target=start, name="privopt-cluster-start", daemon=True)
    thread.start()
    thread.join(CLUSTER_START_TIMEOUT_S)
    if thread.is_alive():
        raise TimeoutError(
            f"The local Dask cluster of {workers} workers did not start within "
            f"{CLUSTER_START_TIMEOUT_S:g} s; use fewer --workers, or start a cluster yourself "
            "and pass --scheduler ADDRESS."
        )
    if "error" in started:
        error = started["error"]
        raise OSError(
            f"The local Dask cluster of {workers} workers failed to start "
            f"({type(error).__name__}); use fewer --workers, or pass --scheduler ADDRESS."
        ) from error
    return started["cluster"], started["client"]


def _start_client(scheduler: str | None, workers: int | None) -> Any:
    """A distributed client for ``--scheduler`` / ``--workers`` (None: the threaded
    scheduler), closed with the command's context; both bounded in time."""
    if scheduler is None and workers is None:
        return None
    if scheduler is not None and workers is not None:
        raise ValueError("Give --scheduler ADDRESS or --workers N, not both.")
    try:
        from distributed import Client
    except ImportError:
        raise ValueError(
            "--scheduler/--workers need the distributed package: pip install 'privopt[dask]'."
        ) from None
    if workers is not None:
        if workers < 1:
            raise ValueError(f"Expected --workers >= 1, got {workers}.")
        if workers > max_workers():
            raise ValueError(
                f"Expected --workers <= {max_workers()} (this machine's CPU count, at least 4: "
                f"more one-thread processes only compete for its cores), got {workers:,}; for a "
                "larger cluster start it yourself and pass --scheduler ADDRESS."
            )
        cluster, client = _start_cluster(workers)
        closers = [client.close, cluster.close]
    else:
        try:
            client = Client(scheduler, timeout=SCHEDULER_CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as error:
            raise OSError(
                f"No Dask scheduler answered at {scheduler!r} within "
                f"{SCHEDULER_CONNECT_TIMEOUT_S:g} s ({type(error).__name__}); check the address."
            ) from None
        closers = [client.close]
    import click

    context = click.get_current_context(silent=True)
    for close in closers:
        if context is not None:
            context.call_on_close(close)
    return client


def load_training_data(
    data: Path | str,
    target: str,
    features: list[str] | None,
    backend: str = "numpy",
    scheduler: str | None = None,
    workers: int | None = None,
) -> FitData:
    """The rows of ``data`` for the chosen backend (errors: one-line ValueErrors)."""
    if backend not in ("numpy", "dask"):
        raise ValueError(f"Expected --backend numpy or dask, got {backend!r}.")
    if backend == "numpy":
        if scheduler is not None or workers is not None:
            raise ValueError("--scheduler and --workers need --backend dask.")
        if os.path.isfile(data):
            from privopt.datasets import load_table

            table = load_table(data, target, features=features)
        else:
            from privopt.distributed.files import load_directory

            table = load_directory(data, target, features)
        return FitData(table.X, table.y, table.feature_names, table.target)
    try:
        import dask  # noqa: F401
    except ImportError:
        raise ValueError("--backend dask needs dask: pip install 'privopt[dask]'.") from None
    from privopt.distributed.files import read_directory

    _start_client(scheduler, workers)
    rows = read_directory(data, target, features)
    assert rows.feature_names is not None
    return FitData(rows, None, rows.feature_names, target)
