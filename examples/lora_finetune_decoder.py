"""Private LoRA fine-tuning of a small Llama-style decoder with BLT correlated noise.

The corpus is real English text that ships inside an installed package: scikit-learn's dataset
descriptions (``sklearn/datasets/descr/*.rst``, about 43 KB; scikit-learn is a privopt
dependency, so nothing is downloaded). The files are split by name: the descriptions of the
small bundled data sets (iris, digits, wine, ...) are the *public* text on which the base model
is pre-trained without privacy; the others (covtype, kddcup99, rcv1, twenty_newsgroups, ...)
are the *private* text. One record (the unit of privacy) is one non-overlapping window of
``--length`` characters of the private text; a tenth of the windows is held out.

Steps:

1. a character-level ``LlamaForCausalLM`` built from a tiny config (RMSNorm, rotary
   embeddings, grouped-query attention: 4 query heads share 2 key/value heads) is pre-trained
   on the public text (Adam, non-private: that text is public);
2. its weights are frozen and ``peft`` LoRA adapters (rank 4) are put on every attention
   projection; only they are trained;
3. ``privopt.torch.PrivateTrainer`` trains the adapters on the private windows with BLT noise
   (buffered linear Toeplitz correlated noise, Dvijotham et al. 2024, arXiv 2404.15211; fixed
   batches cycled every epoch) at the target (epsilon, delta); the per-example clipped sums
   cover the adapters only (the frozen base gets no per-example work);
4. it prints the held-out loss (nats per character) before and after, and the privacy report.

    python examples/lora_finetune_decoder.py [--epochs 2] [--length 32] [--hidden 64] ...

On a 2-core CPU the defaults take well under a minute of training; the BLT coefficients are
optimised once for the run's number of steps (seconds to a minute, depending on the machine).
"""

from __future__ import annotations

import argparse
import importlib.resources
import time

import torch.nn.functional as F

import torch

PUBLIC = (
    "breast_cancer",
    "california_housing",
    "diabetes",
    "digits",
    "iris",
    "linnerud",
    "wine_data",
)


def load_texts() -> tuple[str, str]:
    """(public text, private text) from scikit-learn's dataset descriptions."""
    root = importlib.resources.files("sklearn.datasets.descr")
    public, private = [], []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".rst"):
            text = entry.read_text(encoding="utf-8")
            (public if entry.name[:-4] in PUBLIC else private).append(text)
    return "\n".join(public), "\n".join(private)


def encode(text: str) -> torch.Tensor:
    """Characters -> ids: printable ASCII 32..126 -> 1..95, newline -> 96, anything else 0."""
    ids = [
        c - 31 if 32 <= c <= 126 else (96 if c == 10 else 0)
        for c in text.encode("ascii", "replace")
    ]
    return torch.tensor(ids, dtype=torch.long)


def windows(ids: torch.Tensor, length: int) -> torch.Tensor:
    n = ids.shape[0] // length
    return ids[: n * length].view(n, length)


def per_example_loss(out, y: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross-entropy of each window (nats)."""
    logits = out.logits[:, :-1]
    per = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1), reduction="none"
    )
    return per.view(y.shape[0], -1).mean(1)


@torch.no_grad()
def held_out_loss(model, data: torch.Tensor) -> float:
    model.eval()
    loss = per_example_loss(model(data), data).mean()
    model.train()
    return float(loss)


def main(argv: list[str] | None = None) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from privopt.torch import PrivateTrainer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=32, help="characters per record")
    parser.add_argument("--hidden", type=int, default=64, help="model width")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pretrain-steps", type=int, default=150)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (tiny model: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    public_text, private_text = load_texts()
    public = windows(encode(public_text), args.length)
    private = windows(encode(private_text), args.length)
    order = torch.randperm(private.shape[0], generator=torch.Generator().manual_seed(args.seed))
    held = private[order[: private.shape[0] // 10]]
    train = private[order[private.shape[0] // 10 :]]
    print(
        f"corpus: scikit-learn dataset descriptions; public {public.shape[0]} windows, "
        f"private {train.shape[0]} training + {held.shape[0]} held-out windows of "
        f"{args.length} characters"
    )

    config = LlamaConfig(
        vocab_size=97,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.length,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    base = LlamaForCausalLM(config)
    start = time.perf_counter()
    opt = torch.optim.Adam(base.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(args.pretrain_steps):  # public text: no privacy needed
        batch = public[torch.randint(0, public.shape[0], (32,), generator=gen)]
        opt.zero_grad()
        per_example_loss(base(batch), batch).mean().backward()
        opt.step()
    print(f"pre-trained on public text in {time.perf_counter() - start:.1f} s")

    lora = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    model = get_peft_model(base, lora)
    adapters = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in model.parameters())
    print(f"LoRA: {sum(p.numel() for p in adapters):,} trainable of {total:,} parameters")
    before = held_out_loss(model, held)

    start = time.perf_counter()
    trainer = PrivateTrainer(
        model,
        torch.optim.SGD(adapters, lr=args.lr, momentum=0.9),
        (train, train),  # (inputs, targets): the model reads the window, the loss shifts it
        epsilon=args.epsilon,
        delta=args.delta,
        epochs=args.epochs,
        batch_size=args.batch_size,
        clip_norm=args.clip_norm,
        mechanism="blt",
        loss_fn=per_example_loss,
        seed=args.seed,
    )
    planned = time.perf_counter() - start
    start = time.perf_counter()
    report = trainer.fit()
    trained = time.perf_counter() - start
    after = held_out_loss(model, held)
    print(
        f"BLT plan in {planned:.1f} s; {trainer.steps} private steps in {trained:.1f} s; "
        f"held-out loss {before:.3f} -> {after:.3f} nats per character"
    )
    report.render()


if __name__ == "__main__":
    main()
