r"""Per-layer per-example gradient norms and clipped sums from (input, output-gradient) pairs.

For a layer called on the batch with input ``a`` and output gradient ``g = dL/d(output)`` (L the
sum of the per-example losses, so row i of ``g`` belongs to example i alone), each rule computes

* ``squared_norms()``: ``||grad_i||^2`` summed over the layer's trainable parameters, (B,);
* ``clipped_sums(c)``: ``sum_i c_i grad_i`` per parameter ("book-keeping", Bu et al. 2022, arXiv
  2210.00038: no second backward, one contraction per parameter);
* ``per_example()``: the (B, *shape) gradients (used only for parameters shared by several
  layers, whose norm needs the sum of the layers' gradients).

====================  ===========================================================  ============
layer                 per-example weight gradient and its norm                      choice
====================  ===========================================================  ============
Linear (T positions)  W_i = g_i^T a_i; ghost ||W_i||^2 = <a_i a_i^T, g_i g_i^T>_F     cheaper of
                      (T = 1: ||a_i||^2 ||g_i||^2; Li et al. 2021, arXiv 2110.05679)  the two
Conv1d/2d (unfolded   W_i = g_i U_i^T with U_i the unfolded input (D x T); ghost    cheapest of
input U_i, T outputs) <U_i^T U_i, g_i^T g_i>_F (Bu et al. 2022, arXiv 2205.10683)    four
                      (:mod:`privopt.torch._conv`: no F.unfold, Grams of pixels)
Embedding             ||sum over tokens of g_it per row||^2, grouped by             ghost
                      (example, row) by a sort and segment sums (O(B T D))
Layer/Group/RMSNorm   gamma_i = sum x_hat_i * g_i, beta_i = sum g_i (B x C)         materialise
                      (GroupNorm: one batched dot product, no x_hat * g tensor)
bias                  sum over positions of g_i                                      materialise
====================  ===========================================================  ============

Ghost costs T^2 (D + p) multiply-adds per example against T p D for the materialised gradient
(D inputs, p outputs, T positions); each rule picks the cheaper per layer. Norms are computed in
float32 (or float64 for float64 models) from the stored tensors, 16-bit Grams on TF32 tensor
cores where the products are exact (:func:`privopt.torch._rule.exact_products`); sums use the
output gradient's dtype, as the non-private backward would. A ghost Linear sum scales the
narrower of (a, g) by c before the one matmul. Embedding needs no host synchronisation (sort and
segment sums instead of ``unique``).
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

import torch
from privopt.torch._conv import ConvRule
from privopt.torch._rule import LayerRule, gram, norm_dtype, scale_rows, where_kept
from torch import nn

__all__ = ["RULES", "LayerRule"]


def _squared(t: torch.Tensor, dims, dtype: torch.dtype) -> torch.Tensor:
    """Sum of squares over ``dims``, accumulated in ``dtype`` (no converted copy)."""
    return torch.linalg.vector_norm(t, dim=dims, dtype=dtype).square()


class _Linear(LayerRule):
    #: the weight is stored (in, out) rather than (out, in) (Hugging Face's Conv1D)
    transposed = False

    @staticmethod
    def features(module) -> tuple[int, int]:
        """(D inputs, p outputs)."""
        return module.in_features, module.out_features

    def _oriented(self, weight: torch.Tensor) -> torch.Tensor:
        """A (..., p, D) weight gradient in the layer's storage order."""
        return weight.transpose(-1, -2) if self.transposed else weight

    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        d, p = self.features(module)
        self.shape = (p, d)
        for args, _, _ in uses:
            self._check_batch(args[0])
        self.dtype = uses[0][2].dtype
        a_parts = [u[0][0].to(self.dtype).reshape(batch, -1, d) for u in uses]
        g_parts = [u[2].reshape(batch, -1, p) for u in uses]
        self.a = torch.cat(a_parts, 1) if len(a_parts) > 1 else a_parts[0]
        self.g = torch.cat(g_parts, 1) if len(g_parts) > 1 else g_parts[0]
        t = self.a.shape[1]
        self.ghost = t * (d + p) <= p * d
        self._weight: torch.Tensor | None = None

    def squared_norms(self):
        ndt = norm_dtype(self.dtype)
        total = torch.zeros(self.batch, dtype=ndt, device=self.g.device)
        if "weight" in self.params:
            if self.ghost:
                if self.a.shape[1] == 1:
                    total += _squared(self.a, (1, 2), ndt) * _squared(self.g, (1, 2), ndt)
                else:
                    grams = gram(self.a, ndt) * gram(self.g, ndt)
                    total += grams.sum((1, 2)).clamp_min(0)
            else:
                self._weight = torch.bmm(self.g.transpose(1, 2), self.a)
                total += _squared(self._weight, (1, 2), ndt)
        if "bias" in self.params:
            self._bias = self.g.sum(1, dtype=ndt)  # (B, p), reused by the sum
            total += _squared(self._bias, 1, ndt)
        return total

    def per_example(self):
        out = {}
        if "weight" in self.params:
            out["weight"] = self._oriented(torch.bmm(self.g.transpose(1, 2), self.a))
        if "bias" in self.params:
            out["bias"] = self.g.sum(1)
        return out

    def clipped_sums(self, c, keep):
        out = {}
        g = where_kept(self.g, keep)
        if "weight" in self.params:
            if self._weight is not None:
                weight = where_kept(self._weight, keep).reshape(self.batch, -1)
                weight = torch.matmul(c.to(self.dtype), weight).view(self.shape)
            else:
                a = where_kept(self.a, keep)
                if a.shape[2] <= g.shape[2]:  # scale the narrower side by c
                    a = scale_rows(a, c)
                    weight = g.flatten(0, 1).T @ a.flatten(0, 1)
                else:
                    weight = scale_rows(g, c).flatten(0, 1).T @ a.flatten(0, 1)
            out["weight"] = self._oriented(weight)
        if "bias" in self.params:
            bias = getattr(self, "_bias", None)
            bias = self.g.sum(1, dtype=norm_dtype(self.dtype)) if bias is None else bias
            out["bias"] = c.to(bias.dtype) @ where_kept(bias, keep)
        return out


