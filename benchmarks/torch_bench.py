"""Time per step of privopt.torch against a non-private step and Opacus 1.6 DP-SGD (CPU).

The model is the digits CNN of ``privopt reproduce cifar-style --backend torch`` (conv16-GN-ReLU-
conv32(s2)-GN-ReLU-linear10, 10.0k parameters), batch 64 of 1x8x8 inputs, cross-entropy, SGD with
momentum, on one CPU thread. Variants, all measured in this process except Opacus:

* ``non_private``: forward, mean-loss backward, ``optimizer.step()``;
* ``clipped_grad_sum``: privopt's per-example clipped sum alone (ghost norms / book-keeping);
* ``privopt:<mechanism>``: one :class:`privopt.torch.PrivateTrainer` step (batch read, clipped sum,
  the mechanism's noise, optimizer step) for every mechanism;
* ``noise:<mechanism>``: the noise stream's ``next()`` alone;
* ``opacus_hooks``: Opacus 1.6 ``make_private`` (hooks, flat clipping, fixed batches) step, run in
  a separate interpreter whose venv holds only torch and opacus (``--opacus-python``; see
  ``make bench-torch``). Opacus is never a privopt dependency.

Each timing is the median over ``--repeats`` of the mean time of ``--steps`` steps after a warm-up;
the variants are interleaved repeat by repeat so that a busy machine slows all of them alike.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

BATCH = 64


def cnn(seed: int = 0) -> nn.Module:
    """The digits CNN (kept identical to privopt.experiments.cifar_torch.digits_cnn; checked)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.GroupNorm(4, 16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.GroupNorm(4, 32),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10),
    )


def _data(n: int):
    gen = torch.Generator().manual_seed(0)
    return torch.rand(n, 1, 8, 8, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def _time(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def opacus_variant(steps: int, repeats: int) -> dict:
    """Opacus 1.6 hooks DP-SGD step (this function runs in the Opacus venv)."""
    import warnings

    import opacus
    from opacus import PrivacyEngine

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    x, y = _data(BATCH * 8)
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    engine = PrivacyEngine(accountant="prv")
    model, opt, loader = engine.make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode="hooks",
    )  # fmt: skip
    xb, yb = x[:BATCH], y[:BATCH]
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    _time(step, 10)
    times = [_time(step, steps) for _ in range(repeats)]
    return {"ms_per_step": statistics.median(times), "runs_ms": times, "opacus": opacus.__version__}


def privopt_variants(steps: int, repeats: int) -> dict[str, list[float]]:
    import warnings

    from privopt.experiments.cifar_torch import digits_cnn
    from privopt.noise.torch_streams import torch_noise_stream
    from privopt.torch import PrivateTrainer, clipped_grad_sum

    warnings.simplefilter("ignore")
    reference = {k: v.shape for k, v in digits_cnn().state_dict().items()}
    assert reference == {k: v.shape for k, v in cnn().state_dict().items()}
    x, y = _data(BATCH * 22)  # 22 batches per epoch, like the digits training split
    xb, yb = x[:BATCH], y[:BATCH]
    variants = {}

    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def non_private():
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    variants["non_private"] = non_private
    per_example = nn.CrossEntropyLoss(reduction="none")
    clip_model = cnn()
    variants["clipped_grad_sum"] = lambda: clipped_grad_sum(clip_model, per_example, xb, yb, 1.0)
    total = 10 + steps * repeats + 5
    for mechanism in ("dpsgd", "blt", "nu-dpftrl", "optimal-cc", "tree", "banded"):
        m = cnn()
        trainer = PrivateTrainer(
            m, torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9), (x, y), epsilon=4.0,
            delta=1e-5, epochs=-(-total // 22), batch_size=BATCH, clip_norm=1.0,
            mechanism=mechanism, seed=1, accountant="rdp" if mechanism == "dpsgd" else "auto",
        )  # fmt: skip
        variants[f"privopt:{mechanism}"] = trainer.step
        dim = sum(p.numel() for p in m.parameters())
        stream = torch_noise_stream(trainer.plan.mechanism, dim, 1.0, key=3, steps=trainer.steps)
        variants[f"noise:{mechanism}"] = stream.next
    for step in variants.values():
        _time(step, 10)
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, step in variants.items():
            runs[name].append(_time(step, steps))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/torch_results.json"))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--opacus-python", default=None, help="python of the Opacus venv")
    parser.add_argument("--opacus-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.opacus_only:
        print(json.dumps(opacus_variant(args.steps, args.repeats)))
        return
    torch.set_num_threads(1)
    runs = privopt_variants(args.steps, args.repeats)
    results = {
        name: {"ms_per_step": statistics.median(t), "runs_ms": t} for name, t in runs.items()
    }
    if args.opacus_python:
        out = subprocess.run(
            [args.opacus_python, __file__, "--opacus-only", "--steps", str(args.steps),
             "--repeats", str(args.repeats)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        results["opacus_hooks"] = json.loads(out.stdout.strip().splitlines()[-1])
    base = results["non_private"]["ms_per_step"]
    for entry in results.values():
        entry["x_non_private"] = entry["ms_per_step"] / base
    if "opacus_hooks" in results:
        opacus_ms = results["opacus_hooks"]["ms_per_step"]
        for entry in results.values():
            entry["x_opacus"] = entry["ms_per_step"] / opacus_ms
    payload = {
        "benchmark": "privopt.torch step time, digits CNN (10.0k parameters), batch 64, CPU",
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, "
        "1 torch thread (the 2-core machine is shared: compare ratios within this file)",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "steps_per_timing": args.steps,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    for name, entry in results.items():
        extra = f"  {entry['x_opacus']:.2f}x Opacus" if "x_opacus" in entry else ""
        ratio = f"{entry['x_non_private']:.2f}x non-private"
        print(f"{name:24s} {entry['ms_per_step']:8.3f} ms  {ratio}{extra}")


if __name__ == "__main__":
    main()
