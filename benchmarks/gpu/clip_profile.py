"""Time (and optionally profile) privopt.torch's per-example clipped sum alone.

The same two models as ``torch_gpu_bench.py`` (ResNet-18-GN, token MLP), any batch size, on the
CPU or a GPU: ``GradientClipper.clipped_sum`` (forward, backward to the layer outputs, per-layer
norms, clipped sums) against a plain forward + backward, median of ``--repeats`` timings.

    python benchmarks/gpu/clip_profile.py --model resnet --batch 32          # shrunken ResNet
    python benchmarks/gpu/clip_profile.py --model token --batch 8 --bf16     # autocast bf16
    python benchmarks/gpu/clip_profile.py --model resnet --profile 25        # top-25 ops

``--src DIR`` imports privopt from another source tree (to compare two versions back to back).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["resnet", "token"], default="resnet")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128, help="sequence length (token model)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, help="print the top N ops")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--src", type=Path, default=HERE.parents[1] / "src")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import torch_gpu_bench as tb  # puts this checkout's src first on the path

    sys.path.insert(0, str(args.src))
    from privopt.torch.clipping import GradientClipper

    print("privopt.torch from", Path(sys.modules["privopt"].__file__).parent)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    if args.model == "resnet":
        model = tb.resnet18_gn().to(device)
        x = torch.randn(args.batch, 3, 32, 32, generator=gen).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)
        loss_fn = tb.image_loss
    else:
        model = tb.token_mlp().to(device)
        x = torch.randint(0, 8192, (args.batch, args.tokens), generator=gen).to(device)
        y = torch.randint(0, 8192, (args.batch, args.tokens), generator=gen).to(device)
        loss_fn = tb.token_loss
    clipper = GradientClipper(model)
    cast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if args.bf16
        else torch.autocast(device.type, enabled=False)
    )

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def private():
        with cast:
            clipper.clipped_sum(loss_fn, x, y, 1.0)

    def plain():
        with cast:
            loss = loss_fn(model(x), y).mean()
        loss.backward()
        model.zero_grad(set_to_none=True)

    def timed(step):
        """(median wall ms, median process CPU ms: less sensitive to a shared machine)."""
        step()
        walls, cpus = [], []
        for _ in range(args.repeats):
            sync()
            start, cpu = time.perf_counter(), time.process_time()
            step()
            sync()
            walls.append((time.perf_counter() - start) * 1e3)
            cpus.append((time.process_time() - cpu) * 1e3)
        return statistics.median(walls), statistics.median(cpus)

    (w_plain, c_plain), (w_private, c_private) = timed(plain), timed(private)
    print(
        f"{args.model} batch {args.batch} {'bf16' if args.bf16 else 'fp32'}: "
        f"forward+backward {w_plain:.1f} ms (cpu {c_plain:.1f}), clipped_sum {w_private:.1f} ms "
        f"(cpu {c_private:.1f}); ratio wall {w_private / w_plain:.2f}x, "
        f"cpu {c_private / c_plain:.2f}x"
    )
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            private()
            sync()
        key = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=args.profile))


if __name__ == "__main__":
    main()
