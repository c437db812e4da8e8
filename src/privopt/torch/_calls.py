r"""Which module call computes which parameter's per-example gradient, and where the batch is.

The clipped sum needs, per trainable parameter p (counted once, by identity), per-example
gradients ``grad_i p = sum over the uses of p of d loss_i / d p``. This module finds them
without trusting names, types or sizes:

**Uses by identity.** During the forward a :class:`torch.overrides.TorchFunctionMode` records,
for every torch function whose result requires grad and whose arguments contain a parameter,
the innermost hooked module *call* running at that moment (a stack kept by forward pre-hooks and
hooks). A parameter registered on two modules, tied between layers, read directly by a parent
(``F.linear(x, self.emb.weight)``) or used by a module called twice is thus seen at every place
where it enters the computation. A use outside every call (e.g. inside ``loss_fn``) is refused.

**Batch dimensions by a probe.** A second forward on the batch with its first example appended
(B + 1 examples, so sizes that depend on the batch's content, such as its longest sequence, do
not move) records every call's tensor shapes. In each recorded tensor the batch dimension is the
one dimension whose size went from B to B + 1; a tensor with no changed dimension is shared by
the examples; one whose rank or several sizes changed, or whose changed size is not B -> B + 1
(the batch merged with another dimension, e.g. ``x.view(B * T, D)``), has no usable batch
dimension. Sizes that merely equal B (time-first ``(T, B, D)`` with T == B, a table of B rows)
are never mistaken for the batch. The sequence of calls must be the same in both forwards. The
probe runs with the RNG state saved and restored; its result is cached per *layout*: a later
step reuses it when it has the same calls and every shape equals the probed one with the batch
dimension resized (a step whose shapes equal the probed step's exactly is assumed to route the
batch the same way; the probe repeats whenever any shape differs otherwise).

**Host calls.** A call is *eligible* to compute per-example gradients when every input tensor
has a batch dimension or is shared, and every output that carries gradient has a batch
dimension: then, under the contract that examples are independent, row i of its output gradient
belongs to example i and the call can be replayed on example i alone. For each use of p, the
innermost eligible call enclosing it hosts it; a host nested inside another host of p is
dropped (the outer replay covers it), so every use of p is covered by exactly one host call, and
p's per-example gradient is the sum over its host calls. No eligible call: refused, naming the
module, its type and the fix.

**Packed calls.** A module called with a PackedSequence that returns one packed the same way
(:func:`packed_leaves`: nn.RNN/GRU/LSTM, Opacus's DPRNN/DPGRU/DPLSTM) hosts its parameters by a
replay per example on its own rows of the packed data. Calls nested inside it are never eligible:
their rows are in the packed, length-sorted order, not the examples' (a step where every
sequence is present has B rows that the probe cannot tell from a batch dimension).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from torch.nn.utils.rnn import PackedSequence
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import torch
from torch import nn

__all__ = [
    "Call",
    "CallRecorder",
    "LayoutError",
    "batch_dims",
    "is_args",
    "packed_leaves",
    "tensor_leaves",
]


def is_args(inputs) -> bool:
    """Whether ``inputs`` is a tuple of model arguments (a PackedSequence is one argument)."""
    return isinstance(inputs, tuple) and not isinstance(inputs, PackedSequence)


def _has_packed(value) -> bool:
    if isinstance(value, PackedSequence):
        return True
    if isinstance(value, tuple | list):
        return any(_has_packed(v) for v in value)
    if isinstance(value, dict):
        return any(_has_packed(v) for v in value.values())
    return False


def packed_leaves(call) -> set[int] | None:
    """ids of the PackedSequence tensors of a *packed call* (None if not): a module called with
    a PackedSequence first that returns ``(PackedSequence, ...)`` packed exactly as its input
    (same ``batch_sizes`` and sort order), as nn.RNN/GRU/LSTM and their re-implementations
    (Opacus's DPRNN/DPGRU/DPLSTM) do. Row r of the packed output then belongs to the example of
    row r of the packed input, so the call can be replayed per example on its own rows."""
    if not call.args:
        return None
    x, out = call.args[0], call.output
    if not isinstance(x, PackedSequence) or not isinstance(out, tuple) or not out:
        return None
    y = out[0]
    if not isinstance(y, PackedSequence) or not _same_packing(x, y):
        return None
    return {id(t) for t in tensor_leaves((x, y))}


def _same_packing(x: PackedSequence, y: PackedSequence) -> bool:
    def same(a, b):
        if a is None or b is None:
            return a is None and b is None
        return a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))

    return (
        x.data.shape[0] == y.data.shape[0]
        and same(x.batch_sizes, y.batch_sizes)
        and same(x.sorted_indices, y.sorted_indices)
        and same(x.unsorted_indices, y.unsorted_indices)
    )


class LayoutError(ValueError):
    """The examples of a batch cannot be told apart in some module (names it and the fix)."""


def tensor_leaves(value) -> list[torch.Tensor]:
    """The tensors of a nested structure (tuples, lists, dicts, named tuples) in pytree order."""
    leaves, _ = tree_flatten(value)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


@dataclass
class Call:
    """One call of a hooked module in one forward."""

    index: int
    name: str
    module: nn.Module
    parent: int | None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    output: object = None
    inputs: list = field(default_factory=list)  # tensor leaves of (args, kwargs)
    outputs: list = field(default_factory=list)  # tensor leaves of the output
    versions: list = field(default_factory=list)
    in_dims: list | None = None  # per input leaf: batch dim, None (shared) or "?" (unknown)
    out_dims: list | None = None

    @property
    def label(self) -> str:
        return f"{self.name or 'the model'} ({type(self.module).__name__})"


class _ParamUses(TorchFunctionMode):
    """Records (parameter id -> innermost calls) for every differentiable use of a parameter."""

    def __init__(self, recorder: CallRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rec = self.recorder
        params = [t for t in tensor_leaves((args, kwargs)) if id(t) in rec.trainable]
        if params and any(t.requires_grad for t in tensor_leaves(out)):
            where = rec.stack[-1] if rec.stack else None
            for p in params:
                rec.uses.setdefault(id(p), set()).add(where)
        return out


class CallRecorder:
    """Forward hooks and the parameter-use mode over ``model`` (see the module docstring)."""

    def __init__(self, model: nn.Module, trainable: dict[int, nn.Parameter]) -> None:
        self.model = model
        self.trainable = trainable
        self.calls: list[Call] = []
        self.stack: list[int] = []
        self.uses: dict[int, set] = {}
        self.mode: str | None = None  # "record" | "probe" | None
        self._handles = []
        for name, module in model.named_modules():
            if not any(p.requires_grad for p in module.parameters()):
                continue
            self._handles.append(
                module.register_forward_pre_hook(self._pre(name), with_kwargs=True)
            )
            self._handles.append(
                module.register_forward_hook(self._post(name), with_kwargs=True, always_call=True)
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def clear(self) -> None:
        self.calls, self.stack, self.uses = [], [], {}

    def _pre(self, name: str):
        def hook(module, args, kwargs):
            if self.mode is not None:
                parent = self.stack[-1] if self.stack else None
                self.calls.append(Call(len(self.calls), name, module, parent))
                self.stack.append(len(self.calls) - 1)

        return hook

    def _post(self, name: str):
        def hook(module, args, kwargs, output):
            if self.mode is None or not self.stack:
                return
            call = self.calls[self.stack.pop()]
            if self.mode == "probe":
                call.inputs = [tuple(t.shape) for t in tensor_leaves((args, kwargs))]
                call.outputs = [tuple(t.shape) for t in tensor_leaves(output)]
                return
            call.args, call.kwargs, call.output = args, kwargs, output
            call.inputs = tensor_leaves((args, kwargs))
            call.outputs = tensor_leaves(output)
            call.versions = [t._version for t in call.inputs + call.outputs]

        return hook

    @contextlib.contextmanager
    def recording(self):
        """Record calls and parameter uses of the forward run inside."""
        self.clear()
        self.mode = "record"
        try:
            with _ParamUses(self):
                yield
        finally:
            self.mode = None
            self.stack = []

    def probe(self, forward) -> list[Call]:
        """Run ``forward()`` recording shapes only (RNG state restored); its calls."""
        saved = (self.calls, self.stack, self.uses)
        self.calls, self.stack = [], []
        self.mode = "probe"
        devices = sorted(
            {p.device.index or 0 for p in self.trainable.values() if p.device.type == "cuda"}
        )
        try:
            with torch.random.fork_rng(devices=devices):
                forward()
            return self.calls
        finally:
            self.mode = None
            self.calls, self.stack, self.uses = saved


def batch_dims(real: list[tuple], probe: list[tuple], batch: int) -> list:
    """Per tensor: the dimension that went from ``batch`` to ``batch + 1``, None if no dimension
    changed (shared by the examples), "?" otherwise (see the module docstring)."""
    dims = []
    for a, b in zip(real, probe, strict=True):
        if len(a) != len(b):
            dims.append("?")
            continue
        changed = [d for d, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if not changed:
            dims.append(None)
        elif len(changed) == 1 and a[changed[0]] == batch and b[changed[0]] == batch + 1:
            dims.append(changed[0])
        else:
            dims.append("?")
    return dims


class Layouts:
    """Cache of probed layouts: (call names, per tensor (pattern, batch dim))."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.entries: list[tuple] = []

    @staticmethod
    def _pattern(shape: tuple, dim) -> tuple:
        return tuple(-1 if d == dim else s for d, s in enumerate(shape))

    def store(self, calls: list[Call]) -> None:
        names = tuple(c.name for c in calls)
        dims = []
        for c in calls:
            shapes = [tuple(t.shape) for t in c.inputs + c.outputs]
            dims.append(
                [
                    (self._pattern(s, d), d)
                    for s, d in zip(shapes, c.in_dims + c.out_dims, strict=True)
                ]
            )
        self.entries = [(names, dims), *self.entries[: self.size - 1]]

    def lookup(self, calls: list[Call], batch: int) -> bool:
        """Set in_dims/out_dims of ``calls`` from a cached layout; False if none fits."""
        names = tuple(c.name for c in calls)
        for cached_names, dims in self.entries:
            if cached_names != names or not self._fits(calls, dims, batch):
                continue
            for c, per in zip(calls, dims, strict=True):
                found = [d for _, d in per]
                c.in_dims, c.out_dims = found[: len(c.inputs)], found[len(c.inputs) :]
            return True
        return False

    def _fits(self, calls, dims, batch) -> bool:
        for c, per in zip(calls, dims, strict=True):
            tensors = c.inputs + c.outputs
            if len(tensors) != len(per):
                return False
            for t, (pattern, d) in zip(tensors, per, strict=True):
                if t.dim() != len(pattern):
                    return False
                if isinstance(d, int) and t.shape[d] != batch:  # not None (shared) or "?"
                    return False
                if self._pattern(tuple(t.shape), d) != pattern:
                    return False
        return True
