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

**Broadcast taps.** A call whose output O is shared by the batch (leading size 1, e.g. GPT-2's
position embedding ``wpe(position_ids)`` with ``position_ids`` of shape (1, T)) is not
eligible by itself: the gradient of O is the sum over the examples. When O's only
differentiable use in the forward is one addition ``R = X + O`` broadcasting O along dimension
0 (X of R's shape; ``X += O`` too, R then being X), the call is *tapped*: its output is taken to
be R, whose probed batch dimension must be 0. Then example i's gradient of O is row i of dL/dR
(R_i = X_i + O_0, and examples are independent), so the call hosts its parameters with its own
rule, the shared input expanded to B rows, instead of the enclosing call (for GPT-2 the whole
transformer) being replayed per example. Identity accounting, verified each step: every torch
function taking O is counted (a function returning O itself, such as ``O.to(same device)``, is
transparent; O modified in place is never tapped), and ``sum_i dL/dR_i`` must equal dL/dO (a
use of O that the mode could not see breaks it; refused).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import torch
from torch import nn

__all__ = [
    "Call",
    "CallRecorder",
    "LayoutError",
    "batch_dims",
    "call_model",
    "check_tap",
    "grown_inputs",
    "is_args",
    "is_kwargs",
    "packed_leaves",
    "tap_consistent",
    "tap_error",
    "tensor_leaves",
]


def is_args(inputs) -> bool:
    """Whether ``inputs`` is a tuple of model arguments (a PackedSequence is one argument)."""
    return isinstance(inputs, tuple) and not isinstance(inputs, PackedSequence)


def is_kwargs(inputs) -> bool:
    """Whether ``inputs`` is a mapping of keyword arguments (``model(**inputs)``, as Hugging Face
    models take ``input_ids`` and ``attention_mask``)."""
    return isinstance(inputs, Mapping)


def call_model(model, inputs):
    """``model(*inputs)`` for a tuple, ``model(**inputs)`` for a mapping, else ``model(inputs)``."""
    if is_args(inputs):
        return model(*inputs)
    if is_kwargs(inputs):
        return model(**inputs)
    return model(inputs)


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
    shared: object = None  # a tapped call: its own (shared) output O; outputs is then [R]

    @property
    def label(self) -> str:
        return f"{self.name or 'the model'} ({type(self.module).__name__})"


#: torch functions computing X + O (in place on X for the last two: R is X, modified)
_ADDITIONS = ("add", "__add__", "__radd__", "__iadd__", "add_")


def _arg_tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among a torch function's arguments (flat ones without a pytree walk: this
    runs for every operation of the recorded forward)."""
    out = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, list | tuple | dict):
            out.extend(tensor_leaves(v))
    return out


class _ParamUses(TorchFunctionMode):
    """Records (parameter id -> innermost calls) for every differentiable use of a parameter."""

    def __init__(self, recorder: CallRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rec = self.recorder
        leaves = _arg_tensors(args, kwargs)
        if rec.candidates:
            rec.count_uses(func, args, kwargs, leaves, out)
        params = [t for t in leaves if id(t) in rec.trainable]
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
        # broadcast taps: id(O) -> (call index, O, O's version); call index -> [(R, R's
        # version) or None per use of O]
        self.candidates: dict[int, tuple[int, torch.Tensor, int]] = {}
        self.taps: dict[int, list] = {}
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
        self.candidates, self.taps = {}, {}

    def count_uses(self, func, args, kwargs, leaves, out) -> None:
        """Per shared-output candidate O among ``leaves``: one more differentiable use, with R
        when it is ``R = X + O`` broadcasting O along dimension 0 (module docstring)."""
        hits = [t for t in leaves if id(t) in self.candidates]
        if not hits:
            return
        outs = tensor_leaves(out)
        if not any(t.requires_grad for t in outs):
            return
        for t in hits:
            found = self.candidates.get(id(t))
            if found is None or found[1] is not t or all(o is t for o in outs):
                continue
            k, o, _ = found
            tap = None
            name = getattr(func, "__name__", "")
            if name in _ADDITIONS and not kwargs and len(args) == 2:
                x = args[1] if args[0] is o else args[0]
                r = out
                if (
                    isinstance(x, torch.Tensor)
                    and x is not o
                    and isinstance(r, torch.Tensor)
                    and r.shape == x.shape
                    and r.shape[0] > 1
                    and r.dim() == o.dim()
                    and r.shape[1:] == o.shape[1:]
                ):
                    tap = (r, r._version)
            self.taps.setdefault(k, []).append(tap)

    def _finish_taps(self) -> None:
        """Tap every candidate used exactly once, by a broadcast addition, neither O nor R
        modified in place since (an in-place operation returns O itself and is not counted)."""
        for k, o, version in self.candidates.values():
            uses = self.taps.get(k, [])
            if len(uses) != 1 or uses[0] is None or uses[0][0]._version != uses[0][1]:
                continue
            if o._version != version:
                continue
            call, r = self.calls[k], uses[0][0]
            call.shared = o
            if self.mode == "probe":
                call.outputs = [tuple(r.shape)]
            else:
                call.outputs = [r]
                call.versions = [*call.versions[: len(call.inputs)], r._version]
        self.candidates, self.taps = {}, {}

    def _candidate(self, index: int, output) -> None:
        outs = tensor_leaves(output)
        if len(outs) == 1 and outs[0].dim() > 0 and outs[0].shape[0] == 1 and outs[0].requires_grad:
            self.candidates[id(outs[0])] = (index, outs[0], outs[0]._version)

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
            self._candidate(call.index, output)
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
                self._finish_taps()
        finally:
            self.mode = None
            self.stack = []
            self.candidates, self.taps = {}, {}

    def probe(self, forward) -> list[Call]:
        """Run ``forward()`` recording shapes only (RNG state restored); its calls."""
        saved = (self.calls, self.stack, self.uses)
        self.calls, self.stack, self.uses = [], [], {}  # the mode sees the probe's uses too
        self.mode = "probe"
        devices = sorted(
            {p.device.index or 0 for p in self.trainable.values() if p.device.type == "cuda"}
        )
        try:
            with torch.random.fork_rng(devices=devices), _ParamUses(self):
                forward()
                self._finish_taps()
            return self.calls
        finally:
            self.mode = None
            self.candidates, self.taps = {}, {}
            self.calls, self.stack, self.uses = saved


def tap_consistent(grad_r: torch.Tensor | None, grad_o: torch.Tensor | None) -> torch.Tensor:
    """Whether ``sum_i dL/dR_i`` equals dL/dO (a 0-d bool tensor on the device, no host sync):
    every differentiable use of a tapped call's shared output O went through R."""
    if grad_r is None:
        return torch.ones((), dtype=torch.bool)
    total = grad_r.sum(0, keepdim=True)
    other = torch.zeros_like(total) if grad_o is None else grad_o.to(total.dtype)
    eps = torch.finfo(total.dtype).eps if total.is_floating_point() else 1e-7
    bound = 1e3 * eps * (grad_r.abs().sum(0, keepdim=True) + other.abs()) + 1e-30
    return ((total - other).abs() <= bound).all()


