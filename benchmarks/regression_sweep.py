"""Issues 4 and 16: private linear regression accuracy sweep, speed, CCPP R^2.

* Excess risk / OLS excess risk for each method of DPLinearRegression and the default
  ("auto"; only epsilon and delta known, bounds estimated privately) at N in {2,000, 5,000,
  1e4, 1e5, 1e6}, d in {10, 50}, epsilon in {0.5, 1, 4}, delta = 1e-7 (below 1/N at every N),
  x ~ N(0, I_d), ||w*|| = 1, sigma = 1; median of 5 seeds. ``--reduced`` runs N in {2,000,
  1e4, 1e5}, d in {10, 50}, epsilon = 1, 3 seeds (the run that chose the defaults).
  DP-SSGD is run only where its shuffling bound can certify epsilon and N <= 1e5 (its
  single-example Python loop makes N = 1e6 slow and its accuracy is far behind).
* Fit time of DP-AMBSSGD at N = 1e6, d = 100 against one ``X @ w`` over the same data.
* Test-set R^2 at epsilon = 1 on the CCPP power-plant data with stated public bounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from privopt import DPLinearRegression
from privopt.accounting import PrivacyLedger
from privopt.algorithms import dp_ambssgd, practical_config
from privopt.datasets import load_power_plant, make_linear_regression

METHODS = ("auto", "newton", "adassp", "ambssgd", "dpsgd", "ssgd")
DELTA = 1e-7
HERE = Path(__file__).resolve().parent


def ols_risk(data) -> float:
    design = np.hstack([data.X, np.ones((data.X.shape[0], 1))])
    w = np.linalg.lstsq(design, data.y, rcond=None)[0]
    return data.excess_risk(w[:-1], intercept=float(w[-1]))


#: Public bounds for the synthetic model when a run uses them: |x_j| <= 5 (a standard normal
#: entry exceeds 5 with probability 6e-7) and |y| <= 10 (y has standard deviation sqrt(2)).
PUBLIC_BOUNDS = {"feature_bounds": (-5.0, 5.0), "target_bounds": (-10.0, 10.0)}


def accuracy_sweep(
    ns, ds, epsilons, seeds, public: bool = False, neighbouring: str = "auto"
) -> list[dict]:
    rows = []
    for n in ns:
        for d in ds:
            datasets = [
                make_linear_regression(n, d, sigma=1.0, rng=np.random.default_rng(s)) for s in seeds
            ]
            baselines = [ols_risk(data) for data in datasets]
            for eps in epsilons:
                for method in METHODS:
                    if method == "ssgd" and (n > 100_000 or eps > 1.0):
                        continue
                    ratios, seconds, error = [], [], None
                    for seed, data, base in zip(seeds, datasets, baselines, strict=True):
                        extra = PUBLIC_BOUNDS if public else {}
                        model = DPLinearRegression(
                            epsilon=eps,
                            delta=DELTA,
                            method=method,
                            random_state=seed,
                            neighbouring=neighbouring,
                            **extra,
                        )
                        start = time.perf_counter()
                        try:
                            model.fit(data.X, data.y)
                        except ValueError as exc:
                            error = str(exc)
                            break
                        seconds.append(time.perf_counter() - start)
                        risk = data.excess_risk(model.coef_, intercept=model.intercept_)
                        ratios.append(risk / base)
                        chosen = model.fit_info_["method"]
                    row = {
                        "n": n,
                        "d": d,
                        "epsilon": eps,
                        "method": method,
                        "public": public,
                        "neighbouring": neighbouring,
                    }
                    if error:
                        row["error"] = error
                    else:
                        row["median_ratio"] = float(np.median(ratios))
                        row["ratios"] = ratios
                        row["median_seconds"] = float(np.median(seconds))
                        row["chosen"] = chosen
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "ratios"}), flush=True)
    return rows


def ambssgd_speed(n: int = 1_000_000, d: int = 100, repeats: int = 3) -> dict:
    rng = np.random.default_rng(0)
    data = make_linear_regression(n, d, sigma=1.0, rng=rng)
    Z = np.ascontiguousarray(data.X)
    t = np.asarray(data.y)
    w = rng.normal(size=d)
    floor = statistics.median(_timed(lambda: Z @ w) for _ in range(5))
    row_bound = float(np.max(np.linalg.norm(Z, axis=1)))
    config = practical_config(
        n,
        epsilon=1.0,
        delta=1e-6,
        row_bound=row_bound,
        target_bound=5.0,
        h_norm=1.0,
        row_norm_sq=d + 2.0,
    )

    def core_time(shuffle: str) -> float:
        return statistics.median(
            _timed(
                lambda: dp_ambssgd(
                    Z,
                    t,
                    config,
                    rng=np.random.default_rng(1),
                    ledger=PrivacyLedger("replace-one"),
                    shuffle=shuffle,
                )
            )
            for _ in range(repeats)
        )

    core = core_time("rows")
    contiguous = core_time("none")
    estimator = statistics.median(
        _timed(
            lambda: DPLinearRegression(method="ambssgd", delta=0.1 / n, random_state=0).fit(
                data.X, data.y
            )
        )
        for _ in range(repeats)
    )
    return {
        "n": n,
        "d": d,
        "x_at_w_seconds": floor,
        "dp_ambssgd_seconds": core,
        "dp_ambssgd_over_floor": core / floor,
        "contiguous_rounds_seconds": contiguous,
        "contiguous_rounds_over_floor": contiguous / floor,
        "estimator_seconds": estimator,
        "estimator_over_floor": estimator / floor,
        "target_over_floor": 5.0,
    }


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ccpp_r2(seeds, epsilons=(1.0, 1e4)) -> dict:
    """Test R^2 on CCPP (80/20 split) with only epsilon and delta given, every method, and the
    default on 2,000-row subsamples; plus the default's time at epsilon = 1e4."""
    table = load_power_plant()
    split = np.random.default_rng(0).permutation(table.y.size)
    train, test = split[: int(0.8 * split.size)], split[int(0.8 * split.size) :]

    def r2(pred) -> float:
        y = table.y[test]
        return float(1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))

    design = np.hstack([table.X[train], np.ones((train.size, 1))])
    ols = np.linalg.lstsq(design, table.y[train], rcond=None)[0]
    out: dict = {"ols_r2": r2(table.X[test] @ ols[:-1] + ols[-1])}
    for eps in epsilons:
        for method in METHODS:
            for rows_name, size in (("all", None), ("2000", 2000)):
                scores, error = [], None
                for seed in seeds:
                    rows = train
                    if size is not None:
                        rows = np.random.default_rng(100 + seed).choice(train, size, replace=False)
                    try:
                        model = DPLinearRegression(
                            epsilon=eps, delta=1e-6, method=method, random_state=seed
                        ).fit(table.X[rows], table.y[rows])
                    except ValueError as exc:
                        error = str(exc)[:120]
                        break
                    scores.append(r2(model.predict(table.X[test])))
                key = f"{method}_eps{eps:g}_{rows_name}"
                out[key] = {"error": error} if error else {"median": float(np.median(scores))}
                print(key, out[key], flush=True)
    start = time.perf_counter()
    DPLinearRegression(epsilon=1e4, delta=1e-6, random_state=0).fit(table.X[train], table.y[train])
    out["default_eps1e4_seconds"] = time.perf_counter() - start
    return out


