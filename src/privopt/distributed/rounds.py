"""DP-AMBSSGD on partitioned rows: each round's statistics computed where its rows are.

:func:`ambssgd_dask` follows ``privopt.estimators._regression_methods.run_ambssgd`` and
:func:`privopt.algorithms.ambssgd.dp_ambssgd` line by line (same draws from ``rng`` in the same
order, same releases, same events), with the rows reached through a :class:`PartitionedRows`:

1. the private second moment: its secret subset of ``min(N, 50,000)`` main rows is drawn on the
   client (``rng.choice``), gathered (:meth:`PartitionedRows.take`, one pass) and released by
   :func:`privopt.releases.preprocess.private_second_moment` unchanged;
2. the configuration (:func:`privopt.algorithms.ambssgd.moment_config`) from public values
   and that release; the plan is :func:`privopt.algorithms.ambssgd.ambssgd_plan`;
3. :func:`privopt.training.execute` runs the plan with :class:`RoundStatisticsModel`, whose
   row handle is a :class:`_RoundTasks`. The rounds are cut from the secret permutation of the
   *global* (main) row indices, so which rows a round reads depends neither on the data nor on
   the partitioning. The permutation is known before the first round: ``Rounds.rounds`` is
   replayed on a copy of ``rng`` in the state ``execute`` will draw it from (the draw order is
   1. permutation, 2. the noise stream's key, 3. each round's DP-STAT counts).

Round t is **one pass over its rows**: when the loop asks for DP-STAT's residuals at w_t, one
task per partition (:func:`~privopt.distributed.round_statistics.round_statistics`) takes the
partition's rows of round t and returns DP-STAT's K exact counts over its stat rows (one per
query threshold Delta 2^i of the public grid) and its clipped gradient sums at every one of the
K + 1 public candidate clips scale * Delta 2^i over its gradient rows, all at w_t; the results
are added along the fixed reduction tree. On the client, DP-STAT runs unchanged on the
residuals rounded up to its grid (the same counts, hence the same stopping query and the same
noise draws from ``rng``), and the loop's gradient sum is the candidate at the released
zeta_t: the rows never leave the workers, and the model equals the in-memory fit up to
summation order.

The round cache (:data:`SPILL_ROUNDS`): round 0's pass reads every partition from its source
once, computes round 0's statistics and writes the partition's rows of rounds 1 .. T - 1,
transformed, to its host's temporary disk, one file per round
(:func:`~privopt.distributed.round_statistics.spill_rounds`); round t >= 1 then reads (and
deletes) its files, 1/T of the used rows, instead of the source. A file that is not there (a
task on another host, a lost worker, a failed write) is replaced by reading the source: the
same rows, so the same statistics. The client removes what is left at the end of the fit, also
when it fails (here, and on the workers of a distributed client).

Cost: 1 pass (moment subset) + 1 pass over the source (round 0, writing the cache: about the
data's size in float64, (p + 1) 8 bytes per used row, on the workers' temporary disks, shrinking
as rounds read it) + T - 1 passes over the cached rows (without the cache: T passes over the
source), each one task per partition returning (K + (K + 1)(p + 1)) numbers, about 4 KB at
K = 20, p = 21. The round's positions travel with its tasks (4 bytes per row, round 0's as
2-byte round codes for the whole partition). Worker memory: a partition, transformed once in
round 0, plus a (rows, K + 1) factor matrix of its share of a round. Client memory: no rows;
the replayed rounds' indices (4 bytes per used row while N < 2^31, freed round by round) next
to the loop's own schedule (8 bytes per used row, and the 8 N-byte permutation while it is
drawn, as in memory): about 12 N bytes during the rounds, 20 N at the peak while the loop
draws its permutation (1 GB at N = 5e7).

Privacy: identical to the in-memory fit (:mod:`privopt.algorithms.ambssgd`): the same releases,
sensitivities and noise. The tasks return exact statistics that stay on the client; the noise
is drawn only on the client (a retried task returns the same values and draws nothing), and
the unselected candidate sums are discarded unreleased. The round cache holds transformed
private rows on the workers' temporary disks (a directory readable by the user only, named
by a random token that is no secret and not drawn from ``rng``), the same machines and the
same trust as the data it was read from; nothing in it is released, and it is deleted as it
is read and at the end of the fit.
"""

