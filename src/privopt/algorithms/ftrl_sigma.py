"""DP-FTRL-Σ (Private Overparameterized Linear Regression, anonymous submission, Algorithm 1): one
pass of DP-FTRL with noise covariance Σ.

For t = 0..N-1 (one training example per step, w_0 = 0), with
docs/theory/overparameterised-regression.md#dp-ftrl-sigma's semantics:

    l_t   = RESIDUALEST(estimating rows, w_t)         (public, private, or a fixed threshold)
    psi_t = C l_t,  psi_max = max_{s<=t} psi_s
    g_t   = CLIP(x_t (x_t^T w_t - y_t), psi_t, Σ),  CLIP(v, psi, Σ) = v min{1, psi / ||v||_{Σ^-1}}
    g~_<=t = private tree aggregation of g_0..g_t, node noise N(0, (tau psi_max)^2 Σ)
    w_{t+1} = -eta g~_<=t
    output  (1/N) sum_{t=0}^{N-1} w_t        (includes w_0 = 0, excludes w_N)

On the training core (:func:`ftrl_sigma_plan` -> :func:`privopt.training.execute`), line by line:
the records are read one per step in a secret uniform order (``FixedBatches(1)``: one shuffled
pass; the paper's rows are i.i.d., and without the shuffle the last row given, whose gradient
reaches only the excluded w_N, would never influence the output); the clip source
:class:`~privopt.training.ResidualThreshold` gives psi_t; :class:`~privopt.training.
SigmaNormLinearModel` clips in the non-squared Mahalanobis norm sqrt(v^T Σ^{-1} v) through
:mod:`privopt.clipping` (||x (x^T w - y)||_{Σ^-1} = |x^T w - y| ||x||_{Σ^-1}: no d x d matrix,
docs/theory/overparameterised-regression.md#notation [FIX], §3.4 item 1); the tree's noise
(:class:`privopt.noise.TreeAggregation`,
popcount(t + 1) nodes per prefix, a node drawn once at completion at tau psi_max, in Σ) enters
as per-step increments, so ``SGD(eta)`` on them is line 9 and the ``"inputs"`` average is line 10.

Privacy (Theorem 4.1 with docs/theory/overparameterised-regression.md#tree-sensitivity-fix's [FIX]).
A training example is a leaf of the tree and
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
finite and > 0, and every psi_t must be too (a negative psi made the node noise tau max(0, psi)
= 0, a NaN disabled the clipping, +inf gave NaN noise); +inf, no clipping, is allowed only with
tau = 0 (the non-private SGD reduction of :func:`ftrl_sigma_pass`).

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
    Neighbouring,
    PrivacyLedger,
)
from privopt.algorithms.ftrl_sigma_setup import (
    ResidualLevels,
    all_finite,
    as_float_rows,
    as_real_arg,
    check_estimating_rows,
    checked_covariance,
    derived_clip_constant,
    external_estimating_rows,
    resolve_residual,
    secret_split,
    split_sizes,
)
from privopt.algorithms.result import FitResult
from privopt.clipping.residual_estimate import per_call_budget
from privopt.noise import IdentityCovariance, PrefixSumTree, TreeAggregation
from privopt.training import (
    SGD,
    Averager,
    FixedBatches,
    ResidualThreshold,
    RowData,
    TrainingPlan,
    execute,
    iterate_rounds,
)
from privopt.training.gradients import SigmaNormLinearModel

__all__ = [
    "FTRLSigmaPass",
    "calibrate_ftrl_sigma_tau",
    "calibrated_ftrl_sigma_plan",
    "dp_ftrl_sigma",
    "ftrl_sigma_pass",
    "ftrl_sigma_plan",
    "paper_tau",
    "public_clip_constant",
]

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
    """tau making the tree (epsilon, delta)-DP: exact GDP with mu = Delta sqrt(k) / tau, the
    multiplier of ``ftrl_sigma_plan(steps, None, None, neighbouring).calibrate(epsilon, delta)``.

    ``"paper"``: Theorem 4.1's tau^2 = 4 k (log(1/delta) + epsilon) / epsilon^2 (not private at
    the target under replace-one; docs/theory/overparameterised-regression.md#tree-sensitivity-fix),
    a formula, not a calibration.
    """
    check_positive("epsilon", epsilon)
    check_probability("delta", delta)
    if calibration == "paper":
        return paper_tau(epsilon, delta, steps)
    if calibration != "exact":
        raise ValueError(f"Expected calibration in ('exact', 'paper'), got {calibration!r}.")
    _unit_sensitivity(neighbouring)
    plan = ftrl_sigma_plan(steps, None, None, neighbouring).calibrate(epsilon, delta)
    return plan.noise_multiplier


def paper_tau(epsilon: float, delta: float, steps: int) -> float:
    """Theorem 4.1's tau = sqrt(4 k (log(1/delta) + epsilon)) / epsilon, k the tree's levels."""
    levels = PrefixSumTree.levels(steps)
    return math.sqrt(4.0 * levels * (math.log(1.0 / delta) + epsilon) / epsilon**2)


def _unit_sensitivity(neighbouring: str) -> float:
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"Expected neighbouring in {NEIGHBOURING}, got {neighbouring!r}.")
    return Neighbouring.parse(neighbouring).contribution_factor


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
    """The noisy pass of Algorithm 1 given tau and a threshold rule (no accounting), in the
    order the rows are given (the core's loop, :func:`privopt.training.iterate_rounds`).

    ``threshold(t, w) -> psi_t`` supplies the clipping level (C l_t); every psi_t must be finite
    and > 0 (``ValueError`` otherwise: a zero or negative psi would zero the node noise
    tau max(psi), a NaN would disable the clipping). ``math.inf`` disables clipping and is
    accepted only with tau = 0: then the pass adds no noise and is exactly constant-step SGD
    w_{t+1} = w_t - eta g_t (line 9 with no noise), the reduction the paper states.
    """
    X = as_float_rows(X)
    y = np.asarray(y, dtype=float)
    n, d = X.shape
    tau = as_real_arg("tau", tau)
    if not (tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"Expected a finite tau >= 0, got {tau!r}.")
    eta = check_positive("learning_rate", learning_rate)
    if not callable(threshold):
        raise ValueError(f"threshold must be a rule (t, w) -> psi_t, got {threshold!r}.")
    covariance = covariance or IdentityCovariance(d)
    rule = ResidualThreshold(
        threshold, covariance=_noise_covariance(covariance), allow_infinite=tau == 0.0
    )
    stream = None if tau == 0.0 else rule.open_stream(TreeAggregation(), d, tau, rng)
    source, model = rule.start(), SigmaNormLinearModel(covariance)
    averager = Averager("inputs", n, d)
    rows = (np.array([t]) for t in range(n))
    data = RowData(model, X, y, model.prepare(X))
    average, fractions = _diverged_if_non_finite(
        iterate_rounds, data, rows, n, stream, source, 1.0, SGD(eta), averager, np.zeros(d)
    )
    return FTRLSigmaPass(average, averager.last, np.asarray(source.thresholds), fractions > 0)


def _noise_covariance(covariance: Any) -> Any:
    return None if isinstance(covariance, IdentityCovariance) else covariance


def _diverged_if_non_finite(function, *args, **kwargs):
    """Run ``function``; a non-finite residual (overflowed iterates) is reported as divergence."""
    try:
        return function(*args, **kwargs)
    except ValueError as exc:
        if "non-finite" not in str(exc):
            raise
        raise ValueError(
            "DP-FTRL-Σ diverged: a non-finite residual (the iterates overflowed); use a "
            "smaller learning_rate."
        ) from exc


def ftrl_sigma_plan(
    n: int,
    tau: float | None,
    threshold: ResidualThreshold | None,
    neighbouring: str = "replace-one",
) -> TrainingPlan:
    """Algorithm 1 as a plan of the training core: one shuffled pass of single records, the
    tree mechanism at noise multiplier tau on the unit clip (nodes scaled by psi_max), the
    private threshold's releases. ``event()``: the tree, Mahalanobis sensitivity f sqrt(k)
    (f = 2 replace-one) against std tau: mu = f sqrt(k) / tau. ``tau=None``: uncalibrated
    (``plan.calibrate(epsilon, delta)`` sets tau by exact GDP, the threshold's releases being on
    their own rows)."""
    return TrainingPlan(
        n,
        FixedBatches(1),
        clip_norm=1.0,
        noise_multiplier=tau,
        mechanism=TreeAggregation(),
        neighbouring=neighbouring,
        label=f"tree nodes on a leaf's path (k = {PrefixSumTree.levels(n)} levels), "
        "Mahalanobis sensitivity",
        private_threshold=threshold,
    )


def calibrated_ftrl_sigma_plan(
    n: int,
    threshold: ResidualThreshold,
    epsilon: float,
    delta: float,
    neighbouring: str = "replace-one",
    calibration: str = "exact",
) -> TrainingPlan:
    """:func:`ftrl_sigma_plan` calibrated once at (epsilon, delta) (``"exact"``), or at the
    paper's tau (``"paper"``, :func:`paper_tau`)."""
    if calibration == "paper":
        return ftrl_sigma_plan(n, paper_tau(epsilon, delta, n), threshold, neighbouring)
    if calibration != "exact":
        raise ValueError(f"Expected calibration in ('exact', 'paper'), got {calibration!r}.")
    return ftrl_sigma_plan(n, None, threshold, neighbouring).calibrate(epsilon, delta)


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
    """Private over-parameterised linear regression by DP-FTRL-Σ (Private Overparameterized Linear
    Regression, anonymous submission, Algorithm 1).

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
    kind = resolve_residual(residual, estimating_data)
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
    X = as_float_rows(X)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < 2:
        raise ValueError("Expected X of shape (N, d) with N >= 2 and y of shape (N,).")
    if not (all_finite(X) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite.")
    covariance = checked_covariance(covariance, X.shape[1])
    X_est = y_est = None
    if kind != "fixed" and not split:
        X_est, y_est = external_estimating_rows(X, estimating_data)
    if split:
        n, m = split_sizes(X.shape[0], estimating_rows)
    else:
        n, m = X.shape[0], (0 if X_est is None else X_est.shape[0])
    if clip_constant is None and kind != "fixed":
        clip_constant = derived_clip_constant(public_X, X.shape[1], covariance)
    if calibration not in ("exact", "paper"):
        raise ValueError(f"Expected calibration in ('exact', 'paper'), got {calibration!r}.")

    calls = math.ceil(n / residual_every) if kind != "fixed" else 0
    eps_call, delta_call = per_call_budget(epsilon, delta, max(calls, 1))
    if kind == "private":  # public sizes only: fail before any private row is read
        check_estimating_rows(m, n, calls, (epsilon, delta), (eps_call, delta_call), split, X)
    if split:
        X_train, y_train, X_est, y_est = secret_split(X, y, m, rng)
    else:
        X_train, y_train = X, y
    threshold_rule = ResidualLevels(
        kind, X_est, y_est, n, clip_constant, threshold, residual_every, residual_fallback,
        (eps_call, delta_call), rng, PrivacyLedger(neighbouring),
    )  # fmt: skip
    if kind == "fixed":
        source = "a fixed public threshold psi"
    elif split:
        source = (
            f"private residual estimates (RESIDUALEST option 2) on a secret random split of the "
            f"training rows ({m} of N = {X.shape[0]} rows estimate, the other {n} train)"
        )
    else:
        source = f"{kind} residual estimates on the {m} estimating_data rows"
    release = None
    if kind == "private":
        release = ApproxDPEvent(eps_call, delta_call, label="RESIDUALEST stability histograms")
    rule = ResidualThreshold(
        threshold_rule,
        every=residual_every if kind != "fixed" else 1,
        release=release,
        covariance=_noise_covariance(covariance),
        text=f"thresholds from {source}",
    )
    plan = calibrated_ftrl_sigma_plan(n, rule, epsilon, delta, neighbouring, calibration)
    tau = plan.noise_multiplier
    ledger = ledger if ledger is not None else PrivacyLedger(neighbouring)
    iterates: list[np.ndarray] = []
    info = {
        "tau": tau,
        "levels": PrefixSumTree.levels(n),
        "sensitivity": plan.event().sensitivity,  # f sqrt(k), f = 2 under replace-one
        "clip_constant": clip_constant,
        "residual": kind,
        "training_rows": n,
        "estimating_rows": m,
    }
    w, trace, info = _diverged_if_non_finite(
        execute,
        plan,
        SigmaNormLinearModel(covariance),
        SGD(learning_rate),
        X_train,
        y_train,
        rng=rng,
        averaging="inputs",
        ledger=ledger,
        partition=partition if partition is not None else ("training" if calls else None),
        callback=lambda step: iterates.append(step.w) if step.step == step.steps - 1 else None,
        diagnostics=diagnostics,
        info=info,
    )
    for text in (
        "the number of training rows N is public",
        f"per-example gradients clipped in the Σ^-1 norm at psi_t = C l_t (C = "
        f"{clip_constant if clip_constant is not None else float('nan'):.4g}); the same Σ shapes "
        "the noise; Σ, C and eta are public",
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
    info.update(residual_calls=threshold_rule.calls, last=iterates[-1])
    if diagnostics:  # the same non-private indicators, summarised (disclosed with them)
        info["clipped_fraction"] = float(trace.clip_fraction.mean())
        ledger.disclose("clipped_fraction (diagnostic computed from the private data, no noise)")
    return FitResult(
        coef=w,
        intercept=0.0,
        report=ledger.report(delta),
        trace=trace,
        method="dp-ftrl-sigma",
        info=info,
    )
