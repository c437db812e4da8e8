"""Per-step time and peak memory of each correlated-noise generator (issue 3 benchmark).

Generators whose state is O(d) or O(d log T) (independent, anti-PGD, tree, variance-reduced tree,
and the reference: one N(0, I_d) draw per step) run all ``steps`` steps. The exact Toeplitz
generators of nu-DP-FTRL cost O(t d) per step, so a full 1,000-step run at d = 10^6 would take
about 3 minutes (history mode, 8 GB) and about 3 hours (seed regeneration); for them the cost of a
single step t is measured at t in ``sample_steps`` after restoring a checkpoint of that step (a
step counter for regeneration; a history of t vectors for history mode), which is exactly the
state a real run would hold there.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from privopt import noise

FULL_RUN = {
    "independent": lambda: noise.independent(),
    "anti-pgd (history)": lambda: noise.anti_pgd(),
    "tree": lambda: noise.TreeAggregation(),
    "tree-honaker": lambda: noise.TreeAggregation(variance_reduction=True),
}


def _measure(fn: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak MiB allocated during the call) of one call."""
    tracemalloc.start()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20


def reference_draw(dim: int, steps: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    per_step = []

    def run() -> None:
        for _ in range(steps):
            start = time.perf_counter()
            rng.standard_normal(dim)
            per_step.append(time.perf_counter() - start)

    _, peak = _measure(run)
    return {"median_step_ms": 1e3 * statistics.median(per_step), "peak_mib": peak}


def full_run(mechanism: noise.Mechanism, dim: int, steps: int, **options) -> dict[str, float]:
    stream = mechanism.noise_stream(dim, 1.0, seed=0, **options)
    per_step = []

    def run() -> None:
        for _ in range(steps):
            start = time.perf_counter()
            stream.next()
            per_step.append(time.perf_counter() - start)

    total, peak = _measure(run)
    return {
        "median_step_ms": 1e3 * statistics.median(per_step),
        "max_step_ms": 1e3 * max(per_step),
        "total_s": total,
        "peak_mib": peak,
    }


def sampled_steps(mode: str, dim: int, sample_steps: list[int]) -> dict[str, dict[str, float]]:
    mechanism = noise.nu_dpftrl(0.01)
    out = {}
    for t in sample_steps:
        stream = mechanism.noise_stream(dim, 1.0, seed=0, mode=mode)
        state = {"step": t, "seed": 0}
        if mode == "history":
            state["history"] = [np.ones(dim) for _ in range(t)]
        stream.restore(state)
        del state
        seconds, peak = _measure(stream.next)
        # what the stream holds after the step (history mode: t + 1 vectors)
        held = 8 * dim * (t + 1) / 2**20 if mode == "history" else 0.0
        out[str(t)] = {"step_ms": 1e3 * seconds, "step_peak_mib": peak, "state_mib": held}
        del stream
    return out


def run(dim: int = 10**6, steps: int = 1000, sample_steps: list[int] | None = None) -> dict:
    sample_steps = sample_steps or [1, 10, 100, steps - 1]
    results: dict[str, object] = {"dim": dim, "steps": steps}
    results["reference N(0, I_d) draw"] = reference_draw(dim, steps)
    for name, make in FULL_RUN.items():
        results[name] = full_run(make(), dim, steps)
    for mode in ("history", "regenerate"):
        results[f"nu-dpftrl ({mode}), step t"] = sampled_steps(mode, dim, sample_steps)
    return results
