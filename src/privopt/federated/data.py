"""Records grouped by user: the privacy unit of federated, user-level training.

:class:`UserData` holds every record once, in one flat tensor sorted by user, with each user's
offset and count (no padding: users of very different sizes cost their own rows only). A user
is a group of records named by a user id; every record must have one (a record without an id
could belong to anyone, so no bound on a user's contribution would cover it).

Local batches (:meth:`UserData.local_batches`) are public functions of the user's count: local
step j of a user with n_u records reads the b_u = min(b, n_u) positions
``(j b + i) mod n_u, i < b_u`` of its records in stored order (all n_u records each step when
``local_batch_size`` is None), and weights each by 1 / b_u, so a local step descends the mean
loss of its batch. The batch of a cohort is one gather of shape (users, b) with zero weights on
the padding.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count

__all__ = ["UserData"]


def _torch():
    import torch

    return torch


def _missing_ids(users: np.ndarray) -> np.ndarray:
    """Where a user id is missing: None, NaN, or an empty string."""
    missing = np.zeros(len(users), dtype=bool)
    for i, value in enumerate(users.tolist()):
        if value is None or (isinstance(value, str) and value.strip() == ""):
            missing[i] = True
        elif isinstance(value, numbers.Real) and not math.isfinite(float(value)):
            missing[i] = True
    return missing


@dataclass(frozen=True, eq=False)
class UserData:
    """Records of ``num_users`` users, grouped (build it with :meth:`from_records`).

    Attributes:
        inputs: the model inputs of every record, sorted by user (a tensor, first axis records).
        targets: the targets, in the same order.
        offsets: the first row of each user (int64 numpy array of length ``num_users``).
        counts: the number of records of each user (all >= 1).
    """

    inputs: Any
    targets: Any
    offsets: np.ndarray
    counts: np.ndarray

    @classmethod
    def from_records(cls, inputs: Any, targets: Any, users: Any) -> UserData:
        """Group records by user id (ids of any hashable kind; users are ordered by first
        appearance, records keep their order within a user).

        Refuses records without a user id (None, NaN, empty string) by count, never by value.
        """
        torch = _torch()
        if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
            raise ValueError("Expected inputs and targets as torch tensors (first axis records).")
        n = inputs.shape[0] if inputs.dim() else 0
        if n == 0:
            raise ValueError("Expected at least one record, got an empty inputs tensor.")
        if targets.dim() == 0 or targets.shape[0] != n:
            raise ValueError(
                f"Expected one target per record: inputs have {n} records, targets "
                f"{targets.shape[0] if targets.dim() else 0}."
            )
        ids = np.asarray(users, dtype=object).reshape(-1) if users is not None else None
        if ids is None or len(ids) != n:
            got = "none" if ids is None else str(len(ids))
            raise ValueError(f"Expected one user id per record ({n} records), got {got}.")
        missing = int(_missing_ids(ids).sum())
        if missing:
            raise ValueError(
                f"{missing} of {n} records have no user id (None, NaN or empty): user-level "
                "privacy bounds each user's contribution, so every record needs its user's id."
            )
        first: dict[Any, int] = {}
        try:
            codes = np.array([first.setdefault(u, len(first)) for u in ids.tolist()])
        except TypeError:
            raise ValueError("Expected hashable user ids (ints or strings).") from None
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes, minlength=len(first)).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        index = torch.from_numpy(order)
        return cls(inputs[index], targets[index], offsets, counts)

    @property
    def num_users(self) -> int:
        return len(self.counts)

    @property
    def num_records(self) -> int:
        return int(self.counts.sum())

    def local_batches(
        self, cohort: np.ndarray, local_steps: int, local_batch_size: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (global, shape (users, k, b)) and weights (1 / b_u on a user's b_u rows of a
        step, 0 on the padding) of the cohort's local steps (module docstring)."""
        local_steps = check_count("local_steps", local_steps)
        cohort = np.asarray(cohort, dtype=np.int64).reshape(-1)
        counts = self.counts[cohort]
        width = int(counts.max(initial=1))
        if local_batch_size is not None:
            width = min(width, check_count("local_batch_size", local_batch_size))
        sizes = np.minimum(counts, width)  # b_u
        i = np.arange(width)
        j = np.arange(local_steps)
        # position (j b + i) mod n_u, with b the nominal local batch (n_u when None)
        nominal = counts if local_batch_size is None else np.full_like(counts, local_batch_size)
        pos = (j[None, :, None] * nominal[:, None, None] + i[None, None, :]) % counts[:, None, None]
        valid = i[None, None, :] < sizes[:, None, None]
        pos = np.where(valid, pos, 0)
        rows = self.offsets[cohort][:, None, None] + pos
        weights = np.where(valid, 1.0 / sizes[:, None, None], 0.0)
        return rows, np.broadcast_to(weights, rows.shape).copy()
