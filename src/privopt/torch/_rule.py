r"""The per-layer rule protocol of :mod:`privopt.torch.clipping` and the helpers rules share.

A rule gets the (args, kwargs, output gradient) of each call of one module in one step and
computes ``squared_norms()`` (B,), ``clipped_sums(c, keep)`` and ``per_example()`` (see
:mod:`privopt.torch._layers`). Rules run with autocast disabled and choose their dtypes
themselves: norms in float32 (float64 for float64 models), sums in the dtype of the layer's
output gradient (bf16 under bf16 autocast, as the non-private backward would).

``exact_products(dtype, device)``: a float32 matmul on CUDA whose inputs are exact 16-bit values
(bf16 has 8 significant bits, fp16 11) may use TF32 tensor cores without any rounding of the
products (TF32 keeps 11 significant bits; a product of two 11-bit significands is exact in
float32, and the accumulation is float32), so the Gram matrices of ghost norms of 16-bit layers
run on tensor cores at float32 accuracy (or ``bmm(out_dtype=float32)`` on the 16-bit inputs
directly, :func:`gram`). ``as_convolutions``: materialised per-example convolution gradients at
the precision cuDNN uses for the layer's own gradients. Anything else keeps the caller's
precision.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

__all__ = [
    "LayerRule",
    "as_convolutions",
    "exact_products",
    "gram",
    "norm_dtype",
    "scale_rows",
    "where_kept",
]

_SHORT = (torch.bfloat16, torch.float16)


def norm_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 tensors: the dtype of every squared norm."""
    return torch.promote_types(dtype, torch.float32)


def where_kept(t: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Rows of ``t`` whose example is not kept (non-finite gradient) set to zero."""
    if keep is None:
        return t
    return torch.where(keep.view((-1,) + (1,) * (t.dim() - 1)), t, torch.zeros((), dtype=t.dtype))


def scale_rows(t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Row i of ``t`` times c_i, in ``t``'s dtype."""
    return t * c.view((-1,) + (1,) * (t.dim() - 1)).to(t.dtype)


@contextlib.contextmanager
def _tf32(enabled: bool):
    if not enabled:
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def exact_products(dtype: torch.dtype, device: torch.device):
    """TF32 float32 matmuls while the inputs are exact ``dtype`` (16-bit) values on CUDA."""
    return _tf32(dtype in _SHORT and device.type == "cuda")


def _cudnn_tf32() -> bool:
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except Exception:  # a torch whose flags moved: keep full float32
        return False


def as_convolutions(dtype: torch.dtype, device: torch.device):
    """float32 matmuls at the precision of the layer's own cuDNN convolutions.

    On CUDA with ``torch.backends.cudnn.allow_tf32`` (PyTorch's default) the non-private
    convolution gradients are TF32; the materialised per-example convolution gradients then are
    too. Their norms are float32 norms of exactly the tensors that are summed, so the bound
    ``||c_i W_i|| <= G`` holds for what is released whatever the matmul precision.
    """
    return _tf32(dtype == torch.float32 and device.type == "cuda" and _cudnn_tf32())


_OUT_DTYPE = [True]  # torch.bmm(..., out_dtype=) available (CUDA, torch >= 2.8)


def gram(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x x^T`` per batch entry in ``dtype`` (float32/64) with float32-or-better products.

    16-bit CUDA inputs use ``bmm(out_dtype=float32)`` (exact products, float32 accumulation, no
    float32 copy of ``x``) where torch has it, else a float32 copy on TF32 tensor cores
    (:func:`exact_products`).
    """
    if x.dtype in _SHORT and x.device.type == "cuda" and dtype == torch.float32 and _OUT_DTYPE[0]:
        try:
            return torch.bmm(x, x.transpose(1, 2), out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            _OUT_DTYPE[0] = False
    with exact_products(x.dtype, x.device):
        y = x.to(dtype)
        return torch.bmm(y, y.transpose(1, 2))


class LayerRule:
    """Base: ``uses`` is a list of (args, kwargs, grad_output) of one module's host calls in one
    step, batch first (moved there by the clipper from the probed dimension); the fallback gets
    (call, output gradients) instead."""

    def __init__(self, module: nn.Module, uses: list, params: dict[str, nn.Parameter], batch: int):
        self.module = module
        self.uses = uses
        self.params = params
        self.batch = batch

    def squared_norms(self) -> torch.Tensor:
        per = self.per_example()
        dtype = norm_dtype(next(iter(per.values())).dtype)
        total = torch.zeros(self.batch, dtype=dtype, device=next(iter(per.values())).device)
        for value in per.values():
            total += value.to(dtype).pow(2).flatten(1).sum(1)
        return total

    def per_example(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def clipped_sums(self, c: torch.Tensor, keep: torch.Tensor | None) -> dict[str, torch.Tensor]:
        out = {}
        for name, value in self.per_example().items():
            value = where_kept(value, keep)
            out[name] = torch.einsum("b,b...->...", c.to(value.dtype), value)
        return out

    def _check_batch(self, t: torch.Tensor) -> None:
        if t.dim() == 0 or t.shape[0] != self.batch:
            raise ValueError(
                f"{type(self.module).__name__} got a tensor of shape {tuple(t.shape)}; "
                f"privopt.torch needs the batch (of {self.batch} examples) first in every "
                "layer's input."
            )
