r"""Accelerated-DP-SRGD (seed 004, Algorithm 1): single-epoch, large-batch private optimisation.

Nesterov-accelerated (linear-coupling) projected gradient descent whose gradient estimate is a
*stochastic recursive gradient* (SRG), privatised by the binary tree mechanism on its prefix sums
(Choquette-Choo, Ganesh & Thakurta; notes/004.md §2). With ``C = B(0, R)``, ``eta_t = t + 1``,
``tau_{t+1} = 2 / (t + 3)`` and T disjoint batches ``B_t`` of B records each::

    x_0 = z_0 = 0,  S_{-1} = 0
    for t = 0 .. T-1:
        Delta_t = (1/B) sum_{d in B_t} clip(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d))
        S_t     = S_{t-1} + Delta_t                      # = eta_t nabla_t (exact prefix sum)
        S^_t    = S_t + zeta_t                           # the tree's noisy prefix sum
        z_{t+1} = Pi_C(z_t - S^_t / beta)                # = Pi_C(z_t - (eta_t/beta) nabla_t + b_t)
        y_{t+1} = Pi_C(x_t - S^_t / (eta_t beta))        # = Pi_C(x_t - nabla_t/beta + b_t/eta_t)
        x_{t+1} = (1 - tau_{t+1}) y_{t+1} + tau_{t+1} z_{t+1}
    return y_T

so the paper's ``b_t`` is ``-zeta_t / beta``. ``eta_{-1} = 0``: at t = 0 the per-example term is
the plain gradient ("first gradient", clipped to ``clip_first``); for t >= 1 the per-example
weighted difference is clipped to ``clip_difference``. Differences are formed as
``eta_t (g_t - g_{t-1}) + g_{t-1}`` to avoid cancellation. Each record is in exactly one batch
and its gradient is evaluated at the two points ``x_t, x_{t-1}`` of that step only (2n - B
gradients in all). The **independent** variant (Theorem 15) replaces the SRG by the plain batch
mean ``nabla_t = (1/B) sum clip(grad f(x_t, d))`` with independent noise on each step.

Privacy (zero-out neighbours, the paper's relation; replace-one doubles every sensitivity)
-------------------------------------------------------------------------------------------
Clipping is always on, so the guarantee holds for **any** loss (convex or not) and any data,
with no high-probability event: zeroing one record changes only the Delta_t of its batch, by at
most ``c_t / B`` (``c_0 = clip_first``, ``c_t = clip_difference``), because Delta_t is divided by
the fixed B. The tree releases every complete node sum plus N(0, sigma^2 I) (Lemma 8); leaf t
lies in ``m_t`` complete nodes (``m_0 = floor(log2 T) + 1``, the most), so the release is a
Gaussian mechanism of l2 sensitivity ``s = max_t c_t sqrt(m_t) / B``, i.e. exactly
``(s / sigma)``-GDP, also under adaptivity (each node, given the earlier releases, is a Gaussian
release whose sensitivity is c_t / B or 0). Every iterate is post-processing of the released
nodes. sigma is the smallest std with ``gdp_delta(s / sigma, epsilon) <= delta`` (exact mu-GDP;
all of delta goes to the Gaussian, since nothing holds only with high probability). The paper
converts with ``mu = eps / sqrt(2 ln(1.25/delta))`` (Lemma 8) or ``sqrt(2 ln(2.5/delta))`` (Cor.
9/13), which is invalid for large epsilon (notes/004.md §3.4); those values are returned in
``info`` for comparison only. Independent variant: each step is a Gaussian release of
sensitivity ``clip_first / B`` on a disjoint batch, so the fit is ``(clip_first / (B sigma))``-GDP
by parallel composition. The batch assignment (a uniform permutation) is data-independent and
no amplification is claimed, so exposing it (``info["batch_assignment"]``) costs no privacy.

Parameters (:func:`srgd_parameters`, each overridable)
-----------------------------------------------------
* ``setting="general"`` (Theorem 14, no assumption on the minimiser): ``B = floor(sqrt n)``,
  ``T = floor(n / B)``, ``beta = (16 c_M + 8) L n^{3/2} / (R B^2)`` with ``c_M = M R / L``
  (so ``beta >= 2 M T``, Lemma 11's requirement). These constants are usable as printed.
  ``clip_difference = (12 c_M + 4) L`` (``constants="practical"``): Lemma 11's recursion gives
  ``||Delta_t(d)|| <= 2 (M b_max + 4 M R + L)`` (the paper's ``2 M R`` uses
  ``||z_t - x_{t-1}|| <= R``, but two points of a ball of radius R can be 2R apart), and with
  Corollary 12's ``M b_max <= (2 c_M + 1) L`` this is ``(12 c_M + 4) L``. ``constants="paper"``
  uses the printed ``(8 c_M + 4) L``.
* ``setting="interior"`` (Eq. 19, the minimiser of the population risk inside the ball).
  Eq. (19)'s ``c_DP = 4 sqrt 2 log^{3/2}(n) sqrt(ln(2n/delta)) ln(2.5/delta)`` is ~4e4 at
  n = 1e6, giving ``T = c_DP n^{1/4} > n`` (B < 1) below n ~ 1e7 and fewer steps than the general
  setting only beyond n ~ 1e25 (notes/004.md §3.5). ``constants="paper"`` computes it literally
  (log base 2) and refuses when B < 1; the default ``"practical"`` drops the polylog factor:
  ``T = ceil(n^{1/4})``, ``B = floor(n / T)``, ``beta = max(M, L / R) max{1, sqrt(d)/(eps sqrt
  n)}`` (Eq. 19 with ``c_DP^2`` replaced by the smallest value keeping Theorem 3's
  ``beta >= M``), and ``clip_difference = (12 c_M + 4) L`` (the general threshold; Lemma 7's own
  constant has unspecified c_1). Its optimisation error ``beta R^2 / T^2`` is ``O(M R^2 /
  sqrt n)``, the point of the interior setting.
* ``clip_first = L`` (the Lipschitz bound on the ball, so the first-gradient clip is inactive).

Only utility (never privacy) depends on these choices, so out-of-theory values warn
(:class:`SRGDWarning`) instead of failing: ``beta < M`` (Theorem 3), ``beta < 2 M T`` in the
general setting (Lemma 11: the clip may bind and bias the gradients) and ``B > sqrt n`` in the
general setting (Theorem 14). When ``B T < n`` the ``n - B T`` records left over by the
permutation are **dropped** (never used); ``B T > n`` is refused.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from privopt._validate import (
    check_count,
    check_design,
    check_nonnegative,
    check_positive,
    check_probability,
)
from privopt.accounting import (
    GaussianEvent,
    Neighbouring,
    PrivacyLedger,
    PrivacyReport,
    calibrate_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    gdp_epsilon,
)
from privopt.algorithms.result import FitResult, FitTrace, release_diagnostics
from privopt.clipping import clip_factors, row_norms
from privopt.losses import LinearLoss, get_loss
from privopt.noise import TreeAggregation
from privopt.noise.rng import gaussian_noise

__all__ = [
    "SRGDParameters",
    "SRGDStep",
    "SRGDWarning",
    "accelerated_dp_srgd",
    "srgd_increment",
    "srgd_parameters",
    "tree_leaf_levels",
]

SETTINGS = ("general", "interior")
VARIANTS = ("recursive", "independent")
CONSTANTS = ("practical", "paper")
_NEIGHBOURING = {"zero-out": 1.0, "replace-one": 2.0}

GradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


class SRGDWarning(UserWarning):
    """A parameter outside a utility theorem's range (privacy is unaffected: clipping holds)."""


