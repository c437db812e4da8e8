"""Issue 14 benchmark: the BLT stream against independent noise and exact nu-DP-FTRL, and the
BLT optimisation time against the horizon.

Stream: d model-sized float64 vectors per step (default d = 10^6, T = 2,000 single participation);
time per step and the stream's state (buffers) against N(0, I) (privopt's independent stream)
and nu-DP-FTRL's exact Toeplitz history stream, measured at a few t (its cost grows with t).
Peak memory is the process's max RSS delta while each stream runs.

Banded (issue 14): the banded Toeplitz stream (``optimize_banded_toeplitz`` at L bands, state
(L - 1) d) at the same d and T; and the exact Toeplitz history stream's time per step at
d = 10^5, t in {100, 1000}: the blocked BLAS product (``ToeplitzStream``) against the per-term
axpy loop it replaced (``privopt.noise.base.accumulate`` over the same history), in one process.

Run: ``python benchmarks/blt_bench.py --out benchmarks/blt_results.json`` (about 8 minutes);
``--sections banded history --merge`` reruns only the banded sections and merges them into the
existing JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from privopt.noise import (
    independent,
    nu_dpftrl,
    optimal_cc,
    optimize_banded_toeplitz,
    optimize_blt,
)
from privopt.noise.base import accumulate
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


def blt_sections(dim: int, steps: int, ftrl_steps: int, horizons: list[int]) -> dict:
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


def banded_section(dim: int, steps: int, bands: int) -> dict:
    """The banded Toeplitz stream (single participation, max loss) beside independent noise."""
    t0 = time.perf_counter()
    mech = optimize_banded_toeplitz(steps, bands)
    seconds = time.perf_counter() - t0
    independent_cost = stream_cost(independent(), dim, steps)
    banded_cost = stream_cost(mech, dim, steps)
    return {
        "dim": dim,
        "steps": steps,
        "bands": bands,
        "optimisation_seconds": seconds,
        "max_loss_ratio_to_optimal_toeplitz": mech.prefix_losses(steps)[0]
        / _optimal_max_loss(steps),
        "independent": independent_cost,
        "banded_stream": banded_cost,
        "ratio_banded_to_independent": banded_cost["seconds_per_step"]
        / independent_cost["seconds_per_step"],
    }


def history_section(dim: int, at_steps: list[int], repeats: int = 5) -> dict:
    """Toeplitz history stream, time of step t: blocked BLAS product vs the per-term loop."""
    mech = nu_dpftrl(0.01)
    out: dict = {"dim": dim}
    for t in at_steps:
        probe = mech.noise_stream(dim, 1.0, seed=1, mode="history")
        rows = [probe.source.draw((0, a), dim) for a in range(t)]
        checkpoint = {"step": t, "seed": 1, "history": rows}
        beta = mech.beta(t + 1)
        blas, loop, diff = [], [], 0.0
        for _ in range(repeats):
            stream = mech.noise_stream(dim, 1.0, seed=1, mode="history")
            stream.restore(checkpoint)
            a = time.perf_counter()
            new = stream.next()
            blas.append(time.perf_counter() - a)
            a = time.perf_counter()  # the old step: draw z_t, then one axpy per term
            past = [*rows, stream.source.draw((0, t), dim)]
            old = accumulate(((beta[k], past[-1 - k]) for k in range(t + 1)), dim)
            loop.append(time.perf_counter() - a)
            diff = max(diff, float(np.max(np.abs(new - old)) / np.max(np.abs(old))))
        out[str(t)] = {
            "blas_seconds": float(np.median(blas)),
            "per_term_loop_seconds": float(np.median(loop)),
            "speedup": float(np.median(loop) / np.median(blas)),
            "max_relative_difference": diff,
            "block_rows": stream.block_rows,
        }
    return out


def run(
    dim: int,
    steps: int,
    ftrl_steps: int,
    horizons: list[int],
    sections: tuple[str, ...] = ("blt", "banded", "history"),
    bands: int = 32,
    history_dim: int = 100_000,
    history_steps: tuple[int, ...] = (100, 1000),
) -> dict:
    out: dict = {}
    if "blt" in sections:
        out.update(blt_sections(dim, steps, ftrl_steps, horizons))
    if "banded" in sections:
        out["banded"] = banded_section(dim, steps, bands)
    if "history" in sections:
        out["toeplitz_history"] = history_section(history_dim, list(history_steps))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--ftrl-steps", type=int, default=200)
    parser.add_argument("--horizons", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument("--bands", type=int, default=32)
    parser.add_argument("--history-dim", type=int, default=100_000)
    parser.add_argument("--history-steps", type=int, nargs="*", default=[100, 1000])
    parser.add_argument(
        "--sections", nargs="*", default=["blt", "banded", "history"], help="blt banded history"
    )
    parser.add_argument("--merge", action="store_true", help="update the existing --out JSON")
    parser.add_argument("--out", default="benchmarks/blt_results.json")
    args = parser.parse_args()
    result = run(
        args.dim,
        args.steps,
        args.ftrl_steps,
        args.horizons,
        tuple(args.sections),
        args.bands,
        args.history_dim,
        tuple(args.history_steps),
    )
    if args.merge:
        with open(args.out) as f:
            result = {**json.load(f), **result}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
