"""Issue 7 benchmark: time and peak memory of one DP-FTRL-Σ pass with a rank-500 designed Σ.

Full size (the issue's): N = 10^4 training rows, d = 10^5 features (lambda_i = i^-2), Σ = (λ I +
X̃^T X̃)/M from M = 500 public unlabeled rows (rank 500, λ = M/(N eta)), public RESIDUALEST
estimates every 100 steps on ``rows_needed("public", horizon=N)`` public labeled rows, epsilon = 1,
delta = 1e-5. The pass is the library's :func:`privopt.algorithms.ftrl_sigma.dp_ftrl_sigma`.

Storage of X. In float64 the training matrix is N d 8 bytes = 8 GB. ``--storage memmap`` (the
default above 2 GB) writes it, in chunks of fresh rows from ``data.sample``, to a float64
memory-mapped file in ``--scratch`` (deleted afterwards) and passes the memmap to
``dp_ftrl_sigma``, which reads it without copying (``np.asarray(X, dtype=float)`` of a float64
memmap is a view). Nothing else in the pass is N x d except one boolean ``isfinite`` mask (N d
bytes, 1 GB at full size). ``--storage memory`` keeps X in RAM.

Measurements (``tracemalloc`` traces numpy's allocations; the memmap's pages are not traced):

* ``pass_s``: wall time of ``dp_ftrl_sigma`` alone (it includes the clip constant from the public
  rows and ||x_t||_{Σ^-1} for every row, O(N d M)); ``sigma_build_s``: the thin SVD of the
  public rows; ``generate_s``: drawing and writing X.
* ``tracemalloc_peak_bytes``: peak traced memory during the pass (peak reset just before it).
  It is asserted to stay below ``d^2 * 8 / 10`` bytes (8 GB at d = 10^5): a single d x d float64
  array (80 GB) would break it ten times over.
* ``max_rss_bytes``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (process lifetime maximum,
  KiB on Linux, converted), before and after the pass. With ``memmap`` storage it counts the
  file-backed pages of X that the kernel keeps resident (reclaimable page cache, up to 8 GB);
  ``rss_anon_bytes_after_pass`` / ``rss_file_bytes_after_pass`` (Linux ``/proc/self/status``)
  split the current resident set into anonymous memory and file pages.

Usage::

    python benchmarks/ftrl_sigma_pass.py --out benchmarks/ftrl_sigma_results.json [--quick]

``--quick``: N = 1,000, d = 10^4, M = 500 (seconds). Results of both sizes are merged into the
``--out`` file under "quick" / "full".

Measured (2 shared cores, 1 BLAS thread, 2026-11-26). Full: generating X 54-74 s, Σ's thin SVD
3-4 s, the pass 169 s (17 ms/step, machine load ~1) and 257 s (26 ms/step, load ~3.5); peak
traced memory 1.000 GB, which is the N x d boolean of ``dp_ftrl_sigma``'s finiteness check
(8% of X, 1.25% of one d x d array); max RSS 10.3 GB, of which 8.0 GB are X's memory-mapped file
pages and 1.26 GB anonymous memory after the pass. Quick: pass 2.5 s, peak traced 16.5 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

from privopt.algorithms.ftrl_sigma import calibrate_ftrl_sigma_tau, dp_ftrl_sigma
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.clipping.residual_estimate import rows_needed
from privopt.datasets import make_overparameterised_regression
from privopt.noise import LowRankPlusRidgeCovariance

EPSILON, DELTA = 1.0, 1e-5
CHUNK_BYTES = 256 << 20  # rows generated per chunk: about 256 MiB of float64


warnings.filterwarnings("ignore", category=NonPrivateDiagnosticsWarning)


def _max_rss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _proc_status_bytes(*fields: str) -> dict[str, int | None]:
    """Current VmHWM / RssAnon / RssFile from /proc/self/status (Linux; None elsewhere)."""
    out: dict[str, int | None] = dict.fromkeys(fields)
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in out:
                out[name] = int(value.split()[0]) * 1024  # kB
    except OSError:
        pass
    return out


def _step_size(n: int) -> float:
    """Cor. 4.6's tuned step for r = 2 (constants 1): min over its three branches."""
    tau = calibrate_ftrl_sigma_tau(EPSILON, DELTA, n)
    r = 2.0
    return min(
        n ** (-1 / (1 + r)),
        tau ** (-2 * r / (r + 3)) * n ** (-3 / (r + 3)),
        tau ** (-2 * r / (1 + 3 * r)) * n ** (-(1 + r) / (1 + 3 * r)),
    )


