"""Issue 31: the bounds-free DPLinearRegression at small epsilon and on low-signal tables.

For each table and epsilon: the median and worst test R^2 over seeds of OLS, of the default
given correct public bounds (the table's ranges), and of the default with no bounds, with the
ratio of the medians; and, for the no-bounds fits, how many raised the UtilityWarning and how
many had a test R^2 <= 0 without it (the issue's "never silently worse than the mean"). Tables:
the bundled power-plant table (80/20 split per seed, also on 5,000 and 2,000 training rows) and
synthetic low-signal tables (Gaussian or Student-t(3) features, OLS R^2 0.08-0.2), and one-hot
Adult (the public encoding of privopt.datasets.adult, y in {-1, 1}; 10 or 25 columns drawn once,
4,000 or 15,000 training rows per seed, the full test split; public bounds = the encoded
training split's column ranges and (-1, 1)). With ``--tables DIR``
(the CSVs of benchmarks/public_tables.py, which are not shipped) the same rows for each of its
tables at epsilon 0.1, 0.3 and 1 (80/20 split per seed; public bounds the training split's
ranges). Run: ``python benchmarks/small_epsilon.py [--seeds 20] [--only adult] [--tables DIR]``;
writes small_epsilon_results.json (with --only, the rows run are merged into it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

import numpy as np

from privopt import DPLinearRegression
from privopt.datasets import load_power_plant
from privopt.estimators._utility import UtilityWarning

HERE = Path(__file__).resolve().parent


def _r2(y, prediction) -> float:
    return float(1.0 - np.mean((y - prediction) ** 2) / np.var(y))


def _power_plant(seed: int, rows: int | None):
    table = load_power_plant()
    X, y = np.asarray(table.X, float), np.asarray(table.y, float)
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    k = int(0.8 * len(y))
    train = order[:k] if rows is None else order[:rows]
    return X[train], y[train], X[order[k:]], y[order[k:]]


def _synthetic(seed: int, rows: int, d: int, heavy: bool):
    rng = np.random.default_rng(seed)
    beta = np.linspace(1.0, -1.0, d) / np.sqrt(d) * 0.5

    def draw(m):
        X = rng.standard_t(3, size=(m, d)) if heavy else rng.normal(size=(m, d))
        return X, X @ beta + 5.0 + rng.normal(size=m)

    X, y = draw(rows)
    Xt, yt = draw(20_000)
    return X, y, Xt, yt


def _adult(seed: int, rows: int, columns: int):
    from privopt.datasets.adult import load_adult_arrays

    Xtr, ytr, Xte, yte = load_adult_arrays()
    keep = [j for j in range(Xtr.shape[1]) if np.ptp(Xtr[:, j]) > 0]
    chosen = np.random.default_rng(0).choice(len(keep), columns, replace=False)
    chosen = np.asarray(keep)[chosen]
    sample = np.random.default_rng(50 + seed).choice(len(ytr), rows, replace=False)
    ranges = np.c_[Xtr.min(0), Xtr.max(0)][chosen]
    return Xtr[sample][:, chosen], ytr[sample], Xte[:, chosen], yte, ranges


def _public_table(seed: int, directory: Path, spec: dict):
    import public_tables

    X, y = public_tables.load(directory, spec)
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    k = int(0.8 * len(y))
    return X[order[:k]], y[order[:k]], X[order[k:]], y[order[k:]]


def _row(name, epsilon, seeds, data):
    out = {"ols": [], "public_bounds": [], "no_bounds": []}
    warned = silent_bad = 0
    for seed in range(seeds):
        X, y, Xt, yt, *ranges = data(seed)
        w = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
        out["ols"].append(_r2(yt, np.c_[Xt, np.ones(len(Xt))] @ w))
        public = ranges[0] if ranges else np.c_[X.min(0), X.max(0)]
        bounds = {"feature_bounds": public, "target_bounds": (y.min(), y.max())}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=epsilon, random_state=seed, **bounds).fit(X, y)
        out["public_bounds"].append(_r2(yt, model.predict(Xt)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = DPLinearRegression(epsilon=epsilon, random_state=seed).fit(X, y)
        score = _r2(yt, model.predict(Xt))
        out["no_bounds"].append(score)
        warn = any(issubclass(c.category, UtilityWarning) for c in caught)
        warned += warn
        silent_bad += score <= 0 and not warn
    medians = {k: statistics.median(v) for k, v in out.items()}
    row = {"table": name, "epsilon": epsilon, "seeds": seeds}
    for key, values in out.items():
        row[f"{key}_median"], row[f"{key}_worst"] = round(medians[key], 4), round(min(values), 4)
    row["no_bounds_over_public_bounds"] = round(medians["no_bounds"] / medians["public_bounds"], 3)
    row["warned"], row["r2_le_0_unwarned"] = warned, silent_bad
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--only", default="", help="run only the tables whose name has this")
    parser.add_argument("--tables", type=Path, help="the CSVs of benchmarks/public_tables.py")
    args = parser.parse_args()
    plan = [("power plant", e, lambda s: _power_plant(s, None)) for e in (0.1, 0.3, 1.0)]
    plan.append(("power plant 5,000", 0.1, lambda s: _power_plant(s, 5000)))
    plan.append(("power plant 2,000", 0.3, lambda s: _power_plant(s, 2000)))
    for rows_, d, heavy in ((4000, 12, False), (8000, 20, True), (15000, 27, False)):
        name = f"synthetic {'t3' if heavy else 'normal'} {rows_} x {d}"
        plan.append((name, 1.0, lambda s, r=rows_, p=d, h=heavy: _synthetic(s, r, p, h)))
    for rows_, columns in ((4000, 10), (15000, 25)):
        name = f"adult one-hot {rows_} x {columns}"
        plan.append((name, 1.0, lambda s, r=rows_, c=columns: _adult(s, r, c)))
    if args.tables is not None:
        import sys

        sys.path.insert(0, str(HERE))
        import public_tables

        for table, spec in public_tables.TABLES.items():
            if (args.tables / spec["file"]).exists():
                for e in (0.1, 0.3, 1.0):
                    data = lambda s, t=spec: _public_table(s, args.tables, t)  # noqa: E731
                    plan.append((f"public {table}", e, data))
    out = HERE / "small_epsilon_results.json"
    done = json.loads(out.read_text()) if args.only and out.exists() else []
    for name, epsilon, data in plan:
        if args.only in name:
            row = _row(name, epsilon, args.seeds, data)
            done = [r for r in done if (r["table"], r["epsilon"]) != (name, epsilon)] + [row]
    out.write_text(json.dumps(done, indent=1) + "\n")


if __name__ == "__main__":
    main()
