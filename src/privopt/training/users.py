r"""User-level privacy on the numpy training core: records grouped by user, one clip per user.

With the user as the privacy unit a plan is the record-level plan over users (N = number of
users, public like N records is; its batches hold user indices 0 .. N-1), and user u's
contribution to a step is

    clip_G(W_u),    W_u = sum_{i in u} grad_i       (``reduction="sum"``)
    clip_G(W_u / n_u)                               (``reduction="mean"``)

so a neighbouring dataset (all the records of one user replaced or zeroed out) moves the step's
clipped sum by at most 2G (G), whatever the user's number of records n_u: the event is the
record-level event of the same plan over users (McMahan, Ramage, Talwar & Zhang 2018, "Learning
Differentially Private Recurrent Language Models", arXiv:1710.06963, Thm 1).

**How a step is computed (no loop over users).** :class:`UserGroups` sorts the records by user
once (users numbered by first appearance of their id; a user's records keep their order), so a
user's records are one contiguous block. A step's users are gathered into one index array
(:meth:`UserGroups.gather`); for a linear loss the per-example gradients are r_i x_i, and the
per-user sums are segment sums of those rows (``np.add.reduceat`` at the users' block starts),
then clipped by :func:`privopt.clipping.clip_factors` (norm <= G in floating point) and summed:
sum_u c_u W_u. The records per user n_u are kept inside the fit and never released.

:class:`UserRows` is the data handle :func:`privopt.training.execute` receives instead of the
arrays (its ``shape`` is (N users, d), so the plan's N is the number of users), and
:class:`UserModel` resolves a step's user indices on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt.clipping import clip_factors, row_norms
from privopt.training.gradients import GradientModel

__all__ = [
    "USER_REDUCTIONS",
    "USER_UNIT_STATEMENT",
    "UserGroups",
    "UserModel",
    "UserRows",
    "user_plan_assumptions",
]

USER_REDUCTIONS = ("sum", "mean")
#: the ledger statement of the user as the privacy unit
USER_UNIT_STATEMENT = (
    "privacy unit: the user; the number of users N is public; every record has a user id "
    "(public structure); the number of records of each user is never released"
)


def _as_id_array(users: Any) -> np.ndarray:
    if isinstance(users, str | bytes) or not hasattr(users, "__len__"):
        raise ValueError("Expected users to be a sequence or array of user ids, one per record.")
    to_numpy = getattr(users, "to_numpy", None)  # a pandas Series or Index
    values = to_numpy() if callable(to_numpy) else users
    try:
        array = np.asarray(values)
    except ValueError:  # ragged input
        raise ValueError("Expected users to be one-dimensional: one user id per record.") from None
    if array.ndim != 1:
        raise ValueError(
            f"Expected users to be one-dimensional (one user id per record), got an array of "
            f"{array.ndim} dimensions."
        )
    return array


def _missing_ids(ids: np.ndarray) -> np.ndarray:
    """Records without an id: None, NaN / infinite numbers, NaT, empty or blank strings."""
    kind = ids.dtype.kind
    if kind in "iub":
        return np.zeros(ids.shape, dtype=bool)
    if kind == "f":
        return ~np.isfinite(ids)
    if kind in "US":
        return np.char.str_len(np.char.strip(ids)) == 0
    if kind in "mM":
        return np.isnat(ids)
    if kind == "O":
        return np.fromiter((_missing(v) for v in ids), dtype=bool, count=ids.size)
    raise ValueError(
        f"Expected user ids as integers or strings, got an array of dtype kind {kind!r}."
    )


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes):
        return value.strip() == b"" if isinstance(value, bytes) else value.strip() == ""
    if isinstance(value, float | np.floating):
        return not np.isfinite(value)
    try:
        return bool(value != value)  # NaN-like objects (pandas NA, NaT, Decimal NaN)
    except (TypeError, ValueError):
        return True  # an object whose comparison has no truth value (pandas NA) is no id


def _first_appearance_codes(ids: np.ndarray) -> np.ndarray:
    """User codes 0 .. N-1, numbered by first appearance of each id."""
    if ids.dtype.kind != "O":
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        return rank[inverse.reshape(-1)]
    first: dict[Any, int] = {}
    try:
        return np.fromiter(
            (first.setdefault(u, len(first)) for u in ids), dtype=np.int64, count=ids.size
        )
    except TypeError:
        raise ValueError("Expected hashable user ids (integers or strings).") from None


class UserGroups:
    """Records grouped by user id, validated: one id per record, none missing.

    Refusals (one line each, never quoting an id): an id array of another length than the
    records, more than one dimension, records without an id (None, NaN, empty string: their
    count is given), unhashable ids. Attributes (kept inside the fit, never released except
    ``num_users``): ``codes`` (each record's user, 0 .. N-1 by first appearance), ``order``
    (records sorted by user, stably), ``counts`` n_u, ``offsets`` (start of each user's block in
    ``order``).
    """

    def __init__(self, users: Any, num_records: int) -> None:
        ids = _as_id_array(users)
        if ids.shape[0] != num_records:
            raise ValueError(
                f"Expected one user id per record: the data has {num_records} records, users "
                f"has {ids.shape[0]} ids."
            )
        missing = int(np.count_nonzero(_missing_ids(ids)))
        if missing:
            raise ValueError(
                f"{missing} of {num_records} records have no user id (None, NaN or empty): "
                "user-level privacy bounds each user's contribution, so every record needs its "
                "user's id."
            )
        self.codes = _first_appearance_codes(ids)
        self.counts = np.bincount(self.codes).astype(np.int64)
        self.order = np.argsort(self.codes, kind="stable")
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    @property
    def num_users(self) -> int:
        return int(self.counts.size)

    @property
    def num_records(self) -> int:
        return int(self.codes.size)

    def gather(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in the user-sorted records, start of each user's segment, n_u) for the
        users ``users`` (repeats allowed), user after user."""
        users = np.asarray(users, dtype=np.int64).reshape(-1)
        counts = self.counts[users]
        ends = np.cumsum(counts)
        starts = ends - counts
        total = int(ends[-1]) if ends.size else 0
        positions = np.repeat(self.offsets[users] - starts, counts) + np.arange(total)
        return positions, starts, counts

    def record_weights(self) -> np.ndarray:
        """1 / n_u for each record (in the caller's record order): every user's weights sum to
        1, so a count or a sum of values bounded by B moves by at most B when one user's
        records change (record-level sensitivity kept at the user level)."""
        return 1.0 / self.counts[self.codes]


@dataclass(frozen=True)
class UserRows:
    """The records of a user-level fit, sorted by user once: the handle ``execute`` resolves.

    ``shape`` is (number of users, number of features), so a plan over N users accepts it; pass
    it as both X and y (``np.shape(y)[:1]`` is then (N,)).
    """

    X: np.ndarray
    y: np.ndarray
    groups: UserGroups

    @classmethod
    def build(cls, X: np.ndarray, y: np.ndarray, groups: UserGroups) -> UserRows:
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        if X.shape[0] != groups.num_records or y.shape[:1] != (groups.num_records,):
            raise ValueError(
                f"Expected {groups.num_records} records in X and y (one per user id), got "
                f"{X.shape[0]} and {y.shape[0]}."
            )
        return cls(X[groups.order], y[groups.order], groups)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.groups.num_users, int(self.X.shape[1]))


