"""A private step against a non-private step on Hugging Face models, CPU, one thread.

Models built from a config (no download): GPT-2 (``GPT2LMHeadModel``, 4 heads, vocabulary
128, dropout 0) at two sizes, ``tiny`` (2 layers, width 64, batch 32 x 32 tokens) and ``small``
(4 layers, width 256, batch 16 x 64 tokens), each fully fine-tuned and with ``peft`` LoRA
adapters (rank 4 on ``c_attn`` and ``c_proj``, base frozen). The per-example loss is the summed
next-token cross-entropy.

* non-private step: ``loss.sum().backward()`` and ``optimizer.step()`` (SGD);
* private step: ``GradientClipper.clipped_sum`` (one forward, one backward to the layers'
  outputs, per-example norms and clipped sums; kept across steps as the trainer does), Gaussian
  noise of the parameters' shape added to the sums (the noise draw a correlated mechanism also
  makes; the BLT recurrence adds a few vector operations), ``p.grad`` set, ``optimizer.step()``.

Each timing is the median over ``--repeats`` of the mean of ``--steps`` steps after a warm-up.
The ratio private / non-private is the number to compare (the machine is shared, so absolute
times move). Results go to ``benchmarks/torch_hf_results.json``.

    python benchmarks/torch_hf_bench.py [--sizes tiny small] [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch.nn.functional as F

import torch

OUT = Path(__file__).with_name("torch_hf_results.json")


def lm_loss(out, ids):
    logits = out.logits[:, :-1]
    per = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    return per.view(ids.shape[0], -1).sum(1)


FIELDS = ("layers", "width", "batch", "length")
SIZES = {  # name: FIELDS
    "tiny": (2, 64, 32, 32),
    "small": (4, 256, 16, 64),
}


def build(kind: str, layers: int, width: int):
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=4, vocab_size=128, n_positions=64, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if kind == "lora":
        lora = LoraConfig(
            r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["c_attn", "c_proj"],
            fan_in_fan_out=True,
        )  # fmt: skip
        model = get_peft_model(model, lora)
    return model


def _time(step, steps: int) -> float:
    step()  # warm-up (the clipper probes the layout once)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def bench(kind: str, size: str, steps: int, repeats: int) -> dict:
    from privopt.torch import GradientClipper

    layers, width, batch, length = SIZES[size]
    ids = torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(0))
    model = build(kind, layers, width)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3)
    clipper = GradientClipper(model)
    gen = torch.Generator().manual_seed(1)

    def plain():
        opt.zero_grad()
        lm_loss(model(ids), ids).sum().backward()
        opt.step()

    def private():
        opt.zero_grad()
        sums, _ = clipper.clipped_sum(lm_loss, ids, ids, 1.0)
        for name, p in ((n, p) for n, p in model.named_parameters() if p.requires_grad):
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.grad = (sums[name] + noise) / ids.shape[0]
        opt.step()

    runs = {"non_private": [], "private": []}
    for _ in range(repeats):
        runs["non_private"].append(_time(plain, steps))
        runs["private"].append(_time(private, steps))
    median = {k: statistics.median(v) for k, v in runs.items()}
    clipper.remove()
    return {
        "trainable_parameters": sum(p.numel() for p in params),
        "parameters": sum(p.numel() for p in model.parameters()),
        "non_private_ms": median["non_private"],
        "private_ms": median["private"],
        "ratio": median["private"] / median["non_private"],
        "overhead_ms": median["private"] - median["non_private"],
        "batch": [batch, length],
        "runs_ms": runs,
        "methods": dict(clipper.methods),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for size in args.sizes:
        for kind in ("full", "lora"):
            results[f"{size}:{kind}"] = r = bench(kind, size, args.steps, args.repeats)
            print(
                f"{size} {kind:4s}: non-private {r['non_private_ms']:.1f} ms, private "
                f"{r['private_ms']:.1f} ms, ratio {r['ratio']:.2f}, overhead "
                f"{r['overhead_ms']:.1f} ms ({r['trainable_parameters']:,} trainable)"
            )
    import peft
    import transformers

    record = {
        "benchmark": (
            "private step (clipped sum + noise + SGD) against non-private step, GPT-2 built "
            "from a config, fully fine-tuned and with LoRA r=4, CPU"
        ),
        "sizes": {k: dict(zip(FIELDS, SIZES[k], strict=True)) for k in SIZES},
        "machine": f"{platform.machine()}, {platform.system()}, 1 torch thread (shared machine: "
        "compare ratios within this file)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "steps_per_timing": args.steps,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
