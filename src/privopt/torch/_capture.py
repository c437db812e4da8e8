r"""How :func:`privopt.torch.make_private` follows the user's ``forward`` and ``backward``.

The user's loop computes ``loss = L(model(x), y)`` and calls ``loss.backward()``. privopt needs,
for each example i of the batch, ``grad_i = d loss_i / d theta``; the loop gives only
``d L / d theta``. What the loop does give exactly is the gradient of L with respect to the
model's **output**, ``v = d L / d out`` (one backward through the loss only), and for a loss
that is a sum (``loss_reduction="sum"``) or a mean (``"mean"``, B examples) of per-example
losses ``l_i(out_i, y_i)``, row i of v is ``d l_i / d out_i`` (times 1/B for the mean). So

    grad_i = (d out_i / d theta)^T (s v_i),     s = 1 (sum) or B (mean),

which is the gradient of the **surrogate** per-example loss ``l~_i = <out_i, s v_i>`` (v held
fixed): :class:`privopt.torch.GradientClipper` computes the exact clipped sum
``sum_i min(1, G / ||grad_i||) grad_i`` of that surrogate on the recorded batch (its own forward
with the batch's dropout masks: torch's RNG state is restored to the one the loop's forward
began with; the recomputed output is compared with the loop's, and a model whose output
changed is refused).

So the loop's forward (hooks on the model) returns the output **detached from the
parameters**, passed through :class:`_Capture`, an autograd function whose backward records v:
``loss.backward()`` costs one backward through the loss only, and no parameter gets a
gradient from it. Under autocast the 16-bit outputs come back widened to float32 (the same
values), so v (scaled by a ``GradScaler`` or not) is float32 and cannot overflow where the
16-bit output would; ``run.optimizer.step()`` divides the scaler's scale back out.

Assumption (stated in the report): the loop's loss is a sum or mean over the batch of
per-example losses, each a function of its own example's output (``F.cross_entropy``,
``F.mse_loss`` and every ``reduction="mean"``/``"sum"`` loss of ``torch.nn.functional``); a
loss that couples examples (a contrastive loss over the batch, a batch-normalised loss) has no
per-example gradient, and its v_i would carry other examples' data. The model's
independence is tested by :func:`privopt.torch.check_model` on the first batch.
"""

from __future__ import annotations

import math
from typing import Any

from torch.utils._pytree import tree_flatten, tree_unflatten

import torch

__all__ = ["Capture", "LoopHooks", "SurrogateLoss", "rng_state", "set_rng_state"]


def rng_state(device: torch.device) -> tuple:
    """torch's CPU generator state, and the device's when it is a GPU."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class _Capture(torch.autograd.Function):
    """Identity on the output leaves (16-bit ones widened to float32); its backward hands the
    output gradients to ``sink`` and returns no gradient at all (the parameters' gradients
    are computed by ``step()``, clipped per example)."""

    @staticmethod
    def forward(ctx, anchor, sink, *leaves):
        ctx.sink = sink
        return tuple(
            leaf.float() if leaf.dtype in (torch.float16, torch.bfloat16) else leaf.view_as(leaf)
            for leaf in leaves
        )

    @staticmethod
    def backward(ctx, *grads):
        ctx.sink(grads)
        return (None, None, *(None for _ in grads))


class Capture:
    """The output of one forward of the loop, wrapped so that its backward is recorded."""

    def __init__(self, output: Any, batch: int, anchor: torch.Tensor, sink) -> None:
        leaves, self.spec = tree_flatten(output)
        self.slots = [
            k
            for k, t in enumerate(leaves)
            if isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and t.dim() > 0
            and t.shape[0] == batch
        ]
        if not self.slots:
            raise ValueError(
                f"The model's output has no floating-point tensor with the batch ({batch} "
                "examples) first; privopt follows the examples through a batch-first output."
            )
        self.seen = [leaves[k].detach() for k in self.slots]  # compared with the recomputation
        wrapped = _Capture.apply(anchor, sink, *self.seen)
        leaves = list(leaves)
        for k, t in zip(self.slots, wrapped, strict=True):
            leaves[k] = t
        self.output = tree_unflatten(leaves, self.spec)


class SurrogateLoss:
    """``l~_i = sum over the output's batch-first leaves of <out_i, v_i>`` (the targets are
    the scaled output gradients v, one tensor per leaf, batch first), in float32 (float64 for a
    float64 model). With ``seen``, the first call compares the recomputed output with the
    loop's and refuses a model whose output changed."""

    def __init__(self, slots: list[int], seen: list[torch.Tensor] | None = None) -> None:
        self.slots, self.seen = slots, seen

    def __call__(self, output: Any, grads: tuple[torch.Tensor, ...]) -> torch.Tensor:
        leaves, _ = tree_flatten(output)
        picked = [leaves[k] for k in self.slots]
        if self.seen is not None:
            self._compare(picked)
            self.seen = None
        total = None
        for out, v in zip(picked, grads, strict=True):
            wide = out.to(v.dtype).reshape(out.shape[0], -1)
            term = (wide * v.reshape(v.shape[0], -1)).sum(1)
            total = term if total is None else total + term
        return total

    def _compare(self, picked: list[torch.Tensor]) -> None:
        for new, old in zip(picked, self.seen, strict=True):
            if new.shape != old.shape:
                raise ValueError(
                    f"The model's output on this batch has shape {tuple(new.shape)} in "
                    f"privopt's recomputation and {tuple(old.shape)} in the loop's forward."
                )
            scale = float(old.detach().abs().max()) if old.numel() else 0.0
            gap = float((new.detach().float() - old.float()).abs().max()) if old.numel() else 0.0
            if not gap <= 1e-3 * scale + 1e-6:
                raise ValueError(
                    "The model's output on this batch changed between the loop's forward and "
                    "privopt's recomputation: the forward must be a function of the inputs, "
                    "the parameters and torch's RNG state (no numpy or Python randomness, no "
                    "state changed between forward and step), so that the per-example gradients "
                    "are those of the loop's loss."
                )


