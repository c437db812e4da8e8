r"""Per-example gradients of any other layer with ``torch.func`` (the fallback rule).

For a module M called on the batch with inputs ``a`` and output gradient ``g``, the gradient of
example i with respect to M's parameters theta is the vector-Jacobian product
``d/d theta <M_theta(a_i), g_i>``: ``torch.func.vmap(torch.func.grad(...))`` over the examples,
with M made functional by ``torch.func.functional_call`` (the per-sample-gradient recipe of the
PyTorch tutorials). It materialises (B, *shape) per parameter, so ``chunk_size`` bounds the
memory. The parameters may include those of descendants that M uses without calling them
(``nn.MultiheadAttention`` reads ``out_proj.weight`` directly).

Tensor arguments whose first dimension is the batch size are treated as per-example; every
other argument is shared by the examples.
"""

from __future__ import annotations

from torch.func import functional_call, grad, vmap

import torch
from privopt.torch._rule import LayerRule
from torch import nn

__all__ = ["FunctionalRule", "flatten_tensors"]


def flatten_tensors(value) -> list:
    """The tensors of a (nested) tuple / list / dict output, in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for item in value for t in flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for key in sorted(value) for t in flatten_tensors(value[key])]
    return []


class FunctionalRule(LayerRule):
    """Per-example gradients by ``vmap(grad(<M(a_i), g_i>))`` (see the module docstring)."""

    #: examples per vmap chunk (None: all at once)
    chunk_size: int | None = 256

    def per_example(self):
        if getattr(self, "_cached", None) is not None:
            return self._cached
        names = list(self.params)
        total: dict[str, torch.Tensor] = {}
        for args, kwargs, grads in self.uses:
            for name, value in self._one_use(names, args, kwargs, grads).items():
                total[name] = total[name] + value if name in total else value
        self._cached = total
        return total

    def _one_use(self, names, args, kwargs, grads):
        keys = sorted(kwargs)
        flat = list(args) + [kwargs[k] for k in keys]
        batched = [
            i
            for i, x in enumerate(flat)
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == self.batch
        ]
        pairs = [(i, g) for i, g in enumerate(grads) if g is not None]
        module, n_args = self.module, len(args)

        def inner(params, values, cotangents):
            call = list(flat)
            for i, v in zip(batched, values, strict=True):
                call[i] = v.unsqueeze(0)
            out = functional_call(
                module, params, tuple(call[:n_args]), dict(zip(keys, call[n_args:], strict=True))
            )
            outs = flatten_tensors(out)
            total = 0
            for (i, _), g in zip(pairs, cotangents, strict=True):
                total = total + (outs[i] * g.unsqueeze(0).to(outs[i].dtype)).sum()
            return total

        params = {name: self.params[name].detach() for name in names}
        values = tuple(flat[i].detach() for i in batched)
        cotangents = tuple(g for _, g in pairs)
        try:
            return vmap(grad(inner), in_dims=(None, 0, 0), chunk_size=self.chunk_size)(
                params, values, cotangents
            )
        except Exception as exc:  # torch.func raises many types; name the layer and the cause
            raise RuntimeError(
                f"privopt.torch could not compute per-example gradients of "
                f"{type(module).__name__} with torch.func ({exc}). Use layers privopt supports "
                "(Linear, Conv1d/2d, Embedding, LayerNorm, GroupNorm) or layers that torch.func "
                "can vmap over."
            ) from exc


def is_cross_example(module: nn.Module) -> str | None:
    """Why ``module`` mixes the examples of a batch (None when it does not)."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return (
            f"{type(module).__name__} normalises over the batch, so one example's output depends "
            f"on the others (no per-example gradient exists) and its running statistics are "
            f"released without noise; replace it with nn.GroupNorm(min(32, C), C) "
            f"(C = {module.num_features})"
        )
    if isinstance(module, nn.modules.instancenorm._InstanceNorm) and module.track_running_stats:
        return (
            f"{type(module).__name__}(track_running_stats=True) releases running statistics of "
            "the private data without noise; use track_running_stats=False or nn.GroupNorm"
        )
    if isinstance(module, nn.Embedding) and module.scale_grad_by_freq:
        return "Embedding(scale_grad_by_freq=True) scales gradients by batch-wide frequencies"
    if isinstance(module, nn.Embedding) and module.sparse:
        return (
            "Embedding(sparse=True): privopt.torch produces dense noisy gradients; use sparse=False"
        )
    return None
