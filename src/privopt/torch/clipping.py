r"""The clipped sum of per-example gradients of a PyTorch model, without a per-example loop.

``clipped_grad_sum(model, loss_fn, inputs, targets, G)`` returns, per named parameter,

    sum_i min(1, G / ||grad_i||) grad_i,     grad_i = d loss_i / d theta,

with the norm over **all** trainable parameters (flat clipping), each parameter counted once by
identity however many modules register it and however often the forward uses it:

1. forward with hooks that keep every module call's inputs and output, and a torch-function mode
   that records where each parameter is used (:mod:`privopt.torch._calls`);
2. the batch dimension of every tensor of every call from a probe (one more forward with the
   first example appended, cached per layout), never from a size that happens to equal B;
3. per parameter its host calls: the innermost calls enclosing its uses whose examples stay in
   known batch dimensions (every use covered exactly once);
4. one backward to the host calls' outputs only (``torch.autograd.grad``);
5. per host, the squared per-example norms: ghost norms or a materialised gradient for Linear,
   Conv1d/2d, Embedding, LayerNorm, GroupNorm, RMSNorm, Hugging Face's Conv1D and RMSNorms
   (verified against the recorded output) and their subclasses that keep ``forward``
   (:mod:`privopt.torch._layers`, :mod:`privopt.torch._conv`, :mod:`privopt.torch._hf`; a layer
   whose output is shared by the batch and enters it by one broadcast addition, such as GPT-2's
   position embedding, through that sum's gradient: :mod:`privopt.torch._calls`), ``torch.func``
   or a per-example loop for any other module (:mod:`privopt.torch._fallback`); a parameter with
   several hosts sums its per-example gradients across them before the norm;
6. c_i = min(1, G / (||grad_i|| (1 + guard))), and per parameter ``sum_i c_i grad_i`` from the
   stored tensors (book-keeping: no second backward).

Steps 5 and 6 run without autograd recording and with autocast off (each rule picks its dtypes:
float32 norms, sums in the layer's gradient dtype).

Guarantee: example i contributes ``c_i grad_i`` with ``||c_i grad_i|| <= G``, computed from row
i of the stored tensors only, so the l2 sensitivity of the sum is G under zero-out neighbours
(2G under replace-one) **provided the model and the loss treat examples independently**
(``loss_fn`` returns one loss per example, ``reduction="none"``, and no layer mixes examples:
:func:`check_model` tests this on a sample). BatchNorm and other cross-example layers are
refused; where the batch cannot be followed through a module (merged with another dimension,
a rank or call sequence that depends on the batch size, a parameter used outside the model),
the call raises :class:`~privopt.torch._calls.LayoutError` (a ``ValueError``) naming the module,
its type and the fix. ``guard`` covers floating-point rounding: 1e-12 in float64, 1e-5 in
float32, 2^-7 when the layers compute in 16 bits (autocast). An example whose loss or gradient
is not finite contributes zero (its c_i is 0; the sum stays finite). A parameter that the
forward never reaches gets a zero sum; an empty batch gives zero sums.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from torch.nn.utils.rnn import PackedSequence

import torch
from privopt._validate import check_positive
from privopt.torch._calls import (
    CallRecorder,
    LayoutError,
    Layouts,
    _has_packed,
    batch_dims,
    call_model,
    grown_inputs,
    is_args,
    packed_leaves,
    tap_consistent,
    tap_error,
    tensor_leaves,
)
from privopt.torch._check import ModelCheck, check_model
from privopt.torch._fallback import FunctionalRule
from privopt.torch._groups import Groups, group_squared_norms, per_example
from privopt.torch._hf import hf_layout, hf_rules, rms_rule
from privopt.torch._layers import RULES
from torch import nn

__all__ = ["GradientClipper", "LayoutError", "ModelCheck", "check_model", "clipped_grad_sum"]

_GUARD = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2**-7, torch.float16: 2**-7}


def batch_size(inputs: Any) -> int:
    """B: the first dimension of the first input tensor (inputs are batch first), or the number
    of sequences of a PackedSequence."""
    first = inputs[0] if is_args(inputs) and inputs else inputs
    if isinstance(first, PackedSequence):
        if first.sorted_indices is not None:
            return int(first.sorted_indices.shape[0])
        return int(first.batch_sizes[0]) if len(first.batch_sizes) else 0
    tensors = tensor_leaves(inputs)
    if not tensors or tensors[0].dim() == 0:
        raise ValueError("inputs must hold at least one tensor with the batch first.")
    return int(tensors[0].shape[0])


def _fast_rule(module: nn.Module):
    """(rule, layer type) for a supported layer or a subclass that keeps its forward."""
    rules = {**RULES, **hf_rules()}
    for base in type(module).__mro__:
        if base in rules:
            if type(module).forward is base.forward:
                return rules[base], base
            return None
    return rms_rule(module)


def _fast_layout(base: type, module: nn.Module, call) -> int | None:
    """The batch dimension the fast rule can use for ``call`` (None: use the fallback); a
    tapped call (shared input of leading size 1, output R batched in dimension 0) uses 0 on its
    input expanded to the batch."""
    if len(call.args) != 1 or call.kwargs or len(call.inputs) != 1 or len(call.outputs) != 1:
        return None
    d, e = call.in_dims[0], call.out_dims[0]
    x = call.inputs[0]
    if call.shared is not None and d is None and e == 0 and x.dim() > 0 and x.shape[0] == 1:
        d = 0
    if not isinstance(d, int) or d != e:
        return None
    if base is nn.Linear:
        return d if d < x.dim() - 1 else None
    if base is nn.Embedding:
        return d
    if base is nn.LayerNorm or base is getattr(nn, "RMSNorm", None):
        return d if d < x.dim() - len(module.normalized_shape) else None
    if base is nn.GroupNorm:
        return d if d == 0 and x.dim() >= 2 else None
    if base in (nn.Conv1d, nn.Conv2d):
        return d if d == 0 and x.dim() == (3 if base is nn.Conv1d else 4) else None
    return hf_layout(base, module, call, d)


class GradientClipper:
    """Hooks on ``model`` that compute clipped per-example gradient sums (see the module).

    Keep one per model for a training run (hooks stay attached until :meth:`remove`); they
    record only inside :meth:`clipped_sum`. Between calls the clipper keeps no tensor of the
    data; it caches probed layouts (per call of each module, the tensor shapes with the batch
    dimension abstracted), functions of the input shapes.
    """

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected a torch.nn.Module, got {type(model).__name__}.")
        check_model(model)
        self.model = model
        self.names = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
        self._trainable = {id(p): p for n, p in model.named_parameters() if p.requires_grad}
        self._recorder = CallRecorder(model, self._trainable)
        self._layouts = Layouts()
        self._taps: list = []  # per tapped call of the step: (call, its accounting flag)
        self._warned: set[str] = set()
        #: per host module, the method of the last step ("Linear rule", "torch.func", "loop")
        self.methods: dict[str, str] = {}

    def remove(self) -> None:
        """Detach the hooks."""
        self._recorder.remove()

    def _forward(self, inputs):
        return call_model(self.model, inputs)

    # -- the computation ------------------------------------------------------------------------
    def clipped_sum(
        self,
        loss_fn: Callable[..., torch.Tensor],
        inputs: Any,
        targets: Any,
        clip_norm: float,
        *,
        count_unclipped: bool = False,
        groups: Any = None,
        group_reduction: str = "sum",
    ):
        """(clipped sums per parameter name, the per-example losses, detached), and with
        ``count_unclipped`` the examples (users) left unclipped (a device tensor, exact and
        un-noised). ``groups``: each example's user slot 0 .. U-1 (host array); each user's
        summed gradient is clipped (mean: ``group_reduction``; :mod:`privopt.torch._groups`);
        with ``clip_norm=inf`` the count is whether every user's sum is finite."""
        clip_norm = check_positive("clip_norm", clip_norm, allow_inf=groups is not None)
        if group_reduction not in ("sum", "mean"):
            raise ValueError(f"Expected user_clipping 'sum' or 'mean', got {group_reduction!r}.")
        batch = batch_size(inputs)
        if batch == 0:
            sums = {
                n: torch.zeros_like(p) for n, p in self.model.named_parameters() if p.requires_grad
            }
            device = next(iter(self._trainable.values())).device
            empty = torch.zeros(0, device=device)
            return (
                (sums, empty, torch.zeros((), dtype=torch.long))
                if count_unclipped
                else (sums, empty)
            )
        rec = self._recorder
        try:
            with rec.recording():
                outputs = self._forward(inputs)
                losses = loss_fn(outputs, targets)
            _refuse_bag_offsets(rec.calls, inputs)
            if not isinstance(losses, torch.Tensor) or tuple(losses.shape) != (batch,):
                raise ValueError(
                    f"loss_fn must return one loss per example (shape ({batch},), e.g. "
                    f"reduction='none'), got {getattr(losses, 'shape', type(losses))}."
                )
            if groups is not None:
                device = next(iter(self._trainable.values())).device
                groups = (Groups(groups, batch, device), group_reduction)
            sums, unclipped = self._sums(losses, clip_norm, inputs, batch, groups)
        finally:
            rec.clear()
            self._taps = []
        return (sums, losses.detach(), unclipped) if count_unclipped else (sums, losses.detach())

    def _layout(self, inputs, batch: int) -> list:
        calls = self._recorder.calls
        if self._layouts.lookup(calls, batch):
            return calls
        try:
            probed = self._recorder.probe(lambda: self._forward(grown_inputs(inputs, batch)))
        except LayoutError:
            raise
        except Exception as exc:
            raise LayoutError(
                "privopt.torch finds each layer's batch dimension by a second forward with the "
                f"batch's first example appended (B + 1 = {batch + 1} examples); that forward "
                f"failed ({type(exc).__name__}: {exc}). Make the model accept any batch size."
            ) from exc
        real_names = [c.name for c in calls]
        if [c.name for c in probed] != real_names:
            raise LayoutError(
                "The sequence of module calls changes with the batch size (e.g. a loop over the "
                "examples or a branch on x.shape[0]); privopt.torch cannot follow the examples "
                "through it. Vectorise the forward over the batch."
            )
        for c, p in zip(calls, probed, strict=True):
            shapes = [tuple(t.shape) for t in c.inputs + c.outputs]
            dims = batch_dims(shapes, p.inputs + p.outputs, batch)
            c.in_dims, c.out_dims = dims[: len(c.inputs)], dims[len(c.inputs) :]
        self._layouts.store(calls)
        return calls

    @staticmethod
    def _why_not(call) -> str | None:
        """Why ``call`` cannot host per-example gradients (None: it can)."""
        packed = packed_leaves(call)
        if packed is None and any(_has_packed(v) for v in (call.args, call.kwargs, call.output)):
            return (
                "it takes or returns a PackedSequence other than as a packed call (a "
                "PackedSequence first, returned packed the same way first, as nn.LSTM does)"
            )
        if call.shared is not None and (
            call.out_dims != [0] or any(d is not None for d in call.in_dims)
        ):
            return (
                "its output is shared by the batch and the broadcast sum that uses it does not "
                "keep the batch in dimension 0"
            )
        packed = packed or set()
        for t, d in zip(call.inputs, call.in_dims, strict=True):
            if id(t) in packed:
                continue
            if d == "?":
                return f"an input of shape {tuple(t.shape)} has no single batch dimension"
        grads = [
            (t, d) for t, d in zip(call.outputs, call.out_dims, strict=True) if t.requires_grad
        ]
        if not grads:
            return "none of its outputs carries a gradient"
        for t, d in grads:
            if id(t) not in packed and not isinstance(d, int):
                return f"its output of shape {tuple(t.shape)} has no single batch dimension"
        return None

    def _hosts(self, calls) -> dict[tuple, dict[str, nn.Parameter]]:
        """(host module name, host call indices) -> {local name: parameter}."""
        eligible: dict[int, str | None] = {}

        def why(k):
            if k not in eligible:
                packed = next(
                    (j for j in list(chain(k))[1:] if packed_leaves(calls[j]) is not None), None
                )
                if packed is not None:  # its rows are in the packed (length-sorted) order
                    eligible[k] = f"it runs inside the packed call of {calls[packed].label}"
                else:
                    eligible[k] = self._why_not(calls[k])
            return eligible[k]

        def chain(k):
            while k is not None:
                yield k
                k = calls[k].parent

        per_module: dict[tuple, dict[int, nn.Parameter]] = {}
        for pid, p in self._trainable.items():
            where = self._recorder.uses.get(pid)
            if not where:
                self._warn_unreached(self.names[pid])
                continue
            if None in where:
                raise LayoutError(
                    f"Parameter {self.names[pid]!r} is used outside the model's forward (e.g. in "
                    "loss_fn); privopt.torch computes per-example gradients inside module calls "
                    "only. Move that computation into a module of the model."
                )
            candidates = set()
            for k in where:
                host = next((j for j in chain(k) if why(j) is None), None)
                if host is None:
                    c = calls[k]
                    raise LayoutError(
                        f"privopt.torch cannot follow the examples through {c.label}: {why(k)}, "
                        "and no enclosing module keeps them apart either. Keep the batch in its "
                        "own dimension (e.g. not merged into x.view(B * T, D)) and the same "
                        "model code for every batch size."
                    )
                candidates.add(host)
            final = {k for k in candidates if not any(j in candidates for j in list(chain(k))[1:])}
            by_module: dict[str, list[int]] = {}
            for k in sorted(final):
                by_module.setdefault(calls[k].name, []).append(k)
            for name, ks in by_module.items():
                per_module.setdefault((name, tuple(ks)), {})[pid] = p
        units = {}
        for (name, ks), params in per_module.items():
            module = calls[ks[0]].module
            local = {}
            for n, q in module.named_parameters(remove_duplicate=False):
                if id(q) in params and id(q) not in local:
                    local[id(q)] = n
            units[(name, ks)] = {local[pid]: p for pid, p in params.items()}
        return units

    def _warn_unreached(self, name: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"Parameter {name!r} is not reached by the forward pass: it gets a zero "
                "clipped gradient (noise only).",
                stacklevel=5,
            )

    def _sums(self, losses: torch.Tensor, clip_norm: float, inputs, batch: int, groups=None):
        calls = self._layout(inputs, batch)
        units = self._hosts(calls)
        grads = self._output_grads(losses, units, calls)
        # the rules read stored tensors only: no autograd graph, and their own dtypes (autocast
        # would run the float32 norm matmuls in 16 bits)
        with torch.no_grad(), torch.autocast(losses.device.type, enabled=False):
            rules = self._rules(units, grads, calls, batch)
            return self._combine(rules, batch, clip_norm, groups)

    def _rules(self, units, grads, calls, batch: int) -> list:
        rules, self.methods = [], {}
        for (name, ks), params in units.items():
            module = calls[ks[0]].module
            fast = _fast_rule(module)
            uses, dims = [], []
            for k in ks:
                if all(g is None for g in grads[k]):
                    continue
                uses.append(k)
                dims.append(_fast_layout(fast[1], module, calls[k]) if fast else None)
            if not uses:
                continue
            if fast and set(params) <= {"weight", "bias"} and all(d is not None for d in dims):
                moved = [
                    ((_batch_first(calls[k], d, batch),), {}, grads[k][0].movedim(d, 0))
                    for k, d in zip(uses, dims, strict=True)
                ]
                rules.append(fast[0](module, moved, params, batch))
                self.methods[name] = f"{fast[1].__name__} rule"
            else:
                rules.append(
                    FunctionalRule(module, [(calls[k], grads[k]) for k in uses], params, batch)
                )
                self.methods[name] = "torch.func"
        return rules

    def _output_grads(self, losses, units, calls) -> dict[int, list]:
        wanted, slots = [], []
        for _, ks in units:
            for k in ks:
                c = calls[k]
                for t, v in zip(c.inputs + c.outputs, c.versions, strict=True):
                    if t._version != v:
                        raise RuntimeError(
                            f"An input or output of {c.label} was modified in place after the "
                            "layer ran (e.g. ReLU(inplace=True) or x += y); per-example "
                            "gradients need the original values: use out-of-place operations."
                        )
                for j, t in enumerate(c.outputs):
                    if t.requires_grad:
                        wanted.append(t)
                        slots.append((k, j))
                if c.shared is not None:  # dL/dO too, for the identity accounting
                    wanted.append(c.shared)
                    slots.append((k, -1))
        found = (
            torch.autograd.grad(losses.float().sum(), wanted, allow_unused=True) if wanted else ()
        )
        out = {k: [None] * len(calls[k].outputs) for _, ks in units for k in ks}
        shared = {}
        for (k, j), g in zip(slots, found, strict=True):
            if j < 0:
                shared[k] = g
            else:
                out[k][j] = g
        # read at the one host synchronisation of _combine
        self._taps = [(calls[k], tap_consistent(out[k][0], g)) for k, g in shared.items()]
        return out

    def _combine(self, rules, batch: int, clip_norm: float, grouped=None):
        params = list(self._trainable.values())
        device = params[0].device
        norm_dtype = (
            torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32
        )
        counts: dict[int, int] = {}
        for rule in rules:
            for p in rule.params.values():
                counts[id(p)] = counts.get(id(p), 0) + 1
        groups = None if grouped is None else grouped[0]
        rows = batch if groups is None else groups.size  # examples, or users
        squared = torch.zeros(rows, dtype=norm_dtype, device=device)
        shared: dict[int, torch.Tensor] = {}
        guard = 0.0
        for rule in rules:
            dtypes = [_grad_dtype(u) for u in rule.uses]
            guard = max([guard] + [_GUARD.get(d, 1e-5) for d in dtypes if d is not None])
            if all(counts[id(p)] == 1 for p in rule.params.values()):
                if groups is None:
                    norms = rule.squared_norms()
                else:
                    norms = group_squared_norms(rule, groups, norm_dtype)
                _check_rows(norms, (rows,), rule)
                squared += norms.to(norm_dtype)
                continue
            rule.shared = True  # a parameter with several hosts: per-example gradients summed
            for local, value in per_example(rule).items():
                _check_rows(value, (batch, *rule.params[local].shape), rule)
                key = id(rule.params[local])
                shared[key] = shared[key] + value if key in shared else value
        for value in shared.values():
            value = value if groups is None else groups.segment(value, norm_dtype)
            squared += value.to(norm_dtype).pow(2).flatten(1).sum(1)
        guard = max(guard, _GUARD[norm_dtype])
        norms = squared.sqrt()
        keep = torch.isfinite(norms)
        mean = groups is not None and grouped[1] == "mean"
        scale = groups.count_tensor.to(norm_dtype) if mean else 1.0
        factor = torch.where(
            keep, (clip_norm * scale / (norms * (1.0 + guard))).clamp(max=1.0), 0.0
        )
        unclipped = (keep & (factor >= 1.0)).sum()  # returned only when asked for
        if groups is not None:  # c_u (/ n_u for the mean) for each of the user's examples
            unclipped = keep.all() if clip_norm == math.inf else unclipped
            factor, keep = (factor / scale)[groups.index], keep[groups.index]

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
                    _check_rows(value, tuple(rule.params[local].shape), rule)
                    sums[self.names[id(rule.params[local])]] = value
            for key, value in shared.items():
                sums[self.names[key]] = _contract(factor, value, mask)
            return sums

        # all examples finite (the usual case): no masks, and the one host synchronisation comes
        # after every contraction is queued; otherwise the contractions again with the rows of
        # the non-finite examples zeroed (0 * nan would spread)
        sums = contract(None)
        taps, self._taps = self._taps, []  # no call (tensors of the data) kept past the step
        flags = torch.stack([keep.all(), *(ok.to(device) for _, ok in taps)]).tolist()
        for (call, _), ok in zip(taps, flags[1:], strict=True):
            if not ok:
                raise tap_error(call)
        if not flags[0]:
            sums = contract(keep)
        out = {
            name: sums[name].to(p.dtype) if name in sums else torch.zeros_like(p)
            for name, p in self.model.named_parameters()
            if p.requires_grad
        }
        return out, unclipped


