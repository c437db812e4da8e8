"""privopt benchmarks: wall time of the accounting core on this machine.

Run with ``make bench``. Writes a JSON file of results (median of repeated timings) and prints a
table; BENCHMARKS.md summarises the latest run with the targets beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ftrl_epoch import run as run_ftrl_epoch
from noise_generators import run as run_noise_generators
from privopt import DPLinearRegression
from privopt import accounting as acc
from privopt.datasets import make_linear_regression


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    samples, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), value


def _ledger_one_pass(batches: int) -> acc.PrivacyLedger:
    ledger = acc.PrivacyLedger("replace-one")
    rng = np.random.default_rng(0)
    for t in range(batches):
        zeta = float(rng.uniform(0.5, 2.0))
        ledger.record(acc.GaussianEvent(2 * zeta / 64, 2 * zeta * 7.5 / 64), partition=t)
        ledger.record(acc.GaussianEvent(1.0, 7.5, label="dp-stat"), partition=t)
    return ledger


def run_regression_default(n: int = 1_000_000, d: int = 100, repeats: int = 3) -> dict:
    """Issue 16: ``DPLinearRegression(epsilon=1)`` (method auto: noisy Newton, no public
    bounds) at N = 1e6, d = 100 against one ``X @ w`` and scikit-learn's (non-private)
    ``LinearRegression().fit``, in CPU time (``time.process_time``: the machine is shared), the
    three alternated; medians. delta = 0.1 / N (the estimator refuses delta >= 1 / N). Targets
    (issue 31): at most 20x one ``X @ w``, at most 0.25x scikit-learn."""
    rng = np.random.default_rng(0)
    data = make_linear_regression(n, d, sigma=1.0, rng=rng)
    X, y = np.ascontiguousarray(data.X), data.y
    w = rng.normal(size=d)

    def cpu(fn: Callable[[], object]) -> float:
        start = time.process_time()
        fn()
        return time.process_time() - start

    from sklearn.linear_model import LinearRegression

    floors, fits, ols = [], [], []
    for _ in range(repeats):
        floors += [cpu(lambda: X @ w) for _ in range(3)]
        fits.append(cpu(lambda: DPLinearRegression(delta=0.1 / n, random_state=0).fit(X, y)))
        ols.append(cpu(lambda: LinearRegression().fit(X, y)))
    floor, fit, sklearn = statistics.median(floors), statistics.median(fits), statistics.median(ols)
    return {
        "n": n,
        "d": d,
        "x_at_w_cpu_seconds": floor,
        "default_cpu_seconds": fit,
        "sklearn_linear_regression_cpu_seconds": sklearn,
        "default_fit_over_one_x_at_w": fit / floor,
        "default_fit_over_sklearn": fit / sklearn,
        "target_over_floor": 20.0,
        "target_over_sklearn": 0.25,
    }


CASES: dict[str, tuple[Callable[[], object], int, str]] = {
    "gaussian_epsilon": (lambda: acc.gaussian_epsilon(1.0, 1e-5), 50, "epsilon"),
    "calibrate_gaussian_sigma": (lambda: acc.calibrate_gaussian_sigma(1.0, 1e-5), 50, "sigma"),
    "zcdp_epsilon_tight": (lambda: acc.zcdp_epsilon(1.0, 1e-5), 50, "epsilon"),
    "zcdp_rho_inverse": (lambda: acc.zcdp_rho(8.0, 1e-5), 20, "rho"),
    "dpsgd_epsilon_rdp": (lambda: acc.dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, "rdp"), 5, "epsilon"),
    "dpsgd_epsilon_pld": (lambda: acc.dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, "pld"), 3, "epsilon"),
    "calibrate_dpsgd_rdp": (
        lambda: acc.calibrate_dpsgd_noise(1.0, 1e-5, 0.01, 1000, "rdp"),
        3,
        "sigma",
    ),
    "calibrate_dpsgd_pld": (
        lambda: acc.calibrate_dpsgd_noise(1.0, 1e-5, 0.01, 1000, "pld"),
        1,
        "sigma",
    ),
    "shuffled_gaussian_guarantee": (
        lambda: acc.shuffled_gaussian_guarantee(15.0, 10**5, 1e-6).epsilon,
        3,
        "epsilon",
    ),
    "ledger_10k_partitions_report": (
        lambda: _ledger_one_pass(10_000).report(1e-6).epsilon,
        3,
        "epsilon",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results.json"))
    parser.add_argument("--only", nargs="*", help="run only these cases")
    parser.add_argument("--noise-dim", type=int, default=10**6, help="d of the generator suite")
    parser.add_argument("--noise-steps", type=int, default=1000, help="T of the generator suite")
    args = parser.parse_args()
    results: dict[str, object] = {}
    for name, (fn, repeats, quantity) in CASES.items():
        if args.only and name not in args.only:
            continue
        seconds, value = _time(fn, repeats)
        results[name] = {"seconds": seconds, "repeats": repeats, quantity: value}
        print(f"{name:32s} {seconds * 1e3:10.2f} ms   {quantity}={value:.6g}")
    if not args.only or "ftrl_epoch" in args.only:
        results["ftrl_epoch"] = run_ftrl_epoch()
        print(json.dumps(results["ftrl_epoch"]))
    if not args.only or "regression_default" in args.only:
        # issue 16: DPLinearRegression's default fit at N = 1e6, d = 100 against one X @ w
        case = run_regression_default()
        results["regression_default"] = case
        print(
            f"{'default fit / one X@w':32s} {case['default_fit_over_one_x_at_w']:10.1f} x   "
            f"(N={case['n']}, d={case['d']}: {case['default_cpu_seconds']:.2f} s CPU against "
            f"{case['x_at_w_cpu_seconds'] * 1e3:.1f} ms; target 20x; "
            f"{case['default_fit_over_sklearn']:.3f}x scikit-learn, target 0.25x)"
        )
    if not args.only or "noise_generators" in args.only:
        generators = run_noise_generators(args.noise_dim, args.noise_steps)
        results["noise_generators"] = generators
        print(json.dumps(generators, indent=1))
    payload = {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
