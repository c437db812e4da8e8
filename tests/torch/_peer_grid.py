"""Configurations over the parameter spaces of Opacus's per-sample-gradient tests for its DP
layers (``opacus/tests/grad_samples/dp_rnn_test.py``, ``dp_multihead_attention_test.py``,
``sequence_bias_test.py``), float64, each inside a **batch-first** model (the layer itself may be
time first: the adapter transposes in and out, as a user's model does).

``layers`` supplies the layer classes: Opacus's own (``opacus.layers``, when importable) or this
suite's re-implementations of the same structure (:mod:`_peer_layers`), so that CI without Opacus
still runs the same spaces. Each build returns ``(model, loss_fn, inputs, targets, batch,
examples)``: ``examples[i]`` is example i alone as a batch of one (for the reference loop)."""

from __future__ import annotations

import itertools

from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch
from torch import nn


def mse(out, y):
    return ((out - y) ** 2).flatten(1).sum(1)


class RNNAdapter(nn.Module):
    """Batch-first (B, T, D) or a PackedSequence in; the layer's output sequence, batch first
    (padded to ``total`` steps when packed)."""

    def __init__(self, layer, total):
        super().__init__()
        self.rnn, self.total = layer, total

    def forward(self, x):
        if isinstance(x, torch.Tensor):
            h = x if self.rnn.batch_first else x.transpose(0, 1)
            out = self.rnn(h)[0]
            return out if self.rnn.batch_first else out.transpose(0, 1)
        out = self.rnn(x)[0]
        return pad_packed_sequence(out, batch_first=True, total_length=self.total)[0]


class AttentionAdapter(nn.Module):
    """(B, T, D, 3) in (query, key, value stacked last, as Opacus's test does); the time-first
    attention between transposes; (B, T, D) out."""

    def __init__(self, attn):
        super().__init__()
        self.attn = attn

    def forward(self, x):
        q, k, v = (t.transpose(0, 1) for t in x.unbind(-1))
        return self.attn(q, k, v)[0].transpose(0, 1)


class BiasAdapter(nn.Module):
    def __init__(self, layer, batch_first):
        super().__init__()
        self.layer, self.batch_first = layer, batch_first

    def forward(self, x):
        if self.batch_first:
            return self.layer(x)
        return self.layer(x.transpose(0, 1)).transpose(0, 1)


def _rows(x, i):
    return x[i : i + 1]


def _rnn(layers, cls_name, n, t, d, h, num_layers, bias, batch_first, bi, packed, sorted_):
    def build():
        torch.manual_seed(n * 1000 + t * 100 + num_layers * 10 + bi)
        cls = getattr(layers, cls_name)
        layer = cls(
            d, h, num_layers=num_layers, bias=bias, batch_first=batch_first, bidirectional=bi
        )
        model = RNNAdapter(layer, t).double()
        x = torch.randn(n, t, d, dtype=torch.float64)
        width = h * (2 if bi else 1)
        y = torch.randn(n, t, width, dtype=torch.float64)
        if not packed:
            return model, mse, x, y, n, [(_rows(x, i), _rows(y, i)) for i in range(n)]
        lengths = torch.randint(1, t + 1, (n,))
        if sorted_:
            lengths = lengths.sort(descending=True).values
        inputs = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=sorted_)
        examples = [
            (
                pack_padded_sequence(x[i : i + 1, : lengths[i]], lengths[i : i + 1], True),
                _rows(y, i),
            )
            for i in range(n)
        ]
        return model, mse, inputs, y, n, examples

    return build


def rnn_configs(layers, ns=(1, 2, 3), ts=(1, 2, 3), dh=((4, 8), (5, 10))):
    out = []
    for k, (cls, n, t, num_layers, bias, bf, bi, pk) in enumerate(
        itertools.product(
            ("DPRNN", "DPGRU", "DPLSTM"), ns, ts, (1, 2), (True, False), (True, False),
            (False, True), ("no", "sorted", "unsorted"),
        )
    ):  # fmt: skip
        d, h = dh[k % len(dh)]
        name = f"{cls}-N{n}-T{t}-D{d}-H{h}-L{num_layers}-bias{bias}-bf{bf}-bi{bi}-packed{pk}"
        build = _rnn(layers, cls, n, t, d, h, num_layers, bias, bf, bi, pk != "no", pk == "sorted")
        out.append((name, build))
    return out