def _batch_first(call, d: int, batch: int) -> torch.Tensor:
    """The call's input with the batch first (a tapped call's shared input expanded to it)."""
    x = call.inputs[0]
    if call.shared is not None and call.in_dims[0] is None:
        return x.expand(batch, *x.shape[1:])
    return x.movedim(d, 0)


def _refuse_bag_offsets(calls, inputs) -> None:
    """An EmbeddingBag given a 1-D input and offsets straight from the model's inputs: its bags
    (the examples) are runs of the 1-D input, not rows of a batch dimension, so neither the batch
    size nor a probe with one more example can be read from the inputs. Refused by name."""
    given = {id(t) for t in tensor_leaves(inputs)}
    for c in calls:
        if not isinstance(c.module, nn.EmbeddingBag) or not c.args:
            continue
        x = c.args[0]
        offsets = c.args[1] if len(c.args) > 1 else c.kwargs.get("offsets")
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or offsets is None:
            continue
        if id(x) in given or id(offsets) in given:
            raise LayoutError(
                f"{c.label} takes a 1-D input with offsets from the model's inputs: its bags, the "
                "examples, are runs of that 1-D tensor rather than rows of a batch dimension, so "
                "privopt.torch cannot tell them apart (it reads the batch as the first dimension "
                "of every input tensor). Pass the bags as a 2-D (B, L) tensor padded with "
                "padding_idx (nn.EmbeddingBag(..., padding_idx=p); exact in every mode), or with "
                "per_sample_weights (B, L) zero on the padding (mode='sum'), or build the 1-D "
                "input and offsets inside the model from a batch-first input."
            )


