"""Exact clipped sums on Hugging Face ``transformers`` models built from tiny configs (float64
against a per-example loop, to 1e-9 relative), inputs as the models take them (a dict of
``input_ids`` and ``attention_mask``, padded), outputs as the models return them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from _hf_reference import (  # noqa: E402
    assert_exact,
    class_loss,
    encoder,
    gpt2,
    llama,
    lm_loss,
    loop,
    median_clip,
    tokens,
)

from privopt.torch import GradientClipper, LayoutError, check_model, clipped_grad_sum  # noqa: E402
from privopt.torch._calls import Call, check_tap  # noqa: E402
from torch import nn  # noqa: E402

B, T = 5, 9


def _exact(model, loss_fn, inputs, targets, batch=B):
    clip = median_clip(model, loss_fn, inputs, targets, batch)
    expected, _ = loop(model, loss_fn, inputs, targets, clip, batch)
    clipper = GradientClipper(model)
    try:
        got, _ = clipper.clipped_sum(loss_fn, inputs, targets, clip)
    finally:
        clipper.remove()
    assert_exact(got, expected)
    return clipper.methods


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_exact_with_padding_and_fast_rules(attn):
    torch.manual_seed(0)
    model = gpt2(attn_implementation=attn).double()
    batch = tokens(B, T)
    methods = _exact(model, lm_loss, batch, batch)
    # Conv1D by its own rule; wpe (output shared by the batch) by the Embedding rule through
    # the broadcast addition's gradient, not by replaying the whole transformer per example
    assert methods["transformer.h.0.attn.c_attn"] == "Conv1D rule"
    assert methods["transformer.h.1.mlp.c_proj"] == "Conv1D rule"
    assert methods["transformer.wpe"] == "Embedding rule"
    assert methods["transformer.wte"] == "Embedding rule"  # tied with lm_head: one parameter
    assert "transformer" not in methods
    fast = {"Conv1D rule", "Embedding rule", "LayerNorm rule", "Linear rule"}
    assert set(methods.values()) <= fast


def test_gpt2_tuple_output_and_tensor_input():
    torch.manual_seed(1)
    model = gpt2().double()
    batch = tokens(B, T)
    full = {"input_ids": batch["input_ids"], "attention_mask": torch.ones_like(batch["input_ids"])}

    def loss(out, ids):
        assert isinstance(out, tuple)
        return lm_loss(out, {"input_ids": ids, "attention_mask": full["attention_mask"][:1]})

    class Plain(nn.Module):  # model(input_ids) -> tuple (return_dict=False)
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, ids):
            return self.inner(input_ids=ids, return_dict=False)

    _exact(Plain(), loss, batch["input_ids"], batch["input_ids"])


def test_gpt2_dropout_in_train_mode_uses_the_forward_masks():
    """With dropout on, every layer's rule reads the stored tensors of the one forward (no
    replay draws new masks): the sum equals the loop run with the same masks, which a batch of
    one cannot reproduce, so we check the sum against a plain backward of the clipped losses at
    an infinite clip (every c_i = 1): sum_i grad_i is the ordinary batch gradient."""
    torch.manual_seed(2)
    model = gpt2(resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.3).double().train()
    batch = tokens(B, T)
    state = torch.random.get_rng_state()
    got = clipped_grad_sum(model, lm_loss, batch, batch, 1e300)
    torch.random.set_rng_state(state)
    model.zero_grad()
    lm_loss(model(**batch), batch).sum().backward()
    expected = {n: p.grad for n, p in model.named_parameters()}
    assert_exact(got, expected)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_encoder_exact_with_padding(kind):
    torch.manual_seed(3)
    model = encoder(kind).double()
    batch = tokens(B, T)
    labels = torch.tensor([0, 1, 2, 1, 0])
    methods = _exact(model, class_loss, batch, labels)
    assert set(methods.values()) <= {"Linear rule", "Embedding rule", "LayerNorm rule"}


@pytest.mark.parametrize("pad", ["right", "left"])
def test_llama_gqa_rmsnorm_rotary_exact(pad):
    torch.manual_seed(4)
    model = llama().double()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    batch = tokens(B, T, pad=pad)
    methods = _exact(model, lm_loss, batch, batch)
    # RMSNorm by its rule (x_hat verified against the recorded output), no torch.func replay
    assert methods["model.layers.0.input_layernorm"] == "LlamaRMSNorm rule"
    assert methods["model.layers.1.self_attn.k_proj"] == "Linear rule"
    assert methods["model.norm"] == "LlamaRMSNorm rule"
    assert set(methods.values()) <= {"Linear rule", "Embedding rule", "LlamaRMSNorm rule"}


class GemmaStyleRMSNorm(nn.Module):
    """Named like an RMSNorm, but computes (1 + weight) * x_hat: the recomputed output differs,
    so the rule is not used and torch.func replays the norm (exact for any formula)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)
        self.variance_epsilon = 1e-6

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (1.0 + self.weight) * h.to(x.dtype)


