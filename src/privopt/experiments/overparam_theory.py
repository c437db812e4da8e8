"""Theory of the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous
submission) reproduction
(docs/theory/overparameterised-regression.md): Table 1's rates, the corollaries' tuned
step sizes, the calibrated noise multiplier tau and the corollaries' quantities at the sizes
run (hidden constants 1). The experiment is described in :mod:`privopt.experiments.overparam`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy.special import zeta

from privopt.algorithms.ftrl_sigma import calibrate_ftrl_sigma_tau
from privopt.experiments.overparam_config import DESIGNS, NOISE_STD, RELATIVE_TARGET, SIGMA_Z2
from privopt.noise import PrefixSumTree

__all__ = [
    "calibrated_tau",
    "corollary_step_size",
    "nonprivate_step",
    "paper_slopes",
    "tau_at",
    "theory_at_sizes",
]


# -- rates and step sizes ------------------------------------------------------------------------
def paper_slopes(kind: str, r: float | None) -> dict[str, float]:
    """Table 1's log-log slopes at constant epsilon (minus the exponents,
    docs/theory/overparameterised-regression.md)."""
    if kind == "exponential":
        return {"ftrl_identity": -0.5, "ftrl_designed": -2.0 / 3.0, "nonprivate_sgd": -1.0}
    return {
        "ftrl_identity": -r / (1 + 2 * r),
        "ftrl_designed": -min(r / (3 + r), 2 * r / (1 + 3 * r)),
        "nonprivate_sgd": -r / (1 + r),
    }


def corollary_step_size(n: int, tau: float, kind: str, r: float | None, design: str) -> float:
    """The corollaries' tuned eta (hidden constants 1): Cor. 4.4 (identity), Cor. 4.6 (designed).

    Polynomial, identity: min(N^(-1/(1+r)), N^(-(1+r)/(1+2r)) tau^(-2r/(1+2r)));
    designed: min(N^(-1/(1+r)), tau^(-2r/(r+3)) N^(-3/(r+3)), tau^(-2r/(1+3r)) N^(-(1+r)/(1+3r))).
    Exponential: min(1, (N tau^2)^(-1/2)) (identity) and min(1, (N tau^2)^(-1/3)) (designed).
    """
    if kind == "exponential":
        return min(1.0, (n * tau**2) ** (-0.5 if design == "identity" else -1.0 / 3.0))
    candidates = [n ** (-1.0 / (1 + r))]
    if design == "identity":
        candidates.append(n ** (-(1 + r) / (1 + 2 * r)) * tau ** (-2 * r / (1 + 2 * r)))
    else:
        candidates.append(tau ** (-2 * r / (r + 3)) * n ** (-3.0 / (r + 3)))
        candidates.append(tau ** (-2 * r / (1 + 3 * r)) * n ** (-(1 + r) / (1 + 3 * r)))
    return min(candidates)


def nonprivate_step(n: int, kind: str, r: float | None, trace_h: float) -> float:
    """Non-private SGD's step: min(N^(-1/(1+r)), 1/(2 tr H)) (exponential: min(1, 1/(2 tr H)))."""
    tuned = 1.0 if kind == "exponential" else n ** (-1.0 / (1 + r))
    return min(tuned, 1.0 / (2.0 * trace_h))


# -- the calibrated noise multiplier -------------------------------------------------------------
@functools.cache
def calibrated_tau(epsilon: float, delta: float, levels: int) -> float:
    """The calibrated tau; it depends on N only through the tree's levels."""
    return calibrate_ftrl_sigma_tau(epsilon, delta, 2 ** (levels - 1))


def tau_at(epsilon: float, delta: float, n: float) -> float:
    """The calibrated tau for a horizon of ceil(n) steps."""
    return calibrated_tau(epsilon, delta, PrefixSumTree.levels(math.ceil(n)))


# -- theory at these sizes -------------------------------------------------------------------------
def _effective_dimension(kind, r, n_eta) -> tuple[int, float]:
    """k* = max{k: lambda_k >= 1/(N eta)}, EffectDim = k* + N eta sum_{i>k*} lambda_i (d = inf)."""
    if kind == "exponential":
        k = max(0, math.floor(math.log(n_eta))) if n_eta >= 1 else 0
        tail = math.exp(-(k + 1)) / (1.0 - math.exp(-1.0))
    else:
        k = max(0, math.floor(n_eta ** (1.0 / r) + 1e-9)) if n_eta >= 1 else 0
        tail = float(zeta(r, k + 1))
    return k, k + n_eta * tail


