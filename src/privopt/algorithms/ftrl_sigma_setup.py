"""DP-FTRL-Σ's inputs (Private Overparameterized Linear Regression, anonymous submission): checks,
the secret split, the clip constant C, and the
residual levels l_t of RESIDUALEST (Algorithm 2) that :mod:`privopt.algorithms.ftrl_sigma`
turns into thresholds psi_t = C l_t. Public sizes are checked before any private row is read.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privopt.clipping.residual_estimate import residual_estimate, rows_needed
from privopt.noise import CovarianceOperator, IdentityCovariance

__all__ = ["RESIDUAL_OPTIONS", "ResidualLevels"]

RESIDUAL_OPTIONS = ("auto", "public", "private", "fixed")


def as_real_arg(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"Expected {name} to be a real number, got {value!r}.") from None


def as_float_rows(X) -> np.ndarray:
    """X as a floating array without copying float32/float64 storage (memory maps stay maps)."""
    X = np.asarray(X)
    return X if np.issubdtype(X.dtype, np.floating) else X.astype(float)


def all_finite(X: np.ndarray, rows: int = 256) -> bool:
    """Finiteness checked in row chunks (no N x d boolean temporary at d ~ 1e5)."""
    return all(np.isfinite(X[i : i + rows]).all() for i in range(0, X.shape[0], rows))


def resolve_residual(residual: str, estimating_data) -> str:
    """The RESIDUALEST option actually used; refuses option 1 on private training rows."""
    if residual not in RESIDUAL_OPTIONS:
        raise ValueError(f"Expected residual in {RESIDUAL_OPTIONS}, got {residual!r}.")
    if residual == "auto":
        return "public" if estimating_data is not None else "private"
    if residual == "public" and estimating_data is None:
        raise ValueError(
            "residual='public' (RESIDUALEST option 1, no noise) needs public labeled rows in "
            "estimating_data: without estimating_data it would run on a split of the private "
            "training rows and release their residual level without noise. Pass public "
            "estimating_data, or residual='private' (or 'auto', the default) to estimate "
            "privately on a secret split of the training rows."
        )
    return residual


def external_estimating_rows(X, estimating_data) -> tuple[np.ndarray, np.ndarray]:
    try:
        X_est, y_est = (np.asarray(a, dtype=float) for a in estimating_data)
    except (TypeError, ValueError):
        raise ValueError("estimating_data must be a pair (X_est, y_est) of arrays.") from None
    if X_est.ndim != 2 or X_est.shape[1] != X.shape[1] or y_est.shape != (X_est.shape[0],):
        raise ValueError(
            f"estimating_data must be (X_est, y_est) with {X.shape[1]} columns and one "
            "target per row."
        )
    return X_est, y_est


def split_sizes(total: int, estimating_rows: int | None) -> tuple[int, int]:
    """(training rows, estimating rows) of the secret split; public (from N and the arguments)."""
    m = total - total // 2 if estimating_rows is None else estimating_rows
    if not 1 <= m <= total - 1:
        raise ValueError(
            f"Expected 1 <= estimating_rows <= N - 1 = {total - 1} (N = {total} training rows), "
            f"got {m}."
        )
    return total - m, m


def secret_split(X, y, estimating_rows: int, rng):
    """A secret, data-independent split: a uniformly random set of rows estimates, the rest train.

    Only sizes are public; which rows went where is not released (the permutation is drawn from
    ``rng`` and used for nothing else).
    """
    order = rng.permutation(X.shape[0])
    n = X.shape[0] - estimating_rows
    train, est = order[:n], order[n:]
    return X[train], y[train], X[est], y[est]


def checked_covariance(covariance: Any, dim: int) -> CovarianceOperator:
    covariance = covariance or IdentityCovariance(dim)
    if not isinstance(covariance, CovarianceOperator):
        raise ValueError(
            f"covariance must be a privopt.noise covariance operator (e.g. "
            f"LowRankPlusRidgeCovariance), got {type(covariance).__name__}."
        )
    if covariance.dim != dim:
        raise ValueError(f"The covariance has dimension {covariance.dim} but X has {dim} columns.")
    return covariance


def derived_clip_constant(public_X: Any, dim: int, covariance: Any) -> float:
    """C = max ||x~||_{Σ^-1} over the public rows (:func:`public_clip_constant`), checked."""
    from privopt.algorithms.ftrl_sigma import public_clip_constant

    if public_X is None:
        raise ValueError("Give clip_constant C, or public_X to derive it from public rows.")
    public_X = np.asarray(public_X, dtype=float)
    if public_X.ndim != 2 or public_X.shape[1] != dim:
        raise ValueError(f"public_X must have {dim} columns like X; got shape {public_X.shape}.")
    derived = public_clip_constant(public_X, covariance)
    if not (math.isfinite(derived) and derived > 0):
        raise ValueError(
            f"The clip_constant C derived from public_X is {derived!r}; expected a finite "
            "C > 0 (public_X must be finite with a non-zero row). Give clip_constant."
        )
    return derived


def check_estimating_rows(m, n, calls, target, per_call, split, X) -> None:
    """Option 2 needs ``rows_needed`` estimating rows: refuse before any private row is read."""
    (epsilon, delta), (eps_call, delta_call) = target, per_call
    needed = rows_needed("private", horizon=n, epsilon=eps_call, delta=delta_call)
    if m < needed:
        source = (
            f"the secret split of the N = {X.shape[0]} training rows gives {m}"
            if split
            else f"estimating_data has {m}"
        )
        raise ValueError(
            f"Private residual estimates (RESIDUALEST option 2, {calls} calls at "
            f"epsilon={epsilon:g}, delta={delta:g}) need at least {needed} estimating rows; "
            f"{source}. Pass more rows (estimating_rows, estimating_data), a larger "
            "residual_every (fewer calls), public labeled rows as estimating_data "
            "(residual='public'), or residual='fixed' with a public threshold."
        )


class ResidualLevels:
    """The threshold rule (t, w_t) -> psi_t = C l_t: RESIDUALEST every ``every`` steps on the
    estimating rows (option 1 without noise on public rows, option 2 charged by the caller's
    plan; the histogram's own scratch ledger is discarded), or a fixed public psi."""

    def __init__(
        self, kind, X_est, y_est, horizon, clip_constant, fixed, every, fallback, budget, rng,
        scratch,
    ) -> None:  # fmt: skip
        self.kind, self.X_est, self.y_est, self.horizon = kind, X_est, y_est, horizon
        self.clip_constant, self.fixed, self.every = clip_constant, fixed, every
        self.fallback, self.budget, self.rng, self.scratch = fallback, budget, rng, scratch
        self.level: float | None = None
        self.calls = 0

    def __call__(self, t: int, w: np.ndarray) -> float:
        if self.kind == "fixed":
            return self.fixed
        if t % self.every == 0:
            fallback = self.level if self.level is not None else self.fallback
            kwargs: dict[str, Any] = {"horizon": self.horizon, "option": 1}
            if self.kind == "private":
                eps_call, delta_call = self.budget
                kwargs.update(
                    epsilon=eps_call, delta=delta_call, rng=self.rng, ledger=self.scratch,
                    fallback=fallback, option=2,
                )  # fmt: skip
            try:
                self.level = residual_estimate(self.X_est, self.y_est, w, **kwargs).level
            except ValueError as exc:
                if "overflow" not in str(exc):
                    raise
                raise ValueError(
                    "DP-FTRL-Σ diverged: the noise fed back through the residual thresholds "
                    "(eta tau C sqrt(tr(H Σ))) is too large; use a smaller learning_rate."
                ) from exc
            self.calls += 1
        return self.clip_constant * max(self.level, 1e-12)