def default_speed(n: int = 1_000_000, d: int = 100, repeats: int = 3) -> dict:
    """The default estimator's fit time against one ``X @ w`` over the same data (issue 16's
    target: 10x)."""
    rng = np.random.default_rng(0)
    data = make_linear_regression(n, d, sigma=1.0, rng=rng)
    X = np.ascontiguousarray(data.X)
    w = rng.normal(size=d)
    floor = statistics.median(_timed(lambda: X @ w) for _ in range(5))
    seconds = statistics.median(
        _timed(lambda: DPLinearRegression(delta=0.1 / n, random_state=0).fit(X, data.y))
        for _ in range(repeats)
    )
    return {
        "n": n,
        "d": d,
        "x_at_w_seconds": floor,
        "default_seconds": seconds,
        "default_over_floor": seconds / floor,
        "target_over_floor": 10.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=HERE / "regression_results.json")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument(
        "--public-only", action="store_true", help="only the public-bounds sweep at N = 1e4"
    )
    parser.add_argument(
        "--neighbouring",
        default="auto",
        help="auto (each method's own relation) or zero-out (every method at one guarantee)",
    )
    parser.add_argument(
        "--accuracy-only",
        type=int,
        nargs="*",
        metavar="N",
        help="only the accuracy sweep, at these N (default 1e4 1e5 1e6)",
    )
    parser.add_argument(
        "--reduced", action="store_true", help="the reduced sweep that chose the defaults"
    )
    args = parser.parse_args()
    if args.reduced:
        rows = accuracy_sweep([2_000, 10_000, 100_000], [10, 50], [1.0], list(range(3)))
        args.out.write_text(json.dumps({"accuracy_reduced": rows}, indent=2) + "\n")
        return
    if args.accuracy_only is not None:
        ns = args.accuracy_only or [2_000, 5_000, 10_000, 100_000, 1_000_000]
        rows = accuracy_sweep(
            ns, [10, 50], [0.5, 1.0, 4.0], list(range(5)), neighbouring=args.neighbouring
        )
        args.out.write_text(json.dumps({"accuracy": rows}, indent=2) + "\n")
        return
    if args.public_only:
        rows = accuracy_sweep([10_000], [10, 50], [0.5, 1.0, 4.0], list(range(5)), public=True)
        args.out.write_text(json.dumps({"accuracy_public_bounds": rows}, indent=2) + "\n")
        return
    seeds = list(range(2 if args.quick else 5))
    ns = [20_000] if args.quick else [2_000, 5_000, 10_000, 100_000, 1_000_000]
    ds = [5] if args.quick else [10, 50]
    eps = [1.0] if args.quick else [0.5, 1.0, 4.0]
    results = {
        "speed": ambssgd_speed(50_000, 10, 1) if args.quick else ambssgd_speed(),
        "default_speed": default_speed(50_000, 10, 1) if args.quick else default_speed(),
        "ccpp": ccpp_r2(seeds),
        "accuracy": accuracy_sweep(ns, ds, eps, seeds),
    }
    print(json.dumps(results["speed"]), json.dumps(results["default_speed"]))
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()


def markdown_table(rows: list[dict]) -> str:
    """Median excess-risk ratio to OLS per (N, d, epsilon) and method, as a markdown table."""
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    keys = sorted({(r["n"], r["d"], r["epsilon"]) for r in rows})
    lines = ["| N | d | epsilon | " + " | ".join(methods) + " |"]
    lines.append("|---" * (3 + len(methods)) + "|")
    for n, d, eps in keys:
        cells = []
        for method in methods:
            match = [
                r
                for r in rows
                if (r["n"], r["d"], r["epsilon"], r["method"]) == (n, d, eps, method)
            ]
            if not match:
                cells.append("—")
            elif "error" in match[0]:
                cells.append("too few rows" if "rows" in match[0]["error"] else "error")
            else:
                cells.append(f"{match[0]['median_ratio']:.3g}")
        lines.append(f"| {n:,} | {d} | {eps:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
