"""Out-of-core fits on Dask (issue 19): AdaSSP and noisy Newton against the I/O floor.

Writes a Parquet directory of N rows and d features (one file per ``--rows-per-file`` rows,
generated file by file, so the writer's memory is one file), starts a 2-worker LocalCluster
whose per-worker memory limit is below the data size, and times on it:

* the I/O floor: one pass that reads every file with the loader the fits use (read, convert to
  float64, check finiteness) and returns only row counts;
* AdaSSP with public bounds (one pass), AdaSSP with private bounds (a pass gathering the 20,000
  preprocessing rows, then the Gram pass), noisy Newton with public bounds (seven passes);
* DP-SGD's per-step latency on a small in-memory-sized table (one round trip per step);

and the peak resident memory of each worker process (sampled every 0.1 s). Results go to
``--out`` (JSON). Full size: ``python benchmarks/dask_bench.py --rows 50000000`` (about 8.4 GB
of Parquet; check free disk first).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import threading
import time
from pathlib import Path

import numpy as np

from privopt.estimators import DPLinearRegression


def write_table(folder: Path, rows: int, features: int, per_file: int, seed: int = 0) -> float:
    """y = <x, w> + 1 + N(0, 1), x ~ N(0, I); returns the data size in bytes (float64)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = folder / "_complete.json"
    spec = {"rows": rows, "features": features, "per_file": per_file, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return rows * (features + 1) * 8.0
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    w = np.linspace(-1.0, 1.0, features)
    names = [f"x{j:02d}" for j in range(features)]
    for i, start in enumerate(range(0, rows, per_file)):
        m = min(per_file, rows - start)
        X = rng.standard_normal((m, features))  # synthetic data, not privacy noise
        y = X @ w + 1.0 + rng.standard_normal(m)
        columns = {name: X[:, j] for j, name in enumerate(names)} | {"y": y}
        pq.write_table(pa.table(columns), folder / f"part-{i:05d}.parquet", compression="none")
    marker.write_text(json.dumps(spec))
    return rows * (features + 1) * 8.0


class PeakMemory:
    """Peak RSS of every worker process, sampled on the workers every ``period`` seconds."""

    def __init__(self, client, period: float = 0.1):
        self.client, self.period, self.peak = client, period, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        def rss():
            return psutil.Process().memory_info().rss

        while not self._stop.is_set():
            try:
                for worker, value in self.client.run(rss).items():
                    self.peak[worker] = max(self.peak.get(worker, 0), value)
            except Exception:  # a worker restarting: skip the sample
                pass
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def mib(self) -> list[float]:
        return sorted(round(v / 2**20, 1) for v in self.peak.values())


def timed(client, label, fn, results):
    with PeakMemory(client) as memory:
        start = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - start
    results[label] = {"seconds": round(seconds, 3), "peak_worker_rss_mib": memory.mib()}
    print(f"{label}: {seconds:.2f} s, peak worker RSS {memory.mib()} MiB", flush=True)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/privopt_dask_bench"))
    parser.add_argument("--memory-limit", default="600MiB", help="per worker")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sgd-rows", type=int, default=50_000)
    parser.add_argument("--skip-newton", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/dask_results.json"))
    args = parser.parse_args()

    from dask import delayed

    from distributed import Client, LocalCluster
    from privopt.distributed import read_directory
    from privopt.distributed.rows import compute, tree_sum

    start = time.perf_counter()
    size = write_table(args.dir, args.rows, args.features, args.rows_per_file)
    write_seconds = time.perf_counter() - start
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=args.memory_limit,
        dashboard_address=":0",
    )
    client = Client(cluster)
    rows = read_directory(args.dir, "y")
    public = {"feature_bounds": [(-5.0, 5.0)] * args.features, "target_bounds": (-12.0, 12.0)}
    results: dict = {}

    def io_floor():
        counts = [delayed(lambda part: part[0].shape[0])(p) for p in rows.parts]
        return compute(tree_sum(counts))[0]

    assert timed(client, "io_floor_one_pass", io_floor, results) == args.rows

    def adassp_pass():  # the method's own pass (bounds fixed): what the 2x target is about
        from privopt.accounting import PrivacyLedger
        from privopt.distributed.methods import adassp_dask
        from privopt.estimators._base import public_linear_bounds

        ledger = PrivacyLedger("replace-one")
        fixed = public_linear_bounds(
            public["feature_bounds"], public["target_bounds"], args.features, True, ledger
        )
        empty = np.empty(0, dtype=np.int64)
        rng = np.random.default_rng(1)
        return adassp_dask(
            rows, empty, fixed, mu=1.0, rng=rng, ledger=ledger, budget_split=(0.05, 0.6, 0.35)
        )

    timed(client, "adassp_statistic_pass_only", adassp_pass, results)
    fits = {
        "adassp_public_bounds": dict(method="adassp", **public),
        "adassp_private_bounds": dict(method="adassp"),
    }
    if not args.skip_newton:
        fits["newton_public_bounds"] = dict(method="newton", **public)
    models = {}
    for label, params in fits.items():
        model = DPLinearRegression(epsilon=1.0, delta=1e-9, random_state=1, **params)
        models[label] = timed(client, label, lambda m=model: m.fit(rows), results)
    floor = results["io_floor_one_pass"]["seconds"]
    results["adassp_statistic_pass_only"]["x_io_floor"] = round(
        results["adassp_statistic_pass_only"]["seconds"] / floor, 2
    )
    for label in fits:
        results[label]["x_io_floor"] = round(results[label]["seconds"] / floor, 2)
        coef = models[label].coef_
        results[label]["max_coef_error"] = float(
            np.max(np.abs(coef - np.linspace(-1.0, 1.0, args.features)))
        )

    # DP-SGD: one round trip per step, measured on the first files (persisted in memory)
    small = args.dir.parent / (args.dir.name + "_sgd")
    write_table(small, args.sgd_rows, args.features, args.sgd_rows // 4, seed=1)
    sgd_rows = read_directory(small, "y")
    model = DPLinearRegression(epsilon=1.0, delta=1e-9, method="dpsgd", random_state=1, **public)
    timed(client, "dpsgd_small_table", lambda: model.fit(sgd_rows), results)
    steps = int(model.fit_info_["steps"])
    results["dpsgd_small_table"].update(
        rows=args.sgd_rows,
        steps=steps,
        ms_per_step=round(1000 * results["dpsgd_small_table"]["seconds"] / steps, 2),
    )
    client.close()
    cluster.close()
    payload = {
        "rows": args.rows,
        "features": args.features,
        "files": rows.n_partitions,
        "rows_per_file": args.rows_per_file,
        "data_gib_float64": round(size / 2**30, 3),
        "parquet_gib_on_disk": round(
            sum(f.stat().st_size for f in args.dir.glob("*.parquet")) / 2**30, 3
        ),
        "workers": args.workers,
        "threads_per_worker": 1,
        "memory_limit_per_worker": args.memory_limit,
        "write_seconds": round(write_seconds, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "results": results,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
