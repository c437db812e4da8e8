"""DP-FTRL-Σ on partitioned rows: the shuffled pass's rows gathered in order, the core here.

:func:`ftrl_sigma_dask` follows ``DPLinearRegression._ftrl_sigma`` and
:func:`privopt.algorithms.ftrl_sigma.dp_ftrl_sigma` (``residual="fixed"``, the estimator's
setting) line by line: the same public choices (eta, C, Σ from ``public_X``), the same tau, the
same plan (:func:`~privopt.algorithms.ftrl_sigma.ftrl_sigma_plan`: one shuffled pass of single
rows, the tree at the unit clip scaled by the public psi), the same draws from ``rng`` and the
same ledger entries. The rows are the main rows (all but the preprocessing slice), scaled to
||z|| <= 1 and |t| <= 1 as in memory.

The pass reads row ``order[t]`` at step t, ``order`` the secret permutation of the main rows'
indices that ``FixedBatches(1)`` draws first from ``rng`` (replayed here on a copy of the
generator, so the handle knows the order before the loop starts; data- and partition-
independent). The handle gathers the next k = max(1, GATHER_BYTES // (8 (p + 1))) rows of the
order in one pass over the partitions and serves them step by step. Cost: ceil(N / k) passes
(one when the main rows fit in :data:`~privopt.distributed.rounds.GATHER_BYTES`), N steps on
the client, as in memory.

Privacy: identical to the in-memory fit (:mod:`privopt.algorithms.ftrl_sigma`); the tree's
noise is drawn on the client only, after the tasks returned exact rows.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from privopt.accounting import PrivacyLedger
from privopt.algorithms.ftrl_sigma import (
    _diverged_if_non_finite,
    _noise_covariance,
    calibrated_ftrl_sigma_plan,
    public_clip_constant,
)
from privopt.algorithms.ftrl_sigma_setup import ResidualLevels
from privopt.clipping.residual_estimate import per_call_budget
from privopt.distributed import rounds as _rounds
from privopt.distributed.rows import PartitionedRows
from privopt.noise import IdentityCovariance, LowRankPlusRidgeCovariance, PrefixSumTree
from privopt.releases.preprocess import LinearBounds
from privopt.training import SGD, ResidualThreshold, execute
from privopt.training.gradients import SigmaNormLinearModel

__all__ = ["ftrl_sigma_dask"]


class _OrderedRows:
    """The main rows in the pass's secret order, gathered k at a time, scaled as in memory."""

    def __init__(self, rows, excluded, bounds, order, p, gather_bytes=None) -> None:
        self.rows, self.excluded, self.bounds, self.order = rows, excluded, bounds, order
        self.shape = (order.size, p)
        budget = _rounds.GATHER_BYTES if gather_bytes is None else gather_bytes
        self.per_pass = max(1, int(budget // (8 * (p + 1))))
        self.start = self.step = self.passes = 0
        self.Z = self.t = None

    def row(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if batch.size != 1 or int(batch[0]) != self.order[self.step]:
            raise RuntimeError("The rows gathered ahead differ from the loop's order.")
        if self.Z is None or self.step >= self.start + self.Z.shape[0]:
            self.start = self.step
            chunk = self.order[self.step : self.step + self.per_pass]
            sorted_rows = np.sort(chunk)
            X, y = self.rows.take(_rounds.main_to_global(sorted_rows, self.excluded))
            Z, t = self.bounds.transform(X, y)
            at = np.searchsorted(sorted_rows, chunk)  # back to the pass's order
            self.Z = Z[at] / self.bounds.row_bound
            self.t = t[at] / self.bounds.y_radius
            self.passes += 1
        i = self.step - self.start
        self.step += 1
        return self.Z[i : i + 1], self.t[i : i + 1]


class _Targets:
    def __init__(self, n: int) -> None:
        self.shape = (n,)


class OrderedSigmaNormModel(SigmaNormLinearModel):
    """Σ^-1-norm clipped squared loss on an :class:`_OrderedRows` handle (one row per step)."""

    def prepare(self, X: Any, y: Any = None) -> None:
        return None

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        Z, t = X.row(np.asarray(batch))
        return self.clipped_gradient_sum(w, Z, t, clip)


def ftrl_sigma_dask(
    rows: PartitionedRows,
    excluded: np.ndarray,
    bounds: LinearBounds,
    *,
    epsilon: float,
    delta: float,
    public_X: Any,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    diagnostics: bool = False,
    gather_bytes: int | None = None,
) -> tuple[np.ndarray, Any, dict[str, Any]]:
    """DP-FTRL-Σ (fixed public psi = C) on the main rows; returns (w in Z's scale, trace,
    info) as ``DPLinearRegression._ftrl_sigma``."""
    n = rows.n_rows - excluded.size
    d = rows.n_features
    p = bounds.transform(np.zeros((1, d))).shape[1]
    row_bound, y_bound = bounds.row_bound, bounds.y_radius
    covariance: Any = IdentityCovariance(p)
    eta, clip_constant = 0.1 / math.sqrt(n), 1.0
    if public_X is not None:  # public rows: the estimator's choices, verbatim
        public = np.asarray(public_X, dtype=float)
        if public.ndim != 2 or public.shape[1] != d:
            raise ValueError(f"public_X must have {d} columns like X; got shape {public.shape}.")
        public_z = bounds.transform(public) / row_bound
        eta = 0.1 / (math.sqrt(n) * max(float(np.mean(np.sum(public_z**2, axis=1))), 1e-12))
        covariance = LowRankPlusRidgeCovariance.from_public_data(
            public_z, n_samples=n, step_size=eta
        )
        clip_constant = public_clip_constant(public_z, covariance)
    neighbouring = ledger.neighbouring.value
    levels = ResidualLevels(
        "fixed", None, None, n, None, clip_constant, 1, 1.0,
        per_call_budget(epsilon, delta, 1), rng, PrivacyLedger(neighbouring),
    )  # fmt: skip
    rule = ResidualThreshold(
        levels,
        every=1,
        release=None,
        covariance=_noise_covariance(covariance),
        text="thresholds from a fixed public threshold psi",
    )
    plan = calibrated_ftrl_sigma_plan(n, rule, epsilon, delta, neighbouring)
    tau = plan.noise_multiplier
    order = copy.deepcopy(rng).permutation(n)  # FixedBatches(1)'s draw, made next by execute
    handle = _OrderedRows(rows, excluded, bounds, order, p, gather_bytes)
    info = {
        "tau": tau,
        "levels": PrefixSumTree.levels(n),
        "sensitivity": plan.event().sensitivity,
        "clip_constant": None,
        "residual": "fixed",
        "training_rows": n,
        "estimating_rows": 0,
    }
    w, trace, info = _diverged_if_non_finite(
        execute,
        plan,
        OrderedSigmaNormModel(covariance),
        SGD(eta),
        handle,
        _Targets(n),
        rng=rng,
        averaging="inputs",
        ledger=ledger,
        partition="fit",
        diagnostics=diagnostics,
        info=info,
    )
    for text in (
        "the number of training rows N is public",
        "per-example gradients clipped in the Σ^-1 norm at psi_t = C l_t (C = nan); the same Σ "
        "shapes the noise; Σ, C and eta are public",
        f"tau = {tau:.6g} (exact calibration)",
    ):
        ledger.assume(text)
    info.update(residual_calls=levels.calls)
    if diagnostics:
        info["clipped_fraction"] = float(trace.clip_fraction.mean())
        ledger.disclose("clipped_fraction (diagnostic computed from the private data, no noise)")
    info.update(
        learning_rate=eta, covariance=type(covariance).__name__, gather_passes=handle.passes
    )
    return w * y_bound / row_bound, trace, info
