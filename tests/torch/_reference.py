"""The float64 reference: each example's gradient computed alone, clipped, summed."""

from __future__ import annotations

import math

import torch
from privopt.torch import LayoutError, clipped_grad_sum


def rows(value, batch, i):
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value[i : i + 1]
    if isinstance(value, tuple):
        return tuple(rows(v, batch, i) for v in value)
    return value


def loop(model, loss_fn, inputs, targets, clip, batch):
    """(per-parameter clipped sums, per-example norms) by a loop over single examples."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    for i in range(batch):
        x, y = rows(inputs, batch, i), rows(targets, batch, i)
        out = model(*x) if isinstance(x, tuple) else model(x)
        loss = loss_fn(out, y).sum()
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g
            for g, p in zip(grads, params.values(), strict=True)
        ]
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        norms.append(norm)
        for n, g in zip(params, grads, strict=True):
            total[n] += (min(1.0, clip / norm) * g if norm > 0 else g).detach()
    return total, norms


def compare(model, loss_fn, inputs, targets, batch, rtol=1e-9):
    """'exact', 'refused' (clear ValueError) or raises AssertionError (a wrong sum)."""
    _, norms = loop(model, loss_fn, inputs, targets, 1e300, batch)
    positive = sorted(v for v in norms if v > 0)
    clip = positive[len(positive) // 2] if positive else 1.0
    expected, _ = loop(model, loss_fn, inputs, targets, clip, batch)
    try:
        got = clipped_grad_sum(model, loss_fn, inputs, targets, clip)
    except LayoutError as exc:
        msg = str(exc)
        assert "(" in msg and ")" in msg, msg  # names a module and its type
        return "refused"
    assert set(got) == set(expected)
    scale = max(float(v.abs().max()) for v in expected.values()) if expected else 0.0
    for name in expected:
        err = float((got[name].detach() - expected[name]).abs().max())
        assert err <= rtol * scale + 1e-300, f"{name}: error {err:.3g}, scale {scale:.3g}"
    return "exact"
