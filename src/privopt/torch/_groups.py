r"""Per-user squared norms for user-level clipping, without a loop over users.

With the user as the privacy unit (``make_private(..., users=...)``), user u's contribution to a
step is the clipped sum of its examples' gradients,

    W_u = sum_{i in u} grad_i,      c_u = min(1, G / ||W_u||),      released sum_u c_u W_u,

(or with ``user_clipping="mean"`` the clipped mean: c_u = min(1, G n_u / ||W_u||) / n_u, so the
contribution c_u W_u is clip_G(W_u / n_u)). Since sum_u c_u W_u = sum_i c_{u(i)} grad_i, the sum
is contracted by each rule's own per-example machinery (:meth:`LayerRule.clipped_sums`) with the
example factors c_{u(i)}: only the norms ||W_u|| need per-user work. Per rule:

====================  ==============================================================  ==========
layer                 ||W_u||^2                                                        cost
====================  ==============================================================  ==========
Linear (T positions)  ghost per user: <A_u A_u^T, G_u G_u^T>_F with A_u, G_u the       U_k (n_k
                      user's n_u T rows (inputs, output gradients), users batched by    T)^2 (D +
                      size class (2^(k-1) < n_u <= 2^k; at most 3 classes, the          p) per
                      cheapest adjacent ones merged), zero-padded to the class's n_k;   class
                      or the Grams of the whole batch with the pairs of rows of one     (B T)^2
                      user kept (a mask); or the materialised per-example gradients     (D + p)
                      summed by user (``index_add``): the cheapest, memory counted      B T p D
Embedding             the record-level (example, row) segment sums with the example
                      replaced by its user                                              O(B T D)
any other             the rule's per-example gradients (B, *shape) summed by user     materialise
====================  ==============================================================  ==========

All are exact (the same sums in another order); tests compare them with a float64 loop over
users. A rule without per-example gradients (none today) is refused naming the layer. The
user index of each example is host data (the loader built it), so nothing here synchronises.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import torch
from privopt.torch._rule import gram, norm_dtype

__all__ = ["Groups", "group_squared_norms"]

#: the most size classes of users padded together (a class costs a few operations)
MAX_CLASSES = 3


class Groups:
    """The user slot (0 .. U-1) of each example of a batch, from a host array."""

    def __init__(self, slots: Any, batch: int, device: torch.device) -> None:
        if isinstance(slots, torch.Tensor):
            slots = slots.detach().cpu().numpy()
        slots = np.asarray(slots)
        if slots.shape != (batch,) or (slots.size and slots.dtype.kind not in "iu"):
            raise ValueError(
                f"Expected groups to hold one integer user slot per example ({batch}), got an "
                f"array of shape {slots.shape}."
            )
        slots = slots.astype(np.int64)
        if slots.size and slots.min() < 0:
            raise ValueError("Expected groups >= 0 (user slots 0 .. U - 1).")
        self.size = int(slots.max()) + 1 if slots.size else 0  # U
        self.counts = np.bincount(slots, minlength=self.size)  # n_u
        order = np.argsort(slots, kind="stable")
        position = np.empty_like(slots)
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        position[order] = np.arange(batch) - np.repeat(starts, self.counts)
        self.longest = int(self.counts.max()) if slots.size else 0
        self.index = torch.as_tensor(slots, device=device)
        self.position = torch.as_tensor(position, device=device)
        self.count_tensor = torch.as_tensor(self.counts, device=device)
        # size classes: users of 2^(k-1) < n_u <= 2^k records together (at most MAX_CLASSES:
        # each costs a few small operations), padded to the class's largest n_k: per class
        # its users and the rows to take (B: a zero row), or a slice when the class's rows
        # are already contiguous and unpadded (the loader's order)
        level = np.ceil(np.log2(np.maximum(self.counts, 1))).astype(np.int64)
        groups = [np.flatnonzero((level == k) & (self.counts > 0)) for k in np.unique(level)]
        groups = [g for g in groups if len(g)]  # a slot without examples has a zero norm
        while len(groups) > MAX_CLASSES:  # merge the adjacent pair whose padding costs least
            cost = [
                len(a) * (int(self.counts[b].max()) ** 2 - int(self.counts[a].max()) ** 2)
                for a, b in itertools.pairwise(groups)
            ]
            i = int(np.argmin(cost))
            groups[i : i + 2] = [np.concatenate(groups[i : i + 2])]
        self.classes = []
        for users in groups:
            n = int(self.counts[users].max())
            take = np.full((len(users), n), batch, dtype=np.int64)
            row = np.full(self.size, -1, dtype=np.int64)
            row[users] = np.arange(len(users))
            examples = np.flatnonzero(row[slots] >= 0)
            take[row[slots[examples]], position[examples]] = examples
            take = take.reshape(-1)
            if take.max() < batch and np.all(np.diff(take) == 1):  # no padding, in order
                rows = slice(int(take[0]), int(take[-1]) + 1)  # a view, no copy
            else:
                rows = torch.as_tensor(take, device=device)
            self.classes.append((torch.as_tensor(users, device=device), n, rows))

    def segment(self, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B, ...) -> (U, ...): the rows of each user summed, in ``dtype``."""
        out = torch.zeros((self.size, *value.shape[1:]), dtype=dtype, device=value.device)
        return out.index_add_(0, self.index, value.to(dtype))

    def padded(self, value: torch.Tensor):
        """Per size class: (its users, (U_k, n_k, ...) their rows zero-padded to n_k)."""
        extended = None
        for users, n, rows in self.classes:
            if isinstance(rows, slice):
                out = value[rows]
            else:
                if extended is None:  # one zero row appended, for the padding
                    extended = torch.cat([value, value.new_zeros((1, *value.shape[1:]))])
                out = extended[rows]
            yield users, out.view(len(users), n, *value.shape[1:])

    def padded_cost(self, t: int) -> float:
        """sum over size classes of U_k (n_k t)^2."""
        return float(sum(len(users) * (n * t) ** 2 for users, n, _ in self.classes))


