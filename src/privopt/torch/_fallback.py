r"""Per-example gradients of any module call with ``torch.func``, or a per-example loop.

For a host call of module M (:mod:`privopt.torch._calls`) with inputs ``a`` and output gradient
``g``, the gradient of example i with respect to the parameters theta that the call hosts is the
vector-Jacobian product

    grad_i theta = d/d theta <M_theta(a_i), g_i>,

where ``a_i`` is row i of every input tensor along its probed batch dimension (shared inputs are
passed whole) and ``g_i`` row i of every output gradient along the output's batch dimension.
It is computed by ``torch.func.vmap(torch.func.grad(...))`` over the examples, with M made
functional by ``torch.func.functional_call`` (tied names of a parameter are replaced together),
``chunk_size`` examples at a time; where vmap cannot run the module, by a loop over the examples
(one forward and backward of M on a batch of one per example). Both are exact.

Checked, not assumed: each replayed output must have the call's output shape with the batch
dimension of size 1 (a module whose output does not keep the example in its batch dimension is
refused), and every per-example gradient has leading dimension B (never a broadcast).
"""

from __future__ import annotations

import warnings

from torch.func import functional_call, grad, vmap
from torch.nn.utils.rnn import PackedSequence
from torch.utils._pytree import tree_flatten, tree_unflatten

import torch
from privopt.torch._calls import LayoutError, packed_leaves, tensor_leaves
from privopt.torch._rule import LayerRule
from torch import nn

__all__ = ["FunctionalRule", "flatten_tensors", "is_cross_example"]


def flatten_tensors(value) -> list:
    """The tensors of a nested output, in the order the hooks record output gradients."""
    return tensor_leaves(value)