class _Embedding(LayerRule):
    """Per example, the gradient of row v is the sum of g over the example's tokens with id v."""

    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        dim = module.embedding_dim
        for args, _, _ in uses:
            self._check_batch(args[0])
        ids = torch.cat([u[0][0].reshape(batch, -1) for u in uses], 1)
        g = torch.cat([u[2].reshape(batch, -1, dim) for u in uses], 1)
        self.example = torch.arange(batch, device=ids.device)[:, None].expand_as(ids).reshape(-1)
        self.ids = ids.reshape(-1)
        g = g.reshape(-1, dim)
        if module.padding_idx is not None:  # the padding row gets no gradient
            g = torch.where(
                (self.ids != module.padding_idx)[:, None], g, torch.zeros((), dtype=g.dtype)
            )
        self.g = g  # (tokens, D)
        self.dtype = g.dtype

    def squared_norms(self):
        ndt = norm_dtype(self.dtype)
        n = self.ids.shape[0]
        keys = self.example * self.module.num_embeddings + self.ids
        ordered, order = torch.sort(keys)
        new = torch.ones(n, dtype=torch.long, device=keys.device)
        new[1:] = (ordered[1:] != ordered[:-1]).long()
        segment = torch.cumsum(new, 0) - 1  # (example, row) segment of each sorted token
        of_token = torch.empty_like(segment).scatter_(0, order, segment)
        rows = torch.zeros(n, self.g.shape[1], dtype=ndt, device=self.g.device)
        rows.index_add_(0, of_token, self.g.to(ndt))
        owner = torch.zeros(n, dtype=torch.long, device=keys.device)
        owner.scatter_(0, segment, ordered // self.module.num_embeddings)
        total = torch.zeros(self.batch, dtype=ndt, device=self.g.device)
        return total.index_add_(0, owner, _squared(rows, 1, ndt))  # unused segments add 0

    def per_example(self):
        w = self.module.weight
        out = torch.zeros(self.batch * w.shape[0], w.shape[1], dtype=self.dtype, device=w.device)
        out.index_add_(0, self.example * w.shape[0] + self.ids, self.g)
        return {"weight": out.view(self.batch, *w.shape)}

    def clipped_sums(self, c, keep):
        w = self.module.weight
        g = self.g * c[self.example].to(self.dtype)[:, None]
        if keep is not None:
            g = torch.where(keep[self.example][:, None], g, torch.zeros((), dtype=g.dtype))
        out = torch.zeros(w.shape, dtype=self.dtype, device=w.device)
        return {"weight": out.index_add_(0, self.ids, g)}


class _Norm(LayerRule):
    """LayerNorm, GroupNorm and RMSNorm: gamma_i = sum x_hat_i g_i, beta_i = sum g_i over
    positions."""

    def per_example(self):
        if getattr(self, "_cached", None) is None:
            self._cached = self._compute()
        return self._cached

    def _compute(self):
        m = self.module
        weight, bias = 0, 0
        for args, _, g in self.uses:
            a = args[0]
            self._check_batch(a)
            ndt = norm_dtype(g.dtype)
            a, g = a.to(ndt), g.to(ndt)
            if isinstance(m, nn.GroupNorm):  # x_hat . g per channel by one batched dot product
                b, c = a.shape[:2]
                x_hat = F.group_norm(a, m.num_groups, eps=m.eps).view(b, c, -1)
                g = g.reshape(b, c, -1)
                if "weight" in self.params:
                    weight = weight + torch.einsum("bcs,bcs->bc", x_hat, g)
                if "bias" in self.params:
                    bias = bias + g.sum(2)
                continue
            if isinstance(m, nn.LayerNorm):
                x_hat = F.layer_norm(a, m.normalized_shape, eps=m.eps)
            else:  # nn.RMSNorm: x / sqrt(mean(x^2) + eps) over the normalised dimensions
                x_hat = F.rms_norm(a, m.normalized_shape, eps=m.eps)
            dims = tuple(range(1, a.dim() - len(m.normalized_shape)))
            if "weight" in self.params:
                weight = weight + ((x_hat * g).sum(dims) if dims else x_hat * g)
            if "bias" in self.params:
                bias = bias + (g.sum(dims) if dims else g)
        out = {}
        if "weight" in self.params:
            out["weight"] = weight
        if "bias" in self.params:
            out["bias"] = bias
        return out


#: Layer type -> rule, for the type and its subclasses that keep its ``forward`` (a subclass
#: that overrides it, and any other module, uses the checked torch.func fallback).
RULES: dict[type, Any] = {
    nn.Linear: _Linear,
    nn.Conv1d: ConvRule,
    nn.Conv2d: ConvRule,
    nn.Embedding: _Embedding,
    nn.LayerNorm: _Norm,
    nn.GroupNorm: _Norm,
}
if hasattr(nn, "RMSNorm"):  # torch >= 2.4
    RULES[nn.RMSNorm] = _Norm
