"""The clipped sum of per-example gradients on sequence models: privopt against Opacus 1.6 (CPU).

Two models, batch 32 of 16 tokens (vocabulary 100, width 32), a per-example cross-entropy over
4 classes, clip norm 1, one CPU thread:

* ``lstm``: Embedding -> LSTM(32, 32) -> mean over time -> Linear. privopt takes ``nn.LSTM``;
  Opacus needs its ``DPLSTM`` (the same function; nn.LSTM has no per-sample rule there);
* ``transformer``: Embedding -> one post-norm encoder layer (4 heads, feed-forward 64, ReLU, no
  dropout) -> mean -> Linear. privopt takes ``nn.TransformerEncoderLayer`` (batch first); for
  Opacus the same layer is written with its ``DPMultiheadAttention`` (what
  ``ModuleValidator.fix`` substitutes for nn.MultiheadAttention), Linear and LayerNorm, and the
  whole model runs time first (its hooks take one batch dimension for every layer, and
  DPMultiheadAttention is time first).

Timed: ``sum_i min(1, G / ||grad_i||) grad_i`` for every parameter, from the batch:
privopt's ``GradientClipper.clipped_sum`` (kept across steps, as the trainer does); Opacus's
``GradSampleModule`` hooks (forward, backward filling ``grad_sample``, per-sample norms, clip
factors, the weighted sum: what its DPOptimizer's ``clip_and_accumulate`` computes). Opacus runs
in its own venv (``--opacus-python``, see ``make bench-torch``). Each timing is the median over
``--repeats`` of the mean of ``--steps`` steps after a warm-up. A check first compares the two
clipped sums on the same weights (float64) so that the timings are of the same quantity.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

BATCH, TOKENS, VOCAB, WIDTH, CLASSES = 32, 16, 100, 32, 4


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (BATCH, TOKENS), generator=gen)
    return x, torch.randint(0, CLASSES, (BATCH,), generator=gen)


class LSTMModel(nn.Module):
    def __init__(self, lstm_cls=nn.LSTM):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.lstm = lstm_cls(WIDTH, WIDTH, batch_first=True)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        return self.head(self.lstm(self.emb(x))[0].mean(1))


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's post-norm ReLU math with a given attention class."""

    def __init__(self, attn_cls, heads=4, ff=64):
        super().__init__()
        self.self_attn = attn_cls(WIDTH, heads, dropout=0.0)
        self.linear1, self.linear2 = nn.Linear(WIDTH, ff), nn.Linear(ff, WIDTH)
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)

    def forward(self, x):  # time first (T, B, D): Opacus's hooks need one layout throughout
        x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


class TransformerModel(nn.Module):
    def __init__(self, encoder=None):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.encoder = encoder or nn.TransformerEncoderLayer(
            WIDTH, 4, 64, dropout=0.0, batch_first=True
        )
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        if isinstance(self.encoder, nn.TransformerEncoderLayer):  # batch first
            return self.head(self.encoder(self.emb(x)).mean(1))
        # time first throughout, the head before the mean (the same function: Opacus's
        # time-first hooks read dimension 1 of every layer's input as the batch)
        return self.head(self.encoder(self.emb(x.T))).mean(0)


def _copy_encoder(src: nn.TransformerEncoderLayer, dst: EncoderLayer) -> None:
    """nn.TransformerEncoderLayer's weights into the Opacus-style layer (same function)."""
    with torch.no_grad():
        w, b = src.self_attn.in_proj_weight, src.self_attn.in_proj_bias
        attn = dst.self_attn
        for k, lin in enumerate((attn.qlinear, attn.klinear, attn.vlinear)):
            lin.weight.copy_(w[k * WIDTH : (k + 1) * WIDTH])
            lin.bias.copy_(b[k * WIDTH : (k + 1) * WIDTH])
        attn.out_proj.weight.copy_(src.self_attn.out_proj.weight)
        attn.out_proj.bias.copy_(src.self_attn.out_proj.bias)
        for name in ("linear1", "linear2", "norm1", "norm2"):
            getattr(dst, name).load_state_dict(getattr(src, name).state_dict())


def privopt_models():
    torch.manual_seed(0)
    return {"lstm": LSTMModel(), "transformer": TransformerModel()}


def opacus_models():
    from opacus.layers import DPLSTM, DPMultiheadAttention

    mine = privopt_models()
    lstm = LSTMModel(DPLSTM)
    lstm.load_state_dict(mine["lstm"].state_dict(), strict=False)  # DPLSTM keeps nn.LSTM names
    encoder = EncoderLayer(DPMultiheadAttention)
    _copy_encoder(mine["transformer"].encoder, encoder)
    transformer = TransformerModel(encoder)
    transformer.emb.load_state_dict(mine["transformer"].emb.state_dict())
    transformer.head.load_state_dict(mine["transformer"].head.state_dict())
    return {"lstm": lstm, "transformer": transformer}


