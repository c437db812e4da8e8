"""DP-FTRL-Σ (seed 003, Algorithm 1): one pass of DP-FTRL with noise covariance Σ.

For t = 0..N-1 (one training example per step, w_0 = 0), with notes/003.md §2.1's semantics:

    l_t   = RESIDUALEST(estimating rows, w_t)         (public, private, or a fixed threshold)
    psi_t = C l_t,  psi_max = max_{s<=t} psi_s
    g_t   = CLIP(x_t (x_t^T w_t - y_t), psi_t, Σ),  CLIP(v, psi, Σ) = v min{1, psi / ||v||_{Σ^-1}}
    g~_<=t = private tree aggregation of g_0..g_t, node noise N(0, (tau psi_max)^2 Σ)
    w_{t+1} = -eta g~_<=t
    output  (1/N) sum_{t=0}^{N-1} w_t        (includes w_0 = 0, excludes w_N)

The clipping norm is the non-squared Mahalanobis norm sqrt(v^T Σ^{-1} v) with the same Σ as the
noise (notes/003.md §1 [FIX], §3.4 item 1); ||x (x^T w - y)||_{Σ^-1} = |x^T w - y| ||x||_{Σ^-1}, so
no d x d matrix is formed. The tree is :class:`privopt.noise.PrefixSumTree` (popcount(t + 1) nodes
per prefix, noise drawn once per node at completion).

Privacy (Theorem 4.1 with notes/003.md §3.3's [FIX]). A training example is a leaf of the tree and
touches the k = ceil(log2 N) + 1 nodes of its root path; each is a Gaussian mechanism with
Mahalanobis sensitivity 2 psi (replace-one: two clipped vectors differ by at most 2 psi; psi
under zero-out) against noise tau psi_max >= tau psi. So the tree is exactly mu-GDP with
mu = 2 sqrt(k) / tau (replace-one), and tau is calibrated from the exact GDP conversion
(``calibration="exact"``). The paper's tau^2 = 4 k (log(1/delta) + epsilon) / epsilon^2 drops
the factor 2 of replace-one (its guarantee is about epsilon = 1.4 at a target of 1): it is offered
as ``calibration="paper"`` for reproduction, and the report states the epsilon it really gives.
Private residual estimates run on estimating rows disjoint from the training rows (a separate set,
or a secret random half of the training data, so N -> N/2): parallel composition, each part
spending the full (epsilon, delta). Their K calls are (eps~, delta~)-DP each with Theorem 4.1's
eps~ = epsilon / sqrt(8 K log(2/delta)), delta~ = delta / (2K), composed exactly by the ledger.
Σ, C, eta and the thresholds' public inputs must not depend on the private data.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive, check_probability
from privopt.accounting import (
    ApproxDPEvent,
    GaussianEvent,
    PrivacyLedger,
    calibrate_gaussian_sigma,
)
from privopt.algorithms.result import FitResult, FitTrace
from privopt.clipping.residual_estimate import per_call_budget, residual_estimate
from privopt.noise import CovarianceOperator, IdentityCovariance, PrefixSumTree

__all__ = [
    "FTRLSigmaPass",
    "calibrate_ftrl_sigma_tau",
    "dp_ftrl_sigma",
    "ftrl_sigma_pass",
    "public_clip_constant",
]

RESIDUAL_OPTIONS = ("public", "private", "fixed")
NEIGHBOURING = ("replace-one", "zero-out")


@dataclass(frozen=True)
class FTRLSigmaPass:
    """One pass: the averaged iterate, the thresholds used and how often clipping bit."""

    average: np.ndarray
    last: np.ndarray
    thresholds: np.ndarray
    clipped: np.ndarray


def calibrate_ftrl_sigma_tau(
    epsilon: float,
    delta: float,
    steps: int,
    neighbouring: str = "replace-one",
    calibration: str = "exact",
) -> float:
    """tau making the tree (epsilon, delta)-DP: exact GDP with mu = Delta sqrt(k) / tau.

    ``"paper"``: Theorem 4.1's tau^2 = 4 k (log(1/delta) + epsilon) / epsilon^2 (not private at
    the target under replace-one; notes/003.md §3.3).
    """
    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    levels = PrefixSumTree.levels(steps)
    if calibration == "paper":
        return math.sqrt(4.0 * levels * (math.log(1.0 / delta) + epsilon) / epsilon**2)
    if calibration != "exact":
        raise ValueError(f"Expected calibration in ('exact', 'paper'), got {calibration!r}.")
    return calibrate_gaussian_sigma(
        epsilon, delta, _unit_sensitivity(neighbouring) * math.sqrt(levels)
    )


def _unit_sensitivity(neighbouring: str) -> float:
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"Expected neighbouring in {NEIGHBOURING}, got {neighbouring!r}.")
    return 2.0 if neighbouring == "replace-one" else 1.0


def public_clip_constant(public_X: np.ndarray, covariance: Any) -> float:
    """C = max_i ||x~_i||_{Σ^-1} over the public rows (the paper's "upper bound of ||x||_Σ^-1").

    Lemma B.2 puts C^2 ~ tr(Σ^-1 H) log(1/beta); the public maximum estimates that bound without
    touching private data. A larger C clips less but feeds more noise back through the residual
    estimates (psi = C l, noise tau psi_max), so no extra log factor is added; clipping absorbs
    the residual tail.
    """
    public_X = np.asarray(public_X, dtype=float)
    if public_X.ndim != 2 or public_X.shape[0] == 0:
        raise ValueError("Expected a non-empty (M, d) array of public rows.")
    norms = np.asarray(covariance.inv_norm(public_X), dtype=float)
    return float(norms.max())


def ftrl_sigma_pass(
    X: np.ndarray,
    y: np.ndarray,
    *,
    tau: float,
    learning_rate: float,
    threshold,
    covariance: Any = None,
    rng: np.random.Generator,
) -> FTRLSigmaPass:
    """The noisy pass of Algorithm 1 given tau and a threshold rule (no accounting).

    ``threshold(t, w) -> psi_t`` supplies the clipping level (C l_t); ``math.inf`` disables
    clipping. With tau = 0 and no clipping the pass is exactly constant-step SGD
    w_{t+1} = w_t - eta g_t (line 9 with no noise), the reduction the paper states.
    """
    X = _as_float_rows(X)
    y = np.asarray(y, dtype=float)
    n, d = X.shape
    tau = float(tau)
    if not (tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"Expected a finite tau >= 0, got {tau!r}.")
    eta = check_positive("learning_rate", learning_rate)
    covariance = covariance or IdentityCovariance(d)
    inv_norms = np.asarray(covariance.inv_norm(X), dtype=float)  # ||x_t||_{Σ^-1}, once per row
    tree = PrefixSumTree(d, rng, None if isinstance(covariance, IdentityCovariance) else covariance)
    w = np.zeros(d)
    total = np.zeros(d)
    thresholds = np.empty(n)
    clipped = np.zeros(n, dtype=bool)
    psi_max = 0.0
    for t in range(n):
        total += w
        psi = float(threshold(t, w))
        psi_max = max(psi_max, psi)
        thresholds[t] = psi
        residual = float(X[t] @ w - y[t])
        norm = abs(residual) * inv_norms[t]
        factor = 1.0
        if norm > psi:
            factor = psi / norm
            clipped[t] = True
        noisy_prefix = tree.add((residual * factor) * X[t], tau * psi_max)
        w = -eta * noisy_prefix
    return FTRLSigmaPass(total / n, w, thresholds, clipped)


def _as_float_rows(X) -> np.ndarray:
    """X as a floating array without copying float32/float64 storage (memory maps stay maps)."""
    X = np.asarray(X)
    return X if np.issubdtype(X.dtype, np.floating) else X.astype(float)


def _all_finite(X: np.ndarray, rows: int = 256) -> bool:
    """Finiteness checked in row chunks (no N x d boolean temporary at d ~ 1e5)."""
    return all(np.isfinite(X[i : i + rows]).all() for i in range(0, X.shape[0], rows))


def _split(X, y, estimating_data, rng):
    if estimating_data is not None:
        X_est, y_est = (np.asarray(a, dtype=float) for a in estimating_data)
        if X_est.ndim != 2 or X_est.shape[1] != X.shape[1] or y_est.shape != (X_est.shape[0],):
            raise ValueError(
                f"estimating_data must be (X_est, y_est) with {X.shape[1]} columns and one "
                "target per row."
            )
        return X, y, X_est, y_est, False
    order = rng.permutation(X.shape[0])  # secret, data-independent split: N -> N / 2
    half = X.shape[0] // 2
    train, est = order[:half], order[half:]
    return X[train], y[train], X[est], y[est], True


def dp_ftrl_sigma(
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    learning_rate: float,
    rng: np.random.Generator,
    covariance: Any = None,
    clip_constant: float | None = None,
    residual: str = "public",
    estimating_data: tuple[np.ndarray, np.ndarray] | None = None,
    threshold: float | None = None,
    residual_every: int = 1,
    residual_fallback: float = 1.0,
    public_X: np.ndarray | None = None,
    neighbouring: str = "replace-one",
    calibration: str = "exact",
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
) -> FitResult:
    """Private over-parameterised linear regression by DP-FTRL-Σ (seed 003, Algorithm 1).

    Args:
        X, y: private training rows (the model has no intercept; centre beforehand with public
            knowledge).
        epsilon, delta: the target (the tree; private residual estimates on disjoint estimating
            rows spend the same budget in parallel).
        learning_rate: eta (public).
        rng: randomness of the split, the tree noise and the histograms.
        covariance: Σ (``privopt.noise`` covariance operator; default identity). Must be public
            (e.g. :class:`~privopt.noise.LowRankPlusRidgeCovariance` from public unlabeled rows).
        clip_constant: C (public); default from ``public_X`` by :func:`public_clip_constant`.
        residual: ``"public"`` (RESIDUALEST option 1 on public labeled estimating rows, no
            cost), ``"private"`` (option 2, charged), or ``"fixed"`` (psi_t = ``threshold``).
        estimating_data: (X_est, y_est); None splits the training rows in half (secretly).
        residual_every: re-estimate l_t every this many steps (fewer calls: less privacy cost
            and time; l is kept in between).
        residual_fallback: public level used by option 2 when every bin is suppressed before any
            estimate exists (later, the previous estimate).
        public_X: public unlabeled rows (for the default C).
        neighbouring: ``"replace-one"`` (the paper's) or ``"zero-out"``.
        calibration: ``"exact"`` (GDP, private) or ``"paper"`` (Theorem 4.1's tau; the report
            shows its true epsilon).
        ledger, partition: record into this ledger (else a new one) under this label.
    """
    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    if residual not in RESIDUAL_OPTIONS:
        raise ValueError(f"Expected residual in {RESIDUAL_OPTIONS}, got {residual!r}.")
    residual_every = check_count("residual_every", residual_every)
    X = _as_float_rows(X)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < 2:
        raise ValueError("Expected X of shape (N, d) with N >= 2 and y of shape (N,).")
    if not (_all_finite(X) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite.")
    covariance = covariance or IdentityCovariance(X.shape[1])
    if not isinstance(covariance, CovarianceOperator):
        raise ValueError(
            f"covariance must be a privopt.noise covariance operator (e.g. "
            f"LowRankPlusRidgeCovariance), got {type(covariance).__name__}."
        )
    if covariance.dim != X.shape[1]:
        raise ValueError(
            f"The covariance has dimension {covariance.dim} but X has {X.shape[1]} columns."
        )
    if residual == "fixed":
        if threshold is None:
            raise ValueError("residual='fixed' needs a public threshold psi.")
        X_train, y_train, X_est, y_est, was_split = X, y, None, None, False
    else:
        X_train, y_train, X_est, y_est, was_split = _split(X, y, estimating_data, rng)
    n = X_train.shape[0]
    if clip_constant is None and residual != "fixed":
        if public_X is None:
            raise ValueError("Give clip_constant C, or public_X to derive it from public rows.")
        public_X = np.asarray(public_X, dtype=float)
        if public_X.ndim != 2 or public_X.shape[1] != X.shape[1]:
            raise ValueError(
                f"public_X must have {X.shape[1]} columns like X; got shape {public_X.shape}."
            )
        clip_constant = public_clip_constant(public_X, covariance)
    sensitivity = _unit_sensitivity(neighbouring) * math.sqrt(PrefixSumTree.levels(n))
    tau = calibrate_ftrl_sigma_tau(epsilon, delta, n, neighbouring, calibration)

    calls = math.ceil(n / residual_every) if residual != "fixed" else 0
    scratch = PrivacyLedger(neighbouring)
    eps_call, delta_call = per_call_budget(epsilon, delta, max(calls, 1))
    state = {"level": None, "calls": 0}

    def threshold_rule(t: int, w: np.ndarray) -> float:
        if residual == "fixed":
            return float(threshold)
        if t % residual_every == 0:
            fallback = state["level"] if state["level"] is not None else residual_fallback
            kwargs: dict[str, Any] = {"horizon": n}
            if residual == "private":
                kwargs.update(
                    epsilon=eps_call,
                    delta=delta_call,
                    rng=rng,
                    ledger=scratch,
                    fallback=fallback,
                    option=2,
                )
            else:
                kwargs.update(option=1)
            try:
                state["level"] = residual_estimate(X_est, y_est, w, **kwargs).level
            except ValueError as exc:
                if "overflow" not in str(exc):
                    raise
                raise ValueError(
                    "DP-FTRL-Σ diverged: the noise fed back through the residual thresholds "
                    "(eta tau C sqrt(tr(H Σ))) is too large; use a smaller learning_rate."
                ) from exc
            state["calls"] += 1
        return clip_constant * max(state["level"], 1e-12)

    run = ftrl_sigma_pass(
        X_train,
        y_train,
        tau=tau,
        learning_rate=learning_rate,
        threshold=threshold_rule,
        covariance=covariance,
        rng=rng,
    )
    ledger = ledger if ledger is not None else PrivacyLedger(neighbouring)
    ledger.record(
        GaussianEvent(
            sensitivity,
            tau,
            label=f"tree nodes on a leaf's path (k = "
            f"{PrefixSumTree.levels(n)} levels), Mahalanobis sensitivity",
        ),
        partition=partition if partition is not None else ("training" if calls else None),
    )
    if residual == "private":
        ledger.record(
            ApproxDPEvent(
                eps_call, delta_call, count=state["calls"], label="RESIDUALEST stability histograms"
            ),
            partition="estimating",
        )
    for text in (
        "the number of training rows N is public",
        f"per-example gradients clipped in the Σ^-1 norm at psi_t = C l_t (C = "
        f"{clip_constant if clip_constant is not None else float('nan'):.4g}); the same Σ shapes "
        "the noise; Σ, C and eta are public",
        f"thresholds from {residual} residual estimates"
        + (" on a secret random half of the training rows (N -> N/2)" if was_split else ""),
        f"tau = {tau:.6g} ({calibration} calibration)",
    ):
        ledger.assume(text)
    if residual == "public":
        ledger.assume("the estimating rows are public (RESIDUALEST option 1 costs nothing)")
    report = ledger.report(delta)
    trace = FitTrace(
        clip_threshold=run.thresholds,
        clip_fraction=run.clipped.astype(float),
        noise_std=np.maximum.accumulate(run.thresholds) * tau,
    )
    return FitResult(
        coef=run.average,
        intercept=0.0,
        report=report,
        trace=trace,
        method="dp-ftrl-sigma",
        info={
            "tau": tau,
            "levels": PrefixSumTree.levels(n),
            "sensitivity": sensitivity,
            "clip_constant": clip_constant,
            "residual": residual,
            "residual_calls": state["calls"],
            "training_rows": n,
            "clipped_fraction": float(run.clipped.mean()),
            "last": run.last,
        },
    )