def tap_error(call: Call) -> LayoutError:
    return LayoutError(
        f"The output of {call.label} is shared by the batch and reaches the loss other than "
        "through the one broadcast addition privopt.torch saw (the gradients disagree); "
        "privopt.torch cannot attribute its gradient to the examples. Expand it to the "
        "batch (out.expand(B, ...)) inside the model before using it."
    )


def check_tap(call: Call, grad_r: torch.Tensor | None, grad_o: torch.Tensor | None) -> None:
    """A tapped call's identity accounting (module docstring): raises :func:`tap_error` when
    :func:`tap_consistent` fails (the clipper reads the flag at its one host synchronisation)."""
    if not bool(tap_consistent(grad_r, grad_o)):
        raise tap_error(call)


def grown_inputs(inputs, batch: int):
    """The inputs with their first example appended (tensors whose first size is B)."""

    def grow(x):
        if isinstance(x, PackedSequence):  # one more sequence, packed as x is (sorted or not)
            padded, lengths = pad_packed_sequence(x, batch_first=True)
            k = 0 if x.sorted_indices is not None else -1  # sorted: copy the shortest
            padded = torch.cat([padded, padded[k:][:1]])
            lengths = torch.cat([lengths, lengths[k:][:1]])
            return pack_padded_sequence(
                padded, lengths, batch_first=True, enforce_sorted=x.sorted_indices is None
            )
        if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == batch:
            return torch.cat([x, x[:1]])
        return x

    if is_args(inputs):
        return tuple(grow(x) for x in inputs)
    if is_kwargs(inputs):
        return {k: grow(x) for k, x in inputs.items()}
    return grow(inputs)


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
