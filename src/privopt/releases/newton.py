"""Noisy-Newton least squares: a private Gram preconditioner and a few clipped gradient steps.

Sufficient-statistics perturbation (SSP, AdaSSP) releases ``Z^T Z`` and ``Z^T t`` once; its error
is the Gram noise times ``||w||``, which does not shrink with the residuals. DP-SGD's noise scales
with its clip, which must cover the targets at the start. This method takes the best of both:
the noisy Gram matrix is used only as a *preconditioner*, and the solution is refined by a few
full-batch gradient steps whose residual clip adapts to the current residuals::

    P   = V max(L + lambda, lambda) V^T,    V L V^T = Z^T Z + E      (noisy Gram, released once)
    w_0 = 0
    for k = 0 .. K-1:
        rho_k = public rho_0 <= T, |t| <= T                  (k = 0: the residuals are the targets)
              = c * quantile_q(|<z_i, w_k> - t_i|)            (k >= 1: exponential mechanism)
        g_k   = sum_i z_i clip(<z_i, w_k> - t_i, +-rho_k) + N(0, s_k^2 I)
        w_{k+1} = w_k - P^-1 g_k
    return w_K

With exact P = Z^T Z and no clipping the first step is OLS; with noise the iteration contracts
by about ``||E + lambda I|| / (lambda_min(Z^T Z) + lambda)`` per step towards the fixed point,
which is the Huber-type solution of ``sum_i z_i clip(r_i, +-rho) = 0`` (OLS when fewer than 1 - q
of the residuals exceed c times their q-quantile), and the last step's noise shrinks with its
clip rho_K, i.e. with the residuals rather than the targets. The first step only starts the
iteration, so its clip rho_0 may be below T (public, a function of earlier releases: a few
released robust sigmas of the target, :func:`privopt.releases.quantile_bounds.first_step_clip`):
its noise shrinks with it, and the later steps' clips are still searched up to T.

Privacy (all releases on the same rows, composed in exact GDP: ``mu^2 = sum of shares mu^2``):

==============================  ================  ====================  ==================
release                         replace-one       zero-out              mechanism
==============================  ================  ====================  ==================
upper triangle of Z^T Z          sqrt(2) R^2       R^2                   Gaussian
sum_i z_i clip(r_i, +-rho)       2 R rho           R rho                 Gaussian
residual quantile                1 (counts)        1                     exponential mech.
==============================  ================  ====================  ==================

with ``R`` the public row bound (rows are clipped to it here) and rho public at each step (a
function of earlier releases). The exponential mechanism is recorded as the Gaussian event that
dominates it (:mod:`privopt.clipping.quantiles`). ``lambda``, ``P`` and every ``w_k`` are
post-processing. Cost: one Gram product (O(N p^2)), two passes per step, O(p^3) for P.
:func:`dp_newton_rows` runs it on the raw rows of a :class:`LinearBounds` transform without
forming the transformed copy: one fused pass (transform, clip, syrk; with the targets clipped
to rho_0 it gives the first step), then one pass per later step over the raw rows with the
affine map moved onto w (about 21x one ``X @ w`` in CPU time at N = 10^6, d = 100, against 41x
on the copy).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from privopt._validate import check_count, check_positive
from privopt.accounting import GaussianEvent, PrivacyLedger
from privopt.clipping import clip_factors, row_norms
from privopt.clipping.quantiles import bounded_range_epsilon, log_grid, quantile_from_counts
from privopt.noise.rng import gaussian_noise
from privopt.releases.adassp import ADASSP_RIDGE_Z, adassp_sensitivities, gram_matrix
from privopt.releases.preprocess import LinearBounds
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "NEWTON_SHARES",
    "NewtonStatistics",
    "dp_newton",
    "dp_newton_rows",
    "newton_release",
    "newton_shares",
]

#: default (Gram, first step, later steps) shares of mu^2; measured on x ~ N(0, I_20),
#: N = 200,000, epsilon = 1 and on the CCPP table (see BENCHMARKS.md, regression sweep)
NEWTON_SHARES = (0.2, 0.1, 0.7)
#: share of each later step's budget spent on its residual quantile
QUANTILE_SHARE = 0.1
#: the residual clip is RESIDUAL_MULTIPLIER times the private RESIDUAL_LEVEL quantile of |r|.
#: 3 (was 2): heavy-tailed, skewed residuals (house prices) pulled the Huber-type fixed point
#: away from OLS; King County test R^2 0.894x -> 0.917x OLS's (3 seeds), others within noise
RESIDUAL_LEVEL = 0.9
RESIDUAL_MULTIPLIER = 3.0
#: the first residual quantile keeps at least QUANTILE_RANKS ranks of resolution (quantile_n
#: times its epsilon), its share of each later step's budget raised up to QUANTILE_SHARE_MAX
#: where the default share would leave fewer (:func:`residual_quantile_share`)
QUANTILE_RANKS = 60.0
QUANTILE_SHARE_MAX = 0.5
#: the residual quantile reads at most this many rows (a secret subset of public size)
QUANTILE_SUBSET = 100_000
#: rows per block of :func:`dp_newton_rows` (a block of 2048 rows, d = 100, is 1.6 MB: it stays
#: in the L2 cache while it is transformed and multiplied)
BLOCK_ROWS = 2048


def quantile_rows(n: int, public_n: float) -> float:
    """The public number of rows the residual quantile is taken on, for ``n`` rows of public
    size ``public_n``: all of them, or the secret subset of size QUANTILE_SUBSET when there are
    more (:class:`NewtonStatistics`' ``prepare`` draws it)."""
    return public_n if n <= QUANTILE_SUBSET else float(QUANTILE_SUBSET)


def newton_shares(
    steps: int,
    shares: tuple[float, float, float] = NEWTON_SHARES,
    quantile_share: float = QUANTILE_SHARE,
) -> np.ndarray:
    """Shares of mu^2 per release: Gram, first gradient, then (quantile, gradient) per later
    step, the later steps' share split in proportion 1 : 2 : 4 ... (the last step's noise is
    what remains in the answer), ``quantile_share`` of each later step's share on its residual
    quantile (:func:`residual_quantile_share`)."""
    steps = check_count("steps", steps)
    gram, first, later = (check_positive("share", s) for s in shares)
    out = [gram, first]
    if steps > 1:
        weights = 2.0 ** np.arange(steps - 1)
        for w in weights / weights.sum() * later:
            out += [quantile_share * w, (1.0 - quantile_share) * w]
    total = sum(out)
    return np.array(out) / total


def residual_quantile_share(
    mu: float, steps: int, shares: tuple[float, float, float], quantile_n: float
) -> float:
    """Share of each later step's budget spent on its residual quantile: QUANTILE_SHARE, or
    more (up to QUANTILE_SHARE_MAX) when the first residual quantile would have fewer than
    QUANTILE_RANKS ranks of resolution (``quantile_n`` times its epsilon). Public quantities
    only.

    The quantile's score is a count (sensitivity 1); with ``quantile_n eps_q`` small, every
    candidate above the residuals (up to the grid's top, the previous clip) scores about
    ``-(1 - RESIDUAL_LEVEL) quantile_n`` and together they outweigh the true quantile, so the
    release lands at the top and the step's clip, and with it the gradient noise, stays at
    the target radius (the power-plant table at epsilon = 0.1 without bounds: clips of 172
    kept against a residual 0.9-quantile of 7.5, test R^2 0.37 against 0.84 for the other
    seeds). At epsilon >= 1 on a few thousand rows the default share keeps its resolution and
    nothing changes."""
    if steps < 2:
        return QUANTILE_SHARE
    first = float(newton_shares(steps, shares)[2])  # the first quantile's share of mu^2
    have = quantile_n * bounded_range_epsilon(mu * math.sqrt(first))
    if have >= QUANTILE_RANKS:
        return QUANTILE_SHARE
    # epsilon is close to linear in mu at these budgets: scale the share by (wanted / have)^2
    return min(QUANTILE_SHARE * (QUANTILE_RANKS / max(have, 1e-12)) ** 2, QUANTILE_SHARE_MAX)


def _checked_first_clip(target_bound: float, first_clip: float | None) -> float:
    """The first step's residual clip: ``target_bound`` (None), else ``first_clip`` held at
    most ``target_bound`` (every |t_i| <= T, so a larger clip acts as T)."""
    if first_clip is None:
        return target_bound
    return min(check_positive("first_clip", first_clip), target_bound)


def dp_newton(
    Z: np.ndarray,
    t: np.ndarray,
    *,
    row_bound: float,
    target_bound: float,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None = "main",
    steps: int = 3,
    shares: tuple[float, float, float] = NEWTON_SHARES,
    public_n: float | None = None,
    first_clip: float | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Run the noisy-Newton iteration (module docstring) and record its releases.

    Args:
        Z: (n, p) rows; rows longer than ``row_bound`` are clipped here.
        t: (n,) targets; clipped to ``[-target_bound, target_bound]`` here.
        row_bound, target_bound: the public bounds R and T.
        mu: GDP budget of the whole run.
        rng, ledger, partition: randomness, where to record, the records' partition.
        steps: K >= 1 gradient steps.
        shares: (Gram, first step, later steps) shares of mu^2 (see :func:`newton_shares`).
        public_n: public number of rows for the residual quantile (default: n).
        first_clip: the first step's public residual clip (default and at most T; see
            :func:`privopt.releases.quantile_bounds.first_step_clip`).

    Returns:
        (w, info) with the noise stds, the ridge, the residual clips and the shares.
    """
    Z = np.asarray(Z, dtype=float)
    t = np.asarray(t, dtype=float)
    if Z.ndim != 2 or t.shape != (Z.shape[0],):
        raise ValueError(
            f"Expected Z of shape (n, p) and t of shape (n,), got {Z.shape}, {t.shape}."
        )
    R = check_positive("row_bound", row_bound)
    T = check_positive("target_bound", target_bound)
    mu = check_positive("mu", mu)
    n = Z.shape[0]
    n_public = float(n if public_n is None else check_positive("public_n", public_n))
    norms = row_norms(Z)
    if np.any(norms > R):  # the sensitivities must not rely on the caller's clipping
        Z = Z * clip_factors(norms, R)[:, None]
    t = np.clip(t, -T, T)
    statistics = _InMemoryStatistics(Z, t)
    return newton_release(
        gram_matrix(Z),
        statistics,
        row_bound=R,
        target_bound=T,
        mu=mu,
        rng=rng,
        ledger=ledger,
        partition=partition,
        steps=steps,
        shares=shares,
        quantile_n=quantile_rows(n, n_public),
        first_clip=first_clip,
    )


class NewtonStatistics(Protocol):
    """The exact statistics the noisy-Newton releases are computed from (in memory, or reduced
    across partitions by :mod:`privopt.distributed`)."""

    def prepare(self, rng: np.random.Generator) -> None:
        """Draw any secret choice the statistics need (after the Gram release)."""
        ...

    def residual_counts(self, w: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(#{|r_i| < c}, #{|r_i| <= c}) for the grid c, r_i = <z_i, w> - t_i (the rows the
        quantile is taken on)."""
        ...

    def clipped_gradient(self, w: np.ndarray, rho: float) -> np.ndarray:
        """sum_i clip(r_i, -rho, rho) z_i over every row."""
        ...


class _InMemoryStatistics:
    """:class:`NewtonStatistics` of arrays. The quantile is taken on a secret subset of public
    size QUANTILE_SUBSET when there are more rows: it needs a few thousand ranks of resolution,
    not a sort of 10^6 rows."""

    def __init__(self, Z: np.ndarray, t: np.ndarray) -> None:
        self.Z, self.t = Z, t
        self.subset: np.ndarray | None = None

    def prepare(self, rng):
        n = self.Z.shape[0]
        if n > QUANTILE_SUBSET:
            self.subset = rng.choice(n, QUANTILE_SUBSET, replace=False)

    def residual_counts(self, w, grid):
        residuals = self.Z @ w - self.t
        sample = np.sort(np.abs(residuals if self.subset is None else residuals[self.subset]))
        below = np.searchsorted(sample, grid, side="left")
        return below, np.searchsorted(sample, grid, side="right")

    def clipped_gradient(self, w, rho):
        return self.Z.T @ np.clip(self.Z @ w - self.t, -rho, rho)


def dp_newton_rows(
    X: np.ndarray,
    y: np.ndarray,
    bounds: LinearBounds,
    *,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None = "main",
    steps: int = 3,
    shares: tuple[float, float, float] = NEWTON_SHARES,
    public_n: float | None = None,
    first_clip: float | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:func:`dp_newton` on ``bounds.transform(X, y)`` with R = ``bounds.row_bound`` and T =
    ``bounds.y_radius``, without materialising the transformed rows: the same releases from
    the same exact statistics (equal up to the order of floating-point sums), so the same
    mu-GDP guarantee.

    One pass over X in blocks of BLOCK_ROWS rows transforms and clips each block into a
    reused buffer ``[Z, t]`` and accumulates its Gram matrix by BLAS syrk, and with it Z^T
    clip(t, +-rho_0), the first step's gradient (at w = 0 every residual is -t_i; with
    ``first_clip`` None, rho_0 = T and no clip acts). The rows that a clip changed (a few
    percent) are kept; every other row is exactly ``z = [(x - c) / s, s0]``, so the later
    steps read the raw rows with the affine map moved onto w: ``<z, w> = <x - c, w_x / s> + s0
    w_0`` and ``sum_i r_i z_i = [sum_i r_i (x_i - c) / s, s0 sum_i r_i]``, the kept rows added
    exactly. The residual quantile's secret subset is transformed when it is drawn.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(
            f"Expected X of shape (n, d) and y of shape (n,), got {X.shape}, {y.shape}."
        )
    T = check_positive("target_bound", bounds.y_radius)
    n = X.shape[0]
    n_public = float(n if public_n is None else check_positive("public_n", public_n))
    first = _checked_first_clip(T, first_clip)
    statistics = _BlockStatistics(X, np.clip(y - bounds.y_center, -T, T), bounds, T, first)
    # one BLAS thread: the block products are too small to share, and on a busy machine a
    # second thread mostly spins (measured: the 101 x 101 eigh 0.2 s of CPU against 1 ms)
    with threadpool_limits(limits=1, user_api="blas"):
        return newton_release(
            statistics.gram_pass(),
            statistics,
            row_bound=bounds.row_bound,
            target_bound=T,
            mu=check_positive("mu", mu),
            rng=rng,
            ledger=ledger,
            partition=partition,
            steps=steps,
            shares=shares,
            quantile_n=quantile_rows(n, n_public),
            first_clip=first,
        )