@dataclass(frozen=True)
class UserModel(GradientModel):
    """Per-user clipped gradient sums of a linear-loss model (module docstring).

    ``base`` is a residual model of :mod:`privopt.training.gradients` (gradient r_i(w) x_i:
    :class:`~privopt.training.LossModel`, ``LinearRegressionModel``, ...); ``reduction`` is
    ``"sum"`` or ``"mean"`` of a user's gradients before the clip. Batches are user indices of
    a :class:`UserRows` handle.
    """

    base: Any
    reduction: str = "sum"

    def __post_init__(self) -> None:
        if self.reduction not in USER_REDUCTIONS:
            raise ValueError(
                f"Expected user_clipping in {USER_REDUCTIONS}, got {self.reduction!r}."
            )
        if not hasattr(self.base, "residuals"):
            raise TypeError(
                "User-level clipping needs a linear-loss model (gradient r_i x_i), got "
                f"{type(self.base).__name__}."
            )

    @property
    def name(self) -> str:
        return f"{self.base.name} (per-user {self.reduction}, clipped)"

    def prepare(self, X: Any, y: Any = None) -> None:
        rows = _handle(X)
        self.base.prepare(rows.X, rows.y)  # validates the labels once per fit
        return None

    def clipped_gradient_sum(self, w, X, y, clip):
        raise TypeError("User-level gradient sums resolve user indices on a UserRows handle.")

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        """(sum_u clip_G(W_u), fraction of the step's users clipped) over the users ``batch``."""
        rows = _handle(X)
        groups = rows.groups
        if len(batch) == 1:  # one user per step (Wang et al.'s SGD): its contiguous block
            u = int(np.asarray(batch).reshape(-1)[0])
            start, count = int(groups.offsets[u]), int(groups.counts[u])
            block = rows.X[start : start + count]
            r = np.asarray(self.base.residuals(w, block, rows.y[start : start + count]))
            per_user = (r @ block)[None, :]  # W_u
            counts = groups.counts[u : u + 1]
        else:
            positions, starts, counts = groups.gather(batch)
            block = rows.X[positions]
            r = np.asarray(self.base.residuals(w, block, rows.y[positions]), dtype=float)
            per_user = np.add.reduceat(block * r[:, None], starts, axis=0)  # W_u per user
        if self.reduction == "mean":
            per_user /= counts[:, None]
        if clip is None:
            return per_user.sum(axis=0), 0.0
        factors = clip_factors(row_norms(per_user), clip)
        return factors @ per_user, float(np.mean(factors < 1.0))


def _handle(X: Any) -> UserRows:
    if not isinstance(X, UserRows):
        raise TypeError(f"Expected a UserRows handle, got {type(X).__name__}.")
    return X


def user_plan_assumptions(plan_assumptions: list[str], reduction: str, clip: float) -> list[str]:
    """A plan's statements with the user as the unit, and the user-level clipping."""
    out = [
        USER_UNIT_STATEMENT,
        f"each user's contribution to a step is the {reduction} of its records' gradients "
        f"clipped to l2 norm {clip:.6g} as one vector, whatever its number of records",
    ]
    for text in plan_assumptions:
        if text.startswith("the number of records") or text.startswith("per-example gradients"):
            continue
        out.append("over users: " + text.replace("records", "users").replace("record", "user"))
    return out
