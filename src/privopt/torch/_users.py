r"""User-level privacy in :mod:`privopt.torch`: records grouped by user, batches of users.

With ``make_private(..., users=ids)`` (one id per record) the privacy unit is the user. The
plan is the record-level plan over users (N = number of users, public like N records is;
``batch_size`` counts users; Poisson over users for ``"dpsgd"``, fixed batches of users cycled
in the same order every epoch for correlated noise), and user u's contribution to a step is

    clip_G(W_u),    W_u = sum_{i in u} grad_i     (``user_clipping="sum"``, default)
    clip_G(W_u / n_u)                              (``user_clipping="mean"``)

so a neighbouring dataset (all the records of one user zeroed, or replaced) moves the step's sum
by at most G (2 G), whatever the user's number of records: the event is the record-level event
of the same plan over users (McMahan, Ramage, Talwar & Zhang 2018, arXiv:1710.06963, Thm 1),
and the ledger's unit is the user (the report reads ``"user-level zero-out"``).

**How a step's records are gathered.** Users are numbered by first appearance of their id; a
user's records keep their dataset order. A step's batch is the records of its users, user after
user in the plan's order (:meth:`UserIndex.chunks`). With ``max_physical_batch_size=m`` whole
users are packed greedily into chunks of at most m records; a user with more than m records
gets chunks of its own (``np.array_split`` into ceil(n_u / m) parts), whose gradient sums are
accumulated unclipped (in the noise dtype) and clipped once, after its last chunk. The chunk
sizes depend on the users' record counts; they are never released (only the noisy sum is).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

import torch

__all__ = ["USER_CLIPPING", "Chunk", "LargeUser", "UserIndex", "user_assumptions", "user_index"]

USER_CLIPPING = ("sum", "mean")
#: relative rounding guard of a norm (as :mod:`privopt.torch.clipping`'s)
_GUARD = {torch.float64: 1e-12, torch.float32: 1e-5}


@dataclass(frozen=True)
class Chunk:
    """The records of one physical batch, each record's user slot (0 .. U-1 within the chunk)
    and ``part``: None (whole users), or "part" / "last" (a chunk of one large user)."""

    records: np.ndarray
    slots: np.ndarray
    part: str | None = None


def _ids(users: Any) -> list:
    if isinstance(users, torch.Tensor):
        return users.detach().cpu().reshape(-1).tolist()
    if isinstance(users, np.ndarray):
        return users.reshape(-1).tolist()
    if isinstance(users, str | bytes) or not hasattr(users, "__len__"):
        raise ValueError(
            "Expected users to be a sequence, array or tensor of user ids, one per record."
        )
    return list(users)


def _missing(value: Any) -> bool:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return True
    return isinstance(value, numbers.Real) and not math.isfinite(float(value))


class UserIndex:
    """Records grouped by user id (see the module docstring)."""

    def __init__(self, users: Any, num_records: int) -> None:
        ids = _ids(users)
        if len(ids) != num_records:
            raise ValueError(
                f"Expected one user id per record: the data has {num_records} records, users "
                f"has {len(ids)} ids."
            )
        missing = sum(_missing(u) for u in ids)
        if missing:
            raise ValueError(
                f"{missing} of {num_records} records have no user id (None, NaN or empty): "
                "user-level privacy bounds each user's contribution, so every record needs its "
                "user's id."
            )
        first: dict[Any, int] = {}
        try:
            codes = np.array([first.setdefault(u, len(first)) for u in ids], dtype=np.int64)
        except TypeError:
            raise ValueError("Expected hashable user ids (ints or strings).") from None
        self.order = np.argsort(codes, kind="stable")  # records sorted by user
        self.counts = np.bincount(codes, minlength=len(first)).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    @property
    def num_users(self) -> int:
        return len(self.counts)

    def records(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record indices, user slot of each) of ``users``, user after user."""
        users = np.asarray(users, dtype=np.int64)
        counts = self.counts[users]
        total = int(counts.sum())
        starts = np.repeat(self.offsets[users] - (np.cumsum(counts) - counts), counts)
        return self.order[starts + np.arange(total)], np.repeat(np.arange(len(users)), counts)

    def chunks(self, users: np.ndarray, limit: int | None) -> list[Chunk]:
        """The step's physical batches (module docstring); at least one, possibly empty."""
        users = np.asarray(users, dtype=np.int64)
        records, slots = self.records(users)
        if limit is None or len(records) <= limit:
            return [Chunk(records, slots)]
        out: list[Chunk] = []
        pending: list[int] = []  # whole users of the chunk being filled
        size = 0

        def flush() -> None:
            nonlocal pending, size
            if pending:
                out.append(Chunk(*self.records(users[pending])))
            pending, size = [], 0

        for k, u in enumerate(users):
            n = int(self.counts[u])
            if n > limit:
                flush()
                own, _ = self.records(users[k : k + 1])
                parts = np.array_split(own, math.ceil(n / limit))
                for j, part in enumerate(parts):
                    kind = "last" if j == len(parts) - 1 else "part"
                    out.append(Chunk(part, np.zeros(len(part), dtype=np.int64), kind))
                continue
            if size + n > limit:
                flush()
            pending.append(k)
            size += n
        flush()
        return out