#: the later passes read the raw rows (``X w' - c.w'``) when every |c_j| / s_j is at most this
#: (the cancellation then costs at most ~this many ulps of the residuals); otherwise each
#: block is centred first, as the transform does
RAW_OFFSET_LIMIT = 1e3


class _BlockStatistics:
    """:class:`NewtonStatistics` of ``bounds.transform(X, y)`` computed block by block from X
    (see :func:`dp_newton_rows`)."""

    def __init__(
        self,
        X: np.ndarray,
        t: np.ndarray,
        bounds: LinearBounds,
        T: float,
        first: float | None = None,
    ) -> None:
        self.X, self.t, self.bounds = X, t, bounds
        self.R, self.T = bounds.row_bound, T  # |t_i| <= T
        # the first step's clip (<= T): the moment is Z^T clip(t, +-first)
        self.first = _checked_first_clip(T, first)
        self.d = X.shape[1]
        self.p = self.d + 1 if bounds.intercept_scale > 0 else self.d
        self.scale = np.ones(self.d) if bounds.x_scale is None else bounds.x_scale
        finite = np.isfinite(self.scale)
        offsets = np.abs(bounds.x_center[finite]) / self.scale[finite]
        self.raw = bool(np.all(offsets <= RAW_OFFSET_LIMIT))
        self.sample: np.ndarray | None = None

    def _full(self, Zx: np.ndarray) -> np.ndarray:
        """[Zx, s0] (rows of transform's output)."""
        if self.p == self.d:
            return Zx.copy()
        return np.hstack([Zx, np.full((Zx.shape[0], 1), self.bounds.intercept_scale)])

    def gram_pass(self) -> np.ndarray:
        """Z^T Z (upper triangle); keeps the first step's moment Z^T clip(t, +-first) and the
        rows some clip changed.

        The features' block Z_x^T Z_x by BLAS gemm on a contiguous buffer (1.5x faster than syrk
        on these 2,048 x d blocks, measured at d = 100, one thread); the intercept's row
        and column from the column sums (``s0 1^T Z_x``, ``N s0^2``), the moment from Z_x^T t'
        and ``s0 sum t'`` (t' = clip(t, +-first), t itself when first = T); a row that the
        clip to R changes (by rounding) is corrected exactly.
        """
        n, d, p = self.X.shape[0], self.d, self.p
        buffer = np.empty((min(n, BLOCK_ROWS), d))
        gram = np.zeros((d, d))  # the full product: BLAS gemm beats syrk on these blocks
        sums = np.zeros((2, d))  # 1^T Z_x, t^T Z_x
        correction, moment_correction = np.zeros((p, p)), np.zeros(p)
        index, kept = [], []
        s0 = self.bounds.intercept_scale
        for start in range(0, n, BLOCK_ROWS):
            Zx = buffer[: min(BLOCK_ROWS, n - start)]
            stop = start + Zx.shape[0]
            t = self.t[start:stop]
            if self.first < self.T:
                t = np.clip(t, -self.first, self.first)
            changed, norms = self.bounds.transform_block(self.X[start:stop], Zx)
            gram += Zx.T @ Zx
            sums += np.vstack([np.ones_like(t), t]) @ Zx
            # dp_newton's clip to R: ||z||^2 = ||z_x||^2 + s0^2 <= R^2 but for rounding, so
            # only rows near R are checked (exactly: row_norms, clip_factors)
            near = np.flatnonzero(norms * norms + s0 * s0 > (1.0 - 1e-9) * self.R * self.R)
            over = near[:0]
            if near.size:
                rows = self._full(Zx[near])
                lengths = row_norms(rows)
                over = near[lengths > self.R]
                if over.size:
                    before = rows[lengths > self.R]
                    clipped = before * clip_factors(lengths[lengths > self.R], self.R)[:, None]
                    correction += clipped.T @ clipped - before.T @ before
                    moment_correction += (clipped - before).T @ t[over]
                    changed[over] = True
            if np.any(changed):
                full = self._full(Zx[changed])
                if over.size:
                    full[np.searchsorted(np.flatnonzero(changed), over)] = clipped
                index.append(np.flatnonzero(changed) + start)
                kept.append(full)
        self.index = np.concatenate(index) if index else np.zeros(0, dtype=np.intp)
        self.kept = np.concatenate(kept) if kept else np.zeros((0, p))
        upper = np.zeros((p, p))
        upper[:d, :d] = np.triu(gram)
        gram = upper
        self.moment = np.zeros(p)
        self.moment[:d] = sums[1]
        if p > d:
            gram[:d, d] = s0 * sums[0]
            gram[d, d] = n * s0 * s0
            first_t = self.t if self.first >= self.T else np.clip(self.t, -self.first, self.first)
            self.moment[d] = s0 * float(np.sum(first_t))
        self.moment += moment_correction
        return gram + np.triu(correction)

    def prepare(self, rng):
        n = self.X.shape[0]
        if n > QUANTILE_SUBSET:  # the same draw as _InMemoryStatistics (order is irrelevant)
            rows = np.sort(rng.choice(n, QUANTILE_SUBSET, replace=False))
            self.sample = np.empty((rows.size, self.p + 1))
            self.sample[:, self.d :] = self.bounds.intercept_scale
            self.sample[:, self.p] = self.t[rows]
            for start in range(0, rows.size, BLOCK_ROWS):
                block = self.sample[start : start + BLOCK_ROWS]
                Zx = np.empty((block.shape[0], self.d))
                self.bounds.transform_block(self.X[rows[start : start + BLOCK_ROWS]], Zx)
                block[:, : self.d] = Zx
                Z = block[:, : self.p]
                norms = row_norms(Z)  # as dp_newton clips them
                if np.any(norms > self.R):
                    Z *= clip_factors(norms, self.R)[:, None]

    def _affine(self, w):
        """(w', constant): <z, w> = <x - c, w'> + constant on the rows no clip changed, with
        the rows read raw (``<x, w'>``, c.w' moved into the constant) when self.raw."""
        v = w[: self.d] / self.scale  # 0 for dropped features (scale inf)
        constant = self.bounds.intercept_scale * w[self.d] if self.p > self.d else 0.0
        return v, constant - (float(self.bounds.x_center @ v) if self.raw else 0.0)

    def _blocks(self):
        """(start, stop, rows read, positions of kept rows in the block) per block."""
        n = self.X.shape[0]
        buffer = None if self.raw else np.empty((min(n, BLOCK_ROWS), self.d))
        cuts = np.searchsorted(self.index, np.arange(0, n + BLOCK_ROWS, BLOCK_ROWS))
        for k, start in enumerate(range(0, n, BLOCK_ROWS)):
            stop = min(start + BLOCK_ROWS, n)
            rows = self.X[start:stop]
            if buffer is not None:
                rows = np.subtract(rows, self.bounds.x_center, out=buffer[: stop - start])
            yield start, stop, rows, self.index[cuts[k] : cuts[k + 1]] - start

    def residual_counts(self, w, grid):
        if self.sample is not None:
            residuals = self.sample[:, : self.p] @ w - self.sample[:, self.p]
        else:
            v, constant = self._affine(w)
            residuals = np.empty(self.X.shape[0])
            for start, stop, rows, _ in self._blocks():
                np.subtract(rows @ v + constant, self.t[start:stop], out=residuals[start:stop])
            residuals[self.index] = self.kept @ w - self.t[self.index]
        sample = np.sort(np.abs(residuals))
        below = np.searchsorted(sample, grid, side="left")
        return below, np.searchsorted(sample, grid, side="right")

    def clipped_gradient(self, w, rho):
        # at w = 0 every residual is -t_i: the moment, when its clip is rho's (rho >= T acts
        # as T, since |t_i| <= T)
        if min(rho, self.T) == self.first and not np.any(w):
            return -self.moment
        v, constant = self._affine(w)
        exact = np.clip(self.kept @ w - self.t[self.index], -rho, rho)
        gradient = self.kept.T @ exact
        total, gx = 0.0, np.zeros(self.d)
        for start, stop, rows, kept in self._blocks():
            r = rows @ v
            r += constant
            r -= self.t[start:stop]
            np.clip(r, -rho, rho, out=r)
            r[kept] = 0.0
            gx += r @ rows
            total += float(r.sum())
        if self.raw:
            gx -= self.bounds.x_center * total
        finite = np.isfinite(self.scale)
        gradient[: self.d] += np.where(finite, gx / np.where(finite, self.scale, 1.0), 0.0)
        if self.p > self.d:
            gradient[self.d] += self.bounds.intercept_scale * total
        return gradient