def _mha(layers, n, t, d, p, bias, bias_kv, zero_attn, kv_dim):
    def build():
        torch.manual_seed(n * 100 + t)
        kw = {"kdim": d, "vdim": d} if kv_dim else {}
        attn = layers.DPMultiheadAttention(
            d, p, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn, dropout=0.0, **kw
        )
        model = AttentionAdapter(attn).double()
        x = torch.randn(n, t, d, 3, dtype=torch.float64)
        y = torch.randn(n, t, d, dtype=torch.float64)
        return model, mse, x, y, n, [(_rows(x, i), _rows(y, i)) for i in range(n)]

    return build


def mha_configs(layers, ns=(1, 2, 4), ts=(1, 4, 16)):
    out = []
    for n, t, p, bias, kv, za, kvd in itertools.product(
        ns, ts, (1, 2), (True, False), (True, False), (True, False), (True, False)
    ):
        name = f"DPMHA-N{n}-T{t}-P{p}-bias{bias}-biaskv{kv}-zeroattn{za}-kvdim{kvd}"
        out.append((name, _mha(layers, n, t, 4, p, bias, kv, za, kvd)))
    return out


def _seqbias(layers, n, t, d, batch_first):
    def build():
        torch.manual_seed(n * 100 + t)
        model = BiasAdapter(layers.SequenceBias(d, batch_first=batch_first), batch_first)
        model = model.double()
        x = torch.randn(n, t, d, dtype=torch.float64)
        y = torch.randn(n, t + 1, d, dtype=torch.float64)
        return model, mse, x, y, n, [(_rows(x, i), _rows(y, i)) for i in range(n)]

    return build


def seqbias_configs(layers, ns=(0, 1, 2, 3, 4), ts=(1, 4, 10), ds=(4, 8)):
    out = []
    for n, t, d, bf in itertools.product(ns, ts, ds, (True, False)):
        out.append((f"SequenceBias-N{n}-T{t}-D{d}-bf{bf}", _seqbias(layers, n, t, d, bf)))
    return out


def all_configs(layers):
    return rnn_configs(layers) + mha_configs(layers) + seqbias_configs(layers)


def loop(model, loss_fn, examples, clip):
    """(per-parameter clipped sums, per-example norms): each example's gradient alone."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    for x, y in examples:
        loss = loss_fn(model(x), y).sum()
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g
            for g, p in zip(grads, params.values(), strict=True)
        ]
        norm = float(sum((g.double() ** 2).sum() for g in grads)) ** 0.5
        norms.append(norm)
        for n, g in zip(params, grads, strict=True):
            total[n] += (min(1.0, clip / norm) * g if norm > 0 else g).detach()
    return total, norms


def compare(model, loss_fn, inputs, targets, batch, examples, rtol=1e-9):
    """'exact', 'refused' (a LayoutError naming a module), or 'wrong: ...' (never raised here,
    so that a grid can count it)."""
    from privopt.torch import LayoutError, clipped_grad_sum

    _, norms = loop(model, loss_fn, examples, 1e300)
    positive = sorted(v for v in norms if v > 0)
    clip = positive[len(positive) // 2] if positive else 1.0
    expected, _ = loop(model, loss_fn, examples, clip)
    try:
        got = clipped_grad_sum(model, loss_fn, inputs, targets, clip)
    except LayoutError as exc:
        msg = str(exc)
        return "refused" if "(" in msg and ")" in msg else f"wrong: unclear refusal {msg}"
    if set(got) != set(expected):
        return f"wrong: names {sorted(got)} != {sorted(expected)}"
    scale = max(float(v.abs().max()) for v in expected.values()) if expected else 0.0
    for name in expected:
        err = float((got[name].detach() - expected[name]).abs().max())
        if not err <= rtol * scale + 1e-300:
            return f"wrong: {name} error {err:.3g}, scale {scale:.3g}"
    return "exact"
