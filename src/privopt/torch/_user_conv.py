r"""Per-user squared norms of Conv1d/Conv2d weights (user-level clipping, :mod:`._groups`).

The per-example weight gradient of a convolution is W_i = sum_t g_it U_it^T (per group of
channels), U_it the unfolded input patch of output position t (C_g K values) and g_it the output
gradient there (p_g values), so a user's summed gradient W_u = sum_{i in u} W_i is a Linear
layer's over the rows r = (i, t) of its examples, and

    ||W_u||^2 + ||b_u||^2 = sum_{r, s of user u} (<U_r, U_s> + 1) <g_r, g_s>,

the user analogue of the convolution ghost norm of Bu, Mao & Xu 2022, "Scalable and Efficient
Training of Large Convolutional Neural Networks with Differential Privacy" (arXiv:2205.10683),
computed over tiles of users by :func:`privopt.torch._groups.pair_sums` on the unfolded
input (one strided copy, :meth:`ConvRule._unfold`); with G > 1 groups the rows of group j of
user u form their own "user" (u, j) and the G norms are added. Or the rule's materialised
per-example gradients (``mat_shift`` / ``mat_unfold``) summed by user; they are kept on the rule,
whose clipped sum then contracts them with the users' factors (no second pass over the input).
The cheaper of the two by the cost model of :mod:`privopt.torch._groups` (shapes and user sizes
only). Both exact; tests compare them with a float64 loop over users.
"""

from __future__ import annotations

import torch
from privopt.torch._groups import MEMORY_WEIGHT, Groups, ghost_choice, pair_sums

__all__ = ["conv_costs", "conv_group_norms"]


def _shape(rule) -> tuple[int, int, int, int]:
    """(output positions over the calls, C_g K, p_g, G)."""
    m, groups = rule.module, rule.groups
    kk = rule.kernel[0] * rule.kernel[1]
    t = sum(g.shape[2] * g.shape[3] for g in rule.grads)
    return t, m.in_channels // groups * kk, m.out_channels // groups, groups


def conv_costs(rule, groups: Groups) -> dict[str, tuple[float, tuple]]:
    """{"ghost": (cost, widths of its tiling), "materialised": (cost, ())} in multiply-adds."""
    t, d_g, p_g, n_groups = _shape(rule)
    b, mw = rule.batch, MEMORY_WEIGHT
    store = n_groups * p_g * d_g  # one example's weight gradient
    sub = groups if n_groups == 1 else groups.expanded(n_groups)
    widths, ghost = ghost_choice(sub, t, d_g + p_g + 1)
    return {
        "ghost": (ghost + mw * b * n_groups * d_g * t, widths),  # + the unfolded copy
        "materialised": (b * store * t + 2 * mw * b * store, ()),
    }


#: prefer "ghost" or "materialised" (tests); None: the cheaper
method_override: str | None = None


def conv_group_norms(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    """||W_u||^2 over the convolution's parameters, (U,) in ``ndt`` (module docstring)."""
    if "weight" not in rule.params:
        return _segment_squared(groups, rule._bias(), ndt)
    costs = conv_costs(rule, groups)
    method = method_override or min(costs, key=lambda k: costs[k][0])
    n_groups = rule.groups
    if method == "ghost":
        us = [rule._unfold(a, g) for a, g in zip(rule.inputs, rule.grads, strict=True)]
        gs = [rule._grouped(g) for g in rule.grads]
        a, g = (torch.cat(x, 2) if len(x) > 1 else x[0] for x in (us, gs))
        sub = groups if n_groups == 1 else groups.expanded(n_groups)
        norms = pair_sums(
            a.transpose(1, 2),
            g.transpose(1, 2),
            sub.tiling(costs["ghost"][1]),
            sub,
            ndt,
            "bias" in rule.params,
        )
        return norms.view(groups.size, n_groups).sum(1)
    if not rule.method.startswith("mat"):  # the rule chose a ghost norm for its records
        mats = {k: v for k, v in rule._costs().items() if k.startswith("mat")}
        rule.method = min(mats, key=mats.__getitem__)
    rule._weight = rule._materialise()  # kept: the rule's clipped sum contracts it
    value, layout = rule._weight
    if layout == "kbm":  # (K, B, p C_g): sum the users along the batch axis
        value = value.view(value.shape[0], rule.batch, -1)
        out = torch.zeros(
            (value.shape[0], groups.size, value.shape[2]), dtype=ndt, device=value.device
        )
        out.index_add_(1, groups.index, value.to(ndt))
        total = torch.linalg.vector_norm(out, dim=(0, 2), dtype=ndt).square()
    else:
        total = _segment_squared(groups, value.reshape(rule.batch, -1), ndt)
    if "bias" in rule.params:
        total += _segment_squared(groups, rule._bias(), ndt)
    return total


def _segment_squared(groups: Groups, value: torch.Tensor, ndt: torch.dtype) -> torch.Tensor:
    return torch.linalg.vector_norm(groups.segment(value, ndt), dim=1, dtype=ndt).square()
