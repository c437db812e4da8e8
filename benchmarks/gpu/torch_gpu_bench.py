"""GPU step times of privopt.torch (BLT noise) against non-private training and Opacus 1.6.

Two models of issue 15, synthetic data (timings do not depend on the values), SGD:

* ``resnet18_gn``: ResNet-18 for 32x32 inputs (3x3 stem, no max-pool, stages 64-128-256-512 of two
  basic blocks), GroupNorm(min(32, c), c), out-of-place residual adds, 11.2M parameters, batch 512,
  cross-entropy, fp32;
* ``token_mlp``: embedding 8192 x 512, six pre-norm MLP blocks (LayerNorm, 512 -> 2048 -> 512,
  GELU, residual), final LayerNorm, head 512 -> 8192 (21M parameters), batch 64 x 128 tokens,
  the loss of each example averaged over its tokens; fp32 and bf16 autocast.

Variants: ``non_private`` (forward, mean loss, backward, step); ``privopt_blt`` (one
:class:`privopt.torch.PrivateTrainer` step: per-example clipped sum, 4-buffer BLT noise on the
device in fp32, optimizer step); ``blt_noise`` (the noise stream alone); ``opacus_hooks``
(``make_private``, hooks, flat clipping, noise multiplier 1) when opacus is importable. Each
timing is the median of ``--repeats`` means over ``--steps`` steps after warm-up, with
``torch.cuda.synchronize()``. Writes ``torch_gpu_results.json`` into ``$OUT`` (or ``--out``).

Run: ``python benchmarks/gpu/torch_gpu_bench.py`` on the GPU machine (under 5 minutes, no
network); ``--tiny`` shrinks both models for a CPU smoke test; ``--model resnet|token`` times
one model; ``--check`` first compares the device's clipped sums (fp32 and bf16, every
convolution method) with float64 on the CPU (:mod:`torch_gpu_check`); ``--profile N`` adds the
top N operators of the private step to the results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # a checkout, uninstalled
sys.path.insert(1, str(Path(__file__).resolve().parent))  # torch_gpu_check


# -- models ---------------------------------------------------------------------------------------
def _gn(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, c), c)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = _gn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = _gn(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _gn(cout))

    def forward(self, x):
        out = torch.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        return torch.relu(out + (x if self.short is None else self.short(x)))


def resnet18_gn(width: int = 64, classes: int = 10) -> nn.Module:
    w = [width, 2 * width, 4 * width, 8 * width]
    layers = [nn.Conv2d(3, w[0], 3, 1, 1, bias=False), _gn(w[0]), nn.ReLU()]
    cin = w[0]
    for i, c in enumerate(w):
        layers += [Block(cin, c, 1 if i == 0 else 2), Block(c, c, 1)]
        cin = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


class MLPBlock(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def token_mlp(vocab: int = 8192, d: int = 512, hidden: int = 2048, depth: int = 6) -> nn.Module:
    return nn.Sequential(
        nn.Embedding(vocab, d),
        *[MLPBlock(d, hidden) for _ in range(depth)],
        nn.LayerNorm(d),
        nn.Linear(d, vocab),
    )


def token_loss(out, y):
    """Per-example loss: cross-entropy averaged over the example's tokens."""
    return nn.functional.cross_entropy(out.transpose(1, 2), y, reduction="none").mean(1)


