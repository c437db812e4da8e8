"""AdaSSP, noisy Newton and DP-SGD on partitioned rows: statistics on the cluster, noise here.

Each function mirrors its in-memory counterpart line by line (same releases, same order of
draws from ``rng``, same events), with the exact statistic computed by
:meth:`PartitionedRows.map_reduce` instead of one matrix product:

============  ================================================  ===========================
method        cluster work (passes over the data)               in-memory counterpart
============  ================================================  ===========================
AdaSSP        1: clipped (Z^T Z, Z^T t), tree-reduced           ``baselines.adassp``
noisy Newton  1 (Gram) + 1 (the residual quantile's subset      ``newton.dp_newton``
              gathered, N > QUANTILE_SUBSET; else one
              rank-count pass per quantile) + one clipped-
              gradient pass per step
DP-SGD        1 (persist the transformed rows), then one small  ``baselines.dpsgd_linear``
              task per partition holding sampled rows per step  (the training core)
DP-AMBSSGD    1 (the second moment's subset gathered) + one     ``ambssgd.dp_ambssgd``
              gather per k rounds (:mod:`.rounds`), T rounds    (the training core)
DP-FTRL-Σ     one gather per k rows of the secret order         ``ftrl_sigma.dp_ftrl_sigma``
              (:mod:`.ftrl`), N single-row steps here          (the training core)
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

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from dask import delayed

from privopt.accounting import PrivacyLedger
from privopt.algorithms.baselines import dpsgd_linear_plan
from privopt.algorithms.result import FitTrace
from privopt.distributed import statistics as stats
from privopt.distributed.rows import PartitionedRows, compute, tree_sum
from privopt.releases import newton
from privopt.releases.adassp import adassp_release
from privopt.releases.newton import NEWTON_SHARES, newton_release
from privopt.releases.preprocess import LinearBounds
from privopt.releases.quantile_bounds import first_step_clip
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
class _PartitionedStatistics:
    """:class:`privopt.releases.newton.NewtonStatistics` reduced across partitions: exact
    clipped gradients from the tasks, in a fixed tree order, and rank counts of the residuals
    on the rows the in-memory fit takes its quantile on.

    With more than ``newton.QUANTILE_SUBSET`` main rows the in-memory fit draws a secret subset
    of that public size from ``rng`` (after the Gram release) and counts only its residuals;
    :meth:`prepare` draws the same subset from the same generator, gathers those rows to the
    client once (one cheap pass, every file still checked) and transforms and clips them as
    the tasks do, so each step's counts are computed here without a pass over the data. With
    fewer rows the counts are exact sums over every main row from the tasks.
    """

    def __init__(self, rows: PartitionedRows, args: tuple) -> None:
        self.rows, self.args = rows, args
        self.sample: tuple[np.ndarray, np.ndarray] | None = None

    def prepare(self, rng: np.random.Generator) -> None:
        excluded, bounds, row_bound, target_bound = self.args
        n = self.rows.n_rows - excluded.size
        if n <= newton.QUANTILE_SUBSET:
            return None
        subset = np.sort(rng.choice(n, newton.QUANTILE_SUBSET, replace=False))
        # the k-th main row (rows outside ``excluded``, in order) is global row k + #{e <= it}
        shifted = excluded - np.arange(excluded.size)
        X, y = self.rows.take(subset + np.searchsorted(shifted, subset, side="right"))
        Z, t = bounds.transform(X, y)
        self.sample = stats._clipped(Z, t, row_bound, target_bound, "row")
        return None

    def residual_counts(self, w, grid):
        if self.sample is None:
            return self.rows.map_reduce(stats.residual_counts, *self.args, w, grid)
        Z, t = self.sample
        values = np.sort(np.abs(Z @ w - t))
        return np.searchsorted(values, grid, side="left"), np.searchsorted(
            values, grid, side="right"
        )

    def clipped_gradient(self, w, rho):
        return self.rows.map_reduce(stats.clipped_residual_gradient, *self.args, w, rho)


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
    """Noisy Newton (:func:`privopt.releases.newton.dp_newton`, default shares) on the main
    rows: the Gram pass, then per step the residual rank counts and the clipped gradient, all
    released by :func:`privopt.releases.newton.newton_release` on the client."""
    R, T = bounds.row_bound, bounds.y_radius
    args = (excluded, bounds, R, T)
    n_main = rows.n_rows - excluded.size
    gram, _ = rows.map_reduce(stats.gram_moment, *args, "row")
    return newton_release(
        (gram + gram.T) / 2.0,
        _PartitionedStatistics(rows, args),
        row_bound=R,
        target_bound=T,
        mu=mu,
        rng=rng,
        ledger=ledger,
        partition=partition,
        steps=steps,
        shares=NEWTON_SHARES,
        quantile_n=newton.quantile_rows(n_main, public_n),  # as dp_newton
        first_clip=first_step_clip(bounds),
    )


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
    handle = _PersistedRows(rows, excluded, bounds)
    n = handle.shape[0]
    setup = dpsgd_linear_plan(
        n,
        public_n=public_n,
        row_bound=bounds.row_bound,
        target_bound=bounds.y_radius,
        epsilon=epsilon,
        delta=delta,
        epochs=epochs,
        accountant="pld",
    )
    return setup.run(
        DaskLinearModel(),
        handle,
        _TargetsHandle(n),
        rng=rng,
        ledger=ledger,
        partition=partition,
        diagnostics=diagnostics,
        callback=callback,
    )
