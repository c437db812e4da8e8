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
Linear (T positions)  ghost per user: <A_u A_u^T, G_u G_u^T>_F with A_u, G_u the       U (n T)^2
                      user's n_u T rows (inputs, output gradients), zero-padded to       (D + p)
                      the step's largest user n; or the materialised per-example
                      gradients summed by user (``index_add``), the cheaper of the two   B T p D
Embedding             the record-level (example, row) segment sums with the example
                      replaced by its user                                              O(B T D)
any other             the rule's per-example gradients (B, *shape) summed by user     materialise
====================  ==============================================================  ==========

Both are exact (the same sums in another order); tests compare them with a float64 loop over
users. A rule without per-example gradients (none today) is refused naming the layer. The
user index of each example is host data (the loader built it), so nothing here synchronises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import torch
from privopt.torch._rule import gram, norm_dtype

__all__ = ["Groups", "group_squared_norms"]


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

    def segment(self, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B, ...) -> (U, ...): the rows of each user summed, in ``dtype``."""
        out = torch.zeros((self.size, *value.shape[1:]), dtype=dtype, device=value.device)
        return out.index_add_(0, self.index, value.to(dtype))

    def pad(self, value: torch.Tensor) -> torch.Tensor:
        """(B, ...) -> (U, n, ...): each user's rows, zero-padded to the longest user n."""
        out = torch.zeros(
            (self.size, self.longest, *value.shape[1:]), dtype=value.dtype, device=value.device
        )
        out[self.index, self.position] = value
        return out


def _squared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.linalg.vector_norm(t.flatten(1), dim=1, dtype=dtype).square()


def _linear(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    total = torch.zeros(groups.size, dtype=ndt, device=rule.g.device)
    if "weight" in rule.params:
        _, t, d = rule.a.shape
        p = rule.g.shape[2]
        ghost = groups.size * (groups.longest * t) ** 2 * (d + p)
        if ghost <= rule.batch * t * p * d:
            a = groups.pad(rule.a).flatten(1, 2)  # (U, n T, D)
            g = groups.pad(rule.g).flatten(1, 2)
            total += (gram(a, ndt) * gram(g, ndt)).sum((1, 2)).clamp_min(0)
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
