"""User-level clipped sums against the record-level step on the same batch of records, CPU.

Issue 30's target: a user-level private step (each user's summed gradient clipped as one vector,
``GradientClipper.clipped_sum(..., groups=slots)``: per-user ghost Grams over tiles of users, or
per-example gradients summed by user, :mod:`privopt.torch._groups` and
:mod:`privopt.torch._user_conv`) costs at most 1.3x the record-level step (each record clipped,
``clipped_sum(...)``) on the same batch of B records. Both steps:
the clipped sum (one forward, one backward to the layers' outputs, norms, contraction), Gaussian
noise of the parameters' shape added, ``p.grad`` set, ``optimizer.step()`` (SGD).

Models (float32, one torch thread):

* ``mlp``: 784 -> 256 -> 256 -> 10 (Linear, T = 1), B = 256 records;
* ``tokens``: Embedding(1000, 64) -> Linear(64, 64) over T = 32 positions -> LayerNorm ->
  mean -> Linear(64, 10), B = 128 records (the Embedding, T > 1 Linear and norm rules);
* ``cnn``: Conv2d(1, 16, 3) -> Conv2d(16, 16, 3, stride 2) -> Linear on 12 x 12 x 16 -> 10,
  28 x 28 inputs, B = 128 records (the convolution rule's per-example gradients, which the user
  level sums by user and keeps for the clipped sum).

User layouts of the B records: ``4-per-user`` (B / 4 users of 4), ``skewed`` (one user of
B / 4 records, the rest single records), ``geometric`` (sizes 1 + Geometric(1/4)), each user's
records together as the loader yields them (user after user), and ``shuffled`` (the geometric
users with their records scattered through the batch: the clipper accepts any order).
A timing is the mean process CPU time of ``--steps`` steps after a warm-up (one torch thread:
CPU time is the step's cost on a shared machine, where wall time is not). Each repeat times, for
each layout, the record-level step and right after it the user-level step; the reported
``ratio`` is the median over ``--repeats`` of these paired ratios (a pair shares the machine's
load of the moment, so drifts between the pairs cancel), ``ratio_of_medians`` the median
user-level time over the median of all record-level times. Results go to
``benchmarks/results/torch_user_level_results.json``.

    python benchmarks/torch_user_level_bench.py [--models mlp tokens cnn] [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch.nn.functional as F

import torch
from torch import nn

OUT = Path(__file__).parent / "results" / "torch_user_level_results.json"


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.mid = nn.Embedding(1000, 64), nn.Linear(64, 64)
        self.norm, self.head = nn.LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.mid(self.emb(x)))).mean(1))


def build(name: str, gen: torch.Generator):
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )
        return model, torch.randn(256, 784, generator=gen)
    if name == "tokens":
        return Tokens(), torch.randint(0, 1000, (128, 32), generator=gen)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 12 * 12, 10),
    )  # fmt: skip
    return model, torch.randn(128, 1, 28, 28, generator=gen)


def layout(kind: str, batch: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "4-per-user":
        return np.repeat(np.arange(batch // 4), 4)
    if kind == "skewed":
        big = batch // 4
        return np.concatenate([np.zeros(big, dtype=np.int64), np.arange(1, batch - big + 1)])
    sizes = []
    while sum(sizes) < batch:
        sizes.append(int(1 + rng.geometric(0.25)))
    slots = np.repeat(np.arange(len(sizes)), sizes)[:batch]
    return slots[rng.permutation(batch)] if kind == "shuffled" else slots


def _time(step, steps: int) -> float:
    """Process CPU time per step (ms): one torch thread, so this is the step's cost, robust to
    the other processes of a shared machine (wall time is not)."""
    step()  # warm-up (the clipper probes the layout once)
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps * 1e3


def _ce(out, y):
    return F.cross_entropy(out, y, reduction="none")


def bench(name: str, steps: int, repeats: int) -> dict:
    from privopt.torch import GradientClipper

    gen = torch.Generator().manual_seed(0)
    model, x = build(name, gen)
    batch = x.shape[0]
    y = torch.randint(0, 10, (batch,), generator=gen)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.SGD([p for _, p in params], lr=1e-3)
    clipper = GradientClipper(model)
    noise_gen = torch.Generator().manual_seed(1)

    def step(groups):
        def run():
            opt.zero_grad()
            if groups is None:
                sums, _ = clipper.clipped_sum(_ce, x, y, 1.0)
            else:
                sums, _ = clipper.clipped_sum(_ce, x, y, 1.0, groups=groups)
            for n, p in params:
                p.grad = (sums[n] + torch.randn(p.shape, generator=noise_gen)) / batch
            opt.step()

        return run

    out = {"batch": batch, "parameters": sum(p.numel() for _, p in params), "layouts": {}}
    kinds = ("4-per-user", "skewed", "geometric", "shuffled")
    layouts = {k: layout(k, batch, np.random.default_rng(0)) for k in kinds}
    record_runs: dict[str, list[float]] = {k: [] for k in layouts}
    user_runs: dict[str, list[float]] = {k: [] for k in layouts}
    for _ in range(repeats):
        for k, slots in layouts.items():  # a record-level timing right before each layout's
            record_runs[k].append(_time(step(None), steps))
            user_runs[k].append(_time(step(slots), steps))
    every_record = [t for runs in record_runs.values() for t in runs]
    out["record_level_ms"] = statistics.median(every_record)
    out["record_runs_ms"] = every_record
    for k, slots in layouts.items():
        pairs = [u / r for u, r in zip(user_runs[k], record_runs[k], strict=True)]
        out["layouts"][k] = {
            "users": int(slots.max()) + 1,
            "largest_user": int(np.bincount(slots).max()),
            "user_level_ms": statistics.median(user_runs[k]),
            "ratio": statistics.median(pairs),
            "ratio_of_medians": statistics.median(user_runs[k]) / statistics.median(every_record),
            "paired_ratios": pairs,
            "runs_ms": user_runs[k],
            "record_runs_ms": record_runs[k],
        }
    out["methods"] = dict(clipper.methods)
    clipper.remove()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "tokens", "cnn"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for name in args.models:
        results[name] = r = bench(name, args.steps, args.repeats)
        for k, v in r["layouts"].items():
            print(
                f"{name:6s} {k:10s}: record-level {r['record_level_ms']:.1f} ms, user-level "
                f"{v['user_level_ms']:.1f} ms, ratio {v['ratio']:.2f} (of medians "
                f"{v['ratio_of_medians']:.2f}; {v['users']} users)"
            )
    record = {
        "benchmark": (
            "user-level private step (each user's summed gradient clipped) against the "
            "record-level private step on the same batch of records (clipped sum + noise + "
            "SGD), CPU"
        ),
        "target": "ratio <= 1.3 (issue 30); ratio = median of paired user/record timings",
        "machine": f"{platform.machine()}, {platform.system()}, 1 torch thread, process CPU "
        "time (shared machine: compare ratios within this file)",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "steps_per_timing": args.steps,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
