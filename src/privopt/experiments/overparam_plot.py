"""The figure of the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous
submission)
reproduction (docs/theory/overparameterised-regression.md): excess risk against N, one panel per
spectrum. The experiment is described in :mod:`privopt.experiments.overparam`.
"""

from __future__ import annotations

import math

import numpy as np

from privopt.experiments._common import pyplot, save_figure
from privopt.experiments.overparam_summary import nan_none

__all__ = ["plot_overparam"]


def plot_overparam(path, results, slopes, rates, n_grid, epsilon):
    """Median excess risk against N per spectrum (min-max band over seeds), with Table 1's
    slopes dotted from the first point."""
    plt = pyplot()
    keys = list(results)
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    styles = {
        "ftrl_identity": ("C0", "o", "DP-FTRL, Σ = I"),
        "ftrl_designed": ("C1", "s", "DP-FTRL, designed Σ"),
        "dpsgd": ("C2", "^", "DP-SGD"),
        "ambssgd": ("C4", "v", "DP-AMBSSGD"),
        "nonprivate_sgd": ("0.4", "x", "non-private SGD"),
    }
    for ax, key in zip(axes.flat, keys, strict=False):
        res = results[key]
        x = np.asarray(n_grid, float)
        for method, (colour, marker, label) in styles.items():
            med, lo, hi = (
                np.asarray(nan_none(res[method][k]), float) for k in ("median", "min", "max")
            )
            if not np.isfinite(med).any():
                continue
            s = slopes[key].get(method)
            text = f"{label} (slope {s:.2f}" if s is not None else f"{label} ("
            if method in rates[key]:
                text += f", paper {rates[key][method]:.2f})"
            else:
                text += ")"
            ax.plot(x, med, marker=marker, color=colour, label=text)
            ax.fill_between(x, lo, hi, color=colour, alpha=0.15)
            if method in rates[key] and np.isfinite(med[0]):
                ax.plot(x, med[0] * (x / x[0]) ** rates[key][method], ":", color=colour, lw=1)
        ax.axhline(res["null_risk"], color="k", ls="--", lw=0.8, label="risk of w = 0")
        ax.set_xscale("log")
        ax.set_xticks(x, [str(n) for n in n_grid])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.set(
            yscale="log",
            xlabel="N",
            ylabel="excess risk",
            title=f"{key} (d = {res['d']}, ε = {epsilon:g})",
        )
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(
        "Private Overparameterized Linear Regression (anonymous submission): excess risk vs N "
        "(median, min-max over seeds; dotted: Table 1 slopes)"
    )
    save_figure(fig, path)