def _squared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.linalg.vector_norm(t.flatten(1), dim=1, dtype=dtype).square()


#: multiply-adds that writing one tensor element costs, in the cost model (as the conv rule's)
MEMORY_WEIGHT = 8


def _linear_costs(groups: Groups, b: int, t: int, d: int, p: int) -> dict[str, float]:
    mw = MEMORY_WEIGHT
    return {
        "padded": groups.padded_cost(t) * (d + p + mw),  # per-user Grams, by size class
        "masked": (b * t) ** 2 * (d + p + 2 * mw),  # Grams of the whole batch, user blocks kept
        "materialised": b * t * p * d + mw * b * p * d,  # (B, p, D), summed by user
    }


def _linear(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    total = torch.zeros(groups.size, dtype=ndt, device=rule.g.device)
    if "weight" in rule.params:
        b, t, d = rule.a.shape
        costs = _linear_costs(groups, b, t, d, rule.g.shape[2])
        method = min(costs, key=costs.__getitem__)
        if method == "padded":
            for (users, a), (_, g) in zip(
                groups.padded(rule.a), groups.padded(rule.g), strict=True
            ):
                a, g = a.flatten(1, 2), g.flatten(1, 2)  # (U_k, n_k T, D), (U_k, n_k T, p)
                total[users] += (gram(a, ndt) * gram(g, ndt)).sum((1, 2)).clamp_min(0)
        elif method == "masked":  # sum over pairs of rows of one user of <a_r, a_s> <g_r, g_s>
            token = groups.index.repeat_interleave(t)
            a, g = rule.a.reshape(1, b * t, d), rule.g.reshape(1, b * t, -1)
            pairs = (gram(a, ndt) * gram(g, ndt))[0]
            pairs = torch.where(token[:, None] == token[None, :], pairs, 0.0).sum(1)
            total += total.new_zeros(groups.size).index_add_(0, token, pairs).clamp_min(0)
        else:
            weight = torch.bmm(rule.g.transpose(1, 2), rule.a)  # (B, p, D)
            total += _squared(groups.segment(weight, ndt), ndt)
    if "bias" in rule.params:
        rule._bias = rule.g.sum(1, dtype=ndt)  # reused by the rule's sum
        total += _squared(groups.segment(rule._bias, ndt), ndt)
    return total


def _embedding(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    """The rule's (example, row) segment sums with the example replaced by its user."""
    n = rule.ids.shape[0]
    rows_per = rule.module.num_embeddings
    owner = groups.index[rule.example]
    keys = owner * rows_per + rule.ids
    ordered, order = torch.sort(keys)
    new = torch.ones(n, dtype=torch.long, device=keys.device)
    new[1:] = (ordered[1:] != ordered[:-1]).long()
    segment = torch.cumsum(new, 0) - 1
    of_token = torch.empty_like(segment).scatter_(0, order, segment)
    rows = torch.zeros(n, rule.g.shape[1], dtype=ndt, device=rule.g.device)
    rows.index_add_(0, of_token, rule.g.to(ndt))
    user = torch.zeros(n, dtype=torch.long, device=keys.device)
    user.scatter_(0, segment, ordered // rows_per)
    total = torch.zeros(groups.size, dtype=ndt, device=rule.g.device)
    return total.index_add_(0, user, _squared(rows, ndt))


def group_squared_norms(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    """||W_u||^2 over the rule's parameters, (U,) in ``ndt`` (see the module)."""
    from privopt.torch._layers import _Embedding, _Linear

    if isinstance(rule, _Linear):
        return _linear(rule, groups, ndt)
    if isinstance(rule, _Embedding):
        return _embedding(rule, groups, ndt)
    total = torch.zeros(groups.size, dtype=ndt, device=groups.index.device)
    for value in per_example(rule).values():
        total += _squared(groups.segment(value, norm_dtype(value.dtype)), ndt)
    return total


def per_example(rule) -> dict[str, torch.Tensor]:
    """The rule's per-example gradients, or a refusal naming the layer."""
    try:
        return rule.per_example()
    except NotImplementedError:
        raise ValueError(
            f"{type(rule.module).__name__}: privopt.torch has no per-example gradients for "
            "this layer, so it cannot sum them per user exactly; user-level clipping "
            "(users=...) is refused for it."
        ) from None
