"""DP-AMBSSGD on partitioned rows: rounds gathered by global index, the training core here.

:func:`ambssgd_dask` follows ``privopt.estimators._regression_methods.run_ambssgd`` and
:func:`privopt.algorithms.ambssgd.dp_ambssgd` line by line (same draws from ``rng`` in the same
order, same releases, same events), with the rows reached through a :class:`PartitionedRows`:

1. the private second moment: its secret subset of ``min(N, 50,000)`` main rows is drawn on the
   client (``rng.choice``), gathered (:meth:`PartitionedRows.take`, one pass) and released by
   :func:`privopt.algorithms.preprocess.private_second_moment` unchanged;
2. the configuration (:func:`privopt.algorithms.ambssgd.practical_config`) from public values
   and that release; the plan is :func:`privopt.algorithms.ambssgd.ambssgd_plan`;
3. :func:`privopt.training.execute` runs the plan with a model that resolves row indices on a
   :class:`_RoundRows` handle. The rounds are cut from the secret permutation of the *global*
   (main) row indices, so which rows a round reads depends neither on the data nor on the
   partitioning. The permutation is known before the first round: ``Rounds.rounds`` is
   replayed on a copy of ``rng`` in the state ``execute`` will draw it from (the draw order is
   1. permutation, 2. the noise stream's key, 3. each round's DP-STAT counts), so the handle
   gathers each round's s + b rows ahead, several rounds per pass while they fit in
   :data:`GATHER_BYTES` on the client. DP-STAT's residuals and the clipped gradient sum are
   then computed on the client from the gathered rows, exactly as the in-memory fit computes
   them from ``Z[rows]``.

Cost: 1 pass (moment subset) + ceil(T / k) passes, k = max(1, GATHER_BYTES // (8 (s + b) p)),
each pass one task per partition returning its rows of those rounds; with T rounds of N / T
rows that is between 2 passes (everything fits) and T + 1 (one round per pass). Client memory:
k rounds of rows (at least one round, about 8 p N / T bytes), held up to about 3 times while a
pass is concatenated, transformed and cut into rounds (measured at N = 5e6, d = 20: 4 passes
of 2 rounds, peak client RSS 0.9 GB above its start); worker memory: a partition plus its
share of the pass's rows.

Privacy: identical to the in-memory fit (:mod:`privopt.algorithms.ambssgd`): the same releases,
sensitivities and noise; the noise is drawn only on the client, after the tasks have returned
exact rows (a retried task returns the same rows and draws nothing).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np

from privopt.accounting import PrivacyLedger
from privopt.algorithms.ambssgd import ambssgd_plan, check_ledger, execute_rounds, moment_config
from privopt.algorithms.preprocess import LinearBounds, private_second_moment
from privopt.distributed.rows import PartitionedRows
from privopt.training.gradients import GradientModel, LinearRegressionModel

__all__ = ["GATHER_BYTES", "MOMENT_ROWS", "ambssgd_dask"]

#: client memory for gathered round rows: rounds are gathered this many bytes per pass
GATHER_BYTES = 1 << 28
#: rows of the private second moment's secret subset (as ``run_ambssgd``)
MOMENT_ROWS = 50_000

_LINEAR = LinearRegressionModel()


def main_to_global(main: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """Global indices of the given (sorted) main-row indices: the k-th row outside the sorted
    ``excluded`` is global row k + #{e in excluded: e - its rank <= k}."""
    shifted = excluded - np.arange(excluded.size)
    return main + np.searchsorted(shifted, main, side="right")


class _RoundRows:
    """The fit's data handle: the T rounds' rows, gathered ahead by global index and
    transformed on the client, handed out round by round in the loop's order."""

    def __init__(
        self,
        rows: PartitionedRows,
        excluded: np.ndarray,
        bounds: LinearBounds,
        rounds: list[Any],
        n: int,
        p: int,
        gather_bytes: int | None = None,
    ) -> None:
        gather_bytes = GATHER_BYTES if gather_bytes is None else gather_bytes
        self.rows, self.excluded, self.bounds, self.rounds = rows, excluded, bounds, rounds
        self.shape = (n, p)
        width = len(rounds[0]) + (0 if rounds[0].stat is None else len(rounds[0].stat))
        self.per_pass = max(1, int(gather_bytes // (8 * width * (p + 1))))
        self.cache: dict[int, list[Any]] = {}
        self.stat_round = self.gradient_round = 0
        #: passes over the data made by the rounds (public: a function of T, s, b, p)
        self.passes = 0

    def _gather(self, first: int) -> None:
        chunk = range(first, min(first + self.per_pass, len(self.rounds)))
        parts = [a for j in chunk for a in (self.rounds[j].stat, self.rounds[j].rows)]
        union = np.sort(np.concatenate([a for a in parts if a is not None]))
        X, y = self.rows.take(main_to_global(union, self.excluded))
        Z, t = self.bounds.transform(X, y)
        del X, y
        for j in chunk:
            pieces = []
            for a in (self.rounds[j].stat, self.rounds[j].rows):
                at = np.searchsorted(union, a)
                pieces.append((a, Z[at], t[at]))
            self.cache[j] = pieces
        self.passes += 1

    def _take(self, which: int, counter: str, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        j = getattr(self, counter)
        if j not in self.cache:
            self._gather(j)
        expected, Z, t = self.cache[j][which]
        if not np.array_equal(expected, indices):  # the loop drew different rounds
            raise RuntimeError("The rounds gathered ahead differ from the loop's rounds.")
        self.cache[j][which] = None
        if all(piece is None for piece in self.cache[j]):
            del self.cache[j]
        setattr(self, counter, j + 1)
        return Z, t

    def stat_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._take(0, "stat_round", indices)

    def gradient_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._take(1, "gradient_round", indices)


class _Targets:
    def __init__(self, n: int) -> None:
        self.shape = (n,)


class RoundsLinearModel(GradientModel):
    """Squared loss on a :class:`_RoundRows` handle: the round's rows as the in-memory model
    reads them (``Z[rows]``, sorted), the same residuals and clipped sums."""

    name = "linear"

    def prepare(self, X: Any, y: Any = None) -> None:
        return None

    def batch_residuals(self, w, X, y, rows):
        Z, t = X.stat_rows(rows)
        return _LINEAR.residuals(w, Z, t)

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        Z, t = X.gradient_rows(batch)
        return _LINEAR.clipped_gradient_sum(w, Z, t, clip)


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

    ``gather_bytes``: client memory for gathered rounds (default :data:`GATHER_BYTES`).
    Returns (w, trace, info, h_norm): ``info["_bounds"]`` holds the bounds with the rescaled
    intercept column, ``info["gather_passes"]`` the rounds' passes over the data.
    """
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
    rounds = plan.batches.rounds(n, copy.deepcopy(rng))  # the permutation execute draws next
    handle = _RoundRows(rows, excluded, bounds, rounds, n, p, gather_bytes)
    w, trace, info = execute_rounds(
        plan,
        config,
        RoundsLinearModel(),
        handle,
        _Targets(n),
        rng=rng,
        ledger=ledger,
        diagnostics=diagnostics,
    )
    info = {**info, "h_norm_corrected": h_norm, "_bounds": bounds, "gather_passes": handle.passes}
    return w, trace, info, h_norm