def run(
    n: int,
    d: int,
    rank: int,
    *,
    residual: str = "public",
    residual_every: int = 100,
    storage: str = "auto",
    scratch: str | None = None,
    seed: int = 0,
) -> dict:
    x_bytes = n * d * 8
    if storage == "auto":
        storage = "memmap" if x_bytes > 2 << 30 else "memory"
    rng = np.random.default_rng(seed)
    rss_start = _max_rss_bytes()
    t0 = time.perf_counter()
    # The law and the M public unlabeled rows; the training rows come from data.sample below.
    law = make_overparameterised_regression(1, d, r=2.0, n_public=rank, rng=rng)
    path = None
    if storage == "memmap":
        handle, path = tempfile.mkstemp(suffix=".f64", dir=scratch)
        os.close(handle)
        X = np.memmap(path, dtype=np.float64, mode="w+", shape=(n, d))
    elif storage == "memory":
        X = np.empty((n, d))
    else:
        raise ValueError(f"Expected storage in ('auto', 'memmap', 'memory'), got {storage!r}.")
    try:
        y = np.empty(n)
        chunk = max(1, CHUNK_BYTES // (8 * d))
        for start in range(0, n, chunk):
            rows, labels = law.sample(min(chunk, n - start), rng)
            X[start : start + rows.shape[0]] = rows
            y[start : start + rows.shape[0]] = labels
            del rows
        if storage == "memmap":
            X.flush()
        m = rows_needed("public", horizon=n)
        est = law.sample(m, rng)
        generate_s = time.perf_counter() - t0

        eta = _step_size(n)
        t0 = time.perf_counter()
        cov = LowRankPlusRidgeCovariance.from_public_data(law.public_X, n_samples=n, step_size=eta)
        sigma_build_s = time.perf_counter() - t0

        kwargs = (
            {"residual": "fixed", "threshold": 1.0}
            if residual == "fixed"
            else {
                "residual": "public",
                "estimating_data": est,
                "residual_every": residual_every,
                "public_X": law.public_X,
            }
        )
        rss_before = _max_rss_bytes()
        tracemalloc.start()
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        fit = dp_ftrl_sigma(
            X,
            y,
            epsilon=EPSILON,
            delta=DELTA,
            learning_rate=eta,
            rng=np.random.default_rng(seed + 1),
            covariance=cov,
            diagnostics=True,  # synthetic data: the clipped fraction is a benchmark figure
            **kwargs,
        )
        pass_s = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_after = _max_rss_bytes()
        status = _proc_status_bytes("RssAnon", "RssFile", "VmHWM")
        risk = float(law.excess_risk(fit.coef))
    finally:
        del X
        if path is not None:
            os.remove(path)

    dense_bytes = d * d * 8
    bound = dense_bytes // 10
    assert peak < bound, f"peak traced memory {peak} >= {bound} (a d x d array is {dense_bytes})"
    return {
        "n": n,
        "d": d,
        "rank": cov.rank,
        "public_rows_M": rank,
        "residual": residual,
        "residual_every": residual_every if residual != "fixed" else None,
        "estimating_rows": m if residual != "fixed" else 0,
        "storage": storage,
        "x_float64_bytes": x_bytes,
        "learning_rate": eta,
        "tau": fit.info["tau"],
        "clip_constant": fit.info["clip_constant"],
        "residual_calls": fit.info["residual_calls"],
        "clipped_fraction": fit.info["clipped_fraction"],
        "epsilon": fit.report.epsilon,
        "excess_risk": risk,
        "null_risk": law.null_risk,
        "generate_s": generate_s,
        "sigma_build_s": sigma_build_s,
        "pass_s": pass_s,
        "pass_ms_per_step": 1e3 * pass_s / n,
        "tracemalloc_peak_bytes": peak,
        "tracemalloc_bound_bytes": bound,
        "dense_d_by_d_float64_bytes": dense_bytes,
        "max_rss_bytes_at_start": rss_start,
        "max_rss_bytes_before_pass": rss_before,
        "max_rss_bytes_after_pass": rss_after,
        "rss_anon_bytes_after_pass": status["RssAnon"],
        "rss_file_bytes_after_pass": status["RssFile"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/ftrl_sigma_results.json"))
    parser.add_argument("--quick", action="store_true", help="N = 1,000, d = 10^4")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--d", type=int, default=None)
    parser.add_argument("--rank", type=int, default=500, help="M public rows (rank of Σ)")
    parser.add_argument("--residual", choices=("public", "fixed"), default="public")
    parser.add_argument("--residual-every", type=int, default=100)
    parser.add_argument("--storage", choices=("auto", "memmap", "memory"), default="auto")
    parser.add_argument("--scratch", default=None, help="directory of the memmap file")
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS/LAPACK threads (0: leave as is); threaded OpenBLAS eigh is slow on shared cores",
    )
    args = parser.parse_args(argv)
    n = args.n or (1_000 if args.quick else 10_000)
    d = args.d or (10_000 if args.quick else 100_000)
    limit = contextlib.nullcontext()
    if args.blas_threads > 0:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(limits=args.blas_threads, user_api="blas")
    with limit:
        result = run(
            n,
            d,
            args.rank,
            residual=args.residual,
            residual_every=args.residual_every,
            storage=args.storage,
            scratch=args.scratch,
        )
    result["blas_threads"] = args.blas_threads or None
    result["machine"] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    merged = json.loads(args.out.read_text()) if args.out.exists() else {}
    merged["quick" if args.quick else "full"] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(merged, indent=2))
    gib = 1 << 30
    print(
        f"N={n} d={d} rank={result['rank']} ({result['storage']}): pass {result['pass_s']:.1f} s "
        f"({result['pass_ms_per_step']:.2f} ms/step), tracemalloc peak "
        f"{result['tracemalloc_peak_bytes'] / gib:.3f} GiB "
        f"(bound {result['tracemalloc_bound_bytes'] / gib:.1f} GiB), max RSS "
        f"{result['max_rss_bytes_after_pass'] / gib:.2f} GiB, excess risk "
        f"{result['excess_risk']:.4f} (null {result['null_risk']:.4f}), "
        f"epsilon {result['epsilon']:.4f}"
    )
    return result


if __name__ == "__main__":
    main()
