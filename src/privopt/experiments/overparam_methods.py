"""The method runners of the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression,
anonymous submission) reproduction (docs/theory/overparameterised-regression.md#experiments): a draw
of the
over-parameterised regression, one fit of DP-FTRL-Σ (identity or designed Σ), DP-SGD, DP-AMBSSGD
or non-private SGD, and the step-size pilot on a separate draw. The experiment (and the privacy
and public-knowledge conventions these runners follow) is described in
:mod:`privopt.experiments.overparam`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privopt.accounting import PrivacyLedger, gdp_epsilon
from privopt.algorithms import baselines
from privopt.algorithms.ambssgd import dp_ambssgd, practical_config
from privopt.algorithms.ftrl_sigma import dp_ftrl_sigma, ftrl_sigma_pass
from privopt.clipping.residual_estimate import rows_needed
from privopt.datasets import make_overparameterised_regression
from privopt.experiments.overparam_config import (
    BOUND_SDS,
    DESIGNS,
    NOISE_STD,
    PILOT_CONSTANTS,
    RESIDUAL_EVERY,
)
from privopt.experiments.overparam_theory import (
    calibrated_tau,
    corollary_step_size,
    nonprivate_step,
    tau_at,
)
from privopt.noise import LowRankPlusRidgeCovariance, PrefixSumTree
from privopt.releases.preprocess import public_bounds

__all__ = [
    "ambssgd_min_rows",
    "draw",
    "fit_ambssgd",
    "fit_dpsgd",
    "fit_ftrl",
    "fit_nonprivate",
    "pilot",
]


# -- one fit per method ----------------------------------------------------------------------------
def draw(kind, r, n, d, seq: np.random.SeedSequence):
    """A draw (N training rows, M = N public unlabeled rows) and its public estimating rows."""
    data_rng, est_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    data = make_overparameterised_regression(
        n, d, spectrum=kind, r=r, noise_std=NOISE_STD, rng=data_rng
    )
    return data, data.sample(rows_needed("public", horizon=n), est_rng)


def fit_ftrl(data, est, design, eta, epsilon, delta, rng) -> tuple[float, float, bool]:
    """(excess risk, reported epsilon, diverged); a diverged run has infinite risk."""
    n = data.n_samples
    cov = None
    if design == "designed":
        cov = LowRankPlusRidgeCovariance.from_public_data(data.public_X, n_samples=n, step_size=eta)
    try:
        fit = dp_ftrl_sigma(
            data.X,
            data.y,
            epsilon=epsilon,
            delta=delta,
            learning_rate=eta,
            rng=rng,
            covariance=cov,
            public_X=data.public_X,
            residual="public",
            estimating_data=est,
            residual_every=RESIDUAL_EVERY,
        )
        risk = float(data.excess_risk(fit.coef))
    except ValueError as exc:  # divergence: overflow in RESIDUALEST, or non-finite iterates
        text = str(exc)
        if not any(key in text for key in ("diverged", "non-finite", "overflow", "NaN")):
            raise
        # The release is still private (tau was calibrated before the data were touched):
        # report the tree's epsilon at that tau, as the ledger would have.
        levels = PrefixSumTree.levels(n)
        tree_mu = 2.0 * math.sqrt(levels) / calibrated_tau(epsilon, delta, levels)
        return math.inf, float(gdp_epsilon(tree_mu, delta)), True
    return risk, float(fit.report.epsilon), False


def _law_bounds(data):
    """Public bounds from the known law (clip at 4 standard deviations per coordinate)."""
    half = BOUND_SDS * np.sqrt(data.eigenvalues)
    target = BOUND_SDS * math.sqrt(2.0 * data.null_risk + data.noise_std**2)
    return public_bounds(np.stack([-half, half], axis=1), (-target, target), False)


def fit_dpsgd(data, epsilon, delta, rng) -> tuple[float, float]:
    """DP-SGD at zero-out (eps/2, delta/(1+e^(eps/2))): replace-one (eps, delta) by group privacy.

    Returns (excess risk, replace-one epsilon = 2 x the zero-out epsilon of its report).
    """
    eps_zo = epsilon / 2.0
    delta_zo = delta / (1.0 + math.exp(eps_zo))
    bounds = _law_bounds(data)
    Z, t = bounds.transform(data.X, data.y)
    ledger = PrivacyLedger("zero-out")
    w, _, _ = baselines.dpsgd_linear(
        Z,
        t,
        row_bound=bounds.row_bound,
        target_bound=bounds.y_radius,
        epsilon=eps_zo,
        delta=delta_zo,
        rng=rng,
        ledger=ledger,
    )
    coef, _ = bounds.to_original(w)
    return float(data.excess_risk(coef)), 2.0 * float(ledger.report(delta_zo).epsilon)


def _ambssgd_config(n, data, epsilon, delta):
    bounds = _law_bounds(data)
    return bounds, practical_config(
        n,
        epsilon=epsilon,
        delta=delta,
        row_bound=bounds.row_bound,
        target_bound=bounds.y_radius,
        h_norm=float(data.eigenvalues[0]),  # public: the law's largest eigenvalue
        row_norm_sq=data.trace_H,  # public: E ||x||^2 = tr H
    )


def ambssgd_min_rows(data, epsilon: float, delta: float, limit: int = 1 << 30) -> int | None:
    """Fewest rows for which DP-AMBSSGD's practical configuration exists (bisection)."""

    def feasible(n: int) -> bool:
        try:
            _ambssgd_config(n, data, epsilon, delta)
        except ValueError:
            return False
        return True

    hi = 2
    while not feasible(hi):
        hi *= 2
        if hi > limit:
            return None
    lo = hi // 2
    while hi - lo > 1:  # feasible(hi), not feasible(lo) (or lo < 2)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def fit_ambssgd(data, epsilon, delta, rng) -> tuple[float, float]:
    bounds, config = _ambssgd_config(data.n_samples, data, epsilon, delta)
    Z, t = bounds.transform(data.X, data.y)
    ledger = PrivacyLedger("replace-one")
    w, _, _ = dp_ambssgd(Z, t, config, rng=rng, ledger=ledger)
    coef, _ = bounds.to_original(w)
    return float(data.excess_risk(coef)), float(ledger.report(delta).epsilon)


