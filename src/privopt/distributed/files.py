"""A directory (or glob) of Parquet or CSV files as partitioned rows, or as one in-memory table.

:func:`list_table_files` fixes the files and their order (sorted paths), checks before any data
is read that every file has the same columns with the same types and holds the target and the
features, and returns the row counts that Parquet footers give for free. :func:`read_directory`
makes one partition per file (a task that reads it with :func:`privopt.datasets.load_table`,
so each file gets the loader's checks and one-sentence errors), and :func:`load_directory`
reads the same files, in the same order, into memory: the two backends see the same rows with
the same global indices, so seeded fits agree (``privopt fit --backend dask|numpy``).

Errors (ValueError, one sentence naming the file): no files, mixed file types, an unreadable or
malformed file, mixed schemas, a missing target or feature column, a non-numeric column; a
malformed row inside a CSV file or a non-finite value fails the first pass over the data, which
every Dask fit makes before its first private release.
"""

from __future__ import annotations

import glob as globmodule
import gzip
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt.datasets.loaders import Table, load_table

__all__ = ["TableFiles", "list_table_files", "load_directory", "read_directory"]

_PARQUET = (".parquet", ".pq")
_CSV = (".csv", ".csv.gz")


@dataclass(frozen=True)
class TableFiles:
    """The checked file list: paths in order, format, feature names, target, row counts."""

    paths: tuple[str, ...]
    kind: str  # "parquet" or "csv"
    feature_names: tuple[str, ...]
    target: str
    row_counts: tuple[int, ...] | None  # known for Parquet (footers), None for CSV


def _kind(path: str) -> str | None:
    name = path.lower()
    if name.endswith(_PARQUET):
        return "parquet"
    if name.endswith(_CSV):
        return "csv"
    return None


def _paths(source: str | os.PathLike[str]) -> list[str]:
    text = os.fspath(source)
    if os.path.isdir(text):
        names = sorted(os.listdir(text))
        paths = [
            os.path.join(text, name)
            for name in names
            if not name.startswith((".", "_")) and _kind(name) is not None
        ]
        where = f"directory {text!r}"
    elif os.path.isfile(text):
        paths, where = [text], text
    else:
        paths = sorted(p for p in globmodule.glob(text) if os.path.isfile(p))
        where = f"pattern {text!r}"
        if not paths and not any(ch in text for ch in "*?["):
            raise FileNotFoundError(f"{text!r} does not exist (no such file or directory).")
    if not paths:
        raise ValueError(f"No .parquet, .pq, .csv or .csv.gz files in {where}.")
    return paths


def _csv_columns(path: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            header = handle.readline()
        table = pa_csv.read_csv(pa.py_buffer(header), read_options=pa_csv.ReadOptions())
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"Cannot read {path!r} as CSV: {error}") from None
    return list(table.column_names)


def _parquet_schema(path: str) -> tuple[list[str], list[str], int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
        schema = meta.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"Cannot read {path!r} as Parquet: {error}") from None
    return list(schema.names), [str(t) for t in schema.types], int(meta.num_rows)


def list_table_files(
    source: str | os.PathLike[str], target: str, features: list[str] | None = None
) -> TableFiles:
    """The files of ``source`` (a file, a directory or a glob), checked as one table."""
    paths = _paths(source)
    kinds = {_kind(p) for p in paths}
    if None in kinds:
        bad = next(p for p in paths if _kind(p) is None)
        raise ValueError(f"Cannot read {bad!r}: unknown file type (use .parquet, .pq, .csv).")
    if len(kinds) > 1:
        raise ValueError(f"{os.fspath(source)!r} mixes Parquet and CSV files; use one format.")
    kind = kinds.pop()
    columns, types, counts = [], [], []
    for path in paths:
        if kind == "parquet":
            names, dtypes, rows = _parquet_schema(path)
            counts.append(rows)
        else:
            names, dtypes = _csv_columns(path), None
        columns.append(names)
        types.append(dtypes)
    first = paths[0]
    for path, names, dtypes in zip(paths[1:], columns[1:], types[1:], strict=True):
        if names != columns[0] or dtypes != types[0]:
            theirs = list(zip(names, dtypes or names, strict=True))
            ours = list(zip(columns[0], types[0] or columns[0], strict=True))
            raise ValueError(
                f"Mixed schemas: {path!r} has columns {theirs} but {first!r} has {ours}; "
                "every file must have the same columns and types."
            )
    available = columns[0]
    if target not in available:
        raise ValueError(
            f"Column {target!r} (the target) is not in {first!r}; available columns: "
            f"{', '.join(map(repr, available))}."
        )
    names = [c for c in available if c != target] if features is None else list(features)
    for name in names:
        if name not in available:
            raise ValueError(
                f"Column {name!r} is not in {first!r}; available: "
                f"{', '.join(map(repr, available))}."
            )
    if not names:
        raise ValueError(f"{first!r} has no columns besides the target {target!r}.")
    return TableFiles(
        tuple(paths), kind, tuple(names), target, tuple(counts) if kind == "parquet" else None
    )


def _load(path: str, target: str, features: tuple[str, ...]) -> Table:
    """:func:`load_table` with the file named in every data error."""
    try:
        return load_table(path, target, features=list(features))
    except ValueError as error:
        text = str(error)
        raise ValueError(text if path in text else f"{path!r}: {text}") from None


def _read_file(path: str, target: str, features: tuple[str, ...], rows: int | None):
    """One partition: the file read and checked by the in-memory loader (float64, finite)."""
    table = _load(path, target, features)
    if rows is not None and table.X.shape[0] != rows:
        raise ValueError(f"{path!r} changed while being read ({table.X.shape[0]} != {rows} rows).")
    return table.X, table.y


def read_directory(
    source: str | os.PathLike[str], target: str, features: list[str] | None = None
) -> Any:
    """:class:`~privopt.distributed.rows.PartitionedRows` with one partition per file (lazy).

    Parquet row counts come from the footers (no pass); CSV files are counted in one pass that
    also validates every value.
    """
    from dask import delayed

    from privopt.distributed.rows import PartitionedRows

    files = list_table_files(source, target, features)
    counts = files.row_counts or (None,) * len(files.paths)
    parts = tuple(
        delayed(_read_file, pure=True)(path, target, files.feature_names, rows)
        for path, rows in zip(files.paths, counts, strict=True)
    )
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    rows = PartitionedRows(parts, offsets, len(files.feature_names), files.feature_names, target)
    lengths = np.asarray(files.row_counts) if files.row_counts else rows.lengths()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return PartitionedRows(parts, offsets, len(files.feature_names), files.feature_names, target)


def load_directory(
    source: str | os.PathLike[str], target: str, features: list[str] | None = None
) -> Table:
    """The same files read into memory, concatenated in order (the numpy backend)."""
    files = list_table_files(source, target, features)
    tables = [_load(p, target, files.feature_names) for p in files.paths]
    return Table(
        X=np.concatenate([t.X for t in tables], axis=0),
        y=np.concatenate([t.y for t in tables]),
        feature_names=files.feature_names,
        target=target,
    )