def image_loss(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


# -- timing ---------------------------------------------------------------------------------------
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(step, steps, repeats, device) -> dict:
    for _ in range(3):
        step()
    _sync(device)
    runs = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        runs.append((time.perf_counter() - start) / steps * 1e3)
    return {"ms_per_step": statistics.median(runs), "runs_ms": runs}


def _autocast(device, dtype):
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def _profile(step, device, rows: int) -> str:
    """The top ``rows`` operators of three steps by device time (CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(3):
            step()
        _sync(device)
    key = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def bench_model(
    name, make, data, loss_fn, *, device, steps, repeats, autocast=None, profile_rows=0
) -> dict:
    from privopt.noise import optimize_blt
    from privopt.noise.torch_streams import torch_noise_stream
    from privopt.torch import PrivateTrainer

    x, y = data
    batch = len(y)
    out: dict = {}

    model = make().to(device)
    params = sum(p.numel() for p in model.parameters())
    out["parameters"] = params
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def non_private():
        with _autocast(device, autocast):
            loss = loss_fn(model(x), y).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    out["non_private"] = _time(non_private, steps, repeats, device)
    del model, opt

    total = 3 + steps * repeats + 2
    records = (x.repeat((4,) + (1,) * (x.dim() - 1)), y.repeat((4,) + (1,) * (y.dim() - 1)))
    epochs = -(-total // 4)
    blt = optimize_blt(4 * epochs, buffers=4, error="max")  # single participation: closed form
    model = make().to(device)
    trainer = PrivateTrainer(
        model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), records,
        epsilon=8.0, delta=1e-6, epochs=epochs, batch_size=batch, clip_norm=1.0, mechanism=blt,
        loss_fn=loss_fn, seed=0, autocast=autocast,
    )  # fmt: skip
    out["privopt_blt"] = _time(trainer.step, steps, repeats, device)
    out["privopt_blt"]["buffers"] = blt.buffers
    if profile_rows:
        out["privopt_blt_profile"] = _profile(trainer.step, device, profile_rows)
        print(out["privopt_blt_profile"], flush=True)
    stream = torch_noise_stream(blt, params, 1.0, key=1, device=device, steps=trainer.steps)
    out["blt_noise"] = _time(stream.next, steps, repeats, device)
    del model, trainer, stream

    try:
        import opacus
        from opacus import PrivacyEngine
    except ImportError:
        out["opacus_hooks"] = "opacus not importable"
    else:
        try:
            model = make().to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            loader = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(x.cpu(), y.cpu()), batch_size=batch
            )
            model, opt, _ = PrivacyEngine().make_private(
                module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode="hooks",
            )  # fmt: skip

            def opacus_step():
                with _autocast(device, autocast):
                    loss = loss_fn(model(x), y).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            out["opacus_hooks"] = _time(opacus_step, steps, repeats, device)
            out["opacus_hooks"]["version"] = opacus.__version__
        except Exception as exc:  # report, do not lose the other numbers
            out["opacus_hooks"] = f"failed: {type(exc).__name__}: {exc}"
    base = out["non_private"]["ms_per_step"]
    for key in ("privopt_blt", "blt_noise", "opacus_hooks"):
        if isinstance(out[key], dict):
            out[key]["x_non_private"] = out[key]["ms_per_step"] / base
    if isinstance(out["opacus_hooks"], dict):
        out["privopt_blt"]["x_opacus"] = (
            out["privopt_blt"]["ms_per_step"] / out["opacus_hooks"]["ms_per_step"]
        )
    out["blt_noise_fraction_of_private_step"] = (
        out["blt_noise"]["ms_per_step"] / out["privopt_blt"]["ms_per_step"]
    )
    print(name, json.dumps({k: v for k, v in out.items()}, default=str)[:600], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="privopt.torch GPU step times")
    parser.add_argument("--tiny", action="store_true", help="small models, for a CPU smoke test")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--model", choices=["all", "resnet", "token"], default="all", help="which models to time"
    )
    parser.add_argument(
        "--check", action="store_true", help="first check the device paths' accuracy (float64)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="also profile the private step: top N operators"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    if args.tiny:
        img = (16, 3, 32, 32, 8)  # batch, channels, size, size, resnet width
        tok = dict(vocab=256, d=32, hidden=64, depth=2)
        tok_batch, tok_len = 8, 16
    else:
        img = (512, 3, 32, 32, 64)
        tok = dict(vocab=8192, d=512, hidden=2048, depth=6)
        tok_batch, tok_len = 64, 128
    x_img = torch.randn(img[:4], generator=gen).to(device)
    y_img = torch.randint(0, 10, (img[0],), generator=gen).to(device)
    x_tok = torch.randint(0, tok["vocab"], (tok_batch, tok_len), generator=gen).to(device)
    y_tok = torch.randint(0, tok["vocab"], (tok_batch, tok_len), generator=gen).to(device)
    results: dict = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "tiny": args.tiny,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }
    jobs = [
        ("resnet18_gn_fp32", lambda: resnet18_gn(img[4]), (x_img, y_img), image_loss, None),
        ("token_mlp_fp32", lambda: token_mlp(**tok), (x_tok, y_tok), token_loss, None),
        ("token_mlp_bf16", lambda: token_mlp(**tok), (x_tok, y_tok), token_loss, torch.bfloat16),
    ]
    jobs = [job for job in jobs if args.model in ("all", job[0].split("_")[0])]
    if args.check:
        from torch_gpu_check import check

        try:
            results["check_max_relative_error"] = check(
                device, resnet18_gn, token_mlp, image_loss, token_loss
            )
        except Exception:
            results["check_max_relative_error"] = {"error": traceback.format_exc()}
            print(results["check_max_relative_error"]["error"], flush=True)
    for name, make, data, loss_fn, dtype in jobs:
        try:
            results[name] = bench_model(
                name, make, data, loss_fn, device=device, steps=args.steps,
                repeats=args.repeats, autocast=dtype, profile_rows=args.profile,
            )  # fmt: skip
        except Exception:  # keep going: one failure must not lose the other models
            results[name] = {"error": traceback.format_exc()}
            print(results[name]["error"], flush=True)
        if device.type == "cuda":
            results[name]["max_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "torch_gpu_results.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
