"""The methods of :class:`~privopt.estimators.DPLinearRegression` on transformed rows.

Each runner takes the transformed rows ``Z`` (centred, standardised, clipped, with the
intercept column) and targets ``t``, the :class:`~privopt.releases.preprocess.LinearBounds`
that produced them, and the method's :class:`MethodBudget` (the one privacy currency the
estimator hands a method: the GDP ``mu`` its releases may spend, and the (epsilon, delta)
target a self-calibrating method calibrates its plan to when the preprocessing ran on disjoint
rows), and returns ``(w, trace, info, reasons)``: ``reasons`` lists what the public utility
checks of :mod:`privopt.estimators._utility` found (empty for a healthy configuration).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt.accounting import gdp_mu
from privopt.algorithms.ambssgd import dp_ambssgd, moment_config
from privopt.algorithms.baselines import dpsgd_linear
from privopt.algorithms.result import FitTrace
from privopt.algorithms.ssgd import practical_learning_rate, run_ssgd_plan, ssgd_plan
from privopt.estimators._utility import (
    NOISE_TO_SIGNAL_LIMIT,
    PROGRESS_LIMIT,
    noise_to_signal,
    optimisation_progress,
    sgd_noise_ratio,
)
from privopt.releases.adassp import adassp
from privopt.releases.newton import dp_newton, dp_newton_rows
from privopt.releases.preprocess import private_second_moment
from privopt.releases.quantile_bounds import TARGET_SIGMAS, first_step_clip

__all__ = [
    "ADASSP_SPLIT",
    "AUTO_GRAM_CONSTANT",
    "DPSGD_MAX_EPSILON",
    "MethodBudget",
    "adassp_result",
    "capped_dpsgd_epsilon",
    "choose_method",
    "dpsgd_result",
    "newton_result",
    "rounds_reasons",
    "run_adassp",
    "run_ambssgd",
    "run_dpsgd",
    "run_newton",
    "run_newton_rows",
    "run_ssgd",
]

#: Shares of mu^2 for AdaSSP's (lambda_min, Z^T Z, Z^T t) releases. Measured on x ~ N(0, I_20),
#: sigma = 1, N = 200,000, epsilon = 1 (8 seeds): the Gram noise dominates the error, and this
#: split lowers the median excess risk from 5.2x OLS (equal thirds, Wang 2018) to 4.2x.
ADASSP_SPLIT = (0.05, 0.6, 0.35)
#: Work cap (issue 17): DP-SGD is calibrated at min(epsilon, this). Its PLD calibration costs
#: time and memory growing like epsilon (about 1/sigma^2: 60 s and 0.6 GB at epsilon = 128 on
#: 3,000 rows, unbounded at 1e9), while the fit stops improving long before: on CCPP with
#: public bounds the training MSE is flat from epsilon = 8 to 128 (42.0-42.9 at N = 3,000;
#: 33.3-33.7 at N = 9,568; OLS 20.9 / 20.8), the error being the optimisation's, not the
#: noise's. A capped fit is (cap, delta)-DP for its DP-SGD part, which is stronger.
DPSGD_MAX_EPSILON = 16.0
#: "auto" takes the noisy-Newton method when N mu >= AUTO_GRAM_CONSTANT p^1.5 (p = d + 1), i.e.
#: when the Gram noise (spectral norm about 2 sqrt(p) R^2 / mu_gram, R^2 about p) stays below
#: a few times the Gram's smallest scale N (standardised features); DP-SGD otherwise. From the
#: regression sweep (BENCHMARKS.md).
AUTO_GRAM_CONSTANT = 0.5
#: largest p for which "auto" forms the p x p Gram matrix (O(N p^2) time, O(p^2) memory)
AUTO_MAX_GRAM_DIM = 2000
#: noisy-Newton gradient steps of the estimator (the Dask backend's newton_dask runs its own
#: default of 3; both must agree for its equality tests). Four would be better: a
#: heavy-tailed feature whose box was widened has small standardised values in bulk, so its
#: Gram eigenvalue is small against the ridge and each step recovers only part of its
#: coefficient (Student-t / log-normal tables of 10,000 rows, 16 seeds: median test-R^2
#: ratio 0.907 -> 0.926 at d = 12, 0.917 -> 0.935 at d = 18; public tables unchanged or
#: better; paper model 1.34x -> 1.26x OLS over 12 seeds; five steps: 1.37x)
NEWTON_STEPS = 3


@dataclass(frozen=True)
class MethodBudget:
    """The privacy a method run may spend, handed over once by the estimator (issue 28 item 2).

    ``mu``: the GDP budget of the method's releases: ``gdp_mu(epsilon, delta)`` of the fit's
    target, or the share of it left when private preprocessing shared the rows (sequential
    composition, exact in GDP: mu^2 = mu_pre^2 + mu^2_method). ``shared`` says which. A method
    whose accounting is not GDP (Poisson DP-SGD's PLD, DP-SSGD's shuffling, DP-FTRL-Σ's tree)
    calibrates its plan to the fit's ``(epsilon, delta)`` directly (:meth:`target`), which
    holds only when the preprocessing ran on a disjoint slice (parallel composition): then
    nothing is converted, neither mu back to epsilon nor epsilon to mu.
    """

    epsilon: float
    delta: float
    mu: float
    shared: bool = False

    def target(self, method: str) -> tuple[float, float]:
        """(epsilon, delta) for a method that calibrates its own plan; refused when the
        preprocessing shares its rows (its budget is then a share of mu only)."""
        if self.shared:
            raise ValueError(
                f"method {method!r} calibrates to (epsilon, delta); its preprocessing must run "
                "on a disjoint slice, not share the rows."
            )
        return self.epsilon, self.delta


def choose_method(n: int, d: int, epsilon: float, delta: float, intercept: bool = True) -> str:
    """The default method from public quantities only (N, d, epsilon, delta)."""
    p = d + int(intercept)
    mu = gdp_mu(epsilon, delta)
    if p <= AUTO_MAX_GRAM_DIM and n * mu >= AUTO_GRAM_CONSTANT * p**1.5:
        return "newton"
    return "dpsgd"


def _gram_reasons(n: int, p: int, row_bound: float, gram_noise_norm: float) -> list[str]:
    """The Gram noise against the average eigenvalue N R^2 / p of Z^T Z for rows at the bound."""
    signal = n * row_bound**2 / p
    if gram_noise_norm >= signal:
        return [
            f"the Gram-matrix noise (spectral norm about {gram_noise_norm:.3g}) exceeds its "
            f"signal (about {signal:.3g} = N R^2 / p), so the solve is mostly ridge"
        ]
    return []


def _iterate_noise(step_std, eta, curvature, tail, p, bounds) -> list[str]:
    """Prediction noise left in the tail-averaged iterate against the targets' typical scale
    (the target bound over TARGET_SIGMAS, about one standard deviation for private bounds)."""
    signal = bounds.y_radius / TARGET_SIGMAS
    ratio = sgd_noise_ratio(step_std, eta, curvature, max(tail, 1), p, signal)
    if ratio > NOISE_TO_SIGNAL_LIMIT:
        return [
            f"the noise left in the averaged iterate moves predictions by {ratio:.3g} times "
            "the targets' scale"
        ]
    return []


def _at_bounds(method, Z, t, bounds, mu, rng, ledger, **options) -> tuple:
    """A mu-GDP statistics method (AdaSSP, noisy Newton) on the transformed rows, at the public
    bounds R = ``bounds.row_bound`` and T = ``bounds.y_radius`` that produced them."""
    R, T = bounds.row_bound, bounds.y_radius
    return method(Z, t, row_bound=R, target_bound=T, mu=mu, rng=rng, ledger=ledger, **options)


def run_newton(est, Z, t, bounds, budget, rng, ledger, n_public) -> tuple:
    w, info = _at_bounds(
        dp_newton, Z, t, bounds, budget.mu, rng, ledger, public_n=n_public, steps=NEWTON_STEPS,
        first_clip=first_step_clip(bounds),
    )  # fmt: skip
    return newton_result(w, info, Z.shape, bounds)


def run_newton_rows(est, X, y, bounds, budget, rng, ledger, n_public) -> tuple:
    """:func:`run_newton` on ``bounds.transform(X, y)`` without forming it (the same releases
    and model up to summation order: :func:`~privopt.releases.newton.dp_newton_rows`)."""
    w, info = dp_newton_rows(
        X, y, bounds, mu=budget.mu, rng=rng, ledger=ledger, public_n=n_public, steps=NEWTON_STEPS,
        first_clip=first_step_clip(bounds),
    )  # fmt: skip
    p = X.shape[1] + int(bounds.intercept_scale > 0)
    return newton_result(w, info, (X.shape[0], p), bounds)


def newton_result(w, info, shape, bounds) -> tuple:
    """Noisy Newton's (w, trace, info, reasons) on ``shape = (N, p)`` rows (in memory or on
    Dask): the Gram noise and the last gradient's noise against their signals."""
    n, p = shape
    reasons = _gram_reasons(n, p, bounds.row_bound, 2 * math.sqrt(p) * info["gram_std"])
    # the last gradient: noise against a sum whose every row carries the clip rho / sqrt(p)
    last_signal = n * bounds.row_bound * info["residual_clips"][-1] / math.sqrt(p)
    ratio = noise_to_signal(info["gradient_stds"][-1], p, last_signal)
    if ratio > NOISE_TO_SIGNAL_LIMIT:
        reasons.append(f"the last gradient's noise is {ratio:.3g} times its signal")
    return w, FitTrace.empty(), info, reasons


