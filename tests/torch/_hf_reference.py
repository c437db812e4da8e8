"""Tiny config-built Hugging Face models and the float64 per-example reference for them."""

from __future__ import annotations

import math

import torch.nn.functional as F

import torch

# dropout off everywhere: the reference loop and the batch then compute the same function
NO_DROPOUT = {
    "gpt2": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
    "bert": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
}


def gpt2(**kwargs):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, use_cache=False,
        bos_token_id=0, eos_token_id=0, **{**NO_DROPOUT["gpt2"], **kwargs},
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def llama(**kwargs):
    from transformers import LlamaConfig, LlamaForCausalLM

    defaults = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
        "use_cache": False,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
    }
    config = LlamaConfig(**{**defaults, **kwargs})
    return LlamaForCausalLM(config)


def encoder(kind: str = "bert", **kwargs):
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        RobertaConfig,
        RobertaForSequenceClassification,
    )

    config_type, model_type = {
        "bert": (BertConfig, BertForSequenceClassification),
        "roberta": (RobertaConfig, RobertaForSequenceClassification),
    }[kind]
    config = config_type(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=48, max_position_embeddings=40, num_labels=3, pad_token_id=1,
        **{**NO_DROPOUT["bert"], **kwargs},
    )  # fmt: skip
    return model_type(config)


def tokens(batch: int, length: int, *, seed: int = 0, pad: str = "right"):
    """{"input_ids", "attention_mask"}: random ids, example i keeps length - i % 3 tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 64, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for i in range(batch):
        n = length - i % 3
        if pad == "right":
            mask[i, n:] = 0
        else:
            mask[i, : length - n] = 0
    ids = torch.where(mask.bool(), ids, torch.ones_like(ids))  # pad id 1
    return {"input_ids": ids, "attention_mask": mask}


def lm_loss(out, batch):
    """Per example: the summed next-token cross-entropy over its real (unmasked) tokens; ``out``
    is a ModelOutput, a tuple (return_dict=False) or a dict."""
    logits = out["logits"] if isinstance(out, dict) else getattr(out, "logits", None)
    logits = out[0] if logits is None else logits
    ids, mask = batch["input_ids"], batch["attention_mask"]
    per = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view(ids.shape[0], -1)
    return (per * mask[:, 1:].to(per.dtype)).sum(1)


def class_loss(out, labels):
    return F.cross_entropy(out.logits, labels, reduction="none")


def _rows(value, i: int):
    if isinstance(value, dict):
        return {k: _rows(v, i) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(v, i) for v in value)
    return value[i : i + 1] if isinstance(value, torch.Tensor) else value


def _call(model, inputs):
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs) if isinstance(inputs, tuple) else model(inputs)


def loop(model, loss_fn, inputs, targets, clip: float, batch: int):
    """(per-parameter clipped sums, per-example norms): each example's gradient computed alone by
    autograd on a batch of one (float64 model), clipped, summed."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    for i in range(batch):
        loss = loss_fn(_call(model, _rows(inputs, i)), _rows(targets, i)).sum()
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


def median_clip(model, loss_fn, inputs, targets, batch: int) -> float:
    """The median per-example norm, so that about half the examples are clipped."""
    _, norms = loop(model, loss_fn, inputs, targets, math.inf, batch)
    positive = sorted(v for v in norms if v > 0)
    return positive[len(positive) // 2]


def assert_exact(got, expected, rtol: float = 1e-9) -> None:
    """Same parameter names, and every entry within rtol of the largest entry of the sums."""
    assert set(got) == set(expected), sorted(set(got) ^ set(expected))
    scale = max(float(v.abs().max()) for v in expected.values())
    assert scale > 0
    for name, want in expected.items():
        err = float((got[name].detach() - want).abs().max())
        assert err <= rtol * scale, f"{name}: error {err:.3g}, scale {scale:.3g}"