from __future__ import annotations

import copy
import dataclasses
import secrets
import shutil
import warnings
from typing import Any

import numpy as np
from dask import delayed

from privopt.accounting import PrivacyLedger
from privopt.algorithms.ambssgd import ambssgd_plan, check_ledger, execute_rounds, moment_config
from privopt.distributed.round_statistics import (
    UNUSED,
    candidate_clips,
    dp_stat_grid,
    quantised_residuals,
    round_statistics,
    spill_rounds,
    spilled_round_statistics,
)
from privopt.distributed.rows import PartitionedRows, compute, tree_sum
from privopt.releases.preprocess import LinearBounds, private_second_moment
from privopt.training.gradients import GradientModel

__all__ = ["GATHER_BYTES", "MOMENT_ROWS", "RoundStatisticsModel", "ambssgd_dask"]

#: client memory for rows gathered to the client (DP-FTRL-Σ's ordered gathers,
#: :mod:`privopt.distributed.ftrl`); DP-AMBSSGD's rounds no longer gather rows
GATHER_BYTES = 1 << 28
#: rows of the private second moment's secret subset (as ``run_ambssgd``)
MOMENT_ROWS = 50_000
#: round 0's pass writes each partition's rows of the later rounds to its host's temporary
#: disk (:func:`~privopt.distributed.round_statistics.spill_rounds`), so that rounds 1 .. T - 1
#: read 1/T of the rows each instead of the source; False: every round reads the source
SPILL_ROUNDS = True


