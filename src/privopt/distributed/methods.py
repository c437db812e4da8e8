"""AdaSSP, noisy Newton and DP-SGD on partitioned rows: statistics on the cluster, noise here.

Each function mirrors its in-memory counterpart line by line (same releases, same order of
draws from ``rng``, same events), with the exact statistic computed by
:meth:`PartitionedRows.map_reduce` instead of one matrix product:

============  ================================================  ===========================
method        cluster work (passes over the data)               in-memory counterpart
============  ================================================  ===========================
AdaSSP        1: clipped (Z^T Z, Z^T t), tree-reduced           ``baselines.adassp``
noisy Newton  1 + 1 + 2 (K - 1): Gram; per step rank counts of  ``newton.dp_newton``
              |r| on the public grid, then the clipped gradient
DP-SGD        1 (persist the transformed rows), then one small  ``baselines.dpsgd_linear``
              task per partition holding sampled rows per step  (the training core)
============  ================================================  ===========================

Privacy: identical to the in-memory methods (see their docstrings): the releases, their
sensitivities and their noise are the same, and the noise is drawn on the client by
:mod:`privopt.noise` after the exact statistic has been gathered, once. Poisson batches are
drawn on the client from ``rng`` exactly as :class:`~privopt.training.PoissonSampling` draws
them (global indices of the main rows), so which rows a step reads depends neither on the data
nor on the partitioning.

DP-SGD's cost on a cluster is latency: K = ceil(epochs / q) sequential round trips (a few
milliseconds each on a local cluster, more across machines), each touching about q N rows.
With the default q = 256 / N that is 5 N / 256 round trips: worth it only when the expected
batch is large (q N in the tens of thousands or more, so the work of a step dwarfs the round
trip) and the transformed rows fit in the cluster's memory; otherwise AdaSSP or noisy Newton
(one to six passes) are the methods for data that do not fit one machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from dask import delayed

from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.algorithms.baselines import (
    ADASSP_RIDGE_Z,
    DEFAULT_EXPECTED_BATCH,
    adassp_release,
    adassp_sensitivities,
)
from privopt.algorithms.newton import (
    NEWTON_SHARES,
    RESIDUAL_LEVEL,
    RESIDUAL_MULTIPLIER,
    newton_shares,
)
from privopt.algorithms.preprocess import LinearBounds
from privopt.algorithms.result import FitTrace
from privopt.clipping.quantiles import (
    QuantileRelease,
    bounded_range_epsilon,
    bounded_range_gdp_mu,
    log_grid,
)
from privopt.distributed import statistics as stats
from privopt.distributed.rows import PartitionedRows, compute, tree_sum
from privopt.noise.rng import gaussian_noise
from privopt.noise.selection import exponential_mechanism
from privopt.training import SGD, PoissonSampling, TrainingPlan, execute
from privopt.training.gradients import GradientModel

__all__ = ["adassp_dask", "dpsgd_dask", "newton_dask"]


# -- AdaSSP --------------------------------------------------------------------------------------
def adassp_dask(
    rows: PartitionedRows,
    excluded: np.ndarray,
    bounds: LinearBounds,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    budget_split: tuple[float, float, float],
    partition: Hashable | None = "main",
) -> tuple[np.ndarray, dict[str, Any]]:
    """AdaSSP on the main rows: one pass for the clipped (Z^T Z, Z^T t), noise on the client."""
    R, T = bounds.row_bound, bounds.y_radius
    gram, moment = rows.map_reduce(stats.gram_moment, excluded, bounds, R, T, "linalg")
    return adassp_release(
        gram,
        moment,
        row_bound=R,
        target_bound=T,
        mu=mu,
        rng=rng,
        ledger=ledger,
        partition=partition,
        budget_split=budget_split,
    )


# -- noisy Newton --------------------------------------------------------------------------------
def _interval_quantile(counts, grid, q, n, mu, rng) -> QuantileRelease:
    """:func:`privopt.clipping.quantiles.private_interval_quantile` from the exact counts
    (#{v < c}, #{v <= c}) instead of the sorted values: the same scores, the same draw."""
    below, at_or_below = counts
    epsilon = bounded_range_epsilon(mu)
    target = q * n
    scores = -np.maximum(np.maximum(below - target, target - at_or_below), 0.0)
    index = exponential_mechanism(rng, scores, epsilon, 1.0)
    return QuantileRelease(float(grid[index]), q, epsilon, bounded_range_gdp_mu(epsilon))


def newton_dask(
    rows: PartitionedRows,
    excluded: np.ndarray,
    bounds: LinearBounds,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    public_n: float,
    partition: Hashable | None = "main",
    steps: int = 3,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Noisy Newton (:func:`privopt.algorithms.newton.dp_newton`, default shares) on the main
    rows: the Gram pass, then per step the residual rank counts and the clipped gradient."""
    R, T = bounds.row_bound, bounds.y_radius
    args = (excluded, bounds, R, T)
    sens = adassp_sensitivities(R, T, ledger.neighbouring)
    factor = sens.moment / (R * T)
    mus = mu * np.sqrt(newton_shares(steps))
    std_gram = sens.gram / mus[0]
    gram, _ = rows.map_reduce(stats.gram_moment, *args, "row")
    p = gram.shape[0]
    tri_rows, tri_cols = np.triu_indices(p)
    noise = np.zeros((p, p))
    noise[tri_rows, tri_cols] = gaussian_noise(rng, std_gram, tri_rows.size)
    noisy = (gram + gram.T) / 2.0 + noise + np.triu(noise, 1).T
    ledger.record(
        GaussianEvent(sens.gram, std_gram, label="noisy-Newton upper triangle of Z^T Z"),
        partition=partition,
    )
    ridge = ADASSP_RIDGE_Z * math.sqrt(p) * std_gram
    values, vectors = np.linalg.eigh(noisy)
    inverse = (vectors / np.maximum(values + ridge, ridge)) @ vectors.T
    w = np.zeros(p)
    clips, stds = [], []
    release = 1
    for k in range(steps):
        if k == 0:
            rho = T
        else:
            top = R * float(np.linalg.norm(w)) + T
            grid = log_grid(1e-6 * top, top, 1.01)
            grid[-1] = top
            counts = rows.map_reduce(stats.residual_counts, *args, w, grid)
            q = _interval_quantile(counts, grid, RESIDUAL_LEVEL, public_n, mus[release], rng)
            ledger.record(
                GaussianEvent(1.0, 1.0 / q.mu, label="noisy-Newton residual quantile (exp. mech.)"),
                partition=partition,
            )
            release += 1
            rho = min(RESIDUAL_MULTIPLIER * q.value, top)
        std = factor * R * rho / mus[release]
        exact = rows.map_reduce(stats.clipped_residual_gradient, *args, w, rho)
        gradient = exact + gaussian_noise(rng, std, p)
        ledger.record(
            GaussianEvent(factor * R * rho, std, label=f"noisy-Newton clipped gradient {k}"),
            partition=partition,
        )
        release += 1
        w = w - inverse @ gradient
        clips.append(rho)
        stds.append(std)
    info: dict[str, Any] = {
        "steps": steps,
        "gram_std": std_gram,
        "ridge_lambda": ridge,
        "residual_clips": clips,
        "gradient_stds": stds,
        "shares": tuple(float(s) for s in NEWTON_SHARES),
        "mu": mu,
    }
    return w, info


# -- DP-SGD --------------------------------------------------------------------------------------
class _PersistedRows:
    """The transformed main rows held in cluster memory, with their offsets in Z's indexing."""

    def __init__(self, rows: PartitionedRows, excluded: np.ndarray, bounds: LinearBounds):
        import dask

        tasks = [
            delayed(stats.sgd_block, pure=True)(part, int(rows.offsets[p]), excluded, bounds)
            for p, part in enumerate(rows.parts)
        ]
        self.blocks = dask.persist(*tasks)
        removed = np.searchsorted(excluded, rows.offsets)  # slice rows before each offset
        self.offsets = rows.offsets - removed
        p = bounds.transform(np.zeros((1, rows.n_features))).shape[1]
        self.shape = (int(self.offsets[-1]), p)


class _TargetsHandle:
    def __init__(self, n: int):
        self.shape = (n,)


class DaskLinearModel(GradientModel):
    """Squared loss on persisted partitions: each step's clipped gradient sum is computed by
    one task per partition holding rows of the batch, tree-reduced, and returned to the
    training loop on the client (which adds the plan's noise)."""

    name = "linear"

    def prepare(self, X: Any, y: Any = None) -> None:
        return None

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        if clip is None:
            raise ValueError("DP-SGD on Dask needs a clip norm.")
        order = np.sort(np.asarray(batch, dtype=np.int64))
        cuts = np.searchsorted(order, X.offsets)
        tasks = [
            delayed(stats.sgd_gradient, pure=True)(
                X.blocks[p], order[cuts[p] : cuts[p + 1]] - X.offsets[p], w, clip
            )
            for p in range(len(X.blocks))
            if cuts[p + 1] > cuts[p]
        ]
        total, clipped = compute(tree_sum(tasks))[0]
        return total, int(clipped) / order.size


def dpsgd_dask(
    rows: PartitionedRows,
    excluded: np.ndarray,
    bounds: LinearBounds,
    *,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    public_n: float,
    partition: Hashable | None = "main",
    epochs: float = 5,
    diagnostics: bool = False,
    callback: Callable[[Any], None] | None = None,
) -> tuple[np.ndarray, FitTrace, dict[str, Any]]:
    """:func:`privopt.algorithms.baselines.dpsgd_linear` with its defaults (q = min(1, 256 /
    N_public), K = ceil(epochs / q), G = R T, eta = 1 / R^2, PLD calibration, tail average) on
    the training core, each step's clipped sum computed on the cluster."""
    R, T = bounds.row_bound, bounds.y_radius
    handle = _PersistedRows(rows, excluded, bounds)
    n = handle.shape[0]
    batches = PoissonSampling.from_epochs(
        public_n, epochs=epochs, expected_batch=DEFAULT_EXPECTED_BATCH
    )
    G, eta = R * T, 1.0 / R**2
    plan = TrainingPlan(
        n, batches, G, neighbouring="zero-out", public_records=public_n, label="dp-sgd steps"
    ).calibrate(epsilon, delta, "pld")
    return execute(
        plan,
        DaskLinearModel(),
        SGD(eta),
        handle,
        _TargetsHandle(n),
        rng=rng,
        averaging="tail",
        ledger=ledger,
        partition=partition,
        diagnostics=diagnostics,
        callback=callback,
        info={
            "sample_rate": batches.sample_rate,
            "epochs": epochs,
            "expected_batch_size": plan.divisor,
            "clip_norm": G,
            "learning_rate": eta,
            "accountant": "pld",
            "epsilon": epsilon,
            "delta": delta,
        },
    )
