"""This suite's own re-implementations of the structure of Opacus's DP layers (written from
their documented behaviour, not their code), so that the peer grid runs where Opacus is absent:

* ``DPRNN``/``DPGRU``/``DPLSTM``: a cell per layer and direction made of two ``nn.Linear``
  (input and hidden), run step by step; each cell's parameters are **also registered on the
  parent** under ``nn.LSTM``'s names (``weight_ih_l0``, ...), so one parameter sits on two
  modules; tensor input (either layout) or a PackedSequence (steps of shrinking batch);
* ``DPMultiheadAttention``: time-first attention from ``nn.Linear`` projections, ``add_bias_kv``
  through a ``SequenceBias`` (a learned step appended to the keys and values), ``add_zero_attn``,
  ``kdim``/``vdim``;
* ``SequenceBias``: appends a learned step to a sequence, either layout.
"""

from __future__ import annotations

import math

from torch.nn.utils.rnn import PackedSequence

import torch
from torch import nn

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


class _Cell(nn.Module):
    def __init__(self, kind, d, h, bias):
        super().__init__()
        self.kind = kind
        self.ih = nn.Linear(d, _GATES[kind] * h, bias=bias)
        self.hh = nn.Linear(h, _GATES[kind] * h, bias=bias)

    def forward(self, x, state):
        h = state[0]
        a, b = self.ih(x), self.hh(h)
        if self.kind == "RNN":
            return (torch.tanh(a + b),)
        if self.kind == "GRU":
            ar, az, an = a.chunk(3, -1)
            br, bz, bn = b.chunk(3, -1)
            r, z = torch.sigmoid(ar + br), torch.sigmoid(az + bz)
            n = torch.tanh(an + r * bn)
            return ((1 - z) * n + z * h,)
        i, f, g, o = (a + b).chunk(4, -1)
        c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
        return (torch.sigmoid(o) * torch.tanh(c), c)


class _DPRNNBase(nn.Module):
    kind = "RNN"

    def __init__(self, d, h, num_layers=1, bias=True, batch_first=False, bidirectional=False):
        super().__init__()
        self.hidden, self.batch_first = h, batch_first
        self.num_layers, self.dirs = num_layers, 2 if bidirectional else 1
        self.cells = nn.ModuleList()
        for layer in range(num_layers):
            for k in range(self.dirs):
                cell = _Cell(self.kind, d if layer == 0 else h * self.dirs, h, bias)
                self.cells.append(cell)
                suffix = f"l{layer}" + ("_reverse" if k else "")
                for part in ("ih", "hh"):  # the same Parameter registered on the parent too
                    lin = getattr(cell, part)
                    setattr(self, f"weight_{part}_{suffix}", lin.weight)
                    if bias:
                        setattr(self, f"bias_{part}_{suffix}", lin.bias)

    def _run(self, cell, steps, reverse):
        """Outputs per step and the final state; ``steps[t]`` holds the b_t sequences still
        running at step t (b_t non-increasing, as in a PackedSequence)."""
        n_state = 2 if self.kind == "LSTM" else 1
        outs, state, done = [None] * len(steps), None, []
        for t in reversed(range(len(steps))) if reverse else range(len(steps)):
            x = steps[t]
            b = x.shape[0]
            if state is None:
                state = tuple(x.new_zeros(b, self.hidden) for _ in range(n_state))
            elif state[0].shape[0] < b:  # reverse: sequences that end here start now
                state = tuple(
                    torch.cat([s, s.new_zeros(b - s.shape[0], self.hidden)]) for s in state
                )
            elif state[0].shape[0] > b:  # forward: sequences that ended keep their state
                done.append(tuple(s[b:] for s in state))
                state = tuple(s[:b] for s in state)
            state = cell(x, state)
            outs[t] = state[0]
        final = tuple(
            torch.cat([state[j], *[d[j] for d in reversed(done)]]) for j in range(n_state)
        )
        return outs, final

    def forward(self, x, state_init=None):
        packed = isinstance(x, PackedSequence)
        if packed:
            steps = list(x.data.split(x.batch_sizes.tolist()))
        else:
            steps = list((x.transpose(0, 1) if self.batch_first else x).unbind(0))
        finals = []
        for layer in range(self.num_layers):
            per_dir = []
            for k in range(self.dirs):
                outs, final = self._run(self.cells[layer * self.dirs + k], steps, bool(k))
                per_dir.append(outs)
                finals.append(final)
            steps = [torch.cat(parts, -1) for parts in zip(*per_dir, strict=True)]
        states = [torch.stack([f[j] for f in finals]) for j in range(len(finals[0]))]
        if packed and x.unsorted_indices is not None:
            states = [s.index_select(1, x.unsorted_indices) for s in states]
        hidden = tuple(states) if self.kind == "LSTM" else states[0]
        if packed:
            data = torch.cat(steps)
            return PackedSequence(data, x.batch_sizes, x.sorted_indices, x.unsorted_indices), hidden
        out = torch.stack(steps)
        return (out.transpose(0, 1) if self.batch_first else out), hidden


class DPRNN(_DPRNNBase):
    kind = "RNN"


class DPGRU(_DPRNNBase):
    kind = "GRU"


class DPLSTM(_DPRNNBase):
    kind = "LSTM"


class SequenceBias(nn.Module):
    """(T, B, E) -> (T + 1, B, E) (or batch first): a learned step appended."""

    def __init__(self, embed_dim, batch_first=False):
        super().__init__()
        self.batch_first = batch_first
        self.bias = nn.Parameter(torch.randn(embed_dim))

    def forward(self, x):
        if self.batch_first:
            return torch.cat([x, self.bias.expand(x.shape[0], 1, -1)], 1)
        return torch.cat([x, self.bias.expand(1, x.shape[1], -1)], 0)


class DPMultiheadAttention(nn.Module):
    """Time-first multi-head attention from Linear projections (query (T, B, E))."""

    def __init__(
        self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
        add_zero_attn=False, kdim=None, vdim=None,
    ):  # fmt: skip
        super().__init__()
        self.e, self.heads, self.zero = embed_dim, num_heads, add_zero_attn
        self.qlinear = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.klinear = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.vlinear = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        self.seq_bias_k = SequenceBias(embed_dim) if add_bias_kv else None
        self.seq_bias_v = SequenceBias(embed_dim) if add_bias_kv else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _heads(self, x):  # (S, B, E) -> (B, H, S, E / H)
        s, b, _ = x.shape
        return x.reshape(s, b, self.heads, -1).permute(1, 2, 0, 3)

    def forward(self, query, key, value):
        q = self.qlinear(query) / math.sqrt(self.e // self.heads)
        k, v = self.klinear(key), self.vlinear(value)
        if self.seq_bias_k is not None:
            k, v = self.seq_bias_k(k), self.seq_bias_v(v)
        if self.zero:
            k = torch.cat([k, k.new_zeros(1, *k.shape[1:])])
            v = torch.cat([v, v.new_zeros(1, *v.shape[1:])])
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        weights = torch.softmax(q @ k.transpose(-1, -2), -1)
        out = (weights @ v).permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], self.e)
        return self.out_proj(out), weights.mean(1)
