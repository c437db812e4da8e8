"""DP-AMBSSGD's per-round statistics on the workers: DP-STAT's counts and the candidate sums.

Round t of DP-AMBSSGD (:mod:`privopt.algorithms.ambssgd`) releases two things at the iterate
w_t, both computed from the round's own rows:

1. gamma_t = DP-STAT(|<z_j, w_t> - t_j|, j in the s stat rows). DP-STAT
   (:func:`privopt.clipping.dp_stat.dp_stat`) asks, in order, whether the noisy count
   ``#{r_j <= g_i} + N(0, K alpha_s^2)`` reaches ``s - margin`` at ``g_i = Delta 2^i``,
   i = 0 .. K - 1, Delta = B / 2^K, and returns the first g_i that passes, or ``Delta 2^K``.
   The K query thresholds are public constants (the plan's domain B and K), so the values
   enter the release **only through the K exact counts** ``c_i = #{r_j <= g_i}``: any other
   set of s values with the same counts gives the same output with the same noise draws.
   :func:`quantised_residuals` builds such a set on the client from the counts: each residual
   rounded up to the next grid point (``g_i`` for ``g_{i-1} < r <= g_i``, and ``Delta 2^K``
   above ``g_{K-1}``), which preserves every c_i. The client then runs the very same
   :func:`dp_stat` on it, drawing its noise from the fit's ``rng`` as the in-memory fit does.
2. the clipped gradient sum ``sum_i clip_{zeta_t}(r_i z_i)`` over the b gradient rows, with
   zeta_t = scale * gamma_t. gamma_t is one of the K + 1 public values ``Delta 2^i``
   (i = 0 .. K), so zeta_t is one of K + 1 public **candidate clips**; the task computes the
   sum (and the number of clipped rows, for the non-private diagnostics) at every candidate,
   and the client keeps the one DP-STAT released. The residuals are computed once per row;
   each candidate costs one ``clip_factors`` and one column of a (b, K + 1) product.

Both are exact functions of the partition's rows of the round at w_t (integer counts add
exactly; the sums add along the fixed :func:`~privopt.distributed.rows.tree_sum` tree), so one
task per partition and round computes everything the round releases: **one pass per round**.
The arithmetic per row is the in-memory fit's (``bounds.transform``, ``Z w - t``,
:func:`~privopt.clipping.row_norms`, :func:`~privopt.clipping.clip_factors`), so counts are
equal and sums equal up to summation order.

The round cache: :func:`spill_rounds` (round 0's task) reads the partition from its source,
computes round 0's statistics and writes the partition's rows of every later round, transformed,
to one file per round on its host's temporary disk; :func:`spilled_round_statistics` (round
t >= 1) computes the same statistics from that file, or from the source when the file is not
on its host. Both paths transform the same rows with the same arithmetic.

Privacy: the tasks hold no randomness and release nothing; their outputs are exact statistics
that stay on the client, where DP-STAT's noise and the gradient noise are drawn (a task run
twice returns the same values and draws nothing). The candidate sums that are not selected are
discarded unreleased; the selected one is the in-memory fit's sum, released with its noise. The
cache files hold transformed private rows on the workers' own disks (mode 0700), each deleted
when its round reads it; nothing in them is released.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

from privopt.clipping import clip_factors, row_norms
from privopt.clipping.dp_stat import dp_stat_grid
from privopt.releases.preprocess import LinearBounds

__all__ = [
    "UNUSED",
    "candidate_clips",
    "dp_stat_grid",
    "quantised_residuals",
    "round_statistics",
    "spill_path",
    "spill_rounds",
    "spilled_round_statistics",
]


def candidate_clips(domain: float, queries: int, scale: float) -> np.ndarray:
    """The K + 1 clips ``scale * gamma`` DP-STAT's release can produce, in grid order (the
    same product as :class:`~privopt.training.thresholds.DPStatThreshold`'s source)."""
    grid, last = dp_stat_grid(domain, queries)
    return np.asarray([scale * g for g in (*grid.tolist(), last)], dtype=float)


def quantised_residuals(counts: np.ndarray, grid: np.ndarray, top: float, size: int) -> np.ndarray:
    """``size`` values whose count at or below every grid point is ``counts`` (the residuals
    rounded up to the grid; ``top`` above its last point): DP-STAT's input, equivalent to the
    residuals for every query DP-STAT can make."""
    counts = np.asarray(counts, dtype=np.int64)
    steps = np.diff(np.concatenate([[0], counts, [size]]))
    if np.any(steps < 0):
        raise RuntimeError("DP-STAT counts must be non-decreasing and at most the stat rows.")
    return np.repeat(np.append(grid, top), steps)


