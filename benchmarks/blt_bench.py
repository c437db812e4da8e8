"""Issue 14 benchmark: the BLT stream against independent noise and exact nu-DP-FTRL, and the
BLT optimisation time against the horizon.

Stream: d model-sized float64 vectors per step (default d = 10^6, T = 2,000 single participation);
time per step and the stream's state (buffers) against N(0, I) (privopt's independent stream)
and nu-DP-FTRL's exact Toeplitz history stream, measured at a few t (its cost grows with t).
Peak memory is the process's max RSS delta while each stream runs.

Run: ``python benchmarks/blt_bench.py --out benchmarks/blt_results.json`` (about 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from privopt.noise import independent, nu_dpftrl, optimal_cc, optimize_blt
from privopt.noise.blt import _optimize_cached


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _optimal_max_loss(n: int) -> float:
    """The optimal Toeplitz (sqrt of A) max loss: sens^2 sum_t beta_t^2, beta = cumsum(c^-1),
    computed in O(n) from its coefficients (no n x n matrix)."""
    return optimal_cc().prefix_losses(n)[0]


def stream_cost(mechanism, dim: int, steps: int, std: float = 1.0) -> dict:
    stream = mechanism.noise_stream(dim, std, seed=1)
    start_rss = _rss_mb()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        stream.next()
        times.append(time.perf_counter() - t0)
    buffers = stream._buffers()
    state_floats = sum(
        np.asarray(v).size for v in buffers.values() if isinstance(v, np.ndarray)
    ) + sum(np.asarray(h).size for v in buffers.values() if isinstance(v, list) for h in v)
    return {
        "seconds_per_step": float(np.median(times)),
        "state_floats": int(state_floats),
        "state_in_units_of_d": state_floats / dim,
        "rss_growth_mb": _rss_mb() - start_rss,
    }


def run(dim: int, steps: int, ftrl_steps: int, horizons: list[int]) -> dict:
    out: dict = {"dim": dim, "steps": steps}
    blt = optimize_blt(steps)
    out["blt"] = {"buf_decay": blt.buf_decay.tolist(), "output_scale": blt.output_scale.tolist()}
    out["independent"] = stream_cost(independent(), dim, steps)
    out["blt_stream"] = stream_cost(blt, dim, steps)
    out["nu_dpftrl_history"] = stream_cost(nu_dpftrl(0.01), dim, ftrl_steps)
    out["ratio_blt_to_independent"] = (
        out["blt_stream"]["seconds_per_step"] / out["independent"]["seconds_per_step"]
    )
    timing = {}
    for n in horizons:
        _optimize_cached.cache_clear()  # time the optimisation, not the cache
        t0 = time.perf_counter()
        mech = optimize_blt(n)
        seconds = time.perf_counter() - t0
        timing[str(n)] = {
            "seconds": seconds,
            "buffers": mech.buffers,
            "max_loss_ratio_to_optimal_toeplitz": mech.max_loss(n) / _optimal_max_loss(n),
        }
    out["optimisation"] = timing
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--ftrl-steps", type=int, default=200)
    parser.add_argument("--horizons", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument("--out", default="benchmarks/blt_results.json")
    args = parser.parse_args()
    result = run(args.dim, args.steps, args.ftrl_steps, args.horizons)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