def user_index(users: Any, records: int, clipping: str, adaptive: Any) -> UserIndex | None:
    """The records' users (None without ``users``), after the checks on the arguments."""
    if clipping not in USER_CLIPPING:
        raise ValueError(f"Expected user_clipping in {USER_CLIPPING}, got {clipping!r}.")
    if users is None:
        return None
    return UserIndex(users, records)


def user_assumptions(plan_assumptions: list[str], user_clipping: str, plan: Any) -> list[str]:
    """The plan's statements with the user as the unit, and the user-level clipping (under the
    plan's adaptive clipping the bound in force kappa_t follows the quantile of the users' norms
    learnt from a noisy count of unclipped users: Andrew et al. 2021 with the user as the unit)."""
    kind = "sum" if user_clipping == "sum" else "mean"
    clip, adaptive = plan.clip_norm, plan.adaptive_clipping is not None
    bound = f"the adaptive bound kappa_t (initially {clip:g})" if adaptive else f"{clip:g}"
    out = [
        "privacy unit: the user; the number of users N is public; every record has a user id "
        "(public structure)",
        f"each user's contribution to a step is the {kind} of its examples' gradients clipped "
        f"to l2 norm {bound} as one vector, whatever its number of records (a user whose "
        "gradient is not finite contributes zero)",
    ]
    if adaptive:
        out.append(
            "adaptive clipping over users: each step releases the noisy count of the step's "
            "users whose summed gradient the clip left unchanged (one bit per user, whatever "
            "its number of records)"
        )
    for text in plan_assumptions:
        if text.startswith("the number of records") or text.startswith("per-example gradients"):
            continue
        out.append("over users: " + text.replace("records", "users").replace("record", "user"))
    return out


class LargeUser:
    """The chunks of one user with more records than a physical batch: their gradient sums
    accumulated unclipped (``dtype``), then the user's one clipped contribution (module
    docstring); nothing is kept after :meth:`clipped`."""

    def __init__(self) -> None:
        self.total: dict[str, torch.Tensor] | None = None
        self.finite: list[torch.Tensor] = []
        self.records = 0

    def add(self, sums: dict[str, torch.Tensor], finite: torch.Tensor, records: int, dtype):
        sums = {k: v.to(dtype) for k, v in sums.items()}
        self.total = sums if self.total is None else {k: self.total[k] + sums[k] for k in sums}
        self.finite.append(finite.reshape(()))
        self.records += records

    def clipped(self, clip: float, reduction: str) -> tuple[dict[str, torch.Tensor], Any]:
        """(c W per parameter, whether the user was left unclipped: a device bool)."""
        total = self.total or {}
        if reduction == "mean":
            total = {k: v / self.records for k, v in total.items()}
        values = list(total.values())
        dtype = values[0].dtype
        norm = torch.sqrt(sum(v.pow(2).sum() for v in values))
        keep = torch.stack(self.finite).all() & torch.isfinite(norm)
        guard = _GUARD.get(dtype, 1e-5)
        factor = torch.where(keep, (clip / (norm * (1.0 + guard))).clamp(max=1.0), 0.0)
        out = {
            k: torch.where(keep, v * factor, torch.zeros((), dtype=dtype)) for k, v in total.items()
        }
        self.total, self.finite, self.records = None, [], 0
        return out, keep & (factor >= 1.0)
