# ruff: noqa: E731
"""Configurations over the layer families of issue 27: (id, build) with build() ->
(model, loss_fn, inputs, targets, batch), float64, each checked against a loop over examples."""

from __future__ import annotations

import itertools

import torch
from torch import nn


def mse(out, y):
    return ((out - y) ** 2).flatten(1).sum(1)


class Seq(nn.Module):
    """(B, T, ...) in; ``layer`` applied batch first or time first; mean over T; Linear head."""

    def __init__(self, layer, width, time_first=False, call=None, outputs=2):
        super().__init__()
        self.layer, self.time_first, self.call = layer, time_first, call
        self.head = nn.Linear(width, outputs)

    def forward(self, x):
        h = x.transpose(0, 1) if self.time_first else x
        h = self.call(self.layer, h) if self.call else self.layer(h)
        h = h.transpose(0, 1) if self.time_first else h
        return self.head(torch.tanh(h).mean(1))


def _first(module, h):
    return module(h)[0]


def _attention(key_padding=False, causal=False):
    def call(module, h):
        bf = module.batch_first
        t = h.shape[1] if bf else h.shape[0]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1) if causal else None
        kpm = None
        if key_padding:
            b = h.shape[0] if bf else h.shape[1]
            kpm = torch.zeros(b, t, dtype=torch.bool)
            kpm[:, -1] = t > 1  # the last position masked (not when it is the only one)
        kv = h
        if module.kdim != module.embed_dim:
            kv = torch.cat([h, h[..., :1]], -1)[..., : module.kdim]
        return module(h, kv, kv if module.vdim == module.kdim else kv[..., : module.vdim],
                      attn_mask=mask, key_padding_mask=kpm, need_weights=False)[0]  # fmt: skip

    return call


def _seq(layer, width, d_in, batch, t, time_first, call=None, tokens=None):
    def build():
        torch.manual_seed(batch * 100 + t)
        model = Seq(layer(), width, time_first, call).double()
        if tokens:
            x = torch.randint(0, tokens, (batch, t))
        else:
            x = torch.randn(batch, t, d_in, dtype=torch.float64)
        return model, mse, x, torch.randn(batch, 2, dtype=torch.float64), batch

    return build


def sequence_configs(batches=(1, 4), times=(1, 4, 3)):
    out = []
    for b, t, tf in itertools.product(batches, times, (False, True)):
        tag = f"B{b}-T{t}-{'tf' if tf else 'bf'}"
        for bias in (True, False):
            out.append(
                (
                    f"linear-{tag}-bias{bias}",
                    _seq(lambda bias=bias: nn.Linear(3, 4, bias=bias), 4, 3, b, t, tf),
                )
            )
        out.append((f"embedding-{tag}", _seq(lambda: nn.Embedding(7, 4), 4, 0, b, t, tf, tokens=7)))
        out.append(
            (
                f"embedding-pad-{tag}",
                _seq(lambda: nn.Embedding(7, 4, padding_idx=0), 4, 0, b, t, tf, tokens=7),
            )
        )
        out.append((f"layernorm-{tag}", _seq(lambda: nn.LayerNorm(3), 3, 3, b, t, tf)))
        out.append((f"rmsnorm-{tag}", _seq(lambda: nn.RMSNorm(3), 3, 3, b, t, tf)))
        for cls, layers, bi in itertools.product((nn.RNN, nn.GRU, nn.LSTM), (1, 2), (False, True)):
            w = 4 * (2 if bi else 1)
            name = f"{cls.__name__.lower()}-L{layers}-bi{bi}-{tag}"
            make = lambda cls=cls, layers=layers, bi=bi, tf=tf: cls(
                3, 4, num_layers=layers, bidirectional=bi, batch_first=not tf
            )
            out.append((name, _seq(make, w, 3, b, t, tf, call=_first)))
        for opts in (
            {},
            {"add_bias_kv": True},
            {"add_zero_attn": True},
            {"kdim": 3, "vdim": 2},
            {"bias": False},
        ):
            for masks in ((False, False), (True, True)):
                name = f"mha-{'-'.join(opts) or 'plain'}-mask{masks[0]}-{tag}"
                make = lambda opts=opts, tf=tf: nn.MultiheadAttention(
                    4, 2, batch_first=not tf, **opts
                )
                out.append((name, _seq(make, 4, 4, b, t, tf, call=_attention(*masks))))
        for norm_first in (False, True):
            make = lambda nf=norm_first, tf=tf: nn.TransformerEncoderLayer(
                4, 2, 8, dropout=0.0, batch_first=not tf, norm_first=nf
            )
            out.append((f"encoder-nf{norm_first}-{tag}", _seq(make, 4, 4, b, t, tf)))
        make = lambda tf=tf: nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0, batch_first=not tf)
        out.append((f"decoder-{tag}", _seq(make, 4, 4, b, t, tf, call=lambda m, h: m(h, h))))
    return out


def _plain(model_fn, shape, batch, outputs, tokens=None):
    def build():
        torch.manual_seed(batch)
        model = model_fn().double()
        if tokens:
            x = torch.randint(0, tokens, (batch, *shape))
        else:
            x = torch.randn(batch, *shape, dtype=torch.float64)
        return model, mse, x, torch.randn(batch, outputs, dtype=torch.float64), batch

    return build