def _bound(kind, r, n, eta, tau, design, l2, b2=1.0) -> dict[str, float]:
    """Cor. 4.3 / 4.5 with every hidden constant and polylog set to 1 (d -> infinity)."""
    k, effdim = _effective_dimension(kind, r, n * eta)
    nonprivate = b2 / (n * eta) + (NOISE_STD**2 / n + b2 / (n**2 * eta)) * effdim
    if design == "identity":
        private = l2 * tau**2 * eta * effdim
    else:
        tr_h2 = math.exp(-2) / (1 - math.exp(-2)) if kind == "exponential" else float(zeta(2 * r))
        private = l2 * tau**2 * (eta**2 * tr_h2 * effdim + effdim**3 / n)
    return {
        "k_star": k,
        "effective_dimension": effdim,
        "n_eta": n * eta,
        "bias_term": b2 / (n * eta),
        "nonprivate_part": nonprivate,
        "private_part": private,
        "bound": nonprivate + private,
    }


def _n_for_regime(kind, r, design, c, epsilon, delta, l2, target) -> float | None:
    """Smallest N (log grid to 1e15) with the constants-1 bound at eta = c eta_cor below target."""
    for n in np.logspace(2, 15, 131):
        n = float(n)
        tau = tau_at(epsilon, delta, n)
        eta = c * corollary_step_size(n, tau, kind, r, design)
        if _bound(kind, r, n, eta, tau, design, l2)["bound"] < target:
            return n
    return None


def _epsilon_to_recover(kind, r, design, n) -> float:
    """The epsilon beyond which the private term stops dominating
    (docs/theory/overparameterised-regression.md)."""
    if kind == "exponential":
        return n**0.5  # both designs (Cor. 4.4 / 4.6)
    if design == "identity":
        return n ** (r / (2 + 2 * r))
    return max(n ** (1 / (1 + r)), n ** ((r - 1) / (2 + 2 * r)))


def theory_at_sizes(kind, r, data, n_grid, etas, constants, epsilon, delta) -> dict[str, Any]:
    """The corollaries' quantities at the sizes run (hidden constants 1, d -> infinity).

    tr(Σ^-1 H) of the designed Σ is taken at its population version Σ = I/(N eta) + H (design
    (3.1) with λ = 1/(N eta), which Lemma B.10 shows the public-data Σ matches up to
    constants): sum_i lambda_i / (1/(N eta) + lambda_i), O(d) instead of an O(d M^2) diagonal.
    """
    trace_h = data.trace_H
    eig = data.eigenvalues
    l2 = 2.0 * (2.0 * data.null_risk + data.noise_std**2)  # option-1 level l^2 at w_0 = 0
    sz = math.sqrt(SIGMA_Z2)
    out: dict[str, Any] = {"l_squared_at_w0": l2, "trace_H": trace_h}
    for method, design in DESIGNS.items():
        rows = []
        for n, eta in zip(n_grid, etas[method], strict=True):
            tau = tau_at(epsilon, delta, n)
            tr_inv = trace_h if design == "identity" else float(np.sum(eig / (1 / (n * eta) + eig)))
            rows.append(
                {
                    "n": n,
                    "tau": tau,
                    "eta": eta,
                    "eta_theory_max": 1.0 / (16 * (1 + SIGMA_Z2**2) * trace_h * math.log2(n)),
                    "clip_constant_theory": 6
                    * sz
                    * math.sqrt((1 + SIGMA_Z2) * tr_inv)
                    * math.log(n),
                    "tr_sigma_inv_H": tr_inv,
                    **_bound(kind, r, n, eta, tau, design, l2),
                }
            )
        target = RELATIVE_TARGET * data.null_risk
        out[method] = {
            "per_n": rows,
            "n_for_bound_below_10pct_of_null": _n_for_regime(
                kind, r, design, constants[method], epsilon, delta, l2, target
            ),
            "epsilon_to_recover_nonprivate_rate_at_max_n": _epsilon_to_recover(
                kind, r, design, n_grid[-1]
            ),
        }
    return out