@pytest.mark.parametrize("norm", ["torch", "variant"])
def test_rmsnorm_variants_exact(norm):
    torch.manual_seed(11)
    layer = nn.RMSNorm(6, eps=1e-6) if norm == "torch" else GemmaStyleRMSNorm(6)
    if norm == "torch":
        with torch.no_grad():
            layer.weight.normal_()
    model = nn.Sequential(nn.Linear(4, 6), layer, nn.Linear(6, 2)).double()
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    methods = _exact(model, lambda out, y: (out**2).sum((1, 2)), x, None)
    assert methods["1"] == ("RMSNorm rule" if norm == "torch" else "torch.func")


def test_check_model_on_dict_inputs():
    torch.manual_seed(5)
    model = gpt2().double()
    batch = tokens(4, T)
    found = check_model(model, lm_loss, (batch, batch))
    assert found.exact and found.independent and found.largest_error <= 1e-9


def test_batch_merged_before_a_conv1d_is_refused_by_name():
    from transformers.pytorch_utils import Conv1D

    class Merged(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = Conv1D(3, 4)

        def forward(self, x):  # the batch merged with the positions, as far as the output
            return self.proj(x.reshape(-1, 4))

    x = torch.randn(3, 2, 4, dtype=torch.float64)
    model = Merged().double()
    with pytest.raises(LayoutError, match=r"proj \(Conv1D\)"):
        clipped_grad_sum(model, lambda out, y: out.view(3, -1).sum(1), x, None, 1.0)


class _SharedTwice(nn.Module):
    """A position embedding shared by the batch, used twice: no tap, the parent replays."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(10, 4)
        self.pos = nn.Embedding(6, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        p = self.pos(torch.arange(ids.shape[1])[None])
        h = self.tok(ids) + p
        return self.head(torch.tanh(h) * p).sum((1, 2))


def test_shared_output_used_twice_is_hosted_by_the_parent_and_exact():
    torch.manual_seed(6)
    model = _SharedTwice().double()
    ids = torch.randint(0, 10, (4, 6))
    methods = _exact(model, lambda out, y: out**2, ids, None, batch=4)
    assert "pos" not in methods and methods[""] == "torch.func"


class _SharedInPlace(nn.Module):
    """A shared position embedding scaled in place, then added: an in-place operation returns
    O itself (not counted as a use), so the version guard keeps it from being tapped."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(10, 4)
        self.pos = nn.Embedding(6, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        p = self.pos(torch.arange(ids.shape[1])[None])
        p.mul_(3.0)
        return self.head(torch.tanh(self.tok(ids) + p)).sum((1, 2))


def test_shared_output_modified_in_place_is_not_tapped_and_exact():
    torch.manual_seed(9)
    model = _SharedInPlace().double()
    ids = torch.randint(0, 10, (4, 6))
    methods = _exact(model, lambda out, y: out**2, ids, None, batch=4)
    assert "pos" not in methods and methods[""] == "torch.func"


class _AddedInPlace(nn.Module):
    """``h += position embedding`` (older BERT code): tapped like h + p."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(10, 4)
        self.pos = nn.Embedding(6, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        h = self.tok(ids) * 2.0
        h += self.pos(torch.arange(ids.shape[1])[None])
        return self.head(torch.tanh(h)).sum((1, 2))


def test_in_place_addition_of_a_shared_output_is_tapped_and_exact():
    torch.manual_seed(10)
    model = _AddedInPlace().double()
    ids = torch.randint(0, 10, (4, 6))
    methods = _exact(model, lambda out, y: out**2, ids, None, batch=4)
    assert methods == {"tok": "Embedding rule", "pos": "Embedding rule", "head": "Linear rule"}


def test_tap_accounting_refuses_a_gradient_that_went_elsewhere():
    call = Call(0, "wpe", nn.Embedding(3, 2), None)
    grad_r = torch.ones(4, 3, 2, dtype=torch.float64)
    check_tap(call, grad_r, torch.full((1, 3, 2), 4.0, dtype=torch.float64))  # consistent
    with pytest.raises(LayoutError, match=r"wpe \(Embedding\)"):
        check_tap(call, grad_r, torch.full((1, 3, 2), 5.0, dtype=torch.float64))


def test_gpt2_one_clipper_over_batch_sizes_including_one():
    """The layout cache across batch sizes: at B = 1 the forward has no broadcast (wpe's output
    is the example's own) and wpe is replayed alone; at B > 1 it is tapped; all exact."""
    torch.manual_seed(7)
    model = gpt2().double()
    clipper = GradientClipper(model)
    try:
        for n, method in [(3, "Embedding rule"), (1, "torch.func"), (5, "Embedding rule")]:
            batch = {k: v[:n] for k, v in tokens(5, T, seed=n).items()}
            got, _ = clipper.clipped_sum(lm_loss, batch, batch, 0.5)
            expected, _ = loop(model, lm_loss, batch, batch, 0.5, n)
            assert_exact(got, expected)
            assert clipper.methods["transformer.wpe"] == method
    finally:
        clipper.remove()


def test_gpt2_float32_and_bf16_autocast_run_with_the_tap():
    torch.manual_seed(8)
    model = gpt2()
    batch = tokens(B, T)
    clipper = GradientClipper(model)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            sums, _ = clipper.clipped_sum(lm_loss, batch, batch, 1.0)
        assert clipper.methods["transformer.wpe"] == "Embedding rule"
        assert all(bool(torch.isfinite(v).all()) for v in sums.values())
        got, _ = clipper.clipped_sum(lm_loss, batch, batch, 1.0)
    finally:
        clipper.remove()
    wide = gpt2()
    wide.load_state_dict(model.state_dict())
    expected, _ = loop(wide.double(), lm_loss, batch, batch, 1.0, B)
    assert_exact({k: v.double() for k, v in got.items()}, expected, rtol=1e-4)


def test_clipper_raises_the_tap_refusal_at_its_one_sync(monkeypatch):
    """The clipper reads each tapped call's accounting flag at its one host synchronisation and
    refuses by name when it is false (forced here: a use of wpe's output the mode missed)."""
    import privopt.torch.clipping as clipping

    monkeypatch.setattr(clipping, "tap_consistent", lambda r, o: torch.zeros((), dtype=torch.bool))
    model = gpt2().double()
    batch = tokens(3, T)
    clipper = GradientClipper(model)
    try:
        with pytest.raises(LayoutError, match=r"transformer\.wpe \(Embedding\)"):
            clipper.clipped_sum(lm_loss, batch, batch, 1.0)
        assert clipper._taps == []  # nothing of the step kept
    finally:
        clipper.remove()
