"""Out-of-core fits on Dask (issue 19): AdaSSP and noisy Newton against the I/O floor.

Writes a Parquet directory of N rows and d features (one file per ``--rows-per-file`` rows,
generated file by file, so the writer's memory is one file), starts a 2-worker LocalCluster
whose per-worker memory limit is below the data size, and measures on it:

* the I/O floor: one pass that reads every file with the reader the fits use (pyarrow decode,
  one float64 array, finiteness check) and returns only row counts; and, for reference,
  pyarrow's decode alone;
* AdaSSP's statistic pass alone (bounds fixed), the private preprocessing's gather pass alone
  (20,000 rows), the whole AdaSSP fit with public bounds (one pass) and with private bounds
  (gather pass, then the Gram pass), noisy Newton with public bounds (seven passes, once);
* DP-AMBSSGD with public and with private bounds (the moment subset's gather pass, then one
  pass per round: each task returns DP-STAT's counts and the candidate clipped sums of its
  rows of the round, :mod:`privopt.distributed.round_statistics`; no row reaches the client);
* DP-SGD's per-step latency on a small table (one round trip per step).

``--only`` takes labels or prefixes (``--only ambssgd``: the I/O floor and both DP-AMBSSGD
runs; noisy Newton and DP-SGD run only when named).

The runs are repeated ``--repeats`` times, interleaved (forward, then backward), after one
warm-up pass; each reports its best wall time and its least worker CPU time (the machine is
shared, so contention only adds), the passes over the data it made (file-reading tasks from
the scheduler's task stream), the peak RSS of each worker process and of this (client)
process (psutil, every 0.05 s, from this process) and the 1-minute load average. Results go
to ``--out`` (JSON). Full size: ``python benchmarks/dask_bench.py --rows 50000000`` (about
8.9 GB of Parquet; check free disk first).
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


class WorkerMeter:
    """Peak RSS and CPU seconds of the worker processes during a run, read with psutil from
    this process (no task or RPC on the workers: sampling does not load them)."""

    def __init__(self, client, period: float = 0.05):
        import psutil

        self.processes = [psutil.Process(pid) for pid in sorted(client.run(os.getpid).values())]
        self.period, self.peak = period, [0] * len(self.processes)
        self.client = psutil.Process()  # this process: rows gathered to the client land here
        self.client_start = self.client_peak = self.client.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cpu(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self.processes)

    def _run(self):
        while not self._stop.is_set():
            for i, process in enumerate(self.processes):
                try:
                    self.peak[i] = max(self.peak[i], process.memory_info().rss)
                except Exception:  # a worker restarting: skip the sample
                    pass
            self.client_peak = max(self.client_peak, self.client.memory_info().rss)
            self._stop.wait(self.period)

    def __enter__(self):
        self._cpu_start, self._client_start = self._cpu(), time.process_time()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.worker_cpu = self._cpu() - self._cpu_start
        self.client_cpu = time.process_time() - self._client_start

    def mib(self) -> list[float]:
        return sorted(round(v / 2**20, 1) for v in self.peak)


#: the tasks that read a file (one per file and pass): the whole file (also DP-AMBSSGD's round
#: 0, whose task writes the round cache from it), rows gathered from it, or a DP-AMBSSGD round's
#: statistics from the source (the later rounds read the round cache: not passes over the data)
READERS = ("_read_file", "_take_file", "round_statistics")


def measure(client, fn, files: int) -> tuple[object, dict]:
    """Run ``fn`` on the cluster: wall seconds, worker and client CPU seconds, peak worker RSS,
    and the passes over the data (file-reading tasks run, from the scheduler's task stream,
    divided by the number of files)."""
    from distributed import get_task_stream

    with WorkerMeter(client) as meter, get_task_stream(client) as stream:
        start = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - start
    reads = sum(1 for task in stream.data if str(task["key"]).startswith(READERS))
    return value, {
        "seconds": seconds,
        "worker_cpu_seconds": meter.worker_cpu,
        "client_cpu_seconds": meter.client_cpu,
        "passes": reads / files,
        "peak_worker_rss_mib": meter.mib(),
        "client_rss_start_mib": round(meter.client_start / 2**20, 1),
        "peak_client_rss_mib": round(meter.client_peak / 2**20, 1),
        "load_average_1min": os.getloadavg()[0],
    }


def _read_file_decode_only(path: str) -> int:
    """The pyarrow decode of one file (the name makes it count as a pass)."""
    import pyarrow.parquet as pq

    return pq.read_table(path, memory_map=True).num_rows


def best_of(runs: list[dict]) -> dict:
    """The fastest run's wall time and the least CPU of the repeats (contention only adds),
    the largest peak memory, the mean load."""
    return {
        "seconds": round(min(r["seconds"] for r in runs), 3),
        "worker_cpu_seconds": round(min(r["worker_cpu_seconds"] for r in runs), 3),
        "client_cpu_seconds": round(min(r["client_cpu_seconds"] for r in runs), 3),
        "passes": max(r["passes"] for r in runs),
        "peak_worker_rss_mib": max((r["peak_worker_rss_mib"] for r in runs), key=max),
        "client_rss_start_mib": min(r["client_rss_start_mib"] for r in runs),
        "peak_client_rss_mib": max(r["peak_client_rss_mib"] for r in runs),
        "load_average_1min": round(sum(r["load_average_1min"] for r in runs) / len(runs), 2),
        "repeats": len(runs),
    }


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
    parser.add_argument("--skip-sgd", action="store_true")
    parser.add_argument(
        "--only", default=None, help="comma-separated labels of the interleaved runs to make"
    )
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats per run")
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
    files = rows.n_partitions
    paths = sorted(str(p) for p in args.dir.glob("*.parquet"))

    def io_floor():
        counts = [delayed(lambda part: part[0].shape[0])(p) for p in rows.parts]
        return compute(tree_sum(counts))[0]

    def decode_only():  # pyarrow's Parquet decode alone, no float64 array, no checks
        tasks = [delayed(_read_file_decode_only, pure=True)(path) for path in paths]
        return compute(tree_sum(tasks))[0]

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

    def gather_pass():  # private preprocessing: the 20,000 quantile rows gathered to the client
        subset = np.sort(np.random.default_rng(2).choice(args.rows, 20_000, replace=False))
        return rows.take(subset)

    def fit(params):
        model = DPLinearRegression(epsilon=1.0, delta=1e-9, random_state=1, **params)
        return model.fit(rows)

    runs = {
        "io_floor_one_pass": io_floor,
        "parquet_decode_only": decode_only,
        "adassp_statistic_pass_only": adassp_pass,
        "preprocessing_gather_pass": gather_pass,
        "adassp_public_bounds": lambda: fit(dict(method="adassp", **public)),
        "adassp_private_bounds": lambda: fit(dict(method="adassp")),
        "ambssgd_public_bounds": lambda: fit(dict(method="ambssgd", **public)),
        "ambssgd_private_bounds": lambda: fit(dict(method="ambssgd")),
    }
    if args.only:  # labels or their prefixes (--only ambssgd: both DP-AMBSSGD runs)
        wanted = args.only.split(",")
        runs = {
            label: fn
            for label, fn in runs.items()
            if label == "io_floor_one_pass" or any(label.startswith(w) for w in wanted)
        }
        args.skip_newton |= not any("newton".startswith(w) for w in wanted)
        args.skip_sgd |= not any("dpsgd".startswith(w) for w in wanted)
    once = {}
    if not args.skip_newton:
        once["newton_public_bounds"] = lambda: fit(dict(method="newton", **public))
    measure(client, io_floor, files)  # warm-up: worker imports, page cache
    samples: dict[str, list] = {label: [] for label in [*runs, *once]}
    values = {}
    for repeat in range(args.repeats):  # interleaved, so that load changes hit every run alike
        for label, fn in runs.items() if repeat % 2 == 0 else reversed(runs.items()):
            values[label], sample = measure(client, fn, files)
            samples[label].append(sample)
            print(f"{label}: " + json.dumps({k: v for k, v in sample.items()}), flush=True)
    for label, fn in once.items():
        values[label], sample = measure(client, fn, files)
        samples[label].append(sample)
        print(f"{label}: " + json.dumps(sample), flush=True)
    assert values["io_floor_one_pass"] == args.rows
    floor = best_of(samples["io_floor_one_pass"])
    for label, runs_of_label in samples.items():
        results[label] = best_of(runs_of_label)
        if label != "io_floor_one_pass":
            results[label]["x_io_floor_wall"] = round(
                results[label]["seconds"] / floor["seconds"], 2
            )
            results[label]["x_io_floor_worker_cpu"] = round(
                results[label]["worker_cpu_seconds"] / floor["worker_cpu_seconds"], 2
            )
        if label.startswith(("adassp_p", "newton", "ambssgd")):
            coef = values[label].coef_
            results[label]["max_coef_error"] = float(
                np.max(np.abs(coef - np.linspace(-1.0, 1.0, args.features)))
            )
        if label.startswith("ambssgd"):  # rounds, and the passes they made (one per round)
            info = values[label].fit_info_
            results[label].update(rounds=int(info["steps"]), round_passes=info["round_passes"])

    if not args.skip_sgd:
        # DP-SGD: one round trip per step, measured on the first files (persisted in memory)
        small = args.dir.parent / (args.dir.name + "_sgd")
        write_table(small, args.sgd_rows, args.features, args.sgd_rows // 4, seed=1)
        sgd_rows = read_directory(small, "y")
        model = DPLinearRegression(
            epsilon=1.0, delta=1e-9, method="dpsgd", random_state=1, **public
        )
        _, sample = measure(client, lambda: model.fit(sgd_rows), sgd_rows.n_partitions)
        results["dpsgd_small_table"] = best_of([sample])
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
        "reader": "pyarrow read_table (memory-mapped) -> one column-major float64 array, finite "
        "check by column sums (privopt.distributed.files._read_file, the fits' own reader)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "results": results,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
