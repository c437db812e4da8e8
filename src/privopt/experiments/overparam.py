r"""the DP-FTRL-Σ paper (Private Overparameterized Linear Regression, anonymous submission)
reproduction: private over-parameterised linear regression, excess risk against N.

The paper has no experiments (docs/theory/overparameterised-regression.md); this runs the note's
plan E1/E2 at sizes that fit a laptop. For each spectrum (lambda_i = i^-r with r in {1.5, 2, 3}, and
lambda_i = e^-i) and each N of a grid, with d >= 2 N fixed across the grid (so the law, and its null
risk, do not change with N), it fits on independent draws of
:func:`privopt.datasets.make_overparameterised_regression` (Gaussian z, theta*_i ~ 1/i with
||theta*|| = 1, sigma_zeta = 0.5) and reports the exact excess risk 1/2 (w - w*)^T H (w - w*):

* ``ftrl_identity``: DP-FTRL-Σ with Σ = I (Cor. 4.3/4.4);
* ``ftrl_designed``: DP-FTRL-Σ with Σ = (λ I + X̃^T X̃)/M from M = N public unlabeled rows and
  λ = M / (N eta) (Cor. 4.5/4.6);
* ``dpsgd``: DP-SGD with Poisson sampling (:func:`privopt.algorithms.baselines.dpsgd_linear`,
  the library defaults: 5 epochs, expected batch 256, PLD calibration);
* ``ambssgd``: DP-AMBSSGD with :func:`~privopt.algorithms.ambssgd.practical_config`, run where
  its configuration is feasible (at epsilon = 1 it needs about 11,500 rows; the JSON says how
  many and at which N it was skipped);
* ``nonprivate_sgd``: Algorithm 1 with tau = 0 and no clipping (constant-step averaged SGD with
  the tuned step min(N^(-1/(1+r)), 1/(2 tr H))), the reference rate N^(-r/(1+r)).

**Same budget.** Every private method is (epsilon, delta)-DP under **replace-one** neighbours, the
paper's relation. DP-FTRL-Σ and DP-AMBSSGD are calibrated under replace-one directly. DP-SGD's
accountant is add/remove or zero-out only, so it is run as (epsilon/2, delta/(1 + e^(epsilon/2)))
-DP under zero-out neighbours, which implies (epsilon, delta) under replace-one (a replacement is
two zero-outs; group privacy). This is conservative for DP-SGD.

**Public knowledge.** The law is public (synthetic). DP-FTRL-Σ uses M = N public unlabeled rows
(for Σ and its clip constant C = max ||x̃||_{Σ^-1}) and m = ``rows_needed("public", horizon=N)``
public labeled rows for RESIDUALEST option 1 (re-estimated every 10 steps). DP-SGD and
DP-AMBSSGD use public bounds derived from the law: |x_i| <= 4 sqrt(lambda_i) per feature (row
radius 4 sqrt(tr H)) and |y| <= 4 sqrt(theta*^T H theta* + sigma_zeta^2), values outside clipped.

**Step size (fixed in advance).** eta(N) = c * eta_cor(N, tau(N)), with eta_cor the corollary's
tuned step (docs/theory/overparameterised-regression.md, §5.5; tau is the calibrated noise
multiplier at N), and one constant c per (spectrum, design) chosen from :data:`PILOT_CONSTANTS` on a
*separate* synthetic draw (its own seeds) at the two smallest N of the grid, minimising the mean log
excess risk (a diverged run counts as infinite). The evaluation draws are never used to choose
anything.

Slopes are least-squares fits of log(median excess risk over seeds) on log N; ``paper_rates`` are
the slopes Table 1 predicts (minus the exponents of docs/theory/overparameterised-regression.md).
``theory`` evaluates the corollaries' quantities at the sizes run (N eta, k*, the theory's clip
constant and step cap, the bound with all hidden constants set to 1) and ``notes`` states what they
imply.

Measured (default size, seed 0, 4 seeds, 2 shared cores, 330 s): at N = 2048 the median excess
risks are, for r = 1.5 / 2 / 3 / exponential, identity 0.137 / 0.164 / 0.076 / 0.074, designed
0.118 / 0.124 / 0.092 / 0.045, DP-SGD 0.110 / 0.047 / 0.044 / 0.018 (risk of w = 0: 0.34 / 0.33
/ 0.32 / 0.12). The designed Σ has the lower median in 13 of 16 (spectrum, N) cells; DP-SGD
(multi-epoch, amplified by subsampling) is the best method at N >= 1024 in most cells. The
DP-FTRL slopes (identity -0.76 / +0.05 / -0.19 / -0.21, designed -0.59 / -0.48 / -0.49 / -0.31)
vary by 0.5 (median) between seeds, so they do not test Table 1: at these N the step sizes give
N eta ~ 1-5, so k* <= 1 (not even the top eigen-direction is in the head), and the corollaries'
bounds with constants 1 exceed the null risk until N ~ 10^8-10^13.

Layout: the configuration is in :mod:`~privopt.experiments.overparam_config`, the rates, step
sizes and theory quantities in :mod:`~privopt.experiments.overparam_theory`, the method runners
and the step-size pilot in :mod:`~privopt.experiments.overparam_methods`, the statistics, slopes
and notes in :mod:`~privopt.experiments.overparam_summary` and the figure in
:mod:`~privopt.experiments.overparam_plot`; this module is the entry point and re-exports their
public names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive, check_probability
from privopt.experiments._common import reproduction_environment
from privopt.experiments.overparam_config import (
    BOUND_SDS,
    DEFAULT_N_GRID,
    DEFAULT_SEEDS,
    DESIGNS,
    METHODS,
    NOISE_STD,
    PILOT_CONSTANTS,
    PRIVATE_METHODS,
    QUICK_N_GRID,
    QUICK_SPECTRA,
    RESIDUAL_EVERY,
    SPECTRA,
)
from privopt.experiments.overparam_config import RELATIVE_TARGET as RELATIVE_TARGET
from privopt.experiments.overparam_config import SIGMA_Z2 as SIGMA_Z2
from privopt.experiments.overparam_methods import (
    ambssgd_min_rows,
    draw,
    fit_ambssgd,
    fit_dpsgd,
    fit_ftrl,
    fit_nonprivate,
    pilot,
)
from privopt.experiments.overparam_plot import plot_overparam
from privopt.experiments.overparam_summary import nan_none, notes, slope, summarise
from privopt.experiments.overparam_theory import (
    corollary_step_size,
    paper_slopes,
    tau_at,
    theory_at_sizes,
)

__all__ = [
    "DEFAULT_N_GRID",
    "PILOT_CONSTANTS",
    "QUICK_N_GRID",
    "SPECTRA",
    "corollary_step_size",
    "paper_slopes",
    "reproduce_overparam",
]


def _check_inputs(n_grid, n_features, seeds, spectra, epsilon, delta):
    if n_grid is None or len(n_grid) == 0:
        raise ValueError("Expected a non-empty N grid (at least two sizes to fit a slope).")
    n_grid = tuple(sorted(check_count("N", n, minimum=16) for n in n_grid))
    if len(set(n_grid)) < 2:
        raise ValueError(f"Expected at least two distinct N to fit a slope, got {n_grid}.")
    d = 2 * n_grid[-1] if n_features is None else check_count("n_features", n_features)
    if d < 2 * n_grid[-1]:
        raise ValueError(
            f"Expected an over-parameterised problem, d >= 2 N = {2 * n_grid[-1]}; got d = {d}."
        )
    seeds = check_count("seeds", seeds)
    spectra = tuple(spectra)
    unknown = [s for s in spectra if s not in SPECTRA]
    if not spectra or unknown:
        raise ValueError(f"Expected spectra among {tuple(SPECTRA)}, got {spectra!r}.")
    return (
        n_grid,
        d,
        seeds,
        spectra,
        check_positive("epsilon", epsilon),
        check_probability("delta", delta),
    )


# -- the reproduction ------------------------------------------------------------------------------
def reproduce_overparam(
    out: Path,
    *,
    quick: bool = False,
    n_grid: Sequence[int] | None = None,
    n_features: int | None = None,
    seeds: int | None = None,
    spectra: Sequence[str] | None = None,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    seed: int = 0,
    blas_threads: int | None = 1,
) -> dict:
    """Write ``overparam.png`` and ``overparam.json`` into ``out``; return the JSON payload.

    Default: N in (256, 512, 1024, 2048), d = 4096, the four spectra, 4 seeds (about 7 minutes
    on 2 cores); ``quick``: N in (128, 256, 512), d = 1024, r = 2 and the exponential spectrum,
    2 seeds (well under a minute). ``n_grid``, ``n_features`` (default 2 max N; must be >= that),
    ``seeds`` and ``spectra`` (keys of :data:`SPECTRA`) override either.

    ``blas_threads`` caps the BLAS/LAPACK threads while the grid runs (threadpoolctl; None leaves
    them alone). The passes are sequential vector work, and OpenBLAS's threaded ``eigh`` (Σ's
    thin SVD) ran 10x slower than single-threaded on 2 shared cores (5 s vs 0.5 s at 1024).

    Raises ``ValueError`` for an empty or single-size grid, d < 2 max N, unknown spectra,
    epsilon <= 0 or delta outside (0, 1).
    """
    start = time.perf_counter()
    n_grid = n_grid if n_grid is not None else (QUICK_N_GRID if quick else DEFAULT_N_GRID)
    seeds = seeds if seeds is not None else (2 if quick else DEFAULT_SEEDS)
    spectra = spectra if spectra is not None else (QUICK_SPECTRA if quick else tuple(SPECTRA))
    n_grid, d, seeds, spectra, epsilon, delta = _check_inputs(
        n_grid, n_features, seeds, spectra, epsilon, delta
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    timing = dict.fromkeys((*METHODS, "pilot", "theory"), 0.0)

    results: dict[str, Any] = {}
    pilots: dict[str, Any] = {}
    theory: dict[str, Any] = {}
    slopes: dict[str, Any] = {}
    slope_ranges: dict[str, Any] = {}
    rates: dict[str, Any] = {}
    ambssgd_info: dict[str, Any] = {}
    with reproduction_environment(blas_threads, mute_accounting_notices=False):
        for s_index, key in enumerate(spectra):
            kind, r = SPECTRA[key]
            t0 = time.perf_counter()
            pilot_seq = np.random.SeedSequence([seed, 1, s_index])
            pilots[key] = pilot(kind, r, n_grid[:2], d, epsilon, delta, pilot_seq)
            timing["pilot"] += time.perf_counter() - t0
            constants = {m: pilots[key][m]["c"] for m in DESIGNS}
            risks = {m: np.full((len(n_grid), seeds), np.nan) for m in METHODS}
            eps_seen: dict[str, list[float]] = {m: [] for m in PRIVATE_METHODS}
            diverged = {m: [0] * len(n_grid) for m in DESIGNS}
            etas = {
                m: [
                    constants[m] * corollary_step_size(n, tau_at(epsilon, delta, n), kind, r, dz)
                    for n in n_grid
                ]
                for m, dz in DESIGNS.items()
            }
            amb_skipped: list[int] = []
            for i, n in enumerate(n_grid):
                for j in range(seeds):
                    data_seq, *method_seqs = np.random.SeedSequence([seed, 2, s_index, n, j]).spawn(
                        1 + len(METHODS)
                    )
                    data, est = draw(kind, r, n, d, data_seq)
                    rngs = dict(zip(METHODS, map(np.random.default_rng, method_seqs), strict=True))
                    for m, design in DESIGNS.items():
                        t0 = time.perf_counter()
                        risk, eps, div = fit_ftrl(
                            data, est, design, etas[m][i], epsilon, delta, rngs[m]
                        )
                        timing[m] += time.perf_counter() - t0
                        risks[m][i, j] = risk
                        eps_seen[m].append(eps)
                        diverged[m][i] += int(div)
                    t0 = time.perf_counter()
                    risks["dpsgd"][i, j], eps = fit_dpsgd(data, epsilon, delta, rngs["dpsgd"])
                    eps_seen["dpsgd"].append(eps)
                    timing["dpsgd"] += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    try:
                        risks["ambssgd"][i, j], eps = fit_ambssgd(
                            data, epsilon, delta, rngs["ambssgd"]
                        )
                        eps_seen["ambssgd"].append(eps)
                    except ValueError as exc:
                        if "too small" not in str(exc):
                            raise
                        if j == 0:
                            amb_skipped.append(n)
                    timing["ambssgd"] += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    risks["nonprivate_sgd"][i, j] = fit_nonprivate(
                        data, kind, r, rngs["nonprivate_sgd"]
                    )
                    timing["nonprivate_sgd"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            theory[key] = theory_at_sizes(kind, r, data, n_grid, etas, constants, epsilon, delta)
            timing["theory"] += time.perf_counter() - t0
            ambssgd_info[key] = {
                "skipped_n": amb_skipped,
                "min_rows": ambssgd_min_rows(data, epsilon, delta),
            }
            res: dict[str, Any] = {"n": list(n_grid), "d": d, "null_risk": data.null_risk}
            slopes[key], slope_ranges[key] = {}, {}
            for m in METHODS:
                res[m] = summarise(risks[m])
                if m in DESIGNS:
                    res[m].update(diverged=diverged[m], learning_rate=etas[m], c=constants[m])
                if m in eps_seen:
                    res[m]["max_epsilon"] = max(eps_seen[m]) if eps_seen[m] else None
                slopes[key][m] = slope(n_grid, nan_none(res[m]["median"]))
                per_seed = [slope(n_grid, risks[m][:, j]) for j in range(seeds)]
                per_seed = [v for v in per_seed if v is not None]
                slope_ranges[key][m] = [min(per_seed), max(per_seed)] if per_seed else None
            results[key] = res
            rates[key] = paper_slopes(kind, r)

    png = out / "overparam.png"
    plot_overparam(png, results, slopes, rates, n_grid, epsilon)
    reported = [
        results[k][m]["max_epsilon"]
        for k in results
        for m in PRIVATE_METHODS
        if results[k][m].get("max_epsilon") is not None
    ]
    timing["total_s"] = time.perf_counter() - start
    payload = {
        "figure": "overparam",
        "settings": {
            "epsilon": epsilon,
            "delta": delta,
            "neighbouring": "replace-one (DP-SGD: zero-out (epsilon/2, delta/(1+e^(epsilon/2))),"
            " implying replace-one (epsilon, delta) by group privacy)",
            "n_grid": list(n_grid),
            "n_features": d,
            "seeds": seeds,
            "spectra": list(spectra),
            "quick": quick,
            "seed": seed,
            "blas_threads": blas_threads,
            "noise_std": NOISE_STD,
            "theta_star": "theta*_i ~ 1/i, ||theta*|| = 1",
            "x_law": "gaussian",
            "public_unlabeled_rows": "M = N (Σ design and the clip constant C)",
            "estimating_rows": "rows_needed('public', horizon=N) public labeled rows, "
            f"RESIDUALEST option 1 every {RESIDUAL_EVERY} steps",
            "baseline_bounds": f"|x_i| <= {BOUND_SDS:g} sqrt(lambda_i), |y| <= {BOUND_SDS:g} "
            "sqrt(theta*^T H theta* + sigma_zeta^2) (public: from the known law)",
            "nonprivate_step": "min(N^(-1/(1+r)), 1/(2 tr H)) (exponential: min(1, 1/(2 tr H)))",
        },
        "step_size_rule": {
            "rule": "eta = c * eta_corollary(N, tau(N)) (Cor. 4.4 / 4.6 with constants 1); c per "
            "(spectrum, design) from the candidates by the lowest mean log excess risk on a "
            f"separate synthetic draw at N = {list(n_grid[:2])} (never the evaluation draws)",
            "candidates": list(PILOT_CONSTANTS),
            "pilot": pilots,
        },
        "results": results,
        "slopes": slopes,
        "slope_range_over_seeds": slope_ranges,
        "paper_rates": rates,
        "epsilon": {"target": epsilon, "max_reported": max(reported) if reported else None},
        "ambssgd": ambssgd_info,
        "theory": theory,
        "timing_s": timing,
        "png": str(png),
    }
    payload["notes"] = notes(payload)
    (out / "overparam.json").write_text(json.dumps(payload, indent=2))
    return payload