def _leaves(value) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


class LoopHooks:
    """The :class:`~privopt.torch.PrivateRun` methods the loop's forward, backward and the
    GradScaler meet (the hooks on the model, the capture's sink, the placeholder gradient)."""

    def _pre_forward(self, module, args, kwargs):
        if self._internal or not torch.is_grad_enabled():
            return None
        given = {id(t) for t in _leaves((args, kwargs))}
        batch = None if self._batch is None else self._batch[0]
        mine = {id(t) for t in _leaves(batch)} if batch is not None else set()
        if not given or given != mine or self._phase not in ("batch", "forward"):
            if not module.training:  # evaluation with gradients on: not the private batch
                return None
            raise RuntimeError(self._why_not_forward(args, kwargs, given, mine))
        if self._phase == "forward":
            raise RuntimeError(
                "run.model ran twice on one batch; the plan expects one forward, backward and "
                "step per batch."
            )
        if kwargs and args:
            raise ValueError(
                f"run.model got positional and keyword inputs ({sorted(kwargs)}); pass the "
                "batch one way, as run.loader yields it: run.model(x), run.model(*x) or "
                "run.model(**x)."
            )
        kind = self.device.type
        enabled = torch.is_autocast_enabled(kind)
        dtype = torch.get_autocast_dtype(kind) if enabled else None
        if enabled and self._noise_dtype == torch.float64:
            raise ValueError(
                "torch.autocast with a float64 model: autocast leaves float64 computations in "
                "float64, so it would do nothing; drop autocast or use model.float()."
            )
        self._autocast_state = dtype
        self._args, self._armed = (dict(kwargs) if kwargs else args), True
        self._rng = (rng_state(self.device), None)
        return None

    def _post_forward(self, module, args, output):
        if not self._armed:
            return None
        self._armed = False
        self._rng = (self._rng[0], rng_state(self.device))
        n = len(self._chunks[self._chunk])
        self._capture = Capture(output, n, self._anchor, self._on_backward)
        self._phase = "forward"
        return self._capture.output

    def _on_backward(self, grads) -> None:
        if self._phase != "forward":
            raise RuntimeError(
                "backward() reached run.model's output twice for one batch (retain_graph); the "
                "plan expects one backward per batch."
            )
        self._grads = tuple(g.detach() for g in grads)
        scaler = self.grad_scaler
        self._scale = scaler.get_scale() if scaler is not None and scaler.is_enabled() else 1.0
        # the placeholder a GradScaler unscales and checks: inf (skip) only when the scale is
        # not finite, a public condition; never from the data
        self._skip = not math.isfinite(self._scale) or self._scale <= 0
        fill = math.inf if self._skip else 1.0
        self._holder.grad = torch.full_like(self._holder, fill)
        self._holder_grad = self._holder.grad
        self._phase = "backward"

    def _why_not_forward(self, args, kwargs, given, mine) -> str:
        if self._batch is None or self._phase == "idle":
            return (
                "run.model ran in training mode with gradients on inputs that run.loader did not "
                "yield for this step; train on the batches of run.loader (evaluate under "
                "torch.no_grad() or in eval mode)."
            )
        if self._phase in ("forward", "backward"):
            return (
                "run.model ran again before run.optimizer.step() for this batch; the plan "
                "expects one forward, backward and step per batch."
            )
        sizes = sorted({int(t.shape[0]) for t in _leaves((args, kwargs)) if t.dim() > 0})
        expected = len(self._chunks[self._chunk])
        return (
            f"run.model got inputs that are not the tensors run.loader yielded for this step "
            f"(batch size {sizes} where the plan's batch has {expected}; converted, sliced or "
            "another batch): pass the batch as yielded; convert the dataset instead."
        )

    def _read_placeholder(self) -> float:
        g = self._holder.grad
        if g is None or g is not self._holder_grad:
            raise RuntimeError(
                "The gradients were cleared or replaced between backward() and step() (e.g. "
                "zero_grad() in between); call zero_grad() before the forward."
            )
        value = float(g.reshape(-1)[0])
        scaler = self.grad_scaler
        if scaler is not None and scaler.is_enabled():
            expected = float(torch.tensor(1.0 / self._scale, dtype=torch.float32))
            if value == 1.0 and self._scale != 1.0:
                raise RuntimeError(
                    "With grad_scaler, step through scaler.step(run.optimizer) (it unscales "
                    "first), not run.optimizer.step()."
                )
            if abs(value - expected) > 1e-6 * expected:
                raise RuntimeError(
                    "The gradients were modified between backward() and step() (e.g. "
                    "clip_grad_norm_); privopt clips per example, nothing else is needed."
                )
            return value
        if value != 1.0:
            raise RuntimeError(
                "The gradients changed between backward() and step() (a GradScaler not given "
                "to make_private, clip_grad_norm_, or a gradient from outside run.model's "
                "output such as a weight penalty): pass grad_scaler=scaler to make_private; "
                "privopt clips per example (no clip_grad_norm_); use weight_decay."
            )
        return 1.0
