"""clipped_grad_sum equals a per-example loop (float64, 1e-6 relative) for every layer kind."""

import math

import pytest

torch = pytest.importorskip("torch")
from privopt.torch import clipped_grad_sum  # noqa: E402
from privopt.torch._conv import METHODS, ConvRule  # noqa: E402
from privopt.torch._layers import _Linear  # noqa: E402
from torch import nn  # noqa: E402


def _naive(model, loss_fn, inputs, targets, clip):
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    for i in range(targets.shape[0]):
        x = tuple(t[i : i + 1] for t in inputs) if isinstance(inputs, tuple) else inputs[i : i + 1]
        out = model(*x) if isinstance(x, tuple) else model(x)
        loss = loss_fn(out, targets[i : i + 1]).sum()
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g
            for g, p in zip(grads, params.values(), strict=True)
        ]
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        norms.append(norm)
        for n, g in zip(params, grads, strict=True):
            total[n] += (min(1.0, clip / norm) * g if norm > 0 else g).detach()
    return total, norms


def _check(model, loss_fn, inputs, targets):
    model = model.double()
    # clip at the median norm: about half the examples inside the clip, half outside
    _, norms = _naive(model, loss_fn, inputs, targets, 1e300)
    clip = sorted(norms)[len(norms) // 2]
    assert min(norms) < clip < max(norms)
    expected, _ = _naive(model, loss_fn, inputs, targets, clip)
    got = clipped_grad_sum(model, loss_fn, inputs, targets, clip)
    got = {k: v.detach() for k, v in got.items()}
    assert set(got) == set(expected)
    for name in expected:
        scale = float(expected[name].abs().max()) + 1e-300
        assert float((got[name] - expected[name]).abs().max()) <= 1e-6 * scale, name


def _mse(out, y):
    return ((out - y) ** 2).flatten(1).sum(1)


def _xent(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


def _seq_xent(out, y):  # (B, T, V) logits, loss averaged over the tokens of each example
    return nn.functional.cross_entropy(out.transpose(1, 2), y, reduction="none").mean(1)


torch.manual_seed(0)
B = 7


class Scale(nn.Module):
    """A layer privopt has no rule for (torch.func fallback)."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d))
        self.b = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return torch.tanh(x * self.w + self.b)


def test_linear_without_sequence():
    assert _Linear.__name__  # T = 1: ghost ||a||^2 ||g||^2
    _check(
        nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)),
        _mse,
        torch.randn(B, 5).double(),
        torch.randn(B, 3).double(),
    )


@pytest.mark.parametrize("d,p,t", [(16, 16, 3), (3, 2, 6)])  # ghost Grams; materialised
def test_linear_with_sequence(d, p, t):
    model = nn.Sequential(nn.Linear(d, p), nn.Tanh(), nn.Linear(p, p, bias=False))
    _check(model, _mse, torch.randn(B, t, d).double(), torch.randn(B, t, p).double())


@pytest.mark.parametrize(
    "conv,shape",
    [
        (nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), (B, 8, 4, 4)),  # ghost
        (nn.Conv2d(2, 3, (2, 3), padding="same", padding_mode="reflect", bias=False), (B, 2, 6, 7)),
        (nn.Conv2d(3, 4, 3, dilation=2, padding=2, padding_mode="circular"), (B, 3, 6, 6)),
        (nn.Conv1d(3, 4, 3, stride=2, padding=1), (B, 3, 9)),
        (nn.Conv1d(4, 4, 2, groups=4, padding="same"), (B, 4, 5)),
    ],
)
def test_convolutions(conv, shape):
    x = torch.randn(shape).double()
    out_shape = conv.double()(x).shape
    _check(nn.Sequential(conv, nn.Tanh()), _mse, x, torch.randn(out_shape).double())


def _rule(conv, x):
    g = torch.randn_like(conv(x))
    return ConvRule(conv, [((x,), {}, g)], dict(conv.named_parameters()), x.shape[0])


def test_the_cost_model_picks_each_conv_path():
    # few output positions: ghost norms (Gram of the padded pixels); many: materialised by
    # shifted views (stride 1) or one strided unfold (stride 2)
    conv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2).double()
    assert _rule(conv, torch.randn(B, 8, 4, 4).double()).ghost
    assert _rule(nn.Conv2d(2, 3, 2).double(), torch.randn(B, 2, 8, 8).double()).method == (
        "mat_shift"
    )
    conv = nn.Conv2d(2, 3, 3, stride=2).double()
    assert _rule(conv, torch.randn(B, 2, 16, 16).double()).method == "mat_unfold"
    conv = nn.Conv2d(64, 64, 3, padding=1).double()  # ResNet-18 stage 4 at 4x4
    assert _rule(conv, torch.randn(2, 64, 4, 4).double()).method == "ghost_pixel"


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "conv,shape",
    [
        (nn.Conv2d(4, 6, 3, stride=1, padding=1, groups=2), (B, 4, 5, 6)),
        (nn.Conv2d(3, 4, (2, 3), stride=(2, 1), dilation=(1, 2), padding=(1, 0)), (B, 3, 7, 8)),
        (nn.Conv2d(2, 3, 3, dilation=2, padding=2, padding_mode="circular"), (B, 2, 6, 5)),
        (nn.Conv1d(3, 4, 3, padding=1), (B, 3, 9)),
        (nn.Conv2d(3, 5, 1, stride=2, bias=False), (B, 3, 6, 6)),
    ],
)
def test_every_conv_path_equals_the_loop(method, conv, shape):
    stride_one = all(s == 1 for s in conv.stride)
    if method == "mat_shift" and not stride_one:
        pytest.skip("mat_shift needs stride 1")
    ConvRule.method_override = method
    try:
        x = torch.randn(shape).double()
        out_shape = conv.double()(x).shape
        _check(nn.Sequential(conv, nn.Tanh()), _mse, x, torch.randn(out_shape).double())
    finally:
        ConvRule.method_override = None


@pytest.mark.parametrize("method", ["ghost_unfold", "mat_unfold"])
def test_conv_called_twice(method):  # the uses' cross terms enter the norm
    conv = nn.Conv2d(2, 2, 3, padding=1)
    model = nn.Sequential(conv, nn.Tanh(), conv)
    ConvRule.method_override = method
    try:
        _check(model, _mse, torch.randn(B, 2, 5, 5).double(), torch.randn(B, 2, 5, 5).double())
    finally:
        ConvRule.method_override = None


def test_conv_called_twice_and_shared_with_another_layer():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 3, padding=1)
            self.other = nn.Conv2d(2, 2, 3, padding=1, bias=False)
            self.other.weight = self.conv.weight  # tied: per-example gradients summed

        def forward(self, x):
            y = torch.tanh(self.conv(x))
            return self.other(torch.tanh(self.conv(y[:, :, ::2, ::2])))

    x = torch.randn(B, 2, 6, 6).double()
    _check(Twice(), _mse, x, torch.randn(B, 2, 3, 3).double())


def test_embedding_layernorm_and_tied_head():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(6, 4, padding_idx=0)
            self.norm = nn.LayerNorm(4)
            self.mid = nn.Linear(4, 4)
            self.head = nn.Linear(4, 6, bias=False)
            self.head.weight = self.emb.weight  # tied: per-example gradients summed

        def forward(self, x):
            return self.head(torch.tanh(self.mid(self.norm(self.emb(x)))))

    ids = torch.randint(0, 6, (B, 5))
    ids[0, :3] = 0  # padding tokens
    ids[1] = 2  # one token repeated
    _check(Tiny(), _seq_xent, ids, torch.randint(0, 6, (B, 5)))


def test_groupnorm_cnn_and_fallback_mixed():
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, stride=2),
        Scale(1),  # broadcast over (B, C, H, W): torch.func fallback
        nn.Flatten(),
        nn.Linear(36, 5),
        nn.PReLU(),  # no rule: fallback
        nn.LayerNorm(5),
    )
    _check(model, _xent, torch.randn(B, 1, 8, 8).double(), torch.randint(0, 5, (B,)))


def test_fallback_with_parameters_used_without_a_call():
    # MultiheadAttention reads out_proj.weight directly: the attention module hosts them
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
            self.out = nn.Linear(4, 3)

        def forward(self, x):
            return self.out(self.attn(x, x, x, need_weights=False)[0])

    _check(Attn(), _mse, torch.randn(B, 3, 4).double(), torch.randn(B, 3, 3).double())


def test_frozen_parameters_and_tuple_inputs():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(4, 2)

        def forward(self, x, z):
            return self.a(x) * self.b(z)

    model = Two()
    model.a.weight.requires_grad_(False)
    inputs = (torch.randn(B, 3).double(), torch.randn(B, 4).double())
    _check(model, _mse, inputs, torch.randn(B, 2).double())


def test_clipped_norms_never_exceed_the_clip_and_bad_examples_contribute_zero():
    model = nn.Linear(3, 1).double()
    x = torch.randn(4, 3).double() * 100
    x[2, 0] = float("nan")
    got = clipped_grad_sum(model, _mse, x, torch.zeros(4, 1).double(), 0.5)
    total = math.sqrt(sum(float((v**2).sum()) for v in got.values()))
    assert math.isfinite(total) and total <= 3 * 0.5
    single = clipped_grad_sum(model, _mse, x[:1], torch.zeros(1, 1).double(), 0.5)
    assert math.sqrt(sum(float((v**2).sum()) for v in single.values())) <= 0.5


def test_refusals_name_the_layer_and_the_fix():
    with pytest.raises(ValueError, match=r"1: BatchNorm2d normalises over the batch.*GroupNorm"):
        clipped_grad_sum(
            nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)),
            _mse,
            torch.randn(2, 1, 5, 5),
            torch.zeros(2, 2, 3, 3),
            1.0,
        )

    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return torch.relu_(self.fc(x))

    with pytest.raises(RuntimeError, match="in place"):
        clipped_grad_sum(InPlace(), _mse, torch.randn(2, 3), torch.zeros(2, 3), 1.0)
    with pytest.raises(ValueError, match="one loss per example"):
        clipped_grad_sum(
            nn.Linear(3, 1), lambda o, y: o.sum(), torch.randn(2, 3), torch.zeros(2, 1), 1.0
        )
    with pytest.raises(ValueError, match="clip_norm"):
        clipped_grad_sum(nn.Linear(3, 1), _mse, torch.randn(2, 3), torch.zeros(2, 1), -1.0)


@pytest.mark.parametrize("method", METHODS)
def test_bf16_autocast_runs_every_rule_close_to_float32(method):
    # under bf16 autocast the layers compute in 8-bit significands (relative rounding 2^-9 per
    # operation, a few operations deep), so the clipped sums agree with the float32 loop to a
    # few percent of their largest entry (about 1% measured; a clip 1.5x too large is off by
    # 7%); the norms themselves are float32 inside the rules
    torch.manual_seed(1)
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=1 if method == "mat_shift" else 2),
        nn.Flatten(),
        nn.LazyLinear(4),
    )
    x, y = torch.randn(B, 3, 6, 6), torch.randint(0, 4, (B,))
    cnn(x)  # materialise the lazy layer
    tokens = nn.Sequential(
        nn.Embedding(20, 8), nn.LayerNorm(8), nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 20)
    )
    ids, targets = torch.randint(0, 20, (B, 6)), torch.randint(0, 20, (B, 6))
    ConvRule.method_override = method
    try:
        for model, inputs, labels, loss in ((cnn, x, y, _xent), (tokens, ids, targets, _seq_xent)):
            _, norms = _naive(model, loss, inputs, labels, 1e300)
            clip = sorted(norms)[len(norms) // 2]
            expected, _ = _naive(model, loss, inputs, labels, clip)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = clipped_grad_sum(model, loss, inputs, labels, clip)
            for name, value in expected.items():
                assert got[name].dtype == torch.float32
                scale = float(value.abs().max())
                assert float((got[name] - value).abs().max()) <= 0.03 * scale, name
    finally:
        ConvRule.method_override = None
