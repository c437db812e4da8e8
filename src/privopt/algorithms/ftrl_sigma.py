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
no d x d matrix is formed. The tree is :class:`privopt.noise.PrefixSumTree`, the streaming form of
:class:`~privopt.noise.TreeAggregation` (popcount(t + 1) nodes per prefix, noise drawn once per
node at completion, at the scale passed then).

Privacy (Theorem 4.1 with notes/003.md §3.3's [FIX]). A training example is a leaf of the tree and
belongs to at most k = floor(log2 N) + 1 complete nodes (:meth:`TreeAggregation.levels`; the
note's ceil(log2 N) + 1 also counts a level whose node never completes when N is not a power of
two); each is a Gaussian mechanism with
Mahalanobis sensitivity 2 psi (replace-one: two clipped vectors differ by at most 2 psi; psi
under zero-out) against noise tau psi_max >= tau psi. So the tree is exactly mu-GDP with
mu = 2 sqrt(k) / tau (replace-one), and tau is calibrated from the exact GDP conversion
(``calibration="exact"``). The paper's tau^2 = 4 k (log(1/delta) + epsilon) / epsilon^2 drops
the factor 2 of replace-one (its guarantee is about epsilon = 1.4 at a target of 1): it is offered
as ``calibration="paper"`` for reproduction, and the report states the epsilon it really gives.
Private residual estimates run on estimating rows disjoint from the training rows (a separate set,
or a secret random split of the training data, by default half: N -> N/2): parallel composition,
each part spending the full (epsilon, delta). Their K calls are (eps~, delta~)-DP each with
Theorem 4.1's eps~ = epsilon / sqrt(8 K log(2/delta)), delta~ = delta / (2K), composed exactly by
the ledger. Σ, C, eta and the thresholds' public inputs must not depend on the private data.

Where the thresholds come from (``residual``). psi_t = C l_t sets both the clipping and, through
psi_max, the noise scale of every tree node, so l_t is a release about the estimating rows.

* ``"auto"`` (the default): option 1 (``"public"``) when the caller passes ``estimating_data``,
  declaring those rows public (the report says so); otherwise option 2 (``"private"``, the
  stability histogram, charged on the ``"estimating"`` partition) on a secret random split of
  the training rows. Option 2 needs many rows (``rows_needed``: tens of thousands at
  epsilon = 1); too few raise ``ValueError`` before any private row is read.
* ``"public"`` without ``estimating_data`` is refused. It used to be the default and ran option 1
  (a noiseless mean of squared residuals) on a secret half of the private training rows: one
  outlier row moved the clip threshold and the noise scale with no noise at all, and an audit at
  a claimed epsilon = 1 measured a lower bound of 3.5 to 4.1 (issue 12).
* ``"fixed"``: a public ``threshold``.

Every threshold is checked: ``threshold``, ``clip_constant`` and ``residual_fallback`` must be
finite and > 0, and :func:`ftrl_sigma_pass` refuses any psi_t that is not (a negative psi made
the node noise tau max(0, psi) = 0, a NaN disabled the clipping, +inf gave NaN noise, all with a
report saying epsilon = 1); +inf, no clipping, is allowed only with tau = 0 (the non-private SGD
reduction). Clipping uses :func:`privopt.clipping.clip_factors` on the scalar Mahalanobis norm,
so the clipped norm never exceeds psi_t by rounding.

Diagnostics. Which steps were clipped (``trace.clip_fraction``, ``info["clipped_fraction"]``) is
computed from the private rows without noise, one record per step: it is returned only with
``diagnostics=True`` (warned, and listed in the report as released without privacy). The
thresholds and noise stds in the trace are public or privately estimated.
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
from privopt.algorithms.result import FitResult, FitTrace, release_diagnostics
from privopt.clipping import clip_factors
from privopt.clipping.residual_estimate import per_call_budget, residual_estimate, rows_needed
from privopt.noise import CovarianceOperator, IdentityCovariance, PrefixSumTree

__all__ = [
    "FTRLSigmaPass",
    "calibrate_ftrl_sigma_tau",
    "dp_ftrl_sigma",
    "ftrl_sigma_pass",
    "public_clip_constant",
]

RESIDUAL_OPTIONS = ("auto", "public", "private", "fixed")
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


def _check_threshold(t: int, psi: float, tau: float) -> float:
    """psi_t from the threshold rule: finite and > 0 (+inf only when tau = 0, no noise)."""
    if psi > 0 and (math.isfinite(psi) or (tau == 0.0 and psi == math.inf)):
        return psi
    raise ValueError(
        f"The threshold rule returned psi_{t} = {psi!r}; expected a finite psi > 0 (a zero, "
        "negative, NaN or infinite threshold removes the noise or the clipping; +inf is "
        "allowed only with tau = 0, the non-private SGD reduction). DP-FTRL-Σ diverged if the "
        "thresholds are estimated: use a smaller learning_rate."
    )


def _clip_coefficient(residual: float, inv_norm: float, psi: float) -> tuple[float, bool]:
    """(c, clipped) with c x = CLIP(residual x, psi, Σ), so |c| ||x||_{Σ^-1} <= psi exactly.

    The per-example gradient is residual x, of Mahalanobis norm |residual| ||x||_{Σ^-1}: the
    factor comes from :func:`privopt.clipping.clip_factors` on that scalar norm (it never
    overshoots psi by rounding), and the coefficient c = residual * factor is stepped towards 0
    if the product rounds back above psi. Norms at or below psi pass unchanged (c = residual).
    """
    norm = abs(residual) * inv_norm
    if not math.isfinite(norm):
        raise ValueError(
            "DP-FTRL-Σ diverged: a non-finite residual (the iterates overflowed); use a "
            "smaller learning_rate."
        )
    if not norm > psi:
        return residual, False
    coefficient = residual * float(clip_factors(np.array([norm]), psi)[0])
    while abs(coefficient) * inv_norm > psi:
        coefficient = math.nextafter(coefficient, 0.0)
    return coefficient, True


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

    ``threshold(t, w) -> psi_t`` supplies the clipping level (C l_t); every psi_t must be finite
    and > 0 (``ValueError`` otherwise: a zero or negative psi would zero the node noise
    tau max(psi), a NaN would disable the clipping). ``math.inf`` disables clipping and is
    accepted only with tau = 0: then the pass adds no noise and is exactly constant-step SGD
    w_{t+1} = w_t - eta g_t (line 9 with no noise), the reduction the paper states.
    """
    X = _as_float_rows(X)
    y = np.asarray(y, dtype=float)
    n, d = X.shape
    tau = _as_real_arg("tau", tau)
    if not (tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"Expected a finite tau >= 0, got {tau!r}.")
    eta = check_positive("learning_rate", learning_rate)
    if not callable(threshold):
        raise ValueError(f"threshold must be a rule (t, w) -> psi_t, got {threshold!r}.")
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
        psi = _check_threshold(t, _as_real_arg("threshold", threshold(t, w)), tau)
        psi_max = max(psi_max, psi)
        thresholds[t] = psi
        residual = float(X[t] @ w - y[t])
        coefficient, clipped[t] = _clip_coefficient(residual, float(inv_norms[t]), psi)
        std = tau * psi_max if tau > 0 else 0.0  # tau = 0: no noise (not 0 * inf = NaN)
        noisy_prefix = tree.add(coefficient * X[t], std)
        w = -eta * noisy_prefix
    return FTRLSigmaPass(total / n, w, thresholds, clipped)


def _as_real_arg(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"Expected {name} to be a real number, got {value!r}.") from None


def _as_float_rows(X) -> np.ndarray:
    """X as a floating array without copying float32/float64 storage (memory maps stay maps)."""
    X = np.asarray(X)
    return X if np.issubdtype(X.dtype, np.floating) else X.astype(float)


def _all_finite(X: np.ndarray, rows: int = 256) -> bool:
    """Finiteness checked in row chunks (no N x d boolean temporary at d ~ 1e5)."""
    return all(np.isfinite(X[i : i + rows]).all() for i in range(0, X.shape[0], rows))


def _resolve_residual(residual: str, estimating_data) -> str:
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


def _external_estimating_rows(X, estimating_data) -> tuple[np.ndarray, np.ndarray]:
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


def _split_sizes(total: int, estimating_rows: int | None) -> tuple[int, int]:
    """(training rows, estimating rows) of the secret split; public (from N and the arguments)."""
    m = total - total // 2 if estimating_rows is None else estimating_rows
    if not 1 <= m <= total - 1:
        raise ValueError(
            f"Expected 1 <= estimating_rows <= N - 1 = {total - 1} (N = {total} training rows), "
            f"got {m}."
        )
    return total - m, m


def _secret_split(X, y, estimating_rows: int, rng):
    """A secret, data-independent split: a uniformly random set of rows estimates, the rest train.

    Only sizes are public; which rows went where is not released (the permutation is drawn from
    ``rng`` and used for nothing else).
    """
    order = rng.permutation(X.shape[0])
    n = X.shape[0] - estimating_rows
    train, est = order[:n], order[n:]
    return X[train], y[train], X[est], y[est]


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
    residual: str = "auto",
    estimating_data: tuple[np.ndarray, np.ndarray] | None = None,
    threshold: float | None = None,
    residual_every: int = 1,
    residual_fallback: float = 1.0,
    public_X: np.ndarray | None = None,
    neighbouring: str = "replace-one",
    calibration: str = "exact",
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    estimating_rows: int | None = None,
    diagnostics: bool = False,
) -> FitResult:
    """Private over-parameterised linear regression by DP-FTRL-Σ (seed 003, Algorithm 1).

    Privacy: every use of the private rows ``X, y`` is charged. By default (``residual="auto"``
    without ``estimating_data``) the clipping thresholds come from RESIDUALEST option 2 (the
    private stability histogram, recorded in the report) on a secret random split of the
    training rows; option 1 (``"public"``, no noise) is used only on rows the caller passes as
    ``estimating_data`` and thereby declares public (the report states it). Option 1 on a split
    of the private rows (the previous default) released their residual level, hence the clip
    threshold and the noise scale, without noise; it is refused. Diagnostics computed from the
    private rows without noise (which records were clipped) are released only with
    ``diagnostics=True``.

    Args:
        X, y: private training rows (the model has no intercept; centre beforehand with public
            knowledge).
        epsilon, delta: the target (the tree; private residual estimates on disjoint estimating
            rows spend the same budget in parallel).
        learning_rate: eta > 0 (public).
        rng: randomness of the split, the tree noise and the histograms.
        covariance: Σ (``privopt.noise`` covariance operator; default identity). Must be public
            (e.g. :class:`~privopt.noise.LowRankPlusRidgeCovariance` from public unlabeled rows).
        clip_constant: C > 0, finite (public); default from ``public_X`` by
            :func:`public_clip_constant`.
        residual: how l_t is estimated. ``"auto"`` (default): ``"public"`` if ``estimating_data``
            is given, else ``"private"`` on a secret split of ``X, y``. ``"public"``:
            RESIDUALEST option 1 on the public labeled rows ``estimating_data`` (no noise, no
            cost; ``ValueError`` without ``estimating_data``). ``"private"``: option 2
            (charged) on ``estimating_data`` or, without it, on a secret split of ``X, y``.
            ``"fixed"``: psi_t = ``threshold`` (public).
        estimating_data: (X_est, y_est), rows disjoint from ``X, y``. With ``"auto"`` or
            ``"public"`` the caller asserts that they are public: they are used without noise.
        threshold: the public psi of ``residual="fixed"``, finite and > 0.
        residual_every: re-estimate l_t every this many steps (fewer calls: less privacy cost
            and time; l is kept in between).
        residual_fallback: public level (finite, > 0) used by option 2 when every bin is
            suppressed before any estimate exists (later, the previous estimate).
        public_X: public unlabeled rows (for the default C).
        neighbouring: ``"replace-one"`` (the paper's) or ``"zero-out"``.
        calibration: ``"exact"`` (GDP, private) or ``"paper"`` (Theorem 4.1's tau; the report
            shows its true epsilon).
        ledger, partition: record into this ledger (else a new one) under this label.
        estimating_rows: size of the secret split given to option 2 when the estimating rows
            come from ``X, y`` (public; default ceil(N/2), the paper's N -> N/2). Option 2 needs
            many rows (:func:`~privopt.clipping.residual_estimate.rows_needed`: tens of
            thousands at epsilon = 1), so small data sets need public ``estimating_data`` or
            ``residual="fixed"``; the ``ValueError`` gives the number.
        diagnostics: also return the non-private per-step clip indicators (``trace.
            clip_fraction``, ``info["clipped_fraction"]``); warns and records them in the
            report as a release without privacy.
    """
    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    learning_rate = check_positive("learning_rate", learning_rate)
    kind = _resolve_residual(residual, estimating_data)
    residual_every = check_count("residual_every", residual_every)
    residual_fallback = check_positive("residual_fallback", residual_fallback)
    if clip_constant is not None:
        clip_constant = check_positive("clip_constant", clip_constant)
    if threshold is not None:
        threshold = check_positive("threshold", threshold)
    if kind == "fixed" and threshold is None:
        raise ValueError("residual='fixed' needs a public threshold psi.")
    split = kind == "private" and estimating_data is None
    if estimating_rows is not None:
        if not split:
            raise ValueError(
                "estimating_rows sizes the secret split of the training rows; it applies only "
                "to private residual estimates without estimating_data."
            )
        estimating_rows = check_count("estimating_rows", estimating_rows)
    _unit_sensitivity(neighbouring)
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
    X_est = y_est = None
    if kind != "fixed" and not split:
        X_est, y_est = _external_estimating_rows(X, estimating_data)
    if split:
        n, m = _split_sizes(X.shape[0], estimating_rows)
    else:
        n, m = X.shape[0], (0 if X_est is None else X_est.shape[0])
    if clip_constant is None and kind != "fixed":
        if public_X is None:
            raise ValueError("Give clip_constant C, or public_X to derive it from public rows.")
        public_X = np.asarray(public_X, dtype=float)
        if public_X.ndim != 2 or public_X.shape[1] != X.shape[1]:
            raise ValueError(
                f"public_X must have {X.shape[1]} columns like X; got shape {public_X.shape}."
            )
        derived = public_clip_constant(public_X, covariance)
        if not (math.isfinite(derived) and derived > 0):
            raise ValueError(
                f"The clip_constant C derived from public_X is {derived!r}; expected a finite "
                "C > 0 (public_X must be finite with a non-zero row). Give clip_constant."
            )
        clip_constant = derived
    sensitivity = _unit_sensitivity(neighbouring) * math.sqrt(PrefixSumTree.levels(n))
    tau = calibrate_ftrl_sigma_tau(epsilon, delta, n, neighbouring, calibration)

    calls = math.ceil(n / residual_every) if kind != "fixed" else 0
    scratch = PrivacyLedger(neighbouring)
    eps_call, delta_call = per_call_budget(epsilon, delta, max(calls, 1))
    if kind == "private":  # public sizes only: fail before any private row is read
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
    if split:
        X_train, y_train, X_est, y_est = _secret_split(X, y, m, rng)
    else:
        X_train, y_train = X, y
    state = {"level": None, "calls": 0}

    def threshold_rule(t: int, w: np.ndarray) -> float:
        if kind == "fixed":
            return threshold
        if t % residual_every == 0:
            fallback = state["level"] if state["level"] is not None else residual_fallback
            kwargs: dict[str, Any] = {"horizon": n}
            if kind == "private":
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
    if kind == "private":
        ledger.record(
            ApproxDPEvent(
                eps_call, delta_call, count=state["calls"], label="RESIDUALEST stability histograms"
            ),
            partition="estimating",
        )
    if kind == "fixed":
        source = "a fixed public threshold psi"
    elif split:
        source = (
            f"private residual estimates (RESIDUALEST option 2) on a secret random split of the "
            f"training rows ({m} of N = {X.shape[0]} rows estimate, the other {n} train)"
        )
    else:
        source = f"{kind} residual estimates on the {m} estimating_data rows"
    for text in (
        "the number of training rows N is public",
        f"per-example gradients clipped in the Σ^-1 norm at psi_t = C l_t (C = "
        f"{clip_constant if clip_constant is not None else float('nan'):.4g}); the same Σ shapes "
        "the noise; Σ, C and eta are public",
        f"thresholds from {source}",
        f"tau = {tau:.6g} ({calibration} calibration)",
    ):
        ledger.assume(text)
    if kind == "public":
        ledger.assume(
            "the estimating_data rows are public: RESIDUALEST option 1 uses them without noise "
            "(no cost), so they are not protected by this guarantee"
        )
    if kind == "private" and not split:
        ledger.assume("the estimating_data rows are disjoint from the training rows")
    trace = FitTrace(
        clip_threshold=run.thresholds,
        clip_fraction=run.clipped.astype(float),
        noise_std=np.maximum.accumulate(run.thresholds) * tau,
    )
    info = {
        "tau": tau,
        "levels": PrefixSumTree.levels(n),
        "sensitivity": sensitivity,
        "clip_constant": clip_constant,
        "residual": kind,
        "residual_calls": state["calls"],
        "training_rows": n,
        "estimating_rows": m,
        "clipped_fraction": float(run.clipped.mean()),
        "last": run.last,
    }
    trace, info = release_diagnostics(trace, info, diagnostics=diagnostics, ledger=ledger)
    return FitResult(
        coef=run.average,
        intercept=0.0,
        report=ledger.report(delta),
        trace=trace,
        method="dp-ftrl-sigma",
        info=info,
    )