def fit_nonprivate(data, kind, r, rng) -> float:
    eta = nonprivate_step(data.n_samples, kind, r, data.trace_H)
    run = ftrl_sigma_pass(
        data.X, data.y, tau=0.0, learning_rate=eta, threshold=lambda t, w: math.inf, rng=rng
    )
    return float(data.excess_risk(run.average))


# -- step-size pilot on a separate draw ------------------------------------------------------------
def pilot(kind, r, sizes, d, epsilon, delta, seq) -> dict[str, Any]:
    """Choose c per design on separate synthetic draws at ``sizes`` (never the evaluation draws)."""
    out: dict[str, Any] = {}
    seqs = seq.spawn(len(sizes))
    draws = {n: draw(kind, r, n, d, s) for n, s in zip(sizes, seqs, strict=True)}
    for method, design in DESIGNS.items():
        scores = {}
        for c in PILOT_CONSTANTS:
            logs = []
            for n, (data, est) in draws.items():
                eta = c * corollary_step_size(n, tau_at(epsilon, delta, n), kind, r, design)
                rng = np.random.default_rng(seq.spawn(1)[0])
                risk, _, _ = fit_ftrl(data, est, design, eta, epsilon, delta, rng)
                logs.append(math.log(risk) if math.isfinite(risk) else math.inf)
            scores[c] = float(np.mean(logs))
        best = min(PILOT_CONSTANTS, key=lambda c: (scores[c], c))
        out[method] = {
            "c": best,
            "mean_log_risk": {str(c): (v if math.isfinite(v) else None) for c, v in scores.items()},
        }
    return out