def refuse_unfollowable_inputs(model: nn.Module, inputs: Any) -> None:
    """One forward (no gradient) recording the module calls, to refuse by name an input form
    whose examples cannot be read from the inputs (EmbeddingBag offsets); no-op otherwise."""
    trainable = {id(p): p for p in model.parameters() if p.requires_grad}
    recorder = CallRecorder(model, trainable)
    try:
        with torch.no_grad(), recorder.recording():
            call_model(model, inputs)
        _refuse_bag_offsets(recorder.calls, inputs)
    finally:
        recorder.clear()
        recorder.remove()


def _grad_dtype(use) -> torch.dtype | None:
    g = use[2] if len(use) == 3 else next((x for x in use[1] if x is not None), None)
    return g.dtype if isinstance(g, torch.Tensor) else None


def _check_rows(value: torch.Tensor, shape: tuple, rule) -> None:
    if tuple(value.shape) != tuple(shape):
        raise LayoutError(
            f"privopt.torch computed a per-example quantity of shape {tuple(value.shape)} for "
            f"{type(rule.module).__name__}, expected {tuple(shape)}; refused rather than "
            "broadcast."
        )


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
        loss_fn: ``loss_fn(model(inputs), targets)`` -> per-example losses, shape (batch,);
            it gets the model's output as returned (a tensor, a tuple, a dict, a
            ``transformers`` ``ModelOutput``).
        inputs: a tensor, a tuple of tensors (passed as ``model(*inputs)``) or a mapping of
            tensors (passed as ``model(**inputs)``, e.g. ``input_ids`` and ``attention_mask``
            for a ``transformers`` model), every tensor batch first.
        targets: passed to ``loss_fn``.
        clip_norm: G > 0.

    Raises:
        ValueError (:class:`LayoutError`): a module through which the examples cannot be
            followed, named with its type and the fix.

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