def main_to_global(main: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """Global indices of the given (sorted) main-row indices: the k-th row outside the sorted
    ``excluded`` is global row k + #{e in excluded: e - its rank <= k}."""
    shifted = excluded - np.arange(excluded.size)
    return main + np.searchsorted(shifted, main, side="right")


class _RoundTasks:
    """The fit's data handle: the T rounds' main-row indices (replayed ahead, compact), and the
    one pass per round that computes the round's statistics on the workers."""

    def __init__(
        self,
        rows: PartitionedRows,
        excluded: np.ndarray,
        bounds: LinearBounds,
        rounds: list[Any],
        n: int,
        p: int,
    ) -> None:
        self.rows, self.excluded, self.bounds = rows, excluded, bounds
        self.shape = (n, p)
        small = np.int32 if n < 2**31 else np.int64  # the indices the client keeps
        self.rounds = [(r.stat.astype(small), r.rows.astype(small)) for r in rounds]
        #: passes over the rounds' rows (public: T), and the hosts' round caches (None: none)
        self.passes = 0
        self.directories: list[str | None] | None = None
        self.name = f"privopt-rounds-{secrets.token_hex(8)}"  # a file name, not a secret

    def _local(self, main: np.ndarray) -> list[np.ndarray]:
        """Per partition, the sorted positions of the given sorted main rows (int32)."""
        rows = main_to_global(main.astype(np.int64), self.excluded)
        cuts = np.searchsorted(rows, self.rows.offsets)
        return [
            (rows[cuts[q] : cuts[q + 1]] - self.rows.offsets[q]).astype(np.int32)
            for q in range(self.rows.n_partitions)
        ]

    def _codes(self) -> list[np.ndarray]:
        """Per partition, each row's round code (2 j stat, 2 j + 1 gradient, UNUSED)."""
        codes = [np.full(int(m), UNUSED, dtype=np.uint16) for m in np.diff(self.rows.offsets)]
        for j, pair in enumerate(self.rounds):
            for code, main in enumerate(pair, start=2 * j):
                for q, local in enumerate(self._local(main)):
                    codes[q][local] = code
        return codes

    def statistics(self, j: int, stat: np.ndarray, w, grid, clips):
        """Round ``j``'s (counts, candidate sums, clipped counts) at ``w``, summed over the
        partitions (one pass); ``stat``: the loop's stat rows, checked against the replay.

        Round 0 reads the source and (with :data:`SPILL_ROUNDS`) writes the later rounds'
        rows to the hosts' temporary disks; the later rounds read those files (or the source
        where a file is missing)."""
        expected_stat, expected_rows = self.rounds[j]
        if not np.array_equal(expected_stat, stat):  # the loop drew different rounds
            raise RuntimeError("The rounds replayed ahead differ from the loop's rounds.")
        w = np.array(w, dtype=float)
        self.passes += 1
        if j == 0 and SPILL_ROUNDS and len(self.rounds) > 1 and 2 * len(self.rounds) < UNUSED:
            T = len(self.rounds)
            tasks = [
                delayed(spill_rounds, pure=True)(
                    part, codes, self.bounds, self.name, q, T, w, grid, clips
                )
                for q, (part, codes) in enumerate(zip(self.rows.parts, self._codes(), strict=True))
            ]
            total, *directories = compute(tree_sum([t[0] for t in tasks]), *[t[1] for t in tasks])
            self.directories = directories
            self.rounds[j] = (None, expected_rows)
            return total
        sources = self.rows.takers if self.rows.takers is not None else self.rows.parts
        pieces = zip(sources, self._local(expected_stat), self._local(expected_rows), strict=True)
        if self.directories is None:
            tasks = [
                delayed(round_statistics, pure=True)(source, s, g, self.bounds, w, grid, clips)
                for source, s, g in pieces
            ]
        else:  # the source only if a file is missing: not a dependency of the task
            if self.rows.takers is None:
                pieces = ((_LazyPartition(x), s, g) for x, s, g in pieces)
            tasks = [
                delayed(spilled_round_statistics, pure=True)(
                    directory, q, j, source, s, g, self.bounds, w, grid, clips
                )
                for q, (directory, (source, s, g)) in enumerate(
                    zip(self.directories, pieces, strict=True)
                )
            ]
        self.rounds[j] = (None, expected_rows)
        return compute(tree_sum(tasks))[0]

    def finish(self, j: int, rows: np.ndarray) -> None:
        if not np.array_equal(self.rounds[j][1], rows):
            raise RuntimeError("The rounds replayed ahead differ from the loop's rounds.")
        self.rounds[j] = None  # this round's indices are no longer needed

    def cleanup(self) -> None:
        """Remove the round caches left over (each round deletes its files when it reads them;
        a failed fit leaves the later rounds'): here, and on the workers of a distributed
        client, best effort."""
        folders = sorted({d for d in self.directories or [] if d is not None})
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        if folders:
            try:
                from distributed import default_client

                default_client().run(_remove, folders)
            except Exception:  # no client, or a worker gone: the local removal is what we can do
                pass


class _LazyPartition:
    """A partition's delayed ``(X, y)`` read only when called (``taker``-like), so that a task
    holding it does not depend on it: Dask computes the Delayed arguments of a task first, but
    not those inside an object like this one."""

    def __init__(self, part: Any) -> None:
        self.part = part

    def __call__(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X, y = compute_sync(self.part)
        return X[local], y[local]


def compute_sync(part: Any) -> Any:
    import dask

    return dask.compute(part, scheduler="sync")[0]


def _remove(folders: list[str]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


class _Targets:
    def __init__(self, n: int) -> None:
        self.shape = (n,)


class RoundStatisticsModel(GradientModel):
    """Squared loss on a :class:`_RoundTasks` handle, for DP-AMBSSGD's rounds (DP-STAT clip).

    ``batch_residuals`` (the loop's DP-STAT input at w_t) runs round t's pass and returns the
    residuals rounded up to DP-STAT's grid (the same count at every query, see
    :mod:`privopt.distributed.round_statistics`); ``batch_gradient_sum`` (the loop's clipped
    sum at zeta_t, same w_t) returns the pass's candidate sum at zeta_t, which is one of the
    K + 1 public clips ``scale * Delta 2^i``.
    """

    name = "linear"

    def __init__(self, domain: float, queries: int, scale: float) -> None:
        self.grid, self.top = dp_stat_grid(domain, queries)
        self.clips = candidate_clips(domain, queries, scale)
        self.round = 0
        self.pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def prepare(self, X: Any, y: Any = None) -> None:
        return None

    def batch_residuals(self, w, X, y, rows):
        j = self.round
        counts, sums, clipped = X.statistics(j, rows, w, self.grid, self.clips)
        self.pending = (np.array(w, dtype=float), sums, clipped)
        return quantised_residuals(counts, self.grid, self.top, len(rows))

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        if self.pending is None or not np.array_equal(self.pending[0], w):
            raise RuntimeError("A round's gradient sum was asked for before its statistics.")
        _, sums, clipped = self.pending
        where = np.flatnonzero(self.clips == clip)
        if where.size != 1:
            raise RuntimeError(f"The clip {clip!r} is not one of DP-STAT's candidate clips.")
        X.finish(self.round, batch)
        self.pending, self.round = None, self.round + 1
        k = int(where[0])
        return sums[k].copy(), float(clipped[k]) / len(batch)


def ambssgd_dask(
    rows: PartitionedRows,
    excluded: np.ndarray,
    bounds: LinearBounds,
    *,
    epsilon: float,
    delta: float,
    mu: float,
    moment_mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    diagnostics: bool = False,
    gather_bytes: int | None = None,
) -> tuple[np.ndarray, Any, dict[str, Any], float]:
    """DP-AMBSSGD after a private second moment, on the main rows (``run_ambssgd``'s flow).

    ``gather_bytes``: deprecated and ignored (the rounds no longer gather rows to the client).
    Returns (w, trace, info, h_norm): ``info["_bounds"]`` holds the bounds with the rescaled
    intercept column, ``info["round_passes"]`` the rounds' passes over the data (T).
    """
    if gather_bytes is not None:
        warnings.warn(
            "gather_bytes is deprecated and ignored: DP-AMBSSGD's rounds are computed on the "
            "workers, one pass per round, without gathering rows.",
            DeprecationWarning,
            stacklevel=2,
        )
    if ledger.neighbouring.value not in ("replace-one", "zero-out"):
        raise ValueError(
            "DP-AMBSSGD's sensitivities are computed under replace-one neighbours (valid under "
            f"zero-out too); got a {ledger.neighbouring.value!r} ledger."
        )
    n = rows.n_rows - excluded.size
    p = bounds.transform(np.zeros((1, rows.n_features))).shape[1]
    x_dim = p - 1 if bounds.intercept_scale > 0 else p
    subset = np.sort(rng.choice(n, min(n, MOMENT_ROWS), replace=False))
    X, _ = rows.take(main_to_global(subset, excluded))
    plain = bounds.transform(X)[:, :x_dim]
    moment = private_second_moment(
        plain,
        np.arange(subset.size),
        row_bound=bounds.x_radius,
        mu=moment_mu,
        rng=rng,
        ledger=ledger,
        partition=None,
    )
    del X, plain
    config, h_norm, scale = moment_config(
        n,
        moment,
        subset.size,
        moment_mu=moment_mu,
        mu=mu,
        epsilon=epsilon,
        delta=delta,
        bounds=bounds,
        x_dim=x_dim,
    )
    if bounds.intercept_scale > 0:  # the tasks' transform writes the rescaled column
        bounds = dataclasses.replace(bounds, intercept_scale=scale)
    check_ledger(ledger)  # dp_ambssgd on the handle
    plan = ambssgd_plan(n, config)
    rule = plan.private_threshold
    rounds = plan.batches.rounds(n, copy.deepcopy(rng))  # the permutation execute draws next
    handle = _RoundTasks(rows, excluded, bounds, rounds, n, p)
    del rounds
    try:
        w, trace, info = execute_rounds(
            plan,
            config,
            RoundStatisticsModel(rule.domain, rule.queries, rule.scale),
            handle,
            _Targets(n),
            rng=rng,
            ledger=ledger,
            diagnostics=diagnostics,
        )
    finally:
        handle.cleanup()
    info = {
        **info,
        "h_norm_corrected": h_norm,
        "_bounds": bounds,
        "round_passes": handle.passes,
        "round_cache": handle.directories is not None and None not in handle.directories,
    }
    return w, trace, info, h_norm
