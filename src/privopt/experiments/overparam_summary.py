"""Summaries of the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous
submission)
reproduction (docs/theory/overparameterised-regression.md): per-N statistics over seeds, log-log
slopes and the notes (observations with numbers) generated from the JSON payload. The experiment
is described in :mod:`privopt.experiments.overparam`.
"""

from __future__ import annotations

import math

import numpy as np

from privopt.experiments.overparam_config import DESIGNS, METHODS

__all__ = ["nan_none", "notes", "slope", "summarise"]


# -- statistics over seeds ---------------------------------------------------------------------
def slope(n, values) -> float | None:
    """Least-squares slope of log(value) on log N; None unless every value is finite and > 0."""
    y = np.asarray(values, float)
    if y.size < 2 or not (np.all(np.isfinite(y)) and np.all(y > 0)):
        return None
    return float(np.polyfit(np.log(np.asarray(n, float)), np.log(y), 1)[0])


def _finite(v) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def nan_none(values) -> list[float]:
    return [math.nan if v is None else v for v in values]


def summarise(arr: np.ndarray) -> dict[str, list]:
    """Median, min and max over seeds per N (NaN: not run; inf: diverged -> None in JSON)."""
    stats: dict[str, list] = {"median": [], "min": [], "max": []}
    for row in arr:
        ran = row[~np.isnan(row)]
        for name, fn in (("median", np.median), ("min", np.min), ("max", np.max)):
            stats[name].append(_finite(float(fn(ran))) if ran.size else None)
    stats["runs"] = [[_finite(v) for v in row] for row in arr]
    return stats


# -- notes -----------------------------------------------------------------------------------
def _fmt(v, spec=".3g") -> str:
    return "n/a" if v is None else format(v, spec)


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def _comparison_notes(p: dict) -> list[str]:
    """Designed vs identity Σ, DP-SGD vs the best DP-FTRL, and how well slopes are determined."""
    n_grid = p["settings"]["n_grid"]
    seeds = p["settings"]["seeds"]
    wins, cells, sgd_wins, parts = 0, 0, 0, []
    for key, res in p["results"].items():
        ratios = [
            _ratio(d, i)
            for d, i in zip(
                res["ftrl_designed"]["median"], res["ftrl_identity"]["median"], strict=True
            )
        ]
        wins += sum(1 for r in ratios if r is not None and r < 1)
        cells += sum(1 for r in ratios if r is not None)
        best = [
            min(v for v in (a, b) if v is not None) if (a, b) != (None, None) else None
            for a, b in zip(
                res["ftrl_designed"]["median"], res["ftrl_identity"]["median"], strict=True
            )
        ]
        sgd = [_ratio(s, b) for s, b in zip(res["dpsgd"]["median"], best, strict=True)]
        sgd_wins += sum(1 for r in sgd if r is not None and r < 1)
        parts.append(
            f"{key}: designed/identity {', '.join(_fmt(r, '.2f') for r in ratios)}; "
            f"DP-SGD/best DP-FTRL {', '.join(_fmt(r, '.2f') for r in sgd)}"
        )
    widths = [
        rng[1] - rng[0]
        for per in p["slope_range_over_seeds"].values()
        for m, rng in per.items()
        if rng is not None and m in DESIGNS
    ]
    return [
        f"Median excess-risk ratios per N = {n_grid} ({seeds} seeds): " + "; ".join(parts) + ".",
        f"The designed Σ has the lower median in {wins} of {cells} (spectrum, N) cells; DP-SGD "
        f"(5 epochs, Poisson batches of 256, amplified by subsampling, at the conservative "
        f"zero-out epsilon/2) beats the better DP-FTRL-Σ in {sgd_wins} of {cells}. One-pass "
        "DP-FTRL-Σ spends its budget on a single pass of batch size 1, so at these N its noise "
        "(tau ~ 20-30) dominates the risk.",
        f"Per-seed DP-FTRL slopes spread over up to {_fmt(max(widths) if widths else None, '.2f')}"
        f" (median spread {_fmt(float(np.median(widths)) if widths else None, '.2f')}) across "
        f"seeds over this {n_grid[-1] // n_grid[0]}x range of N: the fitted slopes neither "
        "confirm nor refute Table 1's exponents, which are asymptotic (see the theory notes).",
    ]


def notes(p: dict) -> list[str]:
    """Observations with numbers, generated from the payload."""
    out = []
    n_grid = p["settings"]["n_grid"]
    n_max = n_grid[-1]
    out.extend(_comparison_notes(p))
    for key, res in p["results"].items():
        s, rate = p["slopes"][key], p["paper_rates"][key]
        med = {m: res[m]["median"][-1] for m in METHODS}
        out.append(
            f"{key}: at N = {n_max} median excess risk: identity {_fmt(med['ftrl_identity'])}, "
            f"designed {_fmt(med['ftrl_designed'])}, DP-SGD {_fmt(med['dpsgd'])}, non-private "
            f"{_fmt(med['nonprivate_sgd'])} (risk of w = 0: {res['null_risk']:.3g}). Slopes: "
            f"identity {_fmt(s['ftrl_identity'], '.2f')} (paper {rate['ftrl_identity']:.2f}), "
            f"designed {_fmt(s['ftrl_designed'], '.2f')} (paper {rate['ftrl_designed']:.2f}), "
            f"non-private {_fmt(s['nonprivate_sgd'], '.2f')} (paper "
            f"{rate['nonprivate_sgd']:.2f}), DP-SGD {_fmt(s['dpsgd'], '.2f')}."
        )
        div = {m: sum(res[m]["diverged"]) for m in DESIGNS}
        if any(div.values()):
            out.append(
                f"{key}: diverged runs (noise fed back through psi_t = C l_t): "
                + ", ".join(f"{m} {v}" for m, v in div.items())
                + f" (c = {res['ftrl_identity']['c']:g} / {res['ftrl_designed']['c']:g})."
            )
        th = p["theory"][key]
        for m in DESIGNS:
            last = th[m]["per_n"][-1]
            need = th[m]["n_for_bound_below_10pct_of_null"]
            out.append(
                f"{key}, {m}: at N = {n_max} the step used gives N eta = {last['n_eta']:.3g}, "
                f"k* = {last['k_star']}, so the corollary's bias term B^2/(N eta) = "
                f"{last['bias_term']:.3g} and its bound with constants 1 = {last['bound']:.3g} "
                f"(private part {last['private_part']:.3g}) against the null risk "
                f"{res['null_risk']:.3g}; the bound falls below 10% of the null risk only at "
                f"N ~ {_fmt(need, '.2g')} (tau grows like sqrt(log N)). The theory's clip "
                f"constant 6 sigma_z sqrt((1+sigma_z^2) tr(Σ^-1 H)) log N = "
                f"{last['clip_constant_theory']:.3g} (vs max ||x~||_Σ^-1 on public rows, used "
                f"here) and step cap 1/(16 (1+sigma_z^4) tr H log2 N) = "
                f"{last['eta_theory_max']:.2e} (used: {last['eta']:.2e}); recovering the "
                f"non-private rate needs epsilon >~ "
                f"{th[m]['epsilon_to_recover_nonprivate_rate_at_max_n']:.3g}."
            )
        amb = p["ambssgd"][key]
        if amb["skipped_n"]:
            out.append(
                f"{key}: DP-AMBSSGD (practical_config) is infeasible at N in {amb['skipped_n']}: "
                f"its DP-STAT rounds need at least {amb['min_rows']} rows at epsilon = "
                f"{p['settings']['epsilon']:g}, delta = {p['settings']['delta']:g}."
            )
    return out
