"""Data-parallel make_private throughput: 2 processes x 1 thread against 1 process x 1 thread.

    python benchmarks/torch_ddp_bench.py            # writes benchmarks/torch_ddp_results.json

The launcher runs this file under ``torchrun`` (``python -m torch.distributed.run``) twice,
with ``--nproc_per_node 1`` and ``2``; each rank calls ``init_process_group("gloo")`` from
torchrun's environment and the same ``make_private`` call (a small CNN on 32x32x3 inputs,
logical batch 256, BLT noise), runs warm-up steps, then times ``--steps`` private steps between
barriers. Throughput is examples of the logical batch per second; the ratio is the 2-process
throughput over the 1-process one (ideal 2.0 on two idle cores: the all-reduce moves one
flat buffer of the parameters per step). A control runs with each pair: two independent
single-process jobs of half the batch at once (no communication), i.e. what two processes on
this machine can give at best; ``reduce_ms_per_step`` is rank 0's time in the all-reduce,
waiting for the slower rank included. Wall-clock numbers on a shared machine move with its
load, which the JSON records (``os.getloadavg``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("torch_ddp_results.json")


def _worker(args) -> None:
    import torch.distributed as dist
    import torch.nn.functional as F

    import torch
    from privopt.noise import BLTMechanism
    from privopt.torch import make_private
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    gen = torch.Generator().manual_seed(0)
    n = args.batch * 20
    x = torch.randn(n, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run = make_private(model, optimizer, (x, y), epsilon=8.0, delta=1e-5, epochs=1,
                       batch_size=args.batch, clip_norm=1.0, seed=0,
                       mechanism=BLTMechanism([0.9, 0.4], [0.3, 0.2]))  # fmt: skip
    batches = iter(run.loader)
    reduce, reduced = run._reduce, [0.0]

    def timed(sums):  # the all-reduce, including any wait for the slower rank
        start = time.perf_counter()
        out = reduce(sums)
        reduced[0] += time.perf_counter() - start
        return out

    run._reduce = timed

    def step():
        xb, yb = next(batches)
        run.optimizer.zero_grad()
        F.cross_entropy(run.model(xb), yb).backward()
        run.optimizer.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    reduced[0] = 0.0
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    checksum = float(sum(p.double().sum() for p in model.parameters()))  # same for any world
    if dist.get_rank() == 0:
        world = dist.get_world_size()
        print(json.dumps({"world": world, "seconds": seconds, "steps": args.steps,
                          "batch": args.batch, "checksum": checksum,
                          "reduce_ms_per_step": 1000 * reduced[0] / args.steps}))  # fmt: skip
    dist.destroy_process_group()


def _launch(world: int, args, copies: int = 1) -> dict:
    """``copies`` independent torchrun jobs of ``world`` processes at once (copies > 1: the
    control, two single-process jobs of half the batch, no communication); their summed
    throughput."""
    batch = args.batch // copies
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={world}", __file__, "--worker",
        f"--steps={args.steps}", f"--warmup={args.warmup}", f"--batch={batch}",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    load = os.getloadavg()[0]
    jobs = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(copies)
    ]
    results = []
    for job in jobs:
        out, err = job.communicate()
        if job.returncode != 0:
            raise SystemExit(out[-3000:] + err[-3000:])
        results.append(json.loads([s for s in out.splitlines() if s.startswith("{")][-1]))
    result = results[0]
    result["examples_per_second"] = sum(r["steps"] * r["batch"] / r["seconds"] for r in results)
    result["ms_per_step"] = 1000 * max(r["seconds"] for r in results) / result["steps"]
    result["load_average_before"] = load
    result["copies"] = copies
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved 1/2-process runs")
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    runs = []
    for _ in range(args.repeats):  # interleaved, so that a change in load hits both
        run = {world: _launch(world, args) for world in (1, 2)}
        run["control"] = _launch(1, args, copies=2)
        runs.append(run)
    best = {w: max(r[w]["examples_per_second"] for r in runs) for w in (1, 2)}
    report = {
        "benchmark": "make_private data-parallel (gloo, CPU): 2 processes x 1 thread vs 1 x 1",
        "model": "CNN conv(3->16)-pool-conv(16->32)-pool-linear, 32x32x3 inputs, BLT noise",
        "batch": args.batch,
        "steps_timed": args.steps,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared (see load averages)",
        "runs": [{str(w): r[w] for w in r} for r in runs],
        "best_examples_per_second": {str(w): v for w, v in best.items()},
        "ratio_best": best[2] / best[1],
        "ratios": [r[2]["examples_per_second"] / r[1]["examples_per_second"] for r in runs],
        "control": "two independent 1-process jobs of batch/2 at once (no communication): "
        "what two processes on this machine can give at best",
        "control_ratios": [
            r["control"]["examples_per_second"] / r[1]["examples_per_second"] for r in runs
        ],
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    keys = ("best_examples_per_second", "ratio_best", "ratios", "control_ratios")
    print(json.dumps({k: report[k] for k in keys}))


if __name__ == "__main__":
    main()
