r"""Per-example norms and clipped sums of Conv1d/Conv2d weights, without ``F.unfold`` loops.

Notation (per example, one group of G): padded input A (C_g channels on an H_p x W_p grid,
N = H_p W_p pixels), output gradient g (p_g channels, T = H' W' output positions), kernel
k_h x k_w (K = k_h k_w offsets), stride s, dilation d. The per-example weight gradient is

    W[q, c, i, j] = sum_{y, x} g[q, y, x] A[c, s y + d i, s x + d j],

and the rule computes ``||W||^2`` in one of four ways, the cheapest by a cost model (multiply-
adds plus ``MEMORY_WEIGHT`` per element moved through memory, per example):

* ``mat_shift`` (stride 1, one call): for each offset (i, j) the input rows, flattened, are one
  contiguous slice of the flat padded input starting at d i W_p + d j, so
  ``W[:, :, i, j] = g' A_ij^T`` is one batched matmul on a *view* of the input, g' being g padded
  with zero columns to width W_p (the products that wrap into the next row hit those zeros).
  K matmuls of p_g x C_g x ((H'-1) W_p + W') per example: the FLOPs of the weight gradient times
  W_p / W', and no unfolded copy of the input (the classic im2col costs K times the input).
* ``mat_unfold``: the unfolded input U (C_g K x T) built by one strided copy (``as_strided``;
  ``F.unfold`` launches a kernel per example on CUDA), then ``W = g U^T``.
* ``ghost_pixel``: ``||W||^2 = <U^T U, g^T g>_F`` with U^T U gathered from the Gram of the padded
  pixels P = A^T A (N x N): ``(U^T U)[t, t'] = sum_{i, j} P[s t + d(i, j), s t' + d(i, j)]``
  (one ``as_strided`` view of P summed over the offsets). N^2 C_g multiply-adds instead of
  T^2 C_g K, and no unfolded input: the fast choice for deep layers (T small).
* ``ghost_unfold``: the same inner product with U^T U from the unfolded input (also the rule for a
  module called more than once: the uses are concatenated along T, cross terms included).

The clipped sum is the contraction of the stored per-example gradients with c (``mat_*``) or
``sum_i c_i W_i = conv2d_weight(A, c * g)`` (``ghost_*``, the non-private backward's kernel).
Norms are float32 (float64 for float64 models) whatever the layer's dtype; the materialised
gradients and the sums use the output gradient's dtype, and on CUDA the precision cuDNN uses for
the layer's own gradients (TF32 by PyTorch's default, :func:`privopt.torch._rule.as_convolutions`:
the norm is of exactly the tensor summed, so the clip bound holds whatever the precision).
"""

from __future__ import annotations

import torch.nn.functional as F

import torch
from privopt.torch._rule import (
    LayerRule,
    as_convolutions,
    gram,
    norm_dtype,
    scale_rows,
    where_kept,
)
from torch import nn

__all__ = ["ConvRule"]

METHODS = ("mat_shift", "mat_unfold", "ghost_pixel", "ghost_unfold")