# -- parameters ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SRGDParameters:
    """Every public parameter of one Accelerated-DP-SRGD run and its noise calibration.

    Attributes:
        setting, variant, constants: see :func:`srgd_parameters`.
        n, dim: number of records and of parameters (p).
        batch_size, steps: B and T (B T <= n; the rest is dropped).
        beta: the scaling beta (inverse step size).
        clip_first: threshold of per-example first gradients (every gradient of the
            independent variant).
        clip_difference: threshold of per-example weighted differences (None: independent).
        lipschitz, smoothness: L and M used to derive the defaults (None when not given).
        levels: tree levels holding a complete node, floor(log2 T) + 1 (1 when independent).
        sensitivity: l2 sensitivity of the whole release per record under ``neighbouring``.
        sigma: std of each tree node (recursive) or of each step's gradient noise (independent).
        mu: the fit's GDP parameter ``sensitivity / sigma`` (exact).
        epsilon, delta: the target; ``gdp_delta(mu, epsilon) <= delta``.
        classical_sigma: sigma from Lemma 8's conversion ``mu = eps / sqrt(2 ln(1.25/delta))``
            (Dwork–Roth; for comparison only, not valid for large eps).
        paper_budget_sigma: sigma from Cor. 9/13's ``mu = eps / sqrt(2 ln(2.5/delta))``.
        corollary_sigma: the printed Cor. 13 (general) / Cor. 9 (interior) node std
            ``2 sqrt 2 C sqrt(log2 T ln(2.5/delta)) / (eps B)`` / ``C sqrt(...) / (eps B)`` with C
            the largest clip (None for T = 1 or the independent variant).
        c_M: ``M R / L``; c_DP: Eq. (19)'s constant (``constants="paper"``, interior only).
        neighbouring: ``"zero-out"`` or ``"replace-one"``.
        notes: the choices made, in words.
    """

    setting: str
    variant: str
    constants: str
    n: int
    dim: int
    batch_size: int
    steps: int
    beta: float
    clip_first: float
    clip_difference: float | None
    lipschitz: float | None
    smoothness: float | None
    levels: int
    sensitivity: float
    sigma: float
    mu: float
    epsilon: float
    delta: float
    classical_sigma: float
    paper_budget_sigma: float
    corollary_sigma: float | None
    c_M: float | None
    c_DP: float | None
    neighbouring: str
    notes: tuple[str, ...]

    @property
    def unused_records(self) -> int:
        return self.n - self.batch_size * self.steps

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["unused_records"] = self.unused_records
        return out


