"""Issue 8's benchmark: excess risk at n = 2^18 of each single-epoch method at equal privacy.

Synthetic well-specified logistic regression (d = 20, x uniform on the unit sphere, ||w*|| = 3,
R = 4; the population optimum is w* and the excess risk is computed by quadrature, see
:mod:`privopt.experiments.single_epoch`), epsilon = 1, delta = 1e-6, zero-out neighbours. Methods:
the library's two Accelerated-DP-SRGD presets (untuned), and at T = n^{1/4} and T = sqrt(n)
batch steps the validated Accelerated-DP-SRGD (recursive and independent variants), single-pass
DP-SGD with the same T disjoint batches, and Poisson-sampled DP-SGD for 5 epochs (5 T steps,
PLD accountant). The validated hyper-parameters are those chosen at n = 2^16
(``DEFAULT_HYPERPARAMETERS["synthetic"]``, keyed by the exponent of T = n^e), reused here
without retuning. Every seed draws a fresh training sample; wall time is per fit (one core,
single-threaded BLAS), excluding the evaluation and, for Poisson DP-SGD, the one-off noise
calibration and privacy report (``accounting_seconds``, shared by the seeds).

Run: ``python benchmarks/srgd_bench.py --out benchmarks/srgd_results.json [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from privopt.experiments.single_epoch import (
    DEFAULT_HYPERPARAMETERS,
    METHODS,
    PRESETS,
    SYNTHETIC_PROBLEM_SEED,
    SYNTHETIC_RADIUS,
    SyntheticLogistic,
    fit_method,
    logistic_erm,
    steps_grid,
)

EPSILON = 1.0
DELTA = 1e-6
EXPONENTS = (0.25, 0.5)


def run(n: int, seeds: tuple[int, ...], accountant: str) -> dict:
    problem = SyntheticLogistic.make(seed=SYNTHETIC_PROBLEM_SEED)
    samples = [problem.sample(n, [1_000_000 + seed, n]) for seed in seeds]
    hyper = DEFAULT_HYPERPARAMETERS["synthetic"]
    jobs: list[tuple[str, float | None]] = [(m, None) for m in PRESETS]
    jobs += [(m, e) for e in EXPONENTS for m in METHODS]
    cache: dict = {}
    rows = []
    for j, (method, exponent) in enumerate(jobs):
        steps = None if exponent is None else steps_grid(n, (exponent,))[0]
        config = None if exponent is None else hyper[method][f"{exponent:g}"]
        risks, seconds, reported, accounting = [], [], [], 0.0
        for s, (X, y) in enumerate(samples):
            fit = fit_method(
                method,
                X,
                y,
                epsilon=EPSILON,
                delta=DELTA,
                steps=steps,
                config=config,
                x_bound=1.0,
                radius=SYNTHETIC_RADIUS,
                rng=np.random.default_rng([seeds[s], j]),
                accountant=accountant,
                cache=cache,
            )
            risks.append(problem.excess_risk(fit["coef"]))
            seconds.append(fit["seconds"])
            accounting += fit.get("accounting_seconds", 0.0)
            reported.append(fit["reported_epsilon"])
        row = {
            "method": method,
            "exponent": exponent,
            "sequential_steps": fit["sequential_steps"],
            "batch_size": fit["batch_size"],
            "gradient_evaluations": fit["gradient_evaluations"],
            "config": config,
            "excess_risk_mean": float(np.mean(risks)),
            "excess_risk_std": float(np.std(risks, ddof=1)) if len(risks) > 1 else 0.0,
            "excess_risks": risks,
            "reported_epsilon": float(max(reported)),
            "seconds_per_fit": float(np.mean(seconds)),
            "accounting_seconds": accounting,
            "noise": fit["noise"],
        }
        rows.append(row)
        print(
            f"{method:22s} e={exponent!s:5s} T={row['sequential_steps']:6d} "
            f"B={row['batch_size']:6d} excess={row['excess_risk_mean']:.3e} "
            f"(sd {row['excess_risk_std']:.1e}) eps={row['reported_epsilon']:.4f} "
            f"{row['seconds_per_fit']:.2f}s/fit (+{accounting:.1f}s accounting)",
            flush=True,
        )
    erm_start = time.perf_counter()
    erm = [problem.excess_risk(logistic_erm(X, y)) for X, y in samples]
    erm_seconds = (time.perf_counter() - erm_start) / len(samples)
    return {
        "n": n,
        "d": problem.dim,
        "epsilon": EPSILON,
        "delta": DELTA,
        "neighbouring": "zero-out",
        "seeds": list(seeds),
        "dpsgd_accountant": accountant,
        "non_private_erm_excess_risk": float(np.mean(erm)),
        "non_private_erm_seconds_per_fit": erm_seconds,
        "excess_risk_at_zero": problem.excess_risk(np.zeros(problem.dim)),
        "hyperparameters": "DEFAULT_HYPERPARAMETERS['synthetic'] (validated at n = 2^16)",
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/srgd_results.json"))
    parser.add_argument("--quick", action="store_true", help="n = 2^14, 2 seeds, RDP")
    args = parser.parse_args()
    n, seeds, accountant = (2**14, (0, 1), "rdp") if args.quick else (2**18, (0, 1, 2, 3, 4), "pld")
    logging.getLogger("absl").setLevel(logging.ERROR)
    start = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        result = run(n, seeds, accountant)
    result["quick"] = args.quick
    result["wall_time_s"] = time.perf_counter() - start
    result["machine"] = f"{platform.machine()}, {platform.python_implementation()} " + (
        platform.python_version()
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out} in {result['wall_time_s']:.1f} s")


if __name__ == "__main__":
    main()
