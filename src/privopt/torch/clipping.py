r"""The clipped sum of per-example gradients of a PyTorch model, without a per-example loop.

``clipped_grad_sum(model, loss_fn, inputs, targets, G)`` returns, per named parameter,

    sum_i min(1, G / ||grad_i||) grad_i,     grad_i = d loss_i / d theta,

with the norm over **all** trainable parameters (flat clipping), in four passes:

1. forward with hooks that keep every parameterised module's inputs and output;
2. one backward to the module outputs only (``torch.autograd.grad``; the weight gradients of
   the non-private backward are never formed);
3. per layer, the squared per-example norms from (input, output gradient): ghost norms or a
   materialised gradient, whichever is cheaper (:mod:`privopt.torch._layers`,
   :mod:`privopt.torch._conv`), or ``torch.func`` for any other layer
   (:mod:`privopt.torch._fallback`);
4. c_i = min(1, G / (||grad_i|| (1 + guard))), and per parameter the contraction
   ``sum_i c_i grad_i`` from the stored tensors (book-keeping: no second backward).

Steps 3 and 4 run without autograd recording and with autocast off (each rule picks its dtypes:
float32 norms, sums in the layer's gradient dtype), and without a host synchronisation until
every contraction is queued (one check that all norms are finite, at the end).

Guarantee: example i contributes ``c_i grad_i`` with ``||c_i grad_i|| <= G``, computed from row
i of the stored tensors only, so the l2 sensitivity of the sum is G under zero-out neighbours
(2G under replace-one) **provided the model and the loss treat examples independently**
(``loss_fn`` returns one loss per example, ``reduction="none"``, and no layer mixes examples).
BatchNorm and other cross-example layers are refused. ``guard`` covers floating-point rounding:
1e-12 in float64, 1e-5 in float32, 2^-7 when the layers compute in 16 bits (autocast). An
example whose loss or gradient is not finite contributes zero (its c_i is 0; the sum stays
finite). A parameter that the forward never reaches gets a zero sum.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from privopt._validate import check_positive
from privopt.torch._fallback import FunctionalRule, flatten_tensors, is_cross_example
from privopt.torch._layers import RULES
from torch import nn

__all__ = ["GradientClipper", "check_model", "clipped_grad_sum"]

_GUARD = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2**-7, torch.float16: 2**-7}


def check_model(model: nn.Module) -> None:
    """Refuse layers that mix the examples of a batch, naming each and its fix."""
    problems = [
        f"{name or 'model'}: {why}"
        for name, m in model.named_modules()
        if (why := is_cross_example(m)) is not None
    ]
    if problems:
        raise ValueError(
            "privopt.torch needs layers that treat examples independently (per-example "
            "gradients and their clipping rely on it): " + "; ".join(problems) + "."
        )


class GradientClipper:
    """Hooks on ``model`` that compute clipped per-example gradient sums (see the module).

    Keep one per model for a training run (hooks stay attached until :meth:`remove`); they
    record only inside :meth:`clipped_sum`.
    """

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected a torch.nn.Module, got {type(model).__name__}.")
        check_model(model)
        self.model = model
        self.names = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
        self._own: dict[str, dict[str, nn.Parameter]] = {}
        self._modules: dict[str, nn.Module] = {}
        self._handles = []
        self._uses: dict[str, list] = {}
        self._active = False
        self._warned: set[str] = set()
        for name, module in model.named_modules():
            if not any(p.requires_grad for p in module.parameters()):
                continue
            self._modules[name] = module
            own = {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}
            if own:
                self._own[name] = own
            self._handles.append(module.register_forward_hook(self._hook(name), with_kwargs=True))

    def _hook(self, name: str):
        def hook(module, args, kwargs, output):
            if self._active:
                tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
                tensors += flatten_tensors(output)
                versions = [t._version for t in tensors]
                self._uses.setdefault(name, []).append((args, kwargs, output, tensors, versions))

        return hook

    def remove(self) -> None:
        """Detach the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- which module computes which parameters this step -------------------------------------
    def _assignment(self) -> dict[str, dict[str, nn.Parameter]]:
        units: dict[str, dict[str, nn.Parameter]] = {}
        for name, own in self._own.items():
            host = name
            while host not in self._uses and host != "":
                host = host.rpartition(".")[0]
            if host not in self._uses:
                self._warn_unreached(name)
                continue
            prefix = name[len(host) + 1 :] + "." if host != name else ""
            units.setdefault(host, {}).update({prefix + k: p for k, p in own.items()})
        return units

    def _warn_unreached(self, name: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"Parameters of {name!r} are not reached by the forward pass: they get a zero "
                "clipped gradient (noise only).",
                stacklevel=4,
            )

    # -- the computation ------------------------------------------------------------------------
    def clipped_sum(
        self, loss_fn: Callable[..., torch.Tensor], inputs: Any, targets: Any, clip_norm: float
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(clipped sums per parameter name, the per-example losses, detached)."""
        clip_norm = check_positive("clip_norm", clip_norm)
        self._uses = {}
        self._active = True
        try:
            outputs = self.model(*inputs) if isinstance(inputs, tuple) else self.model(inputs)
            losses = loss_fn(outputs, targets)
        finally:
            self._active = False
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
            raise ValueError(
                "loss_fn must return one loss per example (shape (batch,), e.g. "
                f"reduction='none'), got {getattr(losses, 'shape', type(losses))}."
            )
        try:
            sums = self._sums(losses, clip_norm)
        finally:
            self._uses = {}
        return sums, losses.detach()

    def _sums(self, losses: torch.Tensor, clip_norm: float) -> dict[str, torch.Tensor]:
        batch = losses.shape[0]
        units = self._assignment()
        grads = self._output_grads(losses, units)
        # the rules read stored tensors only: no autograd graph, and their own dtypes (autocast
        # would run the float32 norm matmuls in 16 bits)
        with torch.no_grad(), torch.autocast(losses.device.type, enabled=False):
            return self._rules_and_sums(units, grads, batch, clip_norm)

    def _rules_and_sums(self, units, grads, batch: int, clip_norm: float):
        rules = []
        for host, params in units.items():
            module = self._modules[host]
            fast = RULES.get(type(module)) if set(params) <= set(self._own.get(host, {})) else None
            uses = []
            for (args, kwargs, *_), g in zip(self._uses[host], grads[host], strict=True):
                if all(x is None for x in g):
                    continue
                uses.append((args, kwargs, g[0] if fast is not None else g))
            if uses:
                rules.append((fast or FunctionalRule)(module, uses, params, batch))
        return self._combine(rules, batch, clip_norm)

    def _output_grads(self, losses, units) -> dict[str, list[list]]:
        wanted, slots = [], []
        for host in units:
            for k, (_, _, output, tensors, versions) in enumerate(self._uses[host]):
                for t, v in zip(tensors, versions, strict=True):
                    if t._version != v:
                        raise RuntimeError(
                            f"An input or output of {host or 'the model'} "
                            f"({type(self._modules[host]).__name__}) was modified in place after "
                            "the layer ran (e.g. ReLU(inplace=True) or x += y); per-example "
                            "gradients need the original values: use out-of-place operations."
                        )
                for j, t in enumerate(flatten_tensors(output)):
                    if t.requires_grad:
                        wanted.append(t)
                        slots.append((host, k, j))
        found = torch.autograd.grad(losses.float().sum(), wanted, allow_unused=True)
        out = {h: [[None] * len(flatten_tensors(u[2])) for u in self._uses[h]] for h in units}
        for (host, k, j), g in zip(slots, found, strict=True):
            out[host][k][j] = g
        return out

    def _combine(self, rules, batch: int, clip_norm: float) -> dict[str, torch.Tensor]:
        params = [p for n, p in self.model.named_parameters() if p.requires_grad]
        device = params[0].device
        norm_dtype = (
            torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32
        )
        counts: dict[int, int] = {}
        for rule in rules:
            for p in rule.params.values():
                counts[id(p)] = counts.get(id(p), 0) + 1
        squared = torch.zeros(batch, dtype=norm_dtype, device=device)
        shared: dict[int, torch.Tensor] = {}
        guard = 0.0
        for rule in rules:
            dtypes = [u[2].dtype for u in rule.uses if isinstance(u[2], torch.Tensor)]
            guard = max([guard] + [_GUARD.get(d, 1e-5) for d in dtypes])
            if all(counts[id(p)] == 1 for p in rule.params.values()):
                squared += rule.squared_norms().to(norm_dtype)
                continue
            rule.shared = True  # tied parameters: per-example gradients summed across layers
            for local, value in rule.per_example().items():
                key = id(rule.params[local])
                shared[key] = shared[key] + value if key in shared else value
        for value in shared.values():
            squared += value.to(norm_dtype).pow(2).flatten(1).sum(1)
        guard = max(guard, _GUARD[norm_dtype])
        norms = squared.sqrt()
        keep = torch.isfinite(norms)
        factor = torch.where(keep, (clip_norm / (norms * (1.0 + guard))).clamp(max=1.0), 0.0)
        # examples left unclipped (factor 1), for adaptive clipping's count: a device tensor,
        # read (one host sync) only by a trainer that releases the noisy count
        self.last_unclipped = (keep & (factor >= 1.0)).sum()

        def contract(mask) -> dict[str, torch.Tensor]:
            sums: dict[str, torch.Tensor] = {}
            for rule in rules:
                if getattr(rule, "shared", False):
                    pieces = {
                        k: _contract(factor, v, mask)
                        for k, v in rule.per_example().items()
                        if counts[id(rule.params[k])] == 1
                    }
                else:
                    pieces = rule.clipped_sums(factor, mask)
                for local, value in pieces.items():
                    sums[self.names[id(rule.params[local])]] = value
            for key, value in shared.items():
                sums[self.names[key]] = _contract(factor, value, mask)
            return sums

        # all examples finite (the usual case): no masks, and the one host synchronisation comes
        # after every contraction is queued; otherwise the contractions again with the rows of
        # the non-finite examples zeroed (0 * nan would spread)
        sums = contract(None)
        if not bool(keep.all()):
            sums = contract(keep)
        return {
            name: sums[name].to(p.dtype) if name in sums else torch.zeros_like(p)
            for name, p in self.model.named_parameters()
            if p.requires_grad
        }


def _contract(factor: torch.Tensor, value: torch.Tensor, mask) -> torch.Tensor:
    if mask is not None:
        value = torch.where(mask.view((-1,) + (1,) * (value.dim() - 1)), value, 0.0)
    return torch.einsum("b,b...->...", factor.to(value.dtype), value)


def clipped_grad_sum(
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    inputs: Any,
    targets: Any,
    clip_norm: float,
) -> dict[str, torch.Tensor]:
    """``sum_i min(1, G / ||grad_i||) grad_i`` per parameter name (see the module docstring).

    Args:
        model: the network (examples independent; BatchNorm refused).
        loss_fn: ``loss_fn(model(inputs), targets)`` -> per-example losses, shape (batch,).
        inputs: a tensor (or a tuple of tensors, passed as ``model(*inputs)``), batch first.
        targets: passed to ``loss_fn``.
        clip_norm: G > 0.

    >>> import torch
    >>> model = torch.nn.Linear(3, 1, bias=False)
    >>> with torch.no_grad():
    ...     _ = model.weight.fill_(1.0)
    >>> x, y = torch.tensor([[1.0, 0, 0], [0, 10.0, 0]]), torch.zeros(2, 1)
    >>> loss = lambda out, y: ((out - y) ** 2).sum(1) / 2
    >>> clipped_grad_sum(model, loss, x, y, clip_norm=1.0)["weight"]  # (1, 0, 0) + (0, 1, 0)
    tensor([[1.0000, 1.0000, 0.0000]])
    """
    clipper = GradientClipper(model)
    try:
        return clipper.clipped_sum(loss_fn, inputs, targets, clip_norm)[0]
    finally:
        clipper.remove()