def run_adassp(est, Z, t, bounds, budget, rng, ledger, n_public) -> tuple:
    w, info = _at_bounds(adassp, Z, t, bounds, budget.mu, rng, ledger, budget_split=ADASSP_SPLIT)
    return adassp_result(w, info, (int(n_public), Z.shape[1]), bounds)  # N: rows, or users


def adassp_result(w, info, shape, bounds) -> tuple:
    """AdaSSP's (w, trace, info, reasons) on ``shape = (N, p)`` rows (in memory or on Dask)."""
    n, p = shape
    reasons = _gram_reasons(n, p, bounds.row_bound, 2 * math.sqrt(p) * info["gram_std"])
    return w, FitTrace.empty(), info, reasons


def run_dpsgd(est, Z, t, bounds, budget, rng, ledger, n_public) -> tuple:
    """DP-SGD at the budget's target after :func:`capped_dpsgd_epsilon` (the one cap)."""
    epsilon, delta = budget.target("dpsgd")
    w, trace, info = dpsgd_linear(
        Z,
        t,
        row_bound=bounds.row_bound,
        target_bound=bounds.y_radius,
        epsilon=capped_dpsgd_epsilon(epsilon, stacklevel=5),
        delta=delta,
        rng=rng,
        ledger=ledger,
        public_n=n_public,
        diagnostics=est.diagnostics,
    )
    return dpsgd_result(w, trace, info, Z.shape[1], bounds)