class ConvRule(LayerRule):
    """Conv1d and Conv2d (Conv1d as a 2-D convolution of height 1); see the module docstring."""

    #: multiply-adds that moving one tensor element through memory costs, in the cost model
    MEMORY_WEIGHT = 64
    #: prefer one of ``METHODS`` where it applies (tests); None: the cheapest
    method_override: str | None = None

    def __init__(self, module, uses, params, batch):
        super().__init__(module, uses, params, batch)
        m = module
        self.one_d = isinstance(m, nn.Conv1d)
        pair = (lambda v: (1, v[0])) if self.one_d else (lambda v: tuple(v))
        self.kernel, self.stride, self.dilation = (
            pair(m.kernel_size),
            pair(m.stride),
            pair(m.dilation),
        )
        self.groups = m.groups
        self.dtype = uses[0][2].dtype
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            pads, mode = list(m._reversed_padding_repeated_twice), m.padding_mode
            mode = "constant" if mode == "zeros" else mode
        else:
            pads, mode = [v for v in reversed(m.padding) for _ in range(2)], "constant"
        self.inputs, self.grads = [], []
        for args, _, g in uses:
            a = args[0]
            self._check_batch(a)
            a = a.to(self.dtype)
            if any(pads):
                a = F.pad(a, pads, mode=mode)
            if self.one_d:
                a, g = a.unsqueeze(2), g.unsqueeze(2)
            self.inputs.append(a.contiguous())
            self.grads.append(g.contiguous())
        costs = self._costs()  # the methods that apply here, with their costs
        forced = self.method_override
        self.method = forced if forced in costs else min(costs, key=costs.__getitem__)
        self._weight: tuple[torch.Tensor, str] | None = None

    @property
    def ghost(self) -> bool:
        return self.method.startswith("ghost")

    # -- the cost model ---------------------------------------------------------------------------
    def _costs(self) -> dict[str, float]:
        mw = self.MEMORY_WEIGHT
        c_in, p, groups = self.module.in_channels, self.module.out_channels, self.groups
        kk = self.kernel[0] * self.kernel[1]
        d, d_g, c_g = c_in * kk, c_in // groups * kk, c_in // groups
        t = sum(g.shape[2] * g.shape[3] for g in self.grads)
        store = p * d_g  # the per-example weight gradient
        costs = {
            "mat_unfold": p * d_g * t + mw * (d * t + store),
            "ghost_unfold": t * t * (d + p) + mw * (d * t + groups * t * t) + p * d_g * t / 4,
        }
        if len(self.uses) == 1:
            _, _, hp, wp = self.inputs[0].shape
            h_out = self.grads[0].shape[2]
            n = hp * wp
            costs["ghost_pixel"] = (
                groups * n * n * c_g
                + t * t * p
                + mw * groups * (n * n + (kk + 1) * t * t)
                + p * d_g * t / 4
            )
            if self.stride == (1, 1):
                costs["mat_shift"] = p * d_g * h_out * wp + mw * (store + p * h_out * wp)
        return costs

    # -- per-example weight gradients -------------------------------------------------------------
    def _unfold(self, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """U (B G, C_g K, T) by one strided copy of the padded input."""
        b, c, _, _ = a.shape
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        h_out, w_out = g.shape[2:]
        st = a.stride()
        view = a.as_strided(
            (b, c, kh, kw, h_out, w_out),
            (st[0], st[1], dh * st[2], dw * st[3], sh * st[2], sw * st[3]),
        )
        return view.reshape(b * self.groups, -1, h_out * w_out)

    def _grouped(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(self.batch * self.groups, -1, g.shape[2] * g.shape[3])

    def _mat_shift(self, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(K, B G, p_g, C_g): one matmul per kernel offset on views of the flat input."""
        bg = self.batch * self.groups
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        _, _, hp, wp = a.shape
        h_out, w_out = g.shape[2:]
        length = (h_out - 1) * wp + w_out
        flat = a.view(bg, -1, hp * wp)
        gp = F.pad(g, (0, wp - w_out)).view(bg, -1, h_out * wp)[:, :, :length]
        out = torch.empty((kh * kw, bg, gp.shape[1], flat.shape[1]), dtype=a.dtype, device=a.device)
        for i in range(kh):
            for j in range(kw):
                start = dh * i * wp + dw * j
                rows = flat[:, :, start : start + length]
                torch.bmm(gp, rows.transpose(1, 2), out=out[i * kw + j])
        return out

    def _mat_unfold(self, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(B, p, C_g, k_h, k_w)."""
        w = torch.bmm(self._grouped(g), self._unfold(a, g).transpose(1, 2))
        return w.view((self.batch, self.module.out_channels, -1, *self.kernel))

    def _to_weight_layout(self, value: torch.Tensor, layout: str) -> torch.Tensor:
        if layout == "bw":
            return value
        kh, kw = self.kernel
        pg, cg = value.shape[2:]
        w = value.view(kh, kw, self.batch, self.groups, pg, cg).permute(2, 3, 4, 5, 0, 1)
        return w.reshape(self.batch, self.groups * pg, cg, kh, kw)

    def _materialise(self) -> tuple[torch.Tensor, str]:
        with as_convolutions(self.dtype, self.grads[0].device):
            return self._materialise_uses()

    def _materialise_uses(self) -> tuple[torch.Tensor, str]:
        if self.method == "mat_shift":
            return self._mat_shift(self.inputs[0], self.grads[0]), "kbm"
        total = None
        for a, g in zip(self.inputs, self.grads, strict=True):
            if self.stride == (1, 1) and self.method != "mat_unfold":
                w = self._to_weight_layout(self._mat_shift(a, g), "kbm")
            else:
                w = self._mat_unfold(a, g)
            total = w if total is None else total + w
        return total, "bw"

    # -- ghost norms ------------------------------------------------------------------------------
    def _ghost_pixel(self, ndt) -> torch.Tensor:
        a, g = self.inputs[0], self.grads[0]
        bg = self.batch * self.groups
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        _, _, hp, wp = a.shape
        h_out, w_out = g.shape[2:]
        n = hp * wp
        pix = gram(a.view(bg, -1, n).transpose(1, 2), ndt)  # (B G, N, N)
        st = (n * n, dh * wp * (n + 1), dw * (n + 1), sh * wp * n, sw * n, sh * wp, sw)
        view = pix.as_strided((bg, kh, kw, h_out, w_out, h_out, w_out), st)
        uu = view.sum((1, 2)).view(bg, h_out * w_out, h_out * w_out)
        return (uu * gram(self._grouped(g).transpose(1, 2), ndt)).view(self.batch, -1).sum(1)

    def _ghost_unfold(self, ndt) -> torch.Tensor:
        us = [self._unfold(a, g) for a, g in zip(self.inputs, self.grads, strict=True)]
        gs = [self._grouped(g) for g in self.grads]
        u, g = (torch.cat(x, 2) if len(x) > 1 else x[0] for x in (us, gs))
        grams = gram(u.transpose(1, 2), ndt) * gram(g.transpose(1, 2), ndt)
        return grams.view(self.batch, -1).sum(1)

    # -- the rule ---------------------------------------------------------------------------------
    def squared_norms(self):
        ndt = norm_dtype(self.dtype)
        device = self.grads[0].device
        total = torch.zeros(self.batch, dtype=ndt, device=device)
        if "weight" in self.params:
            if self.ghost:
                if self.method == "ghost_pixel":
                    total += self._ghost_pixel(ndt).clamp_min(0)
                else:
                    total += self._ghost_unfold(ndt).clamp_min(0)
            else:
                self._weight = self._materialise()
                value, layout = self._weight
                if layout == "kbm":
                    rows, dims = value.view(value.shape[0], self.batch, -1), (0, 2)
                else:
                    rows, dims = value.reshape(self.batch, -1), 1
                norm = torch.linalg.vector_norm(rows, dim=dims, dtype=ndt)
                total += norm.square()
        if "bias" in self.params:
            total += self._bias().to(ndt).pow(2).sum(1)
        return total

    def _bias(self) -> torch.Tensor:
        return sum(g.sum((2, 3)) for g in self.grads)

    def per_example(self):
        out = {}
        if "weight" in self.params:
            value, layout = self._weight if self._weight is not None else self._materialise()
            w = self._to_weight_layout(value, layout)
            out["weight"] = w.reshape((self.batch, *self.module.weight.shape))
        if "bias" in self.params:
            out["bias"] = self._bias()
        return out

    def clipped_sums(self, c, keep):
        out = {}
        shape = self.module.weight.shape
        if "weight" in self.params:
            if self._weight is not None:
                value, layout = self._weight
                if layout == "kbm":
                    kh, kw = self.kernel
                    rows = value.view(kh * kw, self.batch, -1)
                    if keep is not None:
                        rows = torch.where(
                            keep.view(1, -1, 1), rows, torch.zeros((), dtype=rows.dtype)
                        )
                    total = torch.matmul(c.to(value.dtype), rows)  # (K, p C_g)
                    total = total.view(kh, kw, shape[0], -1).permute(2, 3, 0, 1)
                else:
                    rows = where_kept(value, keep).reshape(self.batch, -1)
                    total = torch.matmul(c.to(value.dtype), rows)
                out["weight"] = total.reshape(shape)
            else:
                total = 0
                for a, g in zip(self.inputs, self.grads, strict=True):
                    g = scale_rows(where_kept(g, keep), c)
                    a = where_kept(a, keep)
                    w_shape = (shape[0], shape[1], *self.kernel)
                    total = total + torch.nn.grad.conv2d_weight(
                        a, w_shape, g, self.stride, 0, self.dilation, self.groups
                    )
                out["weight"] = total.reshape(shape)
        if "bias" in self.params:
            grads = [scale_rows(where_kept(g, keep), c) for g in self.grads]
            out["bias"] = sum(g.sum((0, 2, 3)) for g in grads)
        return out