def conv_configs(batches=(1, 3)):
    out = []
    for b in batches:
        for dim, (groups, stride, dilation, padding, bias) in itertools.product(
            (1, 2, 3),
            [(1, 1, 1, 0, True), (2, 2, 1, 1, False), (1, 1, 2, "same", True), (2, 1, 1, 1, True)],
        ):
            conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dim - 1]
            size = (7, 6, 4)[dim - 1]
            shape = (4,) + (size,) * dim

            def make(conv=conv, g=groups, s=stride, d=dilation, p=padding, bias=bias, dim=dim):
                return nn.Sequential(
                    conv(4, 4, 3, stride=s, dilation=d, padding=p, groups=g, bias=bias),
                    nn.Tanh(), nn.Flatten(), nn.LazyLinear(2),
                )  # fmt: skip

            out.append(
                (
                    f"conv{dim}d-g{groups}-s{stride}-d{dilation}-p{padding}-bias{bias}-B{b}",
                    _lazy(make, shape, b),
                )
            )
        for dim in (1, 2, 3):
            inorm = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)[dim - 1]
            conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dim - 1]
            shape = (2,) + (4,) * dim
            make = lambda conv=conv, inorm=inorm: nn.Sequential(
                conv(2, 4, 1), inorm(4, affine=True), nn.Flatten(), nn.LazyLinear(2)
            )
            out.append((f"instancenorm{dim}d-B{b}", _lazy(make, shape, b)))
        make = lambda: nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.Flatten(), nn.LazyLinear(2)
        )
        out.append((f"groupnorm-B{b}", _lazy(make, (2, 4, 4), b)))
        for mode in ("sum", "mean", "max"):
            make = lambda mode=mode: nn.Sequential(
                nn.EmbeddingBag(9, 4, mode=mode), nn.Linear(4, 2)
            )
            out.append((f"embeddingbag2d-{mode}-B{b}", _plain(make, (5,), b, 2, tokens=9)))
        out.append((f"embeddingbag-offsets-B{b}", _plain(BagOffsets, (5,), b, 2, tokens=9)))
    return out


def _lazy(make, shape, batch):
    def build():
        torch.manual_seed(batch)
        model = make()
        model(torch.randn(1, *shape))  # materialise the lazy layer
        x = torch.randn(batch, *shape, dtype=torch.float64)
        return model.double(), mse, x, torch.randn(batch, 2, dtype=torch.float64), batch

    return build


class BagOffsets(nn.Module):
    """EmbeddingBag in its 1-D input + offsets form, built from padded (B, L) ids."""

    def __init__(self):
        super().__init__()
        self.bag, self.head = nn.EmbeddingBag(9, 4, mode="sum"), nn.Linear(4, 2)

    def forward(self, ids):
        flat = ids.reshape(-1)
        offsets = torch.arange(0, ids.numel(), ids.shape[1])
        return self.head(self.bag(flat, offsets))


class Alias(nn.Module):
    """One parameter registered on a parent and on its child (as DP RNN re-implementations do)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.weight = self.fc.weight
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)))


class Tied(nn.Module):
    """Input embedding tied to the output layer; also read directly."""

    def __init__(self, direct=False):
        super().__init__()
        self.emb, self.out, self.direct = nn.Embedding(6, 4), nn.Linear(4, 6, bias=False), direct
        self.out.weight = self.emb.weight

    def forward(self, ids):
        h = self.emb(ids).mean(1)
        return h @ self.emb.weight.T if self.direct else self.out(h)


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.block = nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def forward(self, x):
        return self.fc(self.block(self.block(torch.tanh(self.fc(x)))))


class SubLinear(nn.Linear):
    pass


class SubConv(nn.Conv1d):
    pass


class OwnForward(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2.0 + self.bias.sum()


class SeqBias(nn.Module):
    """A time-first sequence-bias layer (Opacus's SequenceBias): appends a learned step."""

    def __init__(self, d):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(d))

    def forward(self, x):  # (T, B, D) -> (T + 1, B, D)
        return torch.cat([x, self.bias.expand(1, x.shape[1], -1)])


def structure_configs(batches=(1, 3)):
    out = []
    for b in batches:
        out.append((f"alias-B{b}", _plain(Alias, (3,), b, 2)))
        out.append((f"tied-B{b}", _plain(Tied, (3,), b, 6, tokens=6)))
        out.append((f"tied-direct-B{b}", _plain(lambda: Tied(True), (3,), b, 6, tokens=6)))
        out.append((f"twice-B{b}", _plain(Twice, (3,), b, 3)))
        out.append(
            (
                f"subclasses-B{b}",
                _plain(
                    lambda: nn.Sequential(SubLinear(3, 4), nn.Tanh(), OwnForward(4, 2)), (3,), b, 2
                ),
            )
        )
        out.append(
            (
                f"subconv-B{b}",
                _lazy(
                    lambda: nn.Sequential(SubConv(2, 3, 2), nn.Flatten(), nn.LazyLinear(2)),
                    (2, 5),
                    b,
                ),
            )
        )
        out.append((f"seqbias-T{b}-B{b}", _seq(lambda: SeqBias(3), 3, 3, b, b, True)))

        def frozen():
            m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
            m[0].weight.requires_grad_(False)
            return m

        out.append((f"frozen-B{b}", _plain(frozen, (3,), b, 2)))
    return out


def all_configs():
    return sequence_configs() + conv_configs() + structure_configs()


def fast_configs():
    """A handful: one per failure the issue lists, plus the common layers."""
    wanted = {
        "linear-B4-T4-tf-biasTrue", "embedding-B4-T1-tf", "gru-L1-biFalse-B4-T1-bf",
        "lstm-L2-biTrue-B4-T4-tf", "mha-add_bias_kv-maskTrue-B4-T4-tf", "encoder-nfFalse-B4-T4-tf",
        "alias-B3", "tied-direct-B3", "twice-B3", "subclasses-B3", "conv3d-g1-s1-d1-p0-biasTrue-B3",
    }  # fmt: skip
    found = [c for c in all_configs() if c[0] in wanted]
    assert len(found) == len(wanted), sorted(wanted - {c[0] for c in found})
    return found
