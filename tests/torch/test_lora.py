"""LoRA adapters from ``peft`` on config-built ``transformers`` models: the clipped sum covers
exactly the adapter (trainable) parameters, equals a float64 per-example loop to 1e-9, spends no
per-example work on the frozen base, and a private training step changes only the adapters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from _hf_reference import assert_exact, gpt2, llama, lm_loss, loop, median_clip, tokens  # noqa: E402

from privopt.torch import GradientClipper, PrivateTrainer  # noqa: E402

B, T = 5, 9


def _lora(model, targets, **kwargs):
    # init_lora_weights=False: B random too, so that both A and B get nonzero gradients
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=targets,
        init_lora_weights=False,
        **kwargs,
    )
    return peft.get_peft_model(model, config)


def _check(model, batch):
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    clip = median_clip(model, lm_loss, batch, batch, B)
    expected, _ = loop(model, lm_loss, batch, batch, clip, B)
    model.zero_grad(set_to_none=True)
    clipper = GradientClipper(model)
    try:
        got, _ = clipper.clipped_sum(lm_loss, batch, batch, clip)
        hooked = len(clipper._recorder._handles) // 2
    finally:
        clipper.remove()
    assert set(got) == trainable  # exactly the adapters
    assert_exact(got, expected)
    # per-example work only on adapter layers: every host is a lora_A / lora_B Linear
    assert clipper.methods and all(
        name.rsplit(".", 2)[-2] in ("lora_A", "lora_B") and method == "Linear rule"
        for name, method in clipper.methods.items()
    ), clipper.methods
    # hooks only on modules holding adapters (never on a frozen-only module)
    holders = [m for m in model.modules() if any(p.requires_grad for p in m.parameters())]
    assert hooked == len(holders)
    assert all(p.grad is None for p in model.parameters())  # nothing written into .grad


def test_lora_gpt2_conv1d_adapters_exact():
    torch.manual_seed(0)
    model = _lora(gpt2().double(), ["c_attn", "c_proj"], fan_in_fan_out=True)
    _check(model, tokens(B, T))


def test_lora_llama_gqa_adapters_exact():
    torch.manual_seed(1)
    model = _lora(llama().double(), ["q_proj", "k_proj", "v_proj", "o_proj"])
    _check(model, tokens(B, T, pad="left"))


def test_private_training_changes_only_the_adapters():
    torch.manual_seed(2)
    model = _lora(gpt2(), ["c_attn"], fan_in_fan_out=True)
    ids = tokens(16, T, seed=3)["input_ids"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    adapters = [p for p in model.parameters() if p.requires_grad]
    trainer = PrivateTrainer(
        model,
        torch.optim.SGD(adapters, lr=0.5),
        (ids, ids),  # (inputs, targets) tensors: the model gets input_ids, the loss both
        epsilon=8.0,
        delta=1e-3,
        epochs=1,
        batch_size=4,
        clip_norm=1.0,
        mechanism="blt",
        loss_fn=lambda out, y: lm_loss(out, {"input_ids": y, "attention_mask": torch.ones_like(y)}),
        seed=0,
    )
    report = trainer.fit()
    assert trainer.steps == 4
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert not torch.equal(p, before[name]), name
        else:
            assert torch.equal(p, before[name]), name  # bit for bit
            assert p.grad is None, name
    assert report.epsilon <= 8.0


def test_make_private_user_loop_trains_only_the_adapters():
    """The user's own loop over make_private (issue 29's API) on a LoRA GPT-2: the batch-mean
    token cross-entropy, as written for non-private training; only the adapters move."""
    import torch.nn.functional as F

    from privopt.torch import make_private

    torch.manual_seed(4)
    model = _lora(gpt2(), ["c_attn"], fan_in_fan_out=True)
    ids = tokens(16, T, seed=5)["input_ids"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    adapters = [p for p in model.parameters() if p.requires_grad]
    run = make_private(
        model,
        torch.optim.SGD(adapters, lr=0.5),
        (ids, ids),
        epsilon=8.0,
        delta=1e-3,
        epochs=1,
        batch_size=4,
        clip_norm=1.0,
        mechanism="blt",
        seed=0,
    )
    for x, y in run.loader:
        run.optimizer.zero_grad()
        logits = run.model(x).logits[:, :-1]
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1)).backward()
        run.optimizer.step()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) != p.requires_grad, name
    assert run.epsilon_spent <= 8.0


class _Texts(torch.utils.data.Dataset):
    """(inputs as a dict, target) records, padded; default_collate gives a dict batch, which
    the trainer passes as model(**inputs)."""

    def __init__(self, n: int) -> None:
        self.batch = tokens(n, T, seed=6)

    def __len__(self) -> int:
        return self.batch["input_ids"].shape[0]

    def __getitem__(self, i):
        item = {k: v[i] for k, v in self.batch.items()}
        return item, item


def test_private_trainer_on_padded_dict_records_changes_only_the_adapters():
    torch.manual_seed(6)
    model = _lora(llama(), ["q_proj", "v_proj"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    adapters = [p for p in model.parameters() if p.requires_grad]
    trainer = PrivateTrainer(
        model,
        torch.optim.SGD(adapters, lr=0.5),
        _Texts(16),
        epsilon=8.0,
        delta=1e-3,
        epochs=1,
        batch_size=4,
        clip_norm=1.0,
        mechanism="blt",
        loss_fn=lm_loss,
        seed=1,
    )
    report = trainer.fit()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) != p.requires_grad, name
    assert report.epsilon <= 8.0
