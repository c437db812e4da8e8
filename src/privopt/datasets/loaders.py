"""Numeric tables from CSV and Parquet files, checked before they reach a private algorithm.

The loaders read with pyarrow (imported on first use, so that ``privopt.datasets`` stays cheap
to import) and return float64 arrays. They refuse, with one sentence naming the problem, every
table that would otherwise turn into a silent NaN or a wrong shape downstream: a missing or
ambiguous column, a non-numeric column, missing, NaN or infinite values, an empty table.
Categorical encoding and imputation are the caller's job; for private training they must use
public knowledge or be privatised themselves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Table", "arrow_error_reason", "load_features", "load_table"]

_CSV_SUFFIXES = (".csv", ".csv.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True, eq=False)
class Table:
    """A numeric design matrix and target read from a file.

    Attributes
    ----------
    X : ndarray of shape (n, d), float64
        Feature columns, in the order of ``feature_names``.
    y : ndarray of shape (n,), float64
        The target column.
    feature_names : tuple of str
        Names of the columns of ``X``.
    target : str
        Name of the target column.
    description : str
        What the rows are (set by the bundled loaders of :mod:`privopt.datasets.bundled`,
        empty for a file read with :func:`load_table`).
    source : str
        Where the table comes from and under which licence (bundled loaders only).
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    target: str
    description: str = ""
    source: str = ""


def load_table(
    path: str | os.PathLike[str],
    target: str,
    *,
    features: Sequence[str] | None = None,
) -> Table:
    """Read a CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, ``.pq``) file as a `Table`.

    Parameters
    ----------
    path : str or path-like
        The file; its suffix selects the reader. CSV files need a header row.
    target : str
        Name of the target column.
    features : sequence of str, optional
        Feature columns, in the order wanted for ``X``. ``None`` takes every column except the
        target, in file order.

    Returns
    -------
    Table
        ``X`` of shape ``(n, d)`` and ``y`` of shape ``(n,)``, both float64.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the suffix is unknown, the file cannot be parsed, a requested column is missing or
        appears twice, a column is not numeric (integer, floating, boolean or decimal), a column
        has missing, NaN or infinite values, or the table has no rows.
    """
    if not isinstance(target, str):
        raise ValueError(f"Expected target to be a column name (str), got {target!r}.")
    names = None if features is None else _check_names("features", features)
    table = _read(path)
    if names is None:
        names = tuple(name for name in table.column_names if name != target)
        if not names:
            raise ValueError(f"{os.fspath(path)!r} has no columns besides the target {target!r}.")
    if target in names:
        raise ValueError(f"Column {target!r} is the target and cannot also be a feature.")
    columns = _numeric_columns(table, path, (target, *names))
    return Table(
        X=_stack(columns[1:], table.num_rows),
        y=columns[0],
        feature_names=names,
        target=target,
    )


def load_features(path: str | os.PathLike[str], feature_names: Sequence[str]) -> np.ndarray:
    """Read the named feature columns of a CSV or Parquet file, e.g. to predict on new data.

    Applies the checks of :func:`load_table` without a target column.

    Parameters
    ----------
    path : str or path-like
        A ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file with a header.
    feature_names : sequence of str
        The columns to read, in the order of the returned matrix (typically the
        ``feature_names`` of the training `Table`).

    Returns
    -------
    ndarray of shape (n, d), float64
    """
    names = _check_names("feature_names", feature_names)
    table = _read(path)
    return _stack(_numeric_columns(table, path, names), table.num_rows)


def _check_names(argument: str, names: Sequence[str]) -> tuple[str, ...]:
    """Return ``names`` as a tuple of distinct strings, at least one."""
    if isinstance(names, str):
        raise ValueError(f"Expected {argument} to be a sequence of column names, got {names!r}.")
    out = tuple(names)
    if not out:
        raise ValueError(f"Expected {argument} to name at least one column, got none.")
    for name in out:
        if not isinstance(name, str):
            raise ValueError(f"Expected {argument} to hold column names (str), got {name!r}.")
    duplicates = sorted({name for name in out if out.count(name) > 1})
    if duplicates:
        raise ValueError(f"Expected distinct {argument}, got {', '.join(map(repr, duplicates))}.")
    return out