def round_statistics(
    source: Any,
    stat_local: np.ndarray,
    grad_local: np.ndarray,
    bounds: LinearBounds,
    w: np.ndarray,
    grid: np.ndarray,
    clips: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One partition's share of a round at ``w``, read from the partition's source: (DP-STAT
    counts ``#{|r_j| <= g}`` for every query ``g`` of ``grid`` over the stat rows, (C, p)
    clipped gradient sums at every clip of ``clips`` over the gradient rows, (C,) numbers of
    clipped gradient rows).

    ``source``: the partition's row taker (``taker(local) -> (X, y)``, sorted positions) or its
    ``(X, y)`` blocks; ``stat_local`` and ``grad_local``: the round's positions in the partition
    (sorted, disjoint). The rows are read once (their sorted union) and transformed by
    ``bounds`` as the in-memory fit transforms them.
    """
    union = np.sort(np.concatenate([stat_local, grad_local]).astype(np.int64), kind="stable")
    is_stat = np.zeros(union.size, dtype=bool)  # (two sorted runs: the sort is a merge)
    is_stat[np.searchsorted(union, stat_local)] = True
    if callable(source):
        X, y = source(union)
    else:
        X, y = source[0][union], source[1][union]
    Z, t = bounds.transform(X, y)
    del X, y
    return _statistics(Z[is_stat], t[is_stat], Z[~is_stat], t[~is_stat], w, grid, clips)


def _statistics(Zs, ts, Zg, tg, w, grid, clips):
    """:func:`round_statistics` from the round's transformed stat and gradient rows.

    Candidates at or above every gradient norm ``|r_i| ||z_i||`` clip nothing
    (:func:`~privopt.clipping.clip_factors` returns exactly 1 there), so they share one
    unclipped sum; the others get one column of factors each.
    """
    residuals = np.abs(Zs @ w - ts)
    counts = np.searchsorted(np.sort(residuals), grid, side="right").astype(np.int64)
    sums, clipped = np.zeros((clips.size, Zg.shape[1])), np.zeros(clips.size, dtype=np.int64)
    if Zg.shape[0] == 0:
        return counts, sums, clipped
    r = Zg @ w - tg
    scaled = np.abs(r) * row_norms(Zg)  # ||r_i z_i||, as the linear model clips it
    acting = np.flatnonzero(clips < np.max(scaled))
    factors = np.empty((r.size, acting.size), order="F")
    for column, k in enumerate(acting.tolist()):
        factors[:, column] = clip_factors(scaled, float(clips[k]))
    clipped[acting] = np.count_nonzero(factors < 1.0, axis=0)
    factors *= r[:, None]
    sums[acting] = (Zg.T @ factors).T
    sums[clips >= np.max(scaled)] = Zg.T @ r
    return counts, sums, clipped


# -- the round cache: each partition's rows of later rounds, on its worker's temporary disk ------

#: the code of a row in no round (codes: 2 j for round j's stat rows, 2 j + 1 for its gradient)
UNUSED = np.iinfo(np.uint16).max


def spill_path(directory: str, partition: int, round_: int) -> str:
    return os.path.join(directory, f"part{partition}-round{round_}.npy")


def spill_rounds(
    part: tuple[np.ndarray, np.ndarray],
    codes: np.ndarray,
    bounds: LinearBounds,
    name: str,
    partition: int,
    rounds: int,
    w: np.ndarray,
    grid: np.ndarray,
    clips: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], str | None]:
    """Round 0's statistics of the partition at ``w`` (as :func:`round_statistics`), and its
    rows of rounds 1 .. T - 1 transformed and written to the host's temporary directory
    ``name``, one file per round (``[Z | t]``, the stat rows then the gradient rows, each in
    position order): (statistics, the directory, or None if it could not be written).

    ``codes``: per row of the partition, 2 j (stat row of round j), 2 j + 1 (gradient row) or
    :data:`UNUSED`. The directory is created readable by the user only, and not used if it
    exists with other owners or permissions. Files are written under a temporary name and
    renamed, so a reader sees a whole file or none; a task run twice writes the same bytes.
    """
    X, y = part
    order = np.argsort(codes, kind="stable")  # by code, then by position
    # cut[k]: the first sorted row with code >= k; round j is order[cut[2 j] : cut[2 j + 2]]
    cut = np.searchsorted(codes[order], np.arange(2 * rounds + 1))
    Z, t = bounds.transform(X, y)  # row by row: the whole partition, then each round's rows
    del X, y
    stat, grad = order[: cut[1]], order[cut[1] : cut[2]]
    stats = _statistics(Z[stat], t[stat], Z[grad], t[grad], w, grid, clips)
    directory = os.path.join(tempfile.gettempdir(), name)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:  # not ours alone: do not use it
            return stats, None
        for j in range(1, rounds):
            rows = order[cut[2 * j] : cut[2 * j + 2]]
            block = np.empty((rows.size, Z.shape[1] + 1))
            block[:, :-1], block[:, -1] = Z[rows], t[rows]
            path = spill_path(directory, partition, j)
            with open(path + ".part", "wb") as handle:
                np.save(handle, block)
            os.replace(path + ".part", path)
    except OSError:  # no room or no permission: the rounds read the source instead
        shutil.rmtree(directory, ignore_errors=True)
        return stats, None
    return stats, directory


def spilled_round_statistics(
    directory: str | None,
    partition: int,
    round_: int,
    source: Any,
    stat_local: np.ndarray,
    grad_local: np.ndarray,
    bounds: LinearBounds,
    w: np.ndarray,
    grid: np.ndarray,
    clips: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`round_statistics` from the round's file written by :func:`spill_rounds` (then
    deleted), or from the source when the file is not on this host (another host, a lost
    worker's disk, a retry after the file was read): the same rows either way."""
    if directory is not None:
        path = spill_path(directory, partition, round_)
        try:
            block = np.load(path)
            os.remove(path)
        except (OSError, ValueError):
            block = None
        ns = stat_local.size
        if block is not None and block.shape[0] == ns + grad_local.size:
            Z, t = block[:, :-1], block[:, -1]
            return _statistics(Z[:ns], t[:ns], Z[ns:], t[ns:], w, grid, clips)
    return round_statistics(source, stat_local, grad_local, bounds, w, grid, clips)
