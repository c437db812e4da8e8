"""Reproduction of Choquette-Choo et al.'s (2024) Figure 1: optimal correlations for mean
estimation.

Left panel: the privacy-term ratio F_inf(beta*) / F_inf(DP-SGD) = 4 eta (2 - eta) K(1 - eta)^2 /
pi^2 against the learning rate eta (closed form, docs/theory/correlated-noise.md). Right panels:
beta* = nu-DP-FTRL with nu = eta in time (|beta*_t|, ~ t^{-3/2} (1 - eta)^t) and frequency
(|B*(omega)|^2 = |1 - eta - e^{i omega}|).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from privopt.experiments._common import pyplot, save_figure
from privopt.noise import nu_beta
from privopt.theory import optimal_to_dpsgd_ratio

__all__ = ["reproduce_fig1"]


def reproduce_fig1(
    out: Path, *, quick: bool = False, etas: tuple[float, ...] = (0.01, 0.05, 0.2)
) -> dict:
    """Write ``fig1.png`` and ``fig1.json`` into ``out``; return the JSON payload.

    Closed forms only, so ``quick`` changes nothing (accepted for a uniform interface).
    """
    plt = pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = np.logspace(-3, np.log10(1.99), 200)
    ratio = [optimal_to_dpsgd_ratio(e) for e in grid]
    steps = np.arange(1, 2001)
    omega = np.linspace(-np.pi, np.pi, 801)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].loglog(grid, ratio)
    axes[0].set(
        xlabel="learning rate eta",
        ylabel="F_inf(beta*) / F_inf(DP-SGD)",
        title="privacy-term ratio (Fig. 1, left)",
    )
    for eta in etas:
        beta = nu_beta(eta, steps.size + 1)
        axes[1].loglog(steps, np.abs(beta[1:]), label=f"eta = {eta:g}")
        axes[2].plot(omega, np.abs(1 - eta - np.exp(1j * omega)), label=f"eta = {eta:g}")
    axes[1].set(xlabel="t", ylabel="|beta*_t|", title="beta* in time", ylim=(1e-12, 1.0))
    axes[2].set(xlabel="omega", ylabel="|B*(omega)|^2", title="beta* in frequency")
    axes[1].legend()
    axes[2].legend()
    save_figure(fig, out / "fig1.png")
    payload = {
        "figure": "fig1",
        "ratio": {f"{e:g}": optimal_to_dpsgd_ratio(e) for e in (0.001, 0.01, 0.1, 0.5, 1.0)},
        "eta_grid": grid.tolist(),
        "ratio_curve": ratio,
        "beta_star_first_terms": {f"{e:g}": nu_beta(e, 6).tolist() for e in etas},
        "png": str(out / "fig1.png"),
    }
    (out / "fig1.json").write_text(json.dumps(payload, indent=2) + "\n")
    return payload
