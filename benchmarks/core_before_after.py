"""CPU time of the algorithms the training core runs, for before/after comparisons.

Run it under two checkouts (``PYTHONPATH=OTHER/src python benchmarks/core_before_after.py``)
back to back; it reports process CPU time (min of repeats, single-threaded BLAS), which is far
less sensitive than wall time to other load on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from privopt.accounting import PrivacyLedger
from privopt.algorithms import dp_ftrl, dp_sgd_gradient, dp_ssgd
from privopt.algorithms.baselines import dpsgd_linear
from privopt.algorithms.projected_sgd import projected_sgd
from privopt.losses import get_loss
from privopt.noise import independent


def _cpu(fn, repeats):
    fn()  # warm-up (calibration caches)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def cases():
    rng = np.random.default_rng(0)
    N, d = 200_000, 20
    X = rng.normal(size=(N, d)) / np.sqrt(d)
    y = X @ np.ones(d) + rng.normal(size=N)
    Xc = rng.normal(size=(2000, 20))
    Xc /= np.maximum(1.0, np.linalg.norm(Xc, axis=1, keepdims=True))
    yc = np.where(Xc @ np.ones(20) > 0, 1.0, -1.0)
    Xf = rng.normal(size=(100_000, 100)) / 10
    yf = (Xf @ np.ones(100) > 0).astype(float)
    return {
        "dpsgd_linear N=2e5 d=20 (3,907 Poisson steps)": lambda: dpsgd_linear(
            X, y, row_bound=3.0, target_bound=5.0, epsilon=1.0, delta=1e-6,
            rng=np.random.default_rng(1), ledger=PrivacyLedger("zero-out"),
        ),
        "dp_sgd_gradient n=2000 d=20 T=40,000 (hinge, R=2)": lambda: dp_sgd_gradient(
            Xc, yc, "hinge", epsilon=1.0, delta=1e-6, x_bound=1.0, radius=2.0, eta=0.01,
            steps=40_000, rng=np.random.default_rng(1), accounting="rdp",
        ),
        "projected_sgd (DP-SGD-Output's SGD) n=2000 d=20 T=40,000": lambda: projected_sgd(
            Xc, yc, get_loss("hinge"), eta=0.01, steps=40_000, rng=np.random.default_rng(1),
            radius=2.0,
        ),
        "dp_ssgd N=1e5 d=20 (one shuffled pass)": lambda: dp_ssgd(
            X[:100_000], y[:100_000], noise_multiplier=5.0, clip=1.0, learning_rate=0.05,
            rng=np.random.default_rng(1), ledger=PrivacyLedger("replace-one"),
        ),
        "dp_ftrl epoch logistic N=1e5 d=100 batch 100 B=I": lambda: dp_ftrl(
            Xf, yf, mechanism=independent(), epsilon=1.0, delta=1e-6, clip_norm=1.0,
            learning_rate=0.1, rng=np.random.default_rng(1), model="logistic", batch_size=100,
        ),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = {name: _cpu(fn, args.repeats) for name, fn in cases().items()}
    for name, seconds in results.items():
        print(f"{seconds:8.3f} s  {name}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