def tree_leaf_levels(steps: int) -> np.ndarray:
    """``m_t``: the number of complete binary-tree nodes containing step t, for t < T.

    Node (k, j) covers steps [j 2^k, (j + 1) 2^k) and is complete when (j + 1) 2^k <= T, so
    leaf t is in one node per level k with ``((t >> k) + 1) << k <= T``. These are the column
    norms squared of :meth:`privopt.noise.TreeAggregation.encoder_matrix`; ``m_0 =
    floor(log2 T) + 1`` is the largest, and for T >= 2 leaf 1 attains it too.
    """
    steps = check_count("steps", steps)
    t = np.arange(steps)
    out = np.zeros(steps, dtype=int)
    for k in range(steps.bit_length()):
        out += (((t >> k) + 1) << k) <= steps
    return out


def _optional(name: str, value: float | None) -> float | None:
    return None if value is None else check_nonnegative(name, value)


def _schedule(n: int, batch_size: int | None, steps: int | None) -> tuple[int, int] | None:
    if batch_size is not None:
        batch_size = check_count("batch_size", batch_size)
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the n={n} records.")
    if steps is not None:
        steps = check_count("steps", steps)
        if steps > n:
            raise ValueError(f"steps={steps} exceeds n={n}: a batch needs at least one record.")
    if batch_size is not None and steps is not None:
        if batch_size * steps > n:
            raise ValueError(
                f"batch_size * steps = {batch_size} * {steps} = {batch_size * steps} exceeds "
                f"n = {n}: a single epoch cannot use a record twice. Use at most "
                f"{n // batch_size} steps of {batch_size} records."
            )
        return batch_size, steps
    if batch_size is not None:
        return batch_size, n // batch_size
    if steps is not None:
        return n // steps, steps
    return None