class FunctionalRule(LayerRule):
    """Per-example gradients by ``vmap(grad(<M(a_i), g_i>))`` or a loop (module docstring).

    ``uses`` is a list of (call, output gradients) with the call's probed batch dimensions.
    """

    #: examples per vmap chunk (None: all at once)
    chunk_size: int | None = 256
    #: how the last call was computed: "vmap" or "loop"
    method = "vmap"

    def per_example(self):
        if getattr(self, "_cached", None) is not None:
            return self._cached
        names = list(self.params)
        total: dict[str, torch.Tensor] = {}
        for call, grads in self.uses:
            for name, value in self._one_use(names, call, grads).items():
                if value.shape != (self.batch, *self.params[name].shape):
                    raise LayoutError(
                        f"per-example gradients of {call.label} have shape {tuple(value.shape)}, "
                        f"not (batch, *parameter shape); privopt.torch refuses the layer."
                    )
                total[name] = total[name] + value if name in total else value
        self._cached = total
        return total

    def _one_use(self, names, call, grads):
        if packed_leaves(call) is not None:
            return self._packed_use(names, call, grads)
        leaves, spec = tree_flatten((call.args, call.kwargs))
        positions = [k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        batched = [(k, d) for k, d in zip(positions, call.in_dims, strict=True) if d is not None]
        pairs = [(j, call.out_dims[j]) for j, g in enumerate(grads) if g is not None]
        expected = {
            j: tuple(1 if k == d else s for k, s in enumerate(call.outputs[j].shape))
            for j, d in pairs
        }
        module = self.module
        base = [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]

        def replay(params, values, cotangents):
            call_leaves = list(base)
            for (k, _), v in zip(batched, values, strict=True):
                call_leaves[k] = v
            args, kwargs = tree_unflatten(call_leaves, spec)
            outs = tensor_leaves(functional_call(module, params, args, kwargs))
            total = 0
            for (j, _), g in zip(pairs, cotangents, strict=True):
                if j >= len(outs) or tuple(outs[j].shape) != expected[j]:
                    got = tuple(outs[j].shape) if j < len(outs) else None
                    raise LayoutError(
                        f"{call.label} replayed on one example returned an output of shape "
                        f"{got}, expected {expected[j]} (the batch dimension of size 1): its "
                        "examples do not stay in their batch dimension. Keep the batch in its "
                        "own dimension through this module, or replace the module."
                    )
                total = total + (outs[j] * g.to(outs[j].dtype)).sum()
            return total

        def inner(params, values, cotangents):
            values = [v.unsqueeze(d) for (_, d), v in zip(batched, values, strict=True)]
            cotangents = [g.unsqueeze(d) for (_, d), g in zip(pairs, cotangents, strict=True)]
            return replay(params, values, cotangents)

        params = {name: self.params[name].detach() for name in names}
        values = tuple(base[k] for k, _ in batched)
        cotangents = tuple(grads[j] for j, _ in pairs)
        in_dims = (None, tuple(d for _, d in batched), tuple(d for _, d in pairs))
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*batching rule.*")
                out = vmap(
                    grad(inner), in_dims=in_dims, chunk_size=self.chunk_size, randomness="different"
                )(params, values, cotangents)
            self.method = "vmap"
            return out
        except LayoutError:
            raise
        except Exception:  # vmap cannot run this module: loop over the examples
            pass
        self.method = "loop"
        rows: dict[str, list] = {name: [] for name in names}
        try:
            for i in range(self.batch):
                ps = {n: p.clone().requires_grad_(True) for n, p in params.items()}
                vs = [v.narrow(d, i, 1) for (_, d), v in zip(batched, values, strict=True)]
                gs = [g.narrow(d, i, 1) for (_, d), g in zip(pairs, cotangents, strict=True)]
                with torch.enable_grad():
                    total = replay(ps, vs, gs)
                    found = torch.autograd.grad(total, list(ps.values()), allow_unused=True)
                for (n, p), gi in zip(ps.items(), found, strict=True):
                    rows[n].append(torch.zeros_like(p) if gi is None else gi)
        except LayoutError:
            raise
        except Exception as exc:  # name the layer and the cause
            raise LayoutError(
                f"privopt.torch could not compute per-example gradients of {call.label}, "
                f"neither with torch.func nor by a loop over the examples ({exc}). Replace the "
                "module by one whose examples stay independent."
            ) from exc
        return {n: torch.stack(r) for n, r in rows.items()}


def _packed_rows(packed: PackedSequence, batch: int) -> list[torch.Tensor]:
    """Per example (original order), the rows of ``packed.data`` holding its time steps."""
    sizes = packed.batch_sizes.to("cpu")
    starts = torch.cumsum(sizes, 0) - sizes
    device = packed.data.device
    rank = (
        packed.unsorted_indices.to("cpu")
        if packed.unsorted_indices is not None
        else torch.arange(batch)
    )
    out = []
    for i in range(batch):
        r = int(rank[i])
        steps = int((sizes > r).sum())
        out.append((starts[:steps] + r).to(device))
    return out


def _packed_use(self, names, call, grads):
    """A packed call (nn.RNN/GRU/LSTM or a re-implementation) on a PackedSequence: a loop over
    the examples, each sequence packed
    alone (its rows of the packed data, in time order); the output gradient of its rows of the
    packed output, and of its column of the hidden states (probed batch dimension)."""
    x, rest = call.args[0], call.args[1:]
    rows = _packed_rows(x, self.batch)
    n_packed = len(tensor_leaves(call.output[0]))
    g_data = grads[0]
    hidden_grads = grads[n_packed:]
    hidden_dims = call.out_dims[n_packed:]
    rest_leaves, rest_spec = tree_flatten((rest, call.kwargs))
    n_x = len(tensor_leaves(x))
    rest_dims = iter(call.in_dims[n_x:])
    rest_dims = [next(rest_dims) if isinstance(v, torch.Tensor) else None for v in rest_leaves]
    params = {n: self.params[n].detach() for n in names}
    per: dict[str, list] = {n: [] for n in names}
    for i in range(self.batch):
        ps = {n: p.clone().requires_grad_(True) for n, p in params.items()}
        seq = PackedSequence(x.data.detach()[rows[i]], torch.tensor([1] * len(rows[i])))
        leaves = [
            v.detach().narrow(d, i, 1) if isinstance(v, torch.Tensor) and d is not None else v
            for v, d in zip(rest_leaves, rest_dims, strict=True)
        ]
        args, kwargs = tree_unflatten(leaves, rest_spec)
        with torch.enable_grad():
            out = functional_call(self.module, ps, (seq, *args), kwargs)
            if not (
                isinstance(out, tuple)
                and isinstance(out[0], PackedSequence)
                and out[0].data.shape[0] == len(rows[i])
                and len(tensor_leaves(out[1:])) == len(hidden_grads)
            ):
                raise LayoutError(
                    f"{call.label} replayed on one packed sequence did not return it packed the "
                    "same way (one output row per input row) with the same outputs; privopt.torch "
                    "refuses the layer. Pass it a padded tensor instead of a PackedSequence."
                )
            total = 0
            if g_data is not None:
                total = total + (out[0].data * g_data[rows[i]].to(out[0].data.dtype)).sum()
            hidden = tensor_leaves(out[1:])
            for h, g, d in zip(hidden, hidden_grads, hidden_dims, strict=True):
                if g is not None:
                    g = g.narrow(d, i, 1)
                    if h.shape != g.shape:  # never a broadcast
                        raise LayoutError(
                            f"{call.label} replayed on one packed sequence returned a state of "
                            f"shape {tuple(h.shape)}, expected {tuple(g.shape)}; refused."
                        )
                    total = total + (h * g.to(h.dtype)).sum()
            found = (
                torch.autograd.grad(total, list(ps.values()), allow_unused=True)
                if isinstance(total, torch.Tensor)
                else [None] * len(ps)
            )
        for (n, p), f in zip(ps.items(), found, strict=True):
            per[n].append(torch.zeros_like(p) if f is None else f)
    self.method = "loop"
    return {n: torch.stack(r) for n, r in per.items()}


FunctionalRule._packed_use = _packed_use


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
    if isinstance(module, nn.EmbeddingBag) and module.scale_grad_by_freq:
        return "EmbeddingBag(scale_grad_by_freq=True) scales gradients by batch-wide frequencies"
    return None
