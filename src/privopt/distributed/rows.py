"""Partitioned rows with global indices, per-partition tasks and a fixed reduction tree.

A :class:`PartitionedRows` is an ordered list of partitions, each a Dask task that evaluates
to ``(X_block, y_block)`` as validated float64 arrays, and the public row offsets of the
partitions: partition ``p`` holds the global rows ``offsets[p] .. offsets[p + 1] - 1``, its
position in the concatenation of the partitions in order. A global row index is therefore a
property of the data set (its rows in order), not of how it is cut into partitions, and every
data-independent choice of rows (a secret subset, a Poisson batch) is a set of global indices
drawn on the client.

:func:`tree_sum` adds per-partition statistics along a tree fixed by the partition order and
``split_every`` (not by the scheduler), so a fit is bit-reproducible for one partitioning and
equal to the in-memory fit up to floating-point reassociation for any other.

Privacy. Partition lengths and the per-partition statistics are exact functions of private data:
they stay on the client, never logged or returned (N itself is public under every relation
privopt uses). Tasks hold no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
from dask import delayed

from privopt._validate import as_float_array

__all__ = [
    "SPLIT_EVERY",
    "DaskFitError",
    "PartitionedRows",
    "compute",
    "tree_sum",
]

#: fan-in of the reduction tree (fixed, so the summation order is a function of the
#: partitioning only)
SPLIT_EVERY = 8
#: Most bytes of gathered rows that :meth:`PartitionedRows.take` lets the cluster hold at once:
#: the partitions' results are fetched in groups of at most this size (each partition still read
#: once), so worker memory stays bounded by a partition, not by the rows gathered (a DP-AMBSSGD
#: round of 5e6 rows x 21 columns, 840 MB, killed 600 MiB workers when fetched as one compute).
TAKE_GROUP_BYTES = 64 << 20


class DaskFitError(ConnectionError):
    """The cluster failed mid-fit (e.g. a worker was lost more often than the scheduler's
    ``allowed-failures``); no private value was released. A ConnectionError (an OSError), so
    the CLI reports it as an environment failure, not as a bug."""


def compute(*objects: Any) -> tuple[Any, ...]:
    """``dask.compute`` on the current scheduler, with cluster failures as :class:`DaskFitError`.

    Data errors raised by a task (a malformed file, a non-finite value) propagate unchanged:
    they are ValueErrors with one sentence naming the problem.
    """
    try:
        return dask.compute(*objects)
    except (ValueError, TypeError, FileNotFoundError):
        raise
    except Exception as error:
        if type(error).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError"):
            raise DaskFitError(
                f"The Dask computation failed ({type(error).__name__}: {error}); the fit was "
                "aborted before any private value was released (no model, no report). Retry, or "
                "raise distributed.scheduler.allowed-failures."
            ) from error
        raise


def _add(*parts: Any) -> Any:
    """Sum of statistics in the given order (tuples add componentwise)."""
    total = parts[0]
    for part in parts[1:]:
        if isinstance(total, tuple):
            total = tuple(a + b for a, b in zip(total, part, strict=True))
        else:
            total = total + part
    return total


def tree_sum(items: Sequence[Any], split_every: int = SPLIT_EVERY) -> Any:
    """A delayed sum of ``items`` along the tree that groups ``split_every`` neighbours per
    level, in order (the same tree on every scheduler and after any recomputation)."""
    if not items:
        raise ValueError("Cannot reduce zero partitions.")
    level = list(items)
    while len(level) > 1:
        level = [
            delayed(_add, pure=True)(*level[i : i + split_every])
            for i in range(0, len(level), split_every)
        ]
    return level[0]


_LOCAL_ROW = re.compile(r"\brow (\d+)\b")


def global_rows(message: str, offset: int) -> str:
    """``message`` with each partition-local ``row i`` named by its global row number
    ``offset + i`` (the row's position in the ordered concatenation of the partitions, as
    the in-memory fit of the same rows would name it), the local one in parentheses."""
    return _LOCAL_ROW.sub(
        lambda m: f"row {offset + int(m.group(1))} (row {m.group(1)} of the partition)", message
    )


def _as_float(data: Any, name: str, offset: int | None) -> np.ndarray:
    try:
        return as_float_array(data, name)
    except ValueError as error:
        if offset is None:
            raise
        raise ValueError(global_rows(str(error), offset)) from None


def check_block(
    X: np.ndarray,
    y: np.ndarray,
    where: str,
    names: Sequence[str] | None = None,
    offset: int | None = None,
):
    """Float64 (m, d) and (m,) arrays with finite values, or a ValueError naming the column and
    the first bad row: its global number when the partition's ``offset`` is known, else its
    position in the partition (:meth:`PartitionedRows.from_dask` names it globally then)."""
    X = _as_float(X, f"{where}: X", offset)
    y = _as_float(y, f"{where}: y", offset).reshape(-1)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(
            f"{where}: features of shape {X.shape} and target of shape {y.shape} do not align."
        )
    for j, column in enumerate((*X.T, y)):
        bad = ~np.isfinite(column)
        count = np.count_nonzero(bad)
        if count:
            label = "the target" if j == X.shape[1] else f"feature {j}"
            if names is not None:
                label = f"column {names[j]!r}"
            first = f"row {int(np.argmax(bad))}"
            message = (
                f"{where}: {label} has {count} missing, NaN or infinite values (the first at "
                f"{first}); impute or drop them by a public rule before a private fit."
            )
            raise ValueError(message if offset is None else global_rows(message, offset))
    return np.ascontiguousarray(X), y


def _array_pair(xb: Any, yb: Any, where: str, offset: int | None = None):
    return check_block(xb, yb, where, offset=offset)


def _frame_pair(xb: Any, yb: Any, where: str, names: tuple[str, ...]):
    # pandas' own conversion: nullable columns' missing values become NaN (counted by
    # check_block), not a TypeError
    X = xb.to_numpy(dtype=np.float64, na_value=np.nan)
    return check_block(X, yb.to_numpy(dtype=np.float64, na_value=np.nan), where, names)


#: the target's column in the joined frame of :meth:`PartitionedRows._from_frame`
_JOINED_TARGET = "__privopt_target__"


def _joined_pair(block: Any, where: str, names: tuple[str, ...]):
    """(X, y) of one partition of the joined frame (features, then the target column)."""
    return _frame_pair(block.iloc[:, :-1], block.iloc[:, -1], where, names)


def _length(part: tuple[np.ndarray, np.ndarray]) -> int:
    return int(part[0].shape[0])


def _take(part: tuple[np.ndarray, np.ndarray], local: np.ndarray):
    X, y = part
    return X[local], y[local]


@dataclass(frozen=True, eq=False)
class PartitionedRows:
    """Ordered partitions (delayed ``(X_block, y_block)``) and their global row offsets.

    Attributes:
        parts: one delayed object per partition, evaluating to validated float64 blocks.
        offsets: (P + 1,) global row offsets; ``offsets[-1]`` is N.
        n_features: d.
        feature_names: column names when the rows come from a table.
        target: the target column's name, when known.
        takers: optional, one callable per partition, ``taker(local)`` -> the rows ``local``
            (sorted positions in the partition) as (X, y), every value of the partition checked
            as its task checks it: a cheaper way to gather a few rows than materialising the
            partition (:func:`privopt.distributed.files.read_directory` sets it for files).
    """

    #: lets :func:`privopt.distributed.is_dask_input` recognise it without importing dask
    __privopt_partitioned__ = True

    parts: tuple[Any, ...]
    offsets: np.ndarray
    n_features: int
    feature_names: tuple[str, ...] | None = None
    target: str | None = None
    takers: tuple[Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], ...] | None = None

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def shape(self) -> tuple[int, int]:
        """(N, d), as an array's."""
        return self.n_rows, self.n_features

    @property
    def n_partitions(self) -> int:
        return len(self.parts)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_dask(cls, X: Any, y: Any) -> PartitionedRows:
        """From a Dask array or dataframe of features and a Dask array/series (or numpy) target.

        A dataframe and its target series must have the same partitions (e.g. ``ddf[cols]`` and
        ``ddf[target]``). Unknown partition lengths are computed in one validating pass.
        """
        if hasattr(X, "columns"):
            return cls._from_frame(X, y)
        return cls._from_array(X, y)

    @classmethod
    def _from_array(cls, X: Any, y: Any) -> PartitionedRows:
        import dask.array as da

        if not isinstance(X, da.Array) or X.ndim != 2:
            raise ValueError(f"Expected X to be a 2-D dask array or dataframe, got {type(X)}.")
        X = X.rechunk({1: -1})  # whole rows per block
        if any(np.isnan(c) for c in X.chunks[0]):
            X = X.compute_chunk_sizes()
        lengths = np.asarray(X.chunks[0], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        if hasattr(y, "__dask_graph__"):
            y = da.asarray(y).reshape(-1) if not hasattr(y, "to_dask_array") else y.to_dask_array()
            if y.shape[0] != offsets[-1] and not np.isnan(y.shape[0]):
                raise ValueError(f"X has {offsets[-1]} rows but y has {y.shape[0]}.")
            y_parts = list(y.rechunk((tuple(int(v) for v in lengths),)).to_delayed().ravel())
        else:
            y = np.asarray(y, dtype=np.float64).reshape(-1)
            if y.shape[0] != offsets[-1]:
                raise ValueError(f"X has {offsets[-1]} rows but y has {y.shape[0]}.")
            y_parts = [y[offsets[p] : offsets[p + 1]] for p in range(lengths.size)]
        x_parts = list(X.to_delayed().ravel())
        parts = tuple(
            delayed(_array_pair, pure=True)(xb, yb, f"partition {p}", int(offsets[p]))
            for p, (xb, yb) in enumerate(zip(x_parts, y_parts, strict=True))
        )
        return cls(parts, offsets, int(X.shape[1]))

    @classmethod
    def _from_frame(cls, X: Any, y: Any) -> PartitionedRows:
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        names = tuple(str(c) for c in X.columns)
        for name, dtype in X.dtypes.items():
            if not (is_numeric_dtype(dtype) or is_bool_dtype(dtype)):
                raise ValueError(
                    f"Column {name!r} is not numeric (dtype {dtype}); encode it as numbers or "
                    "leave it out (privopt never quotes data values)."
                )
        if not hasattr(y, "__dask_graph__") or not hasattr(y, "npartitions"):
            raise ValueError("With a dask dataframe X, y must be a dask series of the same frame.")
        y_dtype = getattr(y, "dtype", None)
        if y_dtype is not None and not (is_numeric_dtype(y_dtype) or is_bool_dtype(y_dtype)):
            raise ValueError(
                f"The target y is not numeric (dtype {y_dtype}); encode it as numbers "
                "(privopt never quotes data values)."
            )
        if y.npartitions != X.npartitions:
            raise ValueError(
                f"X has {X.npartitions} partitions but y has {y.npartitions}; select both from "
                "one dataframe (ddf[features], ddf[target])."
            )
        if X.known_divisions and y.known_divisions and X.divisions != y.divisions:
            raise ValueError(
                "y's partitions do not line up with X's (their index divisions differ: y is "
                "shorter, longer or from another frame); select both from one dataframe "
                "(ddf[features], ddf[target])."
            )
        target = getattr(y, "name", None)
        # one frame holding both, so that graph optimisation (which may fuse the partitions of a
        # one-column selection differently from the features') partitions them together
        joined = X.assign(**{_JOINED_TARGET: y})
        parts = tuple(
            delayed(_joined_pair, pure=True)(block, f"partition {p}", (*names, str(target)))
            for p, block in enumerate(joined.to_delayed())
        )
        rows = cls(parts, np.zeros(len(parts) + 1, dtype=np.int64), len(names), names)
        try:
            lengths = rows.lengths()  # one pass: reads and validates every partition
        except ValueError as error:  # name the bad row globally (its offset was unknown)
            found = re.match(r"partition (\d+): ", str(error))
            if found is None or not _LOCAL_ROW.search(str(error)):
                raise
            blocks = joined.to_delayed()[: int(found.group(1))]
            offset = int(sum(compute(*[delayed(len)(b) for b in blocks]))) if blocks else 0
            raise ValueError(global_rows(str(error), offset)) from None
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return cls(parts, offsets, len(names), names, None if target is None else str(target))

    def lengths(self) -> np.ndarray:
        """Partition lengths by reading (and validating) every partition once."""
        return np.asarray(compute(*[delayed(_length)(p) for p in self.parts]), dtype=np.int64)

    # -- tasks ---------------------------------------------------------------------------------
    def map_reduce(self, fn: Callable[..., Any], *args: Any, split_every: int = SPLIT_EVERY) -> Any:
        """sum_p fn(part_p, offset_p, *args), computed on the cluster (fixed tree)."""
        items = [
            delayed(fn, pure=True)(part, int(self.offsets[p]), *args)
            for p, part in enumerate(self.parts)
        ]
        return compute(tree_sum(items, split_every))[0]

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows with the given global indices (sorted, distinct), in that order.

        Every partition is read (and validated), also those holding none of the rows, so a
        malformed partition fails this pass before any release.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= self.n_rows):
            raise ValueError("Expected sorted, distinct row indices within [0, N).")
        cuts = np.searchsorted(rows, self.offsets)
        local = [rows[cuts[p] : cuts[p + 1]] - self.offsets[p] for p in range(self.n_partitions)]
        if self.takers is not None:
            tasks = [
                delayed(take, pure=True)(ix) for take, ix in zip(self.takers, local, strict=True)
            ]
        else:
            tasks = [
                delayed(_take, pure=True)(part, ix)
                for part, ix in zip(self.parts, local, strict=True)
            ]
        row_bytes = 8 * (self.n_features + 1)
        blocks: list[Any] = []
        group: list[Any] = []
        held = 0
        for task, ix in zip(tasks, local, strict=True):
            if group and held + ix.size * row_bytes > TAKE_GROUP_BYTES:
                blocks.extend(compute(*group))
                group, held = [], 0
            group.append(task)
            held += ix.size * row_bytes
        blocks.extend(compute(*group))
        X = np.concatenate([b[0] for b in blocks], axis=0).reshape(-1, self.n_features)
        y = np.concatenate([b[1] for b in blocks])
        return X, y