def srgd_parameters(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    radius: float,
    lipschitz: float | None = None,
    smoothness: float | None = None,
    setting: str = "general",
    *,
    variant: str = "recursive",
    batch_size: int | None = None,
    steps: int | None = None,
    beta: float | None = None,
    clip_first: float | None = None,
    clip_difference: float | None = None,
    constants: str = "practical",
    neighbouring: str = "zero-out",
) -> SRGDParameters:
    r"""Every parameter of Accelerated-DP-SRGD from public inputs, and the exact noise.

    Args:
        n: number of records; d: number of parameters (p in the paper).
        epsilon, delta: the target, ``epsilon > 0``, ``delta`` in (0, 1).
        radius: R, the ball ``C = B(0, R)``.
        lipschitz: L, a bound on every per-example gradient norm on the ball.
        smoothness: M, the per-example smoothness (None: unknown; then ``beta`` and
            ``clip_difference`` must be given and the theorem checks are skipped).
        setting: ``"general"`` (Theorem 14) or ``"interior"`` (Eq. 19).
        variant: ``"recursive"`` (the SRG of Algorithm 1) or ``"independent"`` (Theorem 15).
        batch_size, steps, beta, clip_first, clip_difference: overrides (see the module
            docstring for the defaults). With only one of B and T the other is
            ``floor(n / given)``; ``B T < n`` drops the rest, ``B T > n`` is refused.
        constants: ``"practical"`` (default) or ``"paper"`` (the printed constants; Eq. (19)
            then refuses every n it cannot serve).
        neighbouring: ``"zero-out"`` (the paper's) or ``"replace-one"`` (sensitivity x 2).

    Raises:
        ValueError: invalid inputs, or a default that needs an unknown constant.

    Warns:
        SRGDWarning: ``beta < M``, ``beta < 2 M T`` (general, recursive) or ``B > sqrt n``
            (general): the utility theorems do not apply; privacy is unaffected.
    """
    n = check_count("n", n)
    d = check_count("d", d)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    radius = check_positive("radius", radius)
    L = _optional("lipschitz", lipschitz)
    M = _optional("smoothness", smoothness)
    for name, value, options in (
        ("setting", setting, SETTINGS),
        ("variant", variant, VARIANTS),
        ("constants", constants, CONSTANTS),
        ("neighbouring", neighbouring, tuple(_NEIGHBOURING)),
    ):
        if value not in options:
            raise ValueError(f"Expected {name} in {options}, got {value!r}.")
    notes: list[str] = []
    c_M = None if (L is None or M is None or L == 0.0) else M * radius / L
    c_DP = None
    if setting == "interior" and constants == "paper":
        log_n = math.log2(n) if n > 1 else 0.0
        c_DP = (
            4.0
            * math.sqrt(2.0)
            * log_n**1.5
            * math.sqrt(math.log(2.0 * n / delta))
            * math.log(2.5 / delta)
        )

    def need(what: str, *values: float | None) -> None:
        if any(v is None for v in values):
            raise ValueError(
                f"The default {what} needs a finite Lipschitz bound L and the smoothness M; "
                f"pass lipschitz= and smoothness= (a regression loss needs y_bound for a finite "
                f"L), or {what}= explicitly."
            )

    # -- schedule (B, T) ----------------------------------------------------------------------
    schedule = _schedule(n, batch_size, steps)
    if schedule is None:
        if setting == "general":
            b = max(1, math.isqrt(n))
            schedule = (b, n // b)
            notes.append("B = floor(sqrt n), T = floor(n / B) (Theorem 14's largest batch)")
        elif c_DP is not None:
            t_paper = max(1, math.ceil(c_DP * n**0.25))
            if t_paper > n:
                raise ValueError(
                    f"Eq. (19) gives c_DP = {c_DP:.4g} and T = c_DP n^(1/4) = {t_paper} > n = {n}, "
                    "i.e. a batch size below 1: the paper's constants for the interior setting "
                    "need n of order 1e7 or more (notes/004.md §3.5). Use constants='practical' "
                    "or give batch_size/steps."
                )
            schedule = (n // t_paper, t_paper)
            notes.append(f"Eq. (19): c_DP = {c_DP:.6g} (log base 2), T = ceil(c_DP n^(1/4))")
        else:
            t_int = max(1, math.ceil(n**0.25))
            schedule = (n // t_int, t_int)
            notes.append(
                "interior, practical: T = ceil(n^(1/4)), B = floor(n / T) (Eq. 19 without its "
                "polylog factor c_DP, which makes T > n below n ~ 1e7)"
            )
    B, T = schedule
    if setting == "general" and B * B > n:
        warnings.warn(
            f"batch_size={B} exceeds sqrt(n)={math.sqrt(n):.4g}: Theorem 14's utility bound "
            "needs B <= sqrt(n) (privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )
    if B * T < n:
        notes.append(f"{n - B * T} records left over by the permutation are dropped (unused)")

    # -- beta ---------------------------------------------------------------------------------
    if beta is None:
        need("beta", L, M)
        assert L is not None and M is not None
        if setting == "general":
            beta = (16.0 * M + 8.0 * L / radius) * n**1.5 / (B * B)
            notes.append("beta = (16 c_M + 8) L n^(3/2) / (R B^2) (Theorem 14)")
        else:
            scale = max(1.0, math.sqrt(d) / (epsilon * math.sqrt(n)))
            if c_DP is not None:
                beta = c_DP**2 * L * scale / radius
                notes.append("beta = c_DP^2 L max{1, sqrt(d)/(eps sqrt n)} / R (Eq. 19)")
            else:
                beta = max(M, L / radius) * scale
                notes.append(
                    "interior, practical: beta = max(M, L/R) max{1, sqrt(d)/(eps sqrt n)} (Eq. 19 "
                    "with c_DP^2 replaced by the least value keeping beta >= M, Theorem 3)"
                )
        if not beta > 0:
            raise ValueError("The derived beta is 0 (L = M = 0); give beta explicitly.")
    beta = check_positive("beta", beta)
    if M is not None and beta < M:
        warnings.warn(
            f"beta={beta:.6g} < M={M:.6g}: Theorem 3's convergence guarantee needs beta >= M "
            "(privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )
    elif M is not None and setting == "general" and variant == "recursive" and beta < 2 * M * T:
        warnings.warn(
            f"beta={beta:.6g} < 2 M T = {2 * M * T:.6g}: Lemma 11's sensitivity bound does not "
            "apply, so clip_difference may bind and bias the gradients (privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )

    # -- clipping thresholds ------------------------------------------------------------------
    if clip_first is None:
        if L is None or not math.isfinite(L) or L == 0.0:
            raise ValueError(
                "The default clip_first is the Lipschitz bound L, which is unknown, infinite or 0; "
                "pass a finite lipschitz= (e.g. y_bound for a regression loss) or clip_first=."
            )
        clip_first = L
        notes.append("clip_first = L (inactive: every gradient on the ball has norm <= L)")
    clip_first = check_positive("clip_first", clip_first)
    if variant == "independent":
        clip_difference = None
        notes.append("independent variant: one clipped gradient per record, clip_difference unused")
    else:
        if clip_difference is None:
            need("clip_difference", L, M)
            assert L is not None and M is not None
            if constants == "paper":
                if c_DP is not None:
                    clip_difference = c_DP * L
                    notes.append("clip_difference = c_DP L (Eq. 19 / Corollary 9)")
                else:
                    clip_difference = 8.0 * M * radius + 4.0 * L
                    notes.append("clip_difference = (8 c_M + 4) L (Corollary 12, as printed)")
            else:
                clip_difference = 12.0 * M * radius + 4.0 * L
                notes.append(
                    "clip_difference = (12 c_M + 4) L: Lemma 11 with ||z_t - x_{t-1}|| <= 2R "
                    "gives 2 (M b_max + 4 M R + L), and M b_max <= (2 c_M + 1) L (Corollary 12)"
                )
        clip_difference = check_positive("clip_difference", clip_difference)

    # -- noise calibration (exact mu-GDP) -----------------------------------------------------
    factor = _NEIGHBOURING[neighbouring]
    if variant == "recursive":
        m = tree_leaf_levels(T)
        clips = np.full(T, clip_difference)
        clips[0] = clip_first
        unit = float(np.max(clips * np.sqrt(m)))
        levels = int(m[0])
    else:
        unit, levels = clip_first, 1
    sensitivity = factor * unit / B
    sigma = calibrate_gaussian_sigma(epsilon, delta, sensitivity)
    while gdp_epsilon(sensitivity / sigma, delta) > epsilon:  # the report's epsilon <= target
        sigma *= 1.0 + 1e-12
    classical = classical_gaussian_sigma(epsilon, delta, sensitivity)
    paper_budget = sensitivity * math.sqrt(2.0 * math.log(2.5 / delta)) / epsilon
    corollary = None
    if variant == "recursive" and T > 1:
        clip_max = max(clip_first, clip_difference)  # type: ignore[type-var]
        root = math.sqrt(math.log2(T) * math.log(2.5 / delta))
        scale = 2.0 * math.sqrt(2.0) if setting == "general" else 1.0
        corollary = factor * scale * clip_max * root / (epsilon * B)
    notes.append(
        "noise calibrated by exact mu-GDP (sigma = s / gdp_mu(eps, delta)), not the classical "
        "sqrt(2 ln(1.25/delta)) conversion"
    )
    return SRGDParameters(
        setting=setting,
        variant=variant,
        constants=constants,
        n=n,
        dim=d,
        batch_size=B,
        steps=T,
        beta=float(beta),
        clip_first=float(clip_first),
        clip_difference=None if clip_difference is None else float(clip_difference),
        lipschitz=L,
        smoothness=M,
        levels=levels,
        sensitivity=float(sensitivity),
        sigma=float(sigma),
        mu=float(sensitivity / sigma),
        epsilon=epsilon,
        delta=delta,
        classical_sigma=float(classical),
        paper_budget_sigma=float(paper_budget),
        corollary_sigma=corollary,
        c_M=c_M,
        c_DP=c_DP,
        neighbouring=neighbouring,
        notes=tuple(notes),
    )


# -- one step's clipped increment ---------------------------------------------------------------
def _gradients(gradient: LinearLoss | GradFn, w: np.ndarray, X: np.ndarray, y: np.ndarray):
    grads = np.asarray(gradient(w, X, y), dtype=float)  # type: ignore[operator]
    if grads.shape != (X.shape[0], w.shape[0]):
        raise ValueError(
            f"grad_fn must return one gradient row per example, shape {(X.shape[0], w.shape[0])}, "
            f"got {grads.shape}."
        )
    return grads


def srgd_increment(
    gradient: LinearLoss | GradFn,
    x: np.ndarray,
    x_prev: np.ndarray | None,
    t: int,
    X: np.ndarray,
    y: np.ndarray,
    *,
    clip_first: float,
    clip_difference: float | None,
    batch_size: int,
) -> tuple[np.ndarray, float, float]:
    r"""Step t's clipped batch increment ``Delta_t`` and diagnostics.

    ``Delta_t = (1/B) sum_d clip(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d))`` with
    ``eta_t = t + 1`` (``eta_{-1} = 0``: at t = 0 the plain gradient clipped to ``clip_first``;
    the independent variant calls it with t = 0 at every step). B is the
    fixed batch size, never the number of rows, so zeroing a record changes Delta_t by at most
    ``clip / B``. A :class:`~privopt.losses.LinearLoss` never forms the (b, d) gradient matrix:
    its per-example difference is ``(eta_t phi'(z_t) - eta_{t-1} phi'(z_{t-1})) x``.

    Returns:
        (Delta_t, fraction of the rows clipped, largest unclipped per-example norm).
    """
    t = check_count("t", t, minimum=0)
    first = t == 0
    if not first and x_prev is None:
        raise ValueError("x_prev (the previous iterate) is required for t >= 1.")
    clip = clip_first if first else clip_difference
    if clip is None:
        raise ValueError("clip_difference is required for t >= 1.")
    eta = float(t + 1)
    if isinstance(gradient, LinearLoss):
        coefficient = gradient.derivative(X @ x, y)
        if not first:
            previous = gradient.derivative(X @ x_prev, y)
            coefficient = eta * (coefficient - previous) + previous
        norms = np.abs(coefficient) * row_norms(X)
        factors = clip_factors(norms, clip)
        total = X.T @ (coefficient * factors)
    else:
        rows = _gradients(gradient, x, X, y)
        if not first:
            previous = _gradients(gradient, x_prev, X, y)
            rows = eta * (rows - previous) + previous
        norms = row_norms(rows)
        factors = clip_factors(norms, clip)
        total = rows.T @ factors
    fraction = float(np.mean(factors < 1.0)) if norms.size else 0.0
    largest = float(norms.max()) if norms.size else 0.0
    return total / batch_size, fraction, largest


# -- the algorithm ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SRGDStep:
    """What a callback sees after step t (all private outputs or post-processing of them).

    ``released`` is the noisy prefix sum ``S^_t`` (recursive) or the noisy batch gradient
    (independent); x, y, z are ``x_{t+1}, y_{t+1}, z_{t+1}``.
    """

    t: int
    released: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray


def _project(w: np.ndarray, radius: float) -> np.ndarray:
    norm = float(np.linalg.norm(w))
    return w if norm <= radius else w * (radius / norm)


def _resolve_problem(X, y, loss_or_grad_fn, x_bound, y_bound, radius, lipschitz, smoothness, dim):
    """(gradient, X, y, p, L, M, description) for a privopt loss or a generic grad_fn."""
    if isinstance(loss_or_grad_fn, str | LinearLoss):
        loss = get_loss(loss_or_grad_fn)
        if x_bound is None:
            raise ValueError(
                f"The {loss.name} loss needs the public bound x_bound on ||x|| (its constants are "
                "suprema over the data domain)."
            )
        X, y = loss.check_data(X, y, x_bound, y_bound)
        if dim is not None and check_count("dim", dim) != X.shape[1]:
            raise ValueError(f"dim={dim} differs from the {X.shape[1]} features of a linear loss.")
        if lipschitz is None:
            lipschitz = loss.lipschitz(x_bound, y_bound, radius)
            lipschitz = lipschitz if math.isfinite(lipschitz) else None  # e.g. no y_bound
        if smoothness is None:
            holder = loss.holder(x_bound, y_bound)
            smoothness = holder.L if holder.alpha == 1.0 else None
        return loss, X, y, X.shape[1], lipschitz, smoothness, f"{loss.name} loss"
    if not callable(loss_or_grad_fn):
        raise ValueError(
            "Expected a loss name, a privopt LinearLoss or a per-example gradient function "
            f"grad_fn(w, X, y) -> (b, p), got {loss_or_grad_fn!r}."
        )
    X, y = check_design(X, y)
    p = X.shape[1] if dim is None else check_count("dim", dim)
    return loss_or_grad_fn, X, y, p, lipschitz, smoothness, "generic per-example gradient"


def _ledger(ledger: PrivacyLedger | None) -> PrivacyLedger:
    if ledger is None:
        return PrivacyLedger(Neighbouring.ZERO_OUT)
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"Expected a PrivacyLedger, got {type(ledger).__name__}.")
    if ledger.neighbouring.value not in _NEIGHBOURING:
        raise ValueError(
            f"Accelerated-DP-SRGD is analysed under zero-out (or replace-one) neighbours; got a "
            f"{ledger.neighbouring.value!r} ledger. Adding or removing a record would shift the "
            "fixed batches and change n, on which B and T depend."
        )
    return ledger


def _non_private_report(delta: float, neighbouring: str) -> PrivacyReport:
    relation = Neighbouring(neighbouring)
    return PrivacyReport(
        epsilon=math.inf,
        delta=delta,
        rho=None,
        mu=None,
        accountant="none",
        accountant_description="no privacy: noise=False (testing the optimiser only)",
        neighbouring=relation.value,
        neighbouring_description=relation.description,
        composition="none (nothing private was released)",
        num_partitions=0,
        events=(),
        assumptions=("NON-PRIVATE run: noise disabled (noise=False); no guarantee at all",),
    )


def accelerated_dp_srgd(
    X: np.ndarray,
    y: np.ndarray,
    loss_or_grad_fn: str | LinearLoss | GradFn,
    *,
    epsilon: float,
    delta: float,
    radius: float,
    rng: np.random.Generator,
    batch_size: int | None = None,
    steps: int | None = None,
    beta: float | None = None,
    setting: str = "general",
    variant: str = "recursive",
    clip_first: float | None = None,
    clip_difference: float | None = None,
    x_bound: float | None = None,
    y_bound: float | None = None,
    lipschitz: float | None = None,
    smoothness: float | None = None,
    dim: int | None = None,
    constants: str = "practical",
    z_step_scale: float = 1.0,
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    noise: bool = True,
    callback: Callable[[SRGDStep], None] | None = None,
    diagnostics: bool = False,
) -> FitResult:
    r"""Accelerated-DP-SRGD (seed 004, Algorithm 1): one pass, T batch steps, output ``y_T``.

    Args:
        X, y: the private data, (n, k) and (n,).
        loss_or_grad_fn: a loss name or :class:`~privopt.losses.LinearLoss` (``x_bound``
            required; L and M default to the loss's constants on the ball), or a per-example
            gradient function ``grad_fn(w, X_batch, y_batch) -> (b, p)`` (give ``lipschitz``
            and ``smoothness``, or the parameters they determine; ``dim`` = p, default k).
        epsilon, delta: the target; noise is calibrated by exact mu-GDP.
        radius: R, the constraint set is the ball B(0, R).
        rng: randomness of the batch permutation and of the noise.
        batch_size, steps, beta, clip_first, clip_difference, setting, variant, constants: see
            :func:`srgd_parameters` (the defaults are derived there from public inputs).
        x_bound, y_bound: public data bounds for a privopt loss (checked on every record).
        lipschitz, smoothness: L and M (override the loss's constants; public).
        dim: number of parameters p of a generic ``grad_fn``.
        z_step_scale: multiplies the z step (1 = Algorithm 1 as printed; the proof uses 1/2,
            notes/004.md §4). Post-processing: privacy is unchanged.
        ledger, partition: record into this zero-out (or replace-one) ledger under this label.
        noise: **testing only**. ``False`` adds no noise: the run is NOT private, its report
            says epsilon = inf, and a ledger is refused.
        callback: called with an :class:`SRGDStep` after every step (it sees non-private
            per-step values: what it does with them is the caller's release).
        diagnostics: also return the non-private clip fractions, ``max_norm`` and
            ``noise_norm`` (warns; recorded in the report as non-private releases).

    Returns:
        :class:`FitResult` with ``coef = y_T``, the report, a trace (per-step clip threshold,
        std of the noise on ``nabla_t``; with ``diagnostics=True`` also the clip fraction and
        extras ``max_norm`` and ``noise_norm``: the largest unclipped per-example norm and
        ``||zeta_t||``, non-private) and ``info`` with every parameter, the paper's classical
        sigmas and their exact delta at epsilon, ``batch_assignment`` (batch of each record,
        -1 = dropped) and ``visits`` (how many steps evaluated each record's gradients: 0 or 1).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy Generator, got {type(rng).__name__}.")
    radius = check_positive("radius", radius)
    z_step_scale = check_positive("z_step_scale", z_step_scale)
    if noise not in (True, False):
        raise ValueError(f"Expected noise to be a bool, got {noise!r}.")
    if not noise and ledger is not None:
        raise ValueError("noise=False is a non-private testing mode; it cannot record to a ledger.")
    ledger = _ledger(ledger) if noise else None
    neighbouring = "zero-out" if ledger is None else ledger.neighbouring.value
    gradient, X, y, p, L, M, description = _resolve_problem(
        X, y, loss_or_grad_fn, x_bound, y_bound, radius, lipschitz, smoothness, dim
    )
    if clip_difference is None and beta is None and variant == "recursive" and M is None:
        raise ValueError(
            f"The smoothness M of the {description} is unknown or infinite (not 1-Hölder): "
            "Algorithm 1 needs an M-smooth loss. Use a smooth loss (logistic, squared, "
            "squared_hinge, huber) or give smoothness=, or beta= and clip_difference= "
            "explicitly (privacy holds through clipping for any loss)."
        )
    n = X.shape[0]
    params = srgd_parameters(
        n,
        p,
        epsilon,
        delta,
        radius,
        L,
        M,
        setting,
        variant=variant,
        batch_size=batch_size,
        steps=steps,
        beta=beta,
        clip_first=clip_first,
        clip_difference=clip_difference,
        constants=constants,
        neighbouring=neighbouring,
    )
    B, T, beta_ = params.batch_size, params.steps, params.beta

    order = rng.permutation(n)  # data-independent; the guarantee does not rely on its secrecy
    assignment = np.full(n, -1, dtype=int)
    assignment[order[: B * T]] = np.repeat(np.arange(T), B)
    visits = np.zeros(n, dtype=int)
    tree = TreeAggregation()
    stream = None
    if noise and variant == "recursive":
        stream = tree.noise_stream(p, params.sigma, rng=rng)

    x = np.zeros(p)
    z = np.zeros(p)
    y_out = np.zeros(p)
    x_prev: np.ndarray | None = None
    prefix = np.zeros(p)
    clip_thresholds, fractions, stds, max_norms, noise_norms = [], [], [], [], []
    evaluations = 0
    for t in range(T):
        rows = np.sort(order[t * B : (t + 1) * B])
        visits[rows] += 1
        Xb, yb = X[rows], y[rows]
        eta = float(t + 1)
        if variant == "recursive":
            delta_t, fraction, largest = srgd_increment(
                gradient,
                x,
                x_prev,
                t,
                Xb,
                yb,
                clip_first=params.clip_first,
                clip_difference=params.clip_difference,
                batch_size=B,
            )
            evaluations += B if t == 0 else 2 * B
            prefix = prefix + delta_t
            zeta = stream.next() if stream is not None else np.zeros(p)
            released = prefix + zeta
            z_new = _project(z - z_step_scale * released / beta_, radius)
            y_new = _project(x - released / (eta * beta_), radius)
            clip_thresholds.append(params.clip_first if t == 0 else params.clip_difference)
            stds.append(params.sigma * math.sqrt((t + 1).bit_count()) / eta if noise else 0.0)
        else:
            grad_t, fraction, largest = srgd_increment(
                gradient,
                x,
                None,
                0,
                Xb,
                yb,
                clip_first=params.clip_first,
                clip_difference=None,
                batch_size=B,
            )
            evaluations += B
            zeta = gaussian_noise(rng, params.sigma, p) if noise else np.zeros(p)
            released = grad_t + zeta
            z_new = _project(z - z_step_scale * eta * released / beta_, radius)
            y_new = _project(x - released / beta_, radius)
            clip_thresholds.append(params.clip_first)
            stds.append(params.sigma if noise else 0.0)
        tau = 2.0 / (t + 3.0)
        x_prev, x = x, (1.0 - tau) * y_new + tau * z_new
        z, y_out = z_new, y_new
        fractions.append(fraction)
        max_norms.append(largest)
        noise_norms.append(float(np.linalg.norm(zeta)))
        if callback is not None:
            callback(SRGDStep(t=t, released=released, x=x, y=y_out, z=z))

    if noise:
        assert ledger is not None
        label = (
            "binary-tree node sums of clipped SRG increments (Lemma 8)"
            if variant == "recursive"
            else "independent Gaussian batch gradients (disjoint batches, parallel composition)"
        )
        ledger.record(
            GaussianEvent(params.sensitivity, params.sigma, label=label), partition=partition
        )
        clips = f"first gradients clipped to {params.clip_first:.6g}"
        if params.clip_difference is not None:
            clips += (
                f", weighted differences eta_t g(x_t) - eta_(t-1) g(x_(t-1)) clipped to "
                f"{params.clip_difference:.6g}"
            )
        if variant == "recursive":
            sensitivity_text = (
                f"sensitivity {params.sensitivity:.6g} = max_t clip_t sqrt(m_t) / B over the "
                f"{params.levels} tree levels (Lemma 8); every iterate is post-processing of "
                "the released node sums"
            )
        else:
            sensitivity_text = (
                f"sensitivity {params.sensitivity:.6g} = clip_first / B per disjoint batch; "
                "every iterate is post-processing of the noisy batch gradients"
            )
        for text in (
            f"per-example {clips} (privacy holds for any loss, convex or not)",
            f"single epoch: each record in exactly one of T = {T} disjoint batches of B = {B} "
            f"(data-independent permutation; {params.unused_records} records dropped)",
            "batch means divided by the fixed B (zero-out: a zeroed record contributes 0)",
            sensitivity_text,
            "B, T, beta, radius and clipping thresholds chosen independently of the data",
            "noise calibrated by exact mu-GDP (not the classical sqrt(2 ln(1.25/delta)) formula)",
        ):
            ledger.assume(text)
        report = ledger.report(delta)
    else:
        report = _non_private_report(params.delta, neighbouring)

    sens = params.sensitivity
    info: dict[str, Any] = {
        **params.to_dict(),
        "problem": description,
        "noise": bool(noise),
        "z_step_scale": z_step_scale,
        "classical_delta": gaussian_delta(params.classical_sigma, params.epsilon, sens),
        "paper_budget_delta": gaussian_delta(params.paper_budget_sigma, params.epsilon, sens),
        "exact_delta": gaussian_delta(params.sigma, params.epsilon, sens),
        "batch_assignment": assignment,
        "visits": visits,
        "gradient_evaluations": evaluations,
    }
    trace = FitTrace(
        clip_threshold=np.asarray(clip_thresholds, dtype=float),
        clip_fraction=np.asarray(fractions),
        noise_std=np.asarray(stds),
        extra={"max_norm": np.asarray(max_norms), "noise_norm": np.asarray(noise_norms)},
    )
    if ledger is not None:
        trace, info = release_diagnostics(trace, info, diagnostics=diagnostics, ledger=ledger)
        report = ledger.report(delta)
    elif not diagnostics:
        trace, info = release_diagnostics(trace, info, diagnostics=False, ledger=None)
    return FitResult(y_out, 0.0, report, trace, "accelerated-dp-srgd", info)
