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
Conv1d/2d (unfold     W_i = g_i U_i^T with U_i the unfolded input (D x T); ghost    cheaper of
U_i, T outputs)       <U_i^T U_i, g_i^T g_i>_F (Bu et al. 2022, arXiv 2205.10683)    the two
Embedding             ||sum over tokens of g_it per row||^2, grouped by             ghost
                      (example, row) with ``unique`` (O(B T D))
LayerNorm/GroupNorm   gamma_i = sum x_hat_i * g_i, beta_i = sum g_i (B x C)         materialise
bias                  sum over positions of g_i                                      materialise
====================  ===========================================================  ============

Ghost costs T^2 (D + p) multiply-adds per example against T p D for the materialised gradient
(D inputs, p outputs, T positions); each rule picks the cheaper per layer. Norms are computed in
float32 (or float64 for float64 models) from the stored tensors; sums use the activations'
dtype, as the non-private backward would.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

import torch
from torch import nn

__all__ = ["RULES", "LayerRule"]


def _norm_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _where_kept(t: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    if keep is None:
        return t
    return torch.where(keep.view((-1,) + (1,) * (t.dim() - 1)), t, torch.zeros((), dtype=t.dtype))


def _scale_rows(t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return t * c.view((-1,) + (1,) * (t.dim() - 1)).to(t.dtype)


class LayerRule:
    """Base: ``uses`` is a list of (args, kwargs, grad_output) of one module in one step."""

    def __init__(self, module: nn.Module, uses: list, params: dict[str, nn.Parameter], batch: int):
        self.module = module
        self.uses = uses
        self.params = params
        self.batch = batch

    def squared_norms(self) -> torch.Tensor:
        per = self.per_example()
        dtype = _norm_dtype(next(iter(per.values())).dtype)
        total = torch.zeros(self.batch, dtype=dtype, device=next(iter(per.values())).device)
        for value in per.values():
            total += value.to(dtype).pow(2).flatten(1).sum(1)
        return total

    def per_example(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def clipped_sums(self, c: torch.Tensor, keep: torch.Tensor | None) -> dict[str, torch.Tensor]:
        out = {}
        for name, value in self.per_example().items():
            value = _where_kept(value, keep)
            out[name] = torch.einsum("b,b...->...", c.to(value.dtype), value)
        return out

    def _check_batch(self, t: torch.Tensor) -> None:
        if t.dim() == 0 or t.shape[0] != self.batch:
            raise ValueError(
                f"{type(self.module).__name__} got a tensor of shape {tuple(t.shape)}; "
                f"privopt.torch needs the batch (of {self.batch} examples) first in every "
                "layer's input."
            )


class _Linear(LayerRule):
    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        d, p = module.in_features, module.out_features
        for args, _, _ in uses:
            self._check_batch(args[0])
        g0 = uses[0][2]
        self.dtype = g0.dtype
        self.a = torch.cat([u[0][0].to(self.dtype).reshape(batch, -1, d) for u in uses], 1)
        self.g = torch.cat([u[2].reshape(batch, -1, p) for u in uses], 1)
        t = self.a.shape[1]
        self.ghost = t * (d + p) <= p * d
        self._weight: torch.Tensor | None = None

    def squared_norms(self):
        ndt = _norm_dtype(self.dtype)
        total = torch.zeros(self.batch, dtype=ndt, device=self.g.device)
        if "weight" in self.params:
            if self.ghost:
                a, g = self.a.to(ndt), self.g.to(ndt)
                if a.shape[1] == 1:
                    total += a.pow(2).sum((1, 2)) * g.pow(2).sum((1, 2))
                else:
                    gram = torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))
                    total += gram.sum((1, 2)).clamp_min(0)
            else:
                self._weight = torch.bmm(self.g.transpose(1, 2), self.a)
                total += self._weight.to(ndt).pow(2).sum((1, 2))
        if "bias" in self.params:
            total += self.g.to(ndt).sum(1).pow(2).sum(1)
        return total

    def per_example(self):
        out = {}
        if "weight" in self.params:
            out["weight"] = torch.bmm(self.g.transpose(1, 2), self.a)
        if "bias" in self.params:
            out["bias"] = self.g.sum(1)
        return out

    def clipped_sums(self, c, keep):
        out = {}
        g = _scale_rows(_where_kept(self.g, keep), c)
        if "weight" in self.params:
            if self._weight is not None:
                weight = _where_kept(self._weight, keep)
                out["weight"] = torch.einsum("b,bpd->pd", c.to(self.dtype), weight)
            else:
                a = _where_kept(self.a, keep)
                out["weight"] = g.flatten(0, 1).T @ a.flatten(0, 1)
        if "bias" in self.params:
            out["bias"] = g.sum((0, 1))
        return out


class _Conv(LayerRule):
    """Conv1d and Conv2d (Conv1d as a 2-D convolution of height 1)."""

    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        self.one_d = isinstance(module, nn.Conv1d)
        m = module
        pair = (lambda v: (1, v[0])) if self.one_d else (lambda v: tuple(v))
        self.kernel, self.stride, self.dilation = (
            pair(m.kernel_size),
            pair(m.stride),
            pair(m.dilation),
        )
        self.groups = m.groups
        self.dtype = uses[0][2].dtype
        explicit = m.padding_mode != "zeros" or isinstance(m.padding, str)
        self.padding = (0, 0) if explicit else ((0, m.padding[0]) if self.one_d else m.padding)
        self.inputs, self.grads = [], []
        for args, _, g in uses:
            a = args[0]
            self._check_batch(a)
            a = a.to(self.dtype)
            if explicit:
                mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
                a = F.pad(a, m._reversed_padding_repeated_twice, mode=mode)
            if self.one_d:
                a, g = a.unsqueeze(2), g.unsqueeze(2)
            self.inputs.append(a)
            self.grads.append(g)
        c_out = m.out_channels
        d_group = m.in_channels // self.groups * self.kernel[0] * self.kernel[1]
        t = sum(g.shape[2] * g.shape[3] for g in self.grads)
        self.ghost = t * (d_group * self.groups + c_out) <= c_out * d_group
        self._weight: torch.Tensor | None = None

    def _unfolded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, g) grouped: (B, G, D_g, T) and (B, G, p_g, T), uses concatenated along T."""
        us, gs = [], []
        for a, g in zip(self.inputs, self.grads, strict=True):
            u = F.unfold(a, self.kernel, self.dilation, self.padding, self.stride)
            us.append(u.view(self.batch, self.groups, -1, u.shape[-1]))
            gs.append(g.reshape(self.batch, self.groups, -1, g.shape[2] * g.shape[3]))
        return torch.cat(us, 3), torch.cat(gs, 3)

    def _materialise(self) -> torch.Tensor:
        u, g = self._unfolded()
        w = torch.einsum("bgpt,bgdt->bgpd", g, u)
        return w.reshape((self.batch, *self.module.weight.shape))

    def squared_norms(self):
        ndt = _norm_dtype(self.dtype)
        total = torch.zeros(self.batch, dtype=ndt, device=self.grads[0].device)
        if "weight" in self.params:
            if self.ghost:
                u, g = (x.to(ndt) for x in self._unfolded())
                gram = torch.einsum("bgdt,bgds->bgts", u, u) * torch.einsum("bgpt,bgps->bgts", g, g)
                total += gram.sum((1, 2, 3)).clamp_min(0)
            else:
                self._weight = self._materialise()
                total += self._weight.to(ndt).pow(2).flatten(1).sum(1)
        if "bias" in self.params:
            total += self._bias().to(ndt).pow(2).sum(1)
        return total

    def _bias(self) -> torch.Tensor:
        return sum(g.sum((2, 3)) for g in self.grads)

    def per_example(self):
        out = {}
        if "weight" in self.params:
            out["weight"] = self._materialise()
        if "bias" in self.params:
            out["bias"] = self._bias()
        return out

    def clipped_sums(self, c, keep):
        out = {}
        grads = [_scale_rows(_where_kept(g, keep), c) for g in self.grads]
        if "weight" in self.params:
            if self._weight is not None:
                weight = _where_kept(self._weight, keep)
                out["weight"] = torch.einsum("b,b...->...", c.to(self.dtype), weight)
            else:
                shape = self.module.weight.shape
                shape2 = (shape[0], shape[1], 1, shape[2]) if self.one_d else shape
                total = 0
                for a, g in zip(self.inputs, grads, strict=True):
                    a = _where_kept(a, keep)
                    total = total + torch.nn.grad.conv2d_weight(
                        a, shape2, g, self.stride, self.padding, self.dilation, self.groups
                    )
                out["weight"] = total.reshape(shape)
        if "bias" in self.params:
            out["bias"] = sum(g.sum((0, 2, 3)) for g in grads)
        return out


class _Embedding(LayerRule):
    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        dim = module.embedding_dim
        for args, _, _ in uses:
            self._check_batch(args[0])
        ids = torch.cat([u[0][0].reshape(batch, -1) for u in uses], 1)
        g = torch.cat([u[2].reshape(batch, -1, dim) for u in uses], 1)
        example = torch.arange(batch, device=ids.device)[:, None].expand_as(ids)
        valid = torch.ones_like(ids, dtype=torch.bool)
        if module.padding_idx is not None:
            valid = ids != module.padding_idx
        self.ids, self.example = ids[valid], example[valid]
        self.g = g[valid]  # (tokens, D)
        self.dtype = g.dtype

    def squared_norms(self):
        ndt = _norm_dtype(self.dtype)
        keys = self.example * self.module.num_embeddings + self.ids
        unique, inverse = torch.unique(keys, return_inverse=True)
        rows = torch.zeros(unique.shape[0], self.g.shape[1], dtype=ndt, device=self.g.device)
        rows.index_add_(0, inverse, self.g.to(ndt))
        total = torch.zeros(self.batch, dtype=ndt, device=self.g.device)
        return total.index_add_(0, unique // self.module.num_embeddings, rows.pow(2).sum(1))

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
    """LayerNorm and GroupNorm: gamma_i = sum x_hat_i g_i, beta_i = sum g_i over positions."""

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
            ndt = _norm_dtype(g.dtype)
            a, g = a.to(ndt), g.to(ndt)
            if isinstance(m, nn.GroupNorm):
                x_hat = F.group_norm(a, m.num_groups, eps=m.eps)
                dims = tuple(range(2, a.dim()))
            else:
                x_hat = F.layer_norm(a, m.normalized_shape, eps=m.eps)
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


#: Module type -> rule (exact type or subclass); anything else uses the torch.func fallback.
RULES: dict[type, Any] = {
    nn.Linear: _Linear,
    nn.Conv1d: _Conv,
    nn.Conv2d: _Conv,
    nn.Embedding: _Embedding,
    nn.LayerNorm: _Norm,
    nn.GroupNorm: _Norm,
}
