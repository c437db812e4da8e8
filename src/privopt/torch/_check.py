r"""``check_model``: refuse cross-example layers, and probe a model on a sample before training.

``check_model(model)`` refuses layers known to mix the examples of a batch (BatchNorm, running
statistics, batch-frequency gradient scaling), naming each and its fix.

``check_model(model, loss_fn=..., sample=(inputs, targets))`` also tests, on the sample:

1. **independence**: for two examples j, example j's input is replaced by another example's
   and the per-example losses of every other example must not move (beyond rounding,
   ``1e3 eps`` of the losses' scale): a module that mixes examples (a batch mean, attention
   across the batch) changes them, whatever its type. Forwards run in the model's own mode
   (train or eval) with the same RNG seed, so dropout draws the same masks in both;
2. **exactness**: on the first ``examples`` examples, :func:`privopt.torch.clipped_grad_sum` at
   the median per-example norm (so that some examples are clipped) equals a loop over the
   examples (each gradient computed alone by autograd on a batch of one, clipped, summed) to
   1e-8 relative in float64 and 1e-4 in lower precision. A model with randomness (two seeds give
   different losses) is compared in eval mode.

It returns a :class:`ModelCheck` (what it found) or raises a ``ValueError`` naming the failure.
The outcome is computed from the sample without noise; a model that treats examples
independently passes on every sample, so ``PrivateTrainer`` states the check's pass as an
assumption of the report and keeps none of its numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import torch
from privopt.torch._calls import call_model, is_args, is_kwargs, tensor_leaves
from privopt.torch._fallback import is_cross_example
from torch import nn

__all__ = ["ModelCheck", "check_model"]


@dataclass(frozen=True)
class ModelCheck:
    """What :func:`check_model` found on a sample.

    Attributes:
        examples: examples in the exactness comparison; batch: examples in the sample.
        independent: the other examples' losses stayed put when one example's input changed.
        largest_change: the largest relative move of another example's loss (0 when exact).
        exact: the clipped sum equals the per-example loop.
        largest_error: its largest relative deviation.
        eval_mode: the comparison ran in eval mode (the model draws random numbers).
        methods: per module name, how its per-example gradients were computed.
    """

    batch: int
    examples: int
    independent: bool
    largest_change: float
    exact: bool
    largest_error: float
    eval_mode: bool
    methods: dict[str, str] = field(default_factory=dict)

    @property
    def assumption(self) -> str:
        """The report line (no data-dependent number)."""
        return (
            "check_model passed on the first batch before any private step: replacing one "
            "example's input moved no other example's loss, and the clipped sum on "
            f"{self.examples} examples equalled a per-example loop (this outcome is computed "
            "from private data without noise; a model that treats examples independently "
            "passes on every batch)"
        )


def _static(model: nn.Module) -> None:
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


def _unpack(x: PackedSequence):
    padded, lengths = pad_packed_sequence(x, batch_first=True)
    return padded, lengths


def _repack(x: PackedSequence, padded, lengths) -> PackedSequence:
    """Sequences packed as ``x`` is (sorted input stays sorted: lengths non-increasing)."""
    return pack_padded_sequence(
        padded, lengths, batch_first=True, enforce_sorted=x.sorted_indices is None
    )


def _rows(value: Any, batch: int, index) -> Any:
    """Rows ``index`` (a slice or index tensor) of every tensor whose first size is ``batch``
    (of a PackedSequence: those sequences, packed the same way)."""
    if isinstance(value, PackedSequence):
        padded, lengths = _unpack(value)
        return _repack(value, padded[index], lengths[index])
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value[index]
    if is_args(value):
        return tuple(_rows(v, batch, index) for v in value)
    if is_kwargs(value):
        return {k: _rows(v, batch, index) for k, v in value.items()}
    return value


def _replace(value: Any, batch: int, j: int, k: int) -> Any:
    """Example j's rows replaced by example k's."""
    if isinstance(value, PackedSequence):
        padded, lengths = _unpack(value)
        padded, lengths = padded.clone(), lengths.clone()
        padded[j], lengths[j] = padded[k], lengths[k]
        # unsorted packing keeps every example in its place (sorted input may stop being so)
        return pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        out = value.clone()
        out[j] = value[k]
        return out
    if is_args(value):
        return tuple(_replace(v, batch, j, k) for v in value)
    if is_kwargs(value):
        return {key: _replace(v, batch, j, k) for key, v in value.items()}
    return value


def _same(a: Any, b: Any, batch: int, j: int, k: int) -> bool:
    if isinstance(a, PackedSequence):
        padded, lengths = _unpack(a)
        return bool(lengths[j] == lengths[k]) and torch.equal(padded[j], padded[k])
    if is_args(a) and any(isinstance(v, PackedSequence) for v in a):
        return all(_same(v, v, batch, j, k) for v in a)
    ta, tb = tensor_leaves(a), tensor_leaves(b)
    return all(
        not (x.dim() > 0 and x.shape[0] == batch) or torch.equal(x[j], x[k]) for x in ta
    ) and len(ta) == len(tb)


def _losses(model, loss_fn, inputs, targets, seed: int) -> torch.Tensor:
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)
        out = call_model(model, inputs)
        return loss_fn(out, targets).detach()


def _eps(t: torch.Tensor) -> float:
    return torch.finfo(t.dtype).eps if t.is_floating_point() else torch.finfo(torch.float32).eps


def _independence(model, loss_fn, inputs, targets, batch: int) -> float:
    base = _losses(model, loss_fn, inputs, targets, 0)
    if tuple(base.shape) != (batch,):
        raise ValueError(
            f"loss_fn must return one loss per example (shape ({batch},)), got {tuple(base.shape)}."
        )
    scale = float(base.abs().max()) + 1.0
    worst = 0.0
    for j in sorted({0, batch - 1}):
        k = next(
            (k for k in range(batch) if k != j and not _same(inputs, inputs, batch, j, k)), None
        )
        if k is None:
            continue
        moved = _losses(model, loss_fn, _replace(inputs, batch, j, k), targets, 0)
        others = torch.ones(batch, dtype=torch.bool, device=base.device)
        others[j] = False
        change = float((moved[others] - base[others]).abs().max()) / scale
        if not math.isfinite(change):
            change = math.inf
        worst = max(worst, change)
    return worst


def _loop(model, loss_fn, inputs, targets, n: int, batch: int, clip: float | None):
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads, norms = [], []
    for i in range(n):
        x, y = _rows(inputs, batch, slice(i, i + 1)), _rows(targets, batch, slice(i, i + 1))
        out = call_model(model, x)
        loss = loss_fn(out, y).sum()
        found = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        g = [
            torch.zeros_like(p) if f is None else f.detach()
            for (_, p), f in zip(params, found, strict=True)
        ]
        grads.append(g)
        norms.append(math.sqrt(sum(float(v.double().pow(2).sum()) for v in g)))
    return params, grads, norms


def check_model(
    model: nn.Module, loss_fn=None, sample: tuple | None = None, *, examples: int = 4
) -> ModelCheck | None:
    """Refuse cross-example layers; with ``sample``, probe the model (see the module docstring).

    Args:
        model: the network.
        loss_fn: ``loss_fn(model(inputs), targets)`` -> per-example losses (with ``sample``).
        sample: ``(inputs, targets)``, batch first, at least two examples for the
            independence test; inputs as :func:`privopt.torch.clipped_grad_sum` takes them (a
            tensor, a tuple for ``model(*inputs)``, a mapping for ``model(**inputs)``).
        examples: examples in the exactness comparison (a loop of that many backward passes).

    Returns:
        None without ``sample``; else a :class:`ModelCheck` of a passed check.

    Raises:
        ValueError: a cross-example layer, a module whose examples cannot be followed, or a
            failed probe (the message says which and by how much).
    """
    _static(model)
    if sample is None:
        return None
    if loss_fn is None:
        raise ValueError("check_model(model, loss_fn=..., sample=...) needs loss_fn with sample.")
    from privopt.torch.clipping import GradientClipper, batch_size, refuse_unfollowable_inputs

    inputs, targets = sample
    batch = batch_size(inputs)
    if batch == 0:
        raise ValueError("check_model needs a sample with at least one example.")
    refuse_unfollowable_inputs(model, inputs)  # named refusals before any perturbed forward
    tensors = tensor_leaves(inputs)
    ref = next((t for t in tensors if t.is_floating_point()), None)
    params = [p for p in model.parameters() if p.requires_grad]
    dtype = params[0].dtype if params else torch.float32
    change = _independence(model, loss_fn, inputs, targets, batch) if batch > 1 else 0.0
    tol_change = (
        1e3 * torch.finfo(dtype).eps
        if ref is None
        else 1e3 * max(_eps(ref), torch.finfo(dtype).eps)
    )
    if change > tol_change:
        raise ValueError(
            "check_model: replacing one example's input moved another example's loss by "
            f"{change:.3g} of the losses' scale: the model or loss_fn mixes the examples of a "
            "batch (e.g. a batch mean or attention across the batch), so no per-example "
            "gradient exists. Make every example's output depend on its own input only."
        )
    random = batch > 0 and not torch.equal(
        _losses(model, loss_fn, inputs, targets, 1), _losses(model, loss_fn, inputs, targets, 2)
    )
    n = min(batch, int(examples))
    sub_x, sub_y = _rows(inputs, batch, slice(0, n)), _rows(targets, batch, slice(0, n))
    modes = {m: m.training for m in model.modules()}
    if random:
        model.eval()
    clipper = GradientClipper(model)
    try:
        names, grads, norms = _loop(model, loss_fn, sub_x, sub_y, n, n, None)
        positive = sorted(v for v in norms if v > 0)
        clip = positive[len(positive) // 2] if positive else 1.0
        got, _ = clipper.clipped_sum(loss_fn, sub_x, sub_y, clip)
        methods = dict(clipper.methods)
    finally:
        clipper.remove()
        for m, flag in modes.items():
            m.train(flag)
    diff, scale = 0.0, 0.0
    for idx, (name, _) in enumerate(names):
        want = sum(
            (min(1.0, clip / norms[i]) if norms[i] > 0 else 1.0) * grads[i][idx].double()
            for i in range(n)
        )
        scale = max(scale, float(want.abs().max()))
        diff = max(diff, float((got[name].double() - want).abs().max()))
    error = diff / scale if scale > 0 else diff  # relative to the largest entry of the sum
    tol = 1e-8 if dtype == torch.float64 else 1e-4
    if not error <= tol:
        raise ValueError(
            f"check_model: the clipped sum on {n} examples differs from a per-example loop by "
            f"{error:.3g} (relative; tolerance {tol:g}): privopt.torch computes a wrong "
            f"per-example gradient for this model (modules and methods: {methods}). Please "
            "report it; replace the module computed wrongly."
        )
    return ModelCheck(batch, n, True, change, True, error, random, methods)
