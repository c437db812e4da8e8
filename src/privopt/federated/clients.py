"""Client updates of a cohort, and their clipping to the user's bound.

Each user u of a round's cohort starts from the server parameters w and runs k local SGD steps
on its own records, ``w_u <- w_u - eta_c grad (sum_i a_{u,j,i} loss(w_u; x_i, y_i))`` with the
weights a of :meth:`privopt.federated.UserData.local_batches` (the mean loss of local batch j);
its delta is ``Delta_u = w_u - w``, flattened over the trainable parameters in their order.

Batched clients (``client_batching="vmap"``): the cohort's parameters are one stacked copy per
user, the forward pass is ``torch.func.vmap`` of ``torch.func.functional_call`` over users (each
user's records see only its own copy), and one reverse pass of ordinary autograd on the sum of
the users' losses gives every user's gradient at once, because the users' losses depend on
disjoint parameter copies. ``client_batching="loop"`` runs the users one after another (the
same arithmetic); models whose forward ``vmap`` cannot batch under autograd (``nn.LSTM`` today)
need it, and ``"auto"`` falls back to it when the batched forward raises.

Clipping (:func:`clip_user_deltas`): ``Delta_u min(1, G / ||Delta_u||)`` in float64, with the
factor nudged down until the clipped norm is <= G in floating point (as
:mod:`privopt.clipping`); a delta with a non-finite value, or (optional guard of the paper's
StackOverflow runs) with l-infinity norm above a public threshold, is replaced by zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privopt.federated.data import UserData

__all__ = ["CLIENT_BATCHING", "client_deltas", "clip_and_count", "clip_user_deltas"]

CLIENT_BATCHING = ("auto", "vmap", "loop")


def _torch():
    import torch

    return torch


def clip_user_deltas(deltas: Any, clip_norm: float, *, zero_linf_above: float | None = None):
    """(clipped float64 deltas, number zeroed) for a (users, dim) tensor (module docstring)."""
    clipped, zeroed, _ = clip_and_count(deltas, clip_norm, zero_linf_above=zero_linf_above)
    return clipped, zeroed


def clip_and_count(deltas: Any, clip_norm: float, *, zero_linf_above: float | None = None):
    """:func:`clip_user_deltas` and the number of users its clip left unchanged (delta norm
    <= ``clip_norm``, a zeroed delta included): the count that adaptive clipping releases
    with noise (:mod:`privopt.training.adaptive`)."""
    torch = _torch()
    deltas = deltas.to(torch.float64)
    bad = ~torch.isfinite(deltas).all(dim=1)
    if zero_linf_above is not None:
        bad |= deltas.abs().amax(dim=1) > zero_linf_above
    deltas = torch.where(bad[:, None], torch.zeros((), dtype=deltas.dtype), deltas)

    def norms_of(rows):  # on the host: the factors are nudged in numpy
        return torch.linalg.vector_norm(rows, dim=1).cpu().numpy()

    def scaled(factors):
        return deltas * torch.from_numpy(factors).to(deltas.device)[:, None]

    norms = norms_of(deltas)
    factors = np.where(norms > clip_norm, clip_norm / np.where(norms > 0, norms, 1.0), 1.0)
    clipped = scaled(factors)
    over = norms_of(clipped) > clip_norm
    while over.any():  # rounding pushed a clipped norm above G: step the factor down
        factors[over] = np.nextafter(factors[over], 0.0)
        clipped = scaled(factors)
        over = norms_of(clipped) > clip_norm
    return clipped, int(bad.sum()), int(np.count_nonzero(norms <= clip_norm))


def _flat(tensors) -> Any:
    torch = _torch()
    return torch.cat([t.reshape(t.shape[0], -1) for t in tensors], dim=1)


def _per_example(loss_fn, outputs, targets, count: int):
    losses = loss_fn(outputs, targets)
    if getattr(losses, "shape", None) != (count,):
        raise ValueError(
            "Expected loss_fn(outputs, targets) to return one loss per example (shape "
            f"({count},), e.g. reduction='none'), got shape {tuple(getattr(losses, 'shape', ()))}."
        )
    return losses


def _batched(model, names, params, data: UserData, rows, weights, loss_fn, lr, steps):
    """Every user's delta by vmap over users (forward) and one autograd call per local step."""
    torch = _torch()
    from torch.func import functional_call, vmap

    users, _, width = rows.shape
    device = params[0].device
    current = [p.detach().unsqueeze(0).expand(users, *p.shape).clone() for p in params]

    def forward(own, x):
        return functional_call(model, dict(zip(names, own, strict=True)), (x,))

    for j in range(steps):
        current = [c.requires_grad_() for c in current]
        index = torch.from_numpy(rows[:, j].reshape(-1))
        x = data.inputs[index].reshape(users, width, *data.inputs.shape[1:]).to(device)
        out = vmap(forward)(tuple(current), x)
        targets = data.targets[index].to(device)
        losses = _per_example(
            loss_fn, out.reshape(users * width, *out.shape[2:]), targets, users * width
        )
        a = torch.from_numpy(weights[:, j].reshape(-1)).to(device, losses.dtype)
        grads = torch.autograd.grad((losses * a).sum(), current)
        current = [(c - lr * g).detach() for c, g in zip(current, grads, strict=True)]
    return _flat([c - p.detach().unsqueeze(0) for c, p in zip(current, params, strict=True)])