def _loss(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


def _time(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def opacus_clipped_sum_fn(model):
    """The clipped sum by Opacus's hooks (per-sample gradients, norms, clip, weighted sum)."""
    from opacus import GradSampleModule

    batch_first = not isinstance(model, TransformerModel)  # the Opacus encoder is time first
    gsm = GradSampleModule(model, batch_first=batch_first, loss_reduction="sum")
    params = [p for p in gsm.parameters() if p.requires_grad]

    def clipped_sum(x, y, clip=1.0):
        for p in params:
            p.grad, p.grad_sample = None, None
        _loss(gsm(x), y).sum().backward()
        samples = [p.grad_sample for p in params]
        norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=-1) for g in samples], 1).norm(
            2, dim=1
        )
        factor = (clip / (norms + 1e-6)).clamp(max=1.0)
        return [torch.einsum("i,i...", factor, g) for g in samples]

    return gsm, clipped_sum


def opacus_part(steps: int, repeats: int) -> dict:
    import warnings

    import opacus

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    x, y = _data()
    out = {"opacus": opacus.__version__}
    for name, model in opacus_models().items():
        _, fn = opacus_clipped_sum_fn(model)
        _time(lambda fn=fn: fn(x, y), 5)
        out[name] = [_time(lambda fn=fn: fn(x, y), steps) for _ in range(repeats)]
    return out


def opacus_check() -> dict:
    """float64 clipped sums by Opacus on the shared weights, per privopt parameter name."""
    x, y = _data()
    out = {}
    for name, model in opacus_models().items():
        model = model.double()
        gsm, fn = opacus_clipped_sum_fn(model)
        sums = fn(x, y, 0.5)
        named = [n for n, p in gsm.named_parameters() if p.requires_grad]
        out[name] = {
            n.removeprefix("_module."): s.tolist() for n, s in zip(named, sums, strict=True)
        }
    return out


def _agreement(models, reference: dict) -> dict:
    """Largest relative difference of privopt's float64 clipped sums from Opacus's, per model
    (parameters compared where the names and shapes match: the LSTM's, the embedding, the head;
    the encoder's attention is laid out differently)."""
    from privopt.torch import clipped_grad_sum

    x, y = _data()
    out = {}
    for name, model in models.items():
        got = clipped_grad_sum(model.double(), _loss, x, y, 0.5)
        worst, scale = 0.0, 0.0
        for key, value in reference[name].items():
            if key in got and tuple(got[key].shape) == tuple(torch.tensor(value).shape):
                want = torch.tensor(value, dtype=torch.float64)
                scale = max(scale, float(want.abs().max()))
                worst = max(worst, float((got[key] - want).abs().max()))
        out[name] = worst / scale if scale else math.nan
        model.float()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/torch_seq_results.json"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--opacus-python", default=None, help="python of the Opacus venv")
    parser.add_argument("--opacus-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--opacus-check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.opacus_only:
        print(json.dumps(opacus_part(args.steps, args.repeats)))
        return
    if args.opacus_check:
        print(json.dumps(opacus_check()))
        return
    import warnings

    from privopt.torch.clipping import GradientClipper

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    x, y = _data()
    models = privopt_models()
    runs, methods = {}, {}
    for name, model in models.items():
        clipper = GradientClipper(model)

        def step(clipper=clipper):
            return clipper.clipped_sum(_loss, x, y, 1.0)

        _time(step, 3)
        methods[name] = dict(clipper.methods)
        runs[name] = [_time(step, args.steps) for _ in range(args.repeats)]
        clipper.remove()
    results = {
        f"privopt:{n}": {"ms_per_step": statistics.median(t), "runs_ms": t, "methods": methods[n]}
        for n, t in runs.items()
    }
    agreement = None
    if args.opacus_python:
        common = [args.opacus_python, __file__, "--steps", str(args.steps)]
        out = subprocess.run(
            [*common, "--repeats", str(args.repeats), "--opacus-only"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        theirs = json.loads(out.stdout.strip().splitlines()[-1])
        for name in models:
            t = theirs[name]
            results[f"opacus_hooks:{name}"] = {"ms_per_step": statistics.median(t), "runs_ms": t}
            ratio = results[f"privopt:{name}"]["ms_per_step"] / statistics.median(t)
            results[f"privopt:{name}"]["x_opacus"] = ratio
        check = subprocess.run(
            [*common, "--opacus-check"], check=True, capture_output=True, text=True
        )
        agreement = _agreement(privopt_models(), json.loads(check.stdout.strip().splitlines()[-1]))
    payload = {
        "benchmark": "clipped per-example gradient sum, batch 32 x 16 tokens, CPU: privopt "
        "(nn.LSTM, nn.TransformerEncoderLayer) against Opacus hooks (DPLSTM, DPMultiheadAttention)",
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, "
        "1 torch thread (shared machine: compare ratios within this file)",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "steps_per_timing": args.steps,
        "repeats": args.repeats,
        "float64_agreement_with_opacus": agreement,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    for name, entry in results.items():
        extra = f"  {entry['x_opacus']:.2f}x Opacus" if "x_opacus" in entry else ""
        print(f"{name:26s} {entry['ms_per_step']:9.2f} ms{extra}")
    print("float64 agreement (max relative difference):", agreement)


if __name__ == "__main__":
    main()
