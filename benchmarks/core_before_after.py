"""CPU time of the algorithms the training core runs, for before/after comparisons.

It reports process CPU time (min of repeats, single-threaded BLAS), which is far less sensitive
than wall time to other load on a shared machine. One checkout::

    PYTHONPATH=src python benchmarks/core_before_after.py [--out FILE]

Before/after, alternated: ``--before SRC`` (a ``src`` directory, or ``git:COMMIT`` to export
that commit's ``src`` with ``git archive``) against ``--after SRC`` (default: this checkout's
``src``), each case set run in a fresh process per side and round, the order of the two sides
swapped every round, min over rounds; ``--out`` then writes both sides, the change and the
load averages::

    python benchmarks/core_before_after.py --before git:2b276b6 --rounds 2 --out F.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

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


def _export(spec: str, into: str) -> str:
    """A ``src`` directory: ``spec`` itself, or ``git:COMMIT``'s src exported under ``into``."""
    if not spec.startswith("git:"):
        return str(Path(spec).resolve())
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", spec[4:], "src"],
        check=True,
        capture_output=True,
    ).stdout
    target = Path(into) / spec[4:]
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return str(target / "src")


def _side(src: str, repeats: int, only: str | None) -> dict[str, float]:
    """One fresh process on ``src``: the CPU time of every case (JSON on its last line)."""
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--repeats", str(repeats), "--json"]
    if only:
        command += ["--only", only]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(before: str, after: str, rounds: int, repeats: int, only: str | None) -> dict:
    """Alternated before/after runs (order swapped each round); min per side and case."""
    load = [os.getloadavg()]
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for k in range(rounds):
        order = ("before", "after") if k % 2 == 0 else ("after", "before")
        for side in order:
            sides[side].append(_side(before if side == "before" else after, repeats, only))
            load.append(os.getloadavg())
    best = {side: {c: min(r[c] for r in runs) for c in runs[0]} for side, runs in sides.items()}
    middle = {
        side: {c: float(np.median([r[c] for r in runs])) for c in runs[0]}
        for side, runs in sides.items()
    }
    return {
        "method": (
            f"process CPU time, min over {rounds} alternated rounds of the min of {repeats} "
            "repeats (after a warm-up call), single-threaded BLAS, one fresh process per side "
            "and round; change_percent_of_medians: the same from the medians over rounds"
        ),
        "before_src": before,
        "after_src": after,
        "before": best["before"],
        "after": best["after"],
        "change_percent": {
            c: round(100.0 * (best["after"][c] / best["before"][c] - 1.0), 1) for c in best["after"]
        },
        "change_percent_of_medians": {
            c: round(100.0 * (middle["after"][c] / middle["before"][c] - 1.0), 1)
            for c in middle["after"]
        },
        "rounds": sides,
        "load_average_1_5_15": [[round(x, 2) for x in triple] for triple in load],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--json", action="store_true", help="print the results as JSON only")
    parser.add_argument("--before", default=None, help="src directory or git:COMMIT")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parent.parent / "src"))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.before is not None:
        with tempfile.TemporaryDirectory() as tmp:
            result = compare(
                _export(args.before, tmp),
                _export(args.after, tmp),
                args.rounds,
                args.repeats,
                args.only,
            )
        result["before_src"], result["after_src"] = args.before, args.after
        for name, change in result["change_percent"].items():
            before, after = result["before"][name], result["after"][name]
            median = result["change_percent_of_medians"][name]
            print(
                f"{before:8.3f} s -> {after:8.3f} s  {change:+6.1f}% "
                f"(medians {median:+.1f}%)  {name}"
            )
        print("load average (1, 5, 15 min) along the runs:", result["load_average_1_5_15"])
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=2)
        return
    chosen = {k: f for k, f in cases().items() if args.only is None or args.only in k}
    results = {name: _cpu(fn, args.repeats) for name, fn in chosen.items()}
    if args.json:
        print(json.dumps(results))
        return
    for name, seconds in results.items():
        print(f"{seconds:8.3f} s  {name}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