def dpsgd_result(w, trace, info, p, bounds) -> tuple:
    """DP-SGD's (w, trace, info, reasons) for p columns (in memory or on Dask): the noise left
    in the tail average and the optimisation's progress."""
    steps = int(trace.steps) if trace.steps else 0
    eta, curvature = info["learning_rate"], bounds.row_bound**2 / p
    step_std = eta * float(np.median(trace.noise_std)) if steps else math.inf
    reasons = _iterate_noise(step_std, eta, curvature, steps - steps // 2, p, bounds)
    progress = optimisation_progress(eta, curvature, steps)
    if progress < PROGRESS_LIMIT:
        reasons.append(f"eta * curvature * steps = {progress:.3g} < {PROGRESS_LIMIT:g}")
    return w, trace, info, reasons


def run_ssgd(est, Z, t, bounds, budget, rng, ledger, n_public) -> tuple:
    """DP-SSGD: its plan calibrated once at the budget's target (FMT21), the step size from
    alpha."""
    n, p = Z.shape
    clip = bounds.row_bound * bounds.y_radius
    plan = ssgd_plan(n, clip, ledger.neighbouring).calibrate(*budget.target("ssgd"))
    alpha = plan.noise_multiplier / 2.0
    eta = practical_learning_rate(bounds.row_bound, p, alpha)
    w, trace, info = run_ssgd_plan(
        plan,
        Z,
        t,
        learning_rate=eta,
        rng=rng,
        ledger=ledger,
        diagnostics=est.diagnostics,
    )
    curvature = bounds.row_bound**2 / p
    step_std = float(trace.noise_std[0])  # 2 eta zeta alpha, the per-step noise on w
    reasons = _iterate_noise(step_std, eta, curvature, n - n // 2, p, bounds)
    progress = optimisation_progress(eta, curvature, n)
    if progress < PROGRESS_LIMIT:
        reasons.append(
            f"one pass of N = {n} single-example steps at eta = {eta:.3g} (noise multiplier "
            f"{alpha:.3g}) travels eta * curvature * N = {progress:.3g} of the way"
        )
    return w, trace, info, reasons


def run_ambssgd(est, Z, t, bounds, budget, rng, ledger, n_public, moment_share) -> tuple:
    """DP-AMBSSGD after a private second moment of the rows (its own share of the budget).

    The moment is released on (a secret subset of) the same rows, so it composes sequentially
    with the rounds (which compose in parallel with each other): the rounds get
    ``mu^2 - moment_mu^2``, with ``moment_mu^2 = moment_share mu^2`` (mu the budget's).
    ||H|| is bias-corrected for the noise (:meth:`SecondMoment.h_norm`
    is the top eigenvalue of H + E; the spike of a symmetric Gaussian perturbation with entry
    std s sits at lambda + s^2 p / lambda, which is inverted here when it exceeds the noise edge
    2 s sqrt(p)).
    """
    n, p = Z.shape
    mu, moment_mu = budget.mu, budget.mu * math.sqrt(moment_share)
    x_dim = p - 1 if bounds.intercept_scale > 0 else p
    plain = Z[:, :x_dim]
    rows = np.sort(rng.choice(n, min(n, 50_000), replace=False))
    moment = private_second_moment(
        plain,
        rows,
        row_bound=bounds.x_radius,
        mu=moment_mu,
        rng=rng,
        ledger=ledger,
        partition=None,
    )
    config, h_norm, scale = moment_config(
        n,
        moment,
        rows.size,
        moment_mu=moment_mu,
        mu=mu,
        epsilon=budget.epsilon,  # the fit's target, for the refusal's message only
        delta=budget.delta,
        bounds=bounds,
        x_dim=x_dim,
    )
    if bounds.intercept_scale > 0:
        bounds = dataclasses.replace(bounds, intercept_scale=scale)
        Z[:, -1] = scale
    w, trace, info = dp_ambssgd(Z, t, config, rng=rng, ledger=ledger, diagnostics=est.diagnostics)
    info = {**info, "h_norm_corrected": h_norm, "_bounds": bounds}
    return w, trace, info, rounds_reasons(config.learning_rate, h_norm, config.steps)


def rounds_reasons(eta: float, h_norm: float, rounds: int) -> list[str]:
    """DP-AMBSSGD's public check (in memory or on Dask): eta ||H|| T, the optimisation's
    progress over its rounds."""
    progress = optimisation_progress(eta, h_norm, rounds)
    if progress < PROGRESS_LIMIT:
        return [f"eta * ||H|| * rounds = {progress:.3g} < {PROGRESS_LIMIT:g}"]
    return []


def capped_dpsgd_epsilon(epsilon: float, stacklevel: int) -> float:
    """``min(epsilon, DPSGD_MAX_EPSILON)``, warning when the cap acts (``stacklevel`` as for
    the caller's own ``warnings.warn``)."""
    if epsilon > DPSGD_MAX_EPSILON:
        warnings.warn(
            f"epsilon={epsilon:g} capped at {DPSGD_MAX_EPSILON:g} for DP-SGD (more noise, a "
            "stronger guarantee; larger epsilon costs time without improving the fit: see "
            "DPSGD_MAX_EPSILON).",
            stacklevel=stacklevel + 1,
        )
    return min(epsilon, DPSGD_MAX_EPSILON)


def ssgd_hint() -> str:
    return "use method='auto' (the default) or 'newton'"


def method_fixes(method: str) -> list[str]:
    """What to try when a method's public checks fail."""
    fixes = ["more epsilon or more rows"]
    if method != "newton":
        fixes.append("method='auto' (noisy Newton where the Gram noise allows it)")
    fixes.append("public feature_bounds/target_bounds (privopt fit --bounds) if they are tight")
    return fixes


def describe(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without the private-release arrays that are not for display."""
    return {k: v for k, v in info.items() if k not in ("gram", "moment")}