def _read(path: str | os.PathLike[str]) -> pa.Table:
    """Read the whole file with pyarrow, choosing the reader by suffix."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pa_parquet

    path = Path(path)
    name = path.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        reader, kind = pa_csv.read_csv, "CSV"
    elif name.endswith(_PARQUET_SUFFIXES):
        reader, kind = pa_parquet.read_table, "Parquet"
    else:
        supported = ", ".join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)
        raise ValueError(f"Cannot read {str(path)!r}: unknown file type (supported: {supported}).")
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {str(path)!r}.")
    try:
        return reader(path)
    except pa.ArrowException as error:
        reason = arrow_error_reason(error, path, kind)
    raise ValueError(f"Cannot read {str(path)!r} as {kind}: {reason}")


_RAGGED = re.compile(r"Expected (\d+) columns, got (\d+)")
_CONVERSION = re.compile(r"In CSV column #(\d+): Row #(\d+): CSV conversion error to (\w+)")
_SAFE_REASONS = ("magic bytes not found", "file size is 0", "is not a file")


def arrow_error_reason(error: Exception, path: str | os.PathLike[str], kind: str) -> str:
    """pyarrow's reason for refusing a file, without the data it quotes.

    pyarrow appends the offending row or value to its messages (``Expected 5 columns, got 6:
    21.46,58.18,...``); error messages end up in logs and tickets, so only the row number,
    the column and the counts are kept. A ragged row's line is found by reading again on one
    thread (pyarrow numbers rows only then); a message of an unknown form is withheld.
    """
    text = str(error)
    ragged = _RAGGED.search(text)
    if ragged is not None and kind == "CSV":
        expected, got = ragged.groups()
        line = _ragged_line(path)
        where = f"line {line}" if line is not None else "a row"
        return (
            f"{where} has {got} fields but the header has {expected}; fix or drop that row "
            "(privopt never quotes data values)."
        )
    conversion = _CONVERSION.search(text)
    if conversion is not None:
        column, row, kind_to = conversion.groups()
        return (
            f"column #{column}, row {row}: a value that is not of type {kind_to}; encode the "
            "column as numbers or leave it out (privopt never quotes data values)."
        )
    if "Empty CSV file" in text:
        return "the file is empty (a CSV file needs a header row and at least one data row)."
    for safe in _SAFE_REASONS:
        if safe in text:
            return text.partition("\n")[0]
    return (
        f"pyarrow refused it ({type(error).__name__}; its message is withheld because it may "
        "quote the file's data). Check that the file is well-formed."
    )


def _ragged_line(path: str | os.PathLike[str]) -> int | None:
    """The line number (1-based, the header being line 1) of the first row whose field count
    differs from the header's, or None if pyarrow cannot say."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    lines: list[int] = []

    def handler(row: Any) -> str:
        if row.number is not None:
            lines.append(int(row.number))
        return "error"

    try:
        pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(use_threads=False),
            parse_options=pa_csv.ParseOptions(invalid_row_handler=handler),
        )
    except (pa.ArrowException, OSError):
        pass
    return lines[0] if lines else None


def _numeric_columns(
    table: pa.Table, path: str | os.PathLike[str], names: tuple[str, ...]
) -> list[np.ndarray]:
    """Check the named columns exist once, are numeric and finite; return them as float64."""
    import pyarrow as pa

    available = table.column_names
    for name in names:
        count = available.count(name)
        if count == 0:
            raise ValueError(
                f"Column {name!r} is not in {os.fspath(path)!r}; "
                f"available columns: {', '.join(map(repr, available))}."
            )
        if count > 1:
            raise ValueError(f"Column {name!r} appears {count} times in {os.fspath(path)!r}.")
    if table.num_rows == 0:
        raise ValueError(f"The table in {os.fspath(path)!r} has no rows.")

    out = []
    for name in names:
        column = table.column(name)
        kind = column.type
        if pa.types.is_null(kind):
            # Every value empty: pyarrow could not even infer a type.
            raise ValueError(
                f"{os.fspath(path)!r}: Column {name!r} has {table.num_rows} missing values out "
                f"of {table.num_rows}."
            )
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_decimal(kind)
        ):
            raise ValueError(
                f"{os.fspath(path)!r}: Column {name!r} is not numeric (type {kind}"
                f"{_first_non_number(column)}); encode it as numbers or leave it out (privopt "
                "never quotes data values)."
            )
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls become NaN
        missing = int(np.count_nonzero(np.isnan(values)))
        infinite = int(np.count_nonzero(np.isinf(values)))
        if missing or infinite:
            problems = [
                f"{count} {what}"
                for count, what in ((missing, "missing or NaN"), (infinite, "infinite"))
                if count
            ]
            first = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(
                f"{os.fspath(path)!r}: Column {name!r} has {' and '.join(problems)} values out "
                f"of {table.num_rows} (the first in row {first}, counted from 0 after the "
                "header); impute or drop them by a public rule."
            )
        out.append(np.ascontiguousarray(values, dtype=np.float64))
    return out


def _first_non_number(column: pa.ChunkedArray) -> str:
    """Where a string column first holds a value that does not parse as a number (its row and
    nothing of its content), if it does."""
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return ""
    for row, value in enumerate(column.to_pylist()):
        if value is None:
            continue
        try:
            float(value)
        except ValueError:
            return f"; first non-number in row {row}, counted from 0 after the header"
    return ""


def _stack(columns: list[np.ndarray], n_rows: int) -> np.ndarray:
    """Stack float64 columns into a C-contiguous (n, d) matrix."""
    out = np.empty((n_rows, len(columns)), dtype=np.float64)
    for j, column in enumerate(columns):
        out[:, j] = column
    return out
