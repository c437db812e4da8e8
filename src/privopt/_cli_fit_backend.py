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


def _start_client(scheduler: str | None, workers: int | None) -> Any:
    """A distributed client for ``--scheduler`` / ``--workers`` (None: the threaded
    scheduler), closed with the command's context."""
    if scheduler is None and workers is None:
        return None
    if scheduler is not None and workers is not None:
        raise ValueError("Give --scheduler ADDRESS or --workers N, not both.")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ValueError(
            "--scheduler/--workers need the distributed package: pip install 'privopt[dask]'."
        ) from None
    if workers is not None:
        if workers < 1:
            raise ValueError(f"Expected --workers >= 1, got {workers}.")
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        client = Client(cluster)
        closers = [client.close, cluster.close]
    else:
        client = Client(scheduler)
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