def _looped(model, names, params, data: UserData, rows, weights, loss_fn, lr, steps):
    """The same deltas, one user after another (models vmap cannot batch)."""
    torch = _torch()
    from torch.func import functional_call

    out, device = [], params[0].device
    for u in range(rows.shape[0]):
        keep = weights[u, 0] > 0  # the same b_u positions in every local step
        current = [p.detach().clone() for p in params]
        for j in range(steps):
            current = [c.requires_grad_() for c in current]
            index = torch.from_numpy(rows[u, j][keep])
            pred = functional_call(
                model, dict(zip(names, current, strict=True)), (data.inputs[index].to(device),)
            )
            losses = _per_example(loss_fn, pred, data.targets[index].to(device), len(index))
            a = torch.from_numpy(weights[u, j][keep]).to(device, losses.dtype)
            grads = torch.autograd.grad((losses * a).sum(), current)
            current = [(c - lr * g).detach() for c, g in zip(current, grads, strict=True)]
        out.append(
            torch.cat([(c - p.detach()).reshape(-1) for c, p in zip(current, params, strict=True)])
        )
    return torch.stack(out)


def client_deltas(
    model,
    data: UserData,
    cohort: np.ndarray,
    *,
    loss_fn,
    client_lr: float,
    local_steps: int,
    local_batch_size: int | None,
    batching: str,
) -> tuple[Any, str]:
    """(deltas of shape (users, dim) in the model's dtype, the batching used): the cohort's
    users each run ``local_steps`` local steps from the model's current parameters."""
    torch = _torch()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    names, params = [n for n, _ in named], [p for _, p in named]
    if len(cohort) == 0:
        dim = sum(p.numel() for p in params)
        return torch.zeros(0, dim, dtype=params[0].dtype, device=params[0].device), batching
    rows, weights = data.local_batches(cohort, local_steps, local_batch_size)
    args = (model, names, params, data, rows, weights, loss_fn, client_lr, local_steps)
    if batching == "loop":
        return _looped(*args), "loop"
    try:
        return _batched(*args), "vmap"
    except (RuntimeError, NotImplementedError):
        if batching == "vmap":
            raise ValueError(
                "torch.func.vmap cannot batch this model's forward over users (e.g. nn.LSTM "
                "under autograd); use client_batching='loop' or 'auto'."
            ) from None
        return _looped(*args), "loop"
