"""A directory (or glob) of Parquet or CSV files as partitioned rows, or as one in-memory table.

:func:`list_table_files` fixes the files and their order (sorted paths), checks before any data
is read that every file has the same columns with the same types and holds the target and the
features, and returns the row counts that Parquet footers give for free. :func:`read_directory`
makes one partition per file: a task that reads it as one column-major float64 array (Parquet:
pyarrow's buffers copied once and checked by column sums; anything unusual, and CSV, goes to
:func:`privopt.datasets.load_table`, so each file gets the loader's checks, values and
one-sentence errors), and a cheaper task that gathers a few of its rows (the private
preprocessing's rows) while checking every value. :func:`load_directory`
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
from functools import partial
from typing import Any

import numpy as np

from privopt.datasets.loaders import Table, arrow_error_reason, load_table

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
        table = pa_csv.read_csv(
            pa.py_buffer(header), read_options=pa_csv.ReadOptions(use_threads=False)
        )
    except OSError as error:
        raise ValueError(f"Cannot read {path!r} as CSV: {error.strerror or error}.") from None
    except pa.ArrowException as error:
        raise ValueError(
            f"Cannot read {path!r} as CSV: {arrow_error_reason(error, path, 'CSV')}"
        ) from None
    return list(table.column_names)


def _parquet_schema(path: str) -> tuple[list[str], list[str], int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
        schema = meta.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as error:
        reason = arrow_error_reason(error, path, "Parquet")
        raise ValueError(f"Cannot read {path!r} as Parquet: {reason}") from None
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


def _parquet_columns(path: str, target: str, features: tuple[str, ...]):
    """The columns (features, then target) of a Parquet file as lists of float64 chunks, when
    every column is numeric without nulls and every value is finite; None otherwise (the loader
    then reads the file and names the problem).

    The values are :func:`load_table`'s (float64 casts of the same columns) without its copies:
    float64 chunks are views of pyarrow's buffers. Finiteness is checked by one sum per chunk (a
    non-finite value makes the sum non-finite; a sum that merely overflows sends the file to the
    loader, which then accepts it).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=[*features, target], memory_map=True)
    except (OSError, pa.ArrowException):
        return None
    if table.num_rows == 0 or table.column_names != [*features, target]:
        return None
    columns = []
    for column in table.columns:
        kind = column.type
        if column.null_count or not (
            pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind)
        ):
            return None
        if kind != pa.float64():
            column = column.cast(pa.float64())
        chunks = [chunk.to_numpy(zero_copy_only=False) for chunk in column.chunks]
        with np.errstate(over="ignore", invalid="ignore"):
            finite = all(np.isfinite(np.add.reduce(chunk)) for chunk in chunks)
        if not finite:
            return None
        columns.append(chunks)
    return columns


def _fast_parquet(path: str, target: str, features: tuple[str, ...]):
    """(X, y) of a Parquet file from :func:`_parquet_columns`, copied once into one
    column-major (m, d + 1) float64 array (X and y are views of it); None if it declined."""
    columns = _parquet_columns(path, target, features)
    if columns is None:
        return None
    A = np.empty((sum(c.size for c in columns[0]), len(columns)), order="F")
    for j, chunks in enumerate(columns):
        start = 0
        for chunk in chunks:
            A[start : start + chunk.size, j] = chunk
            start += chunk.size
    return A[:, :-1], A[:, -1]


def _read_file(path: str, target: str, features: tuple[str, ...], rows: int | None):
    """One partition: (X, y) float64 with finite values, X column-major.

    Parquet files take the fast path (:func:`_fast_parquet`); CSV files, and Parquet files
    that fail any of its checks, are read by the in-memory loader, which raises its
    one-sentence error naming the column (or returns the same values).
    """
    part = _fast_parquet(path, target, features) if _kind(path) == "parquet" else None
    if part is None:
        table = _load(path, target, features)
        part = (table.X, table.y)
    if rows is not None and part[0].shape[0] != rows:
        raise ValueError(f"{path!r} changed while being read ({part[0].shape[0]} != {rows} rows).")
    return part


def _take_file(
    path: str, target: str, features: tuple[str, ...], rows: int | None, local: np.ndarray
):
    """Rows ``local`` (sorted positions) of one file as (X, y), every value of the file checked
    as :func:`_read_file` checks it; for Parquet without copying the rest of the file."""
    columns = _parquet_columns(path, target, features) if _kind(path) == "parquet" else None
    if columns is None:
        X, y = _read_file(path, target, features, rows)
        return X[local], y[local]
    m = sum(c.size for c in columns[0])
    if rows is not None and m != rows:
        raise ValueError(f"{path!r} changed while being read ({m} != {rows} rows).")
    out = np.empty((local.size, len(columns)))
    for j, chunks in enumerate(columns):  # columns may be chunked differently (casts)
        starts = np.cumsum([0] + [c.size for c in chunks])
        cuts = np.searchsorted(local, starts)
        for k, chunk in enumerate(chunks):
            out[cuts[k] : cuts[k + 1], j] = chunk[local[cuts[k] : cuts[k + 1]] - starts[k]]
    return out[:, :-1], out[:, -1]


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
    takers = tuple(
        partial(_take_file, path, target, files.feature_names, int(count))
        for path, count in zip(files.paths, lengths, strict=True)
    )
    return PartitionedRows(
        parts, offsets, len(files.feature_names), files.feature_names, target, takers
    )


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