def newton_release(
    gram_upper: np.ndarray,
    statistics: NewtonStatistics,
    *,
    row_bound: float,
    target_bound: float,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None,
    steps: int,
    shares: tuple[float, float, float],
    quantile_n: float,
    first_clip: float | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The noisy-Newton releases and iteration from exact statistics: the one place where its
    noise is drawn and its events recorded (:func:`dp_newton` has the mechanism).

    ``gram_upper`` holds Z^T Z (its upper triangle is read) of rows clipped to ``row_bound``
    with targets clipped to ``target_bound``; ``quantile_n`` is the public number of rows the
    residual quantile is taken on.
    """
    R, T = row_bound, target_bound
    first = _checked_first_clip(T, first_clip)
    p = gram_upper.shape[0]
    sens = adassp_sensitivities(R, T, ledger.neighbouring)
    factor = sens.moment / (R * T)  # 2 under replace-one, 1 under zero-out
    quantile_share = residual_quantile_share(mu, steps, shares, quantile_n)
    mus = mu * np.sqrt(newton_shares(steps, shares, quantile_share))
    std_gram = gaussian_release_std(sens.gram, mus[0])
    rows, cols = np.triu_indices(p)
    noise = np.zeros((p, p))
    noise[rows, cols] = gram_upper[rows, cols] + gaussian_noise(rng, std_gram, rows.size)
    noisy = noise + np.triu(noise, 1).T
    ledger.record(
        GaussianEvent(sens.gram, std_gram, label="noisy-Newton upper triangle of Z^T Z"),
        partition=partition,
    )
    ridge = ADASSP_RIDGE_Z * math.sqrt(p) * std_gram
    values, vectors = np.linalg.eigh(noisy)
    inverse = (vectors / np.maximum(values + ridge, ridge)) @ vectors.T

    statistics.prepare(rng)
    w = np.zeros(p)
    clips, stds = [], []
    release = 1
    ceiling = T  # the largest clip a later step may take: T, then the last released clip
    for k in range(steps):
        if k == 0:
            rho = first  # w = 0: |r_i| = |t_i| <= T; first <= T (a public choice)
        else:
            top = R * float(np.linalg.norm(w)) + T  # |<z, w> - t| <= R ||w|| + T: no upward miss
            # and never above the previous released clip: a later clip that grows is a failed
            # release (the residuals shrink step by step), and the candidates above the
            # residuals, which all score alike, outweigh the quantile at small budgets
            # (post-processing). The first step's clip is not a release of the residuals: a
            # first clip below T leaves the ceiling at T
            top = min(top, ceiling)
            grid = log_grid(1e-6 * top, top, 1.01)
            grid[-1] = top
            below, at_or_below = statistics.residual_counts(w, grid)
            q = quantile_from_counts(
                below, at_or_below, RESIDUAL_LEVEL, grid, mu=float(mus[release]), rng=rng,
                n=quantile_n,
            )  # fmt: skip
            ledger.record(
                GaussianEvent(1.0, 1.0 / q.mu, label="noisy-Newton residual quantile (exp. mech.)"),
                partition=partition,
            )
            release += 1
            rho = ceiling = min(RESIDUAL_MULTIPLIER * q.value, top)
        std = gaussian_release_std(factor * R * rho, mus[release])
        gradient = statistics.clipped_gradient(w, rho) + gaussian_noise(rng, std, p)
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
        "shares": tuple(float(s) for s in shares),
        "mu": mu,
    }
    return w, info
