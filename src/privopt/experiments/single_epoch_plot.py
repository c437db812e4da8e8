"""The figure of Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison (issue 8;
docs/theory/single-epoch-srgd.md): accuracy or
excess risk against the number of sequential (batch) steps. The experiment is described in
:mod:`privopt.experiments.single_epoch`.
"""

from __future__ import annotations

from pathlib import Path

from privopt.experiments._common import pyplot, save_figure
from privopt.experiments.single_epoch_config import LABELS, METHODS, PRESETS

__all__ = ["STYLES", "plot_single_epoch"]

#: Colour and marker of each method.
STYLES = {
    "srgd": ("C0", "o-"),
    "srgd-independent": ("C2", "s--"),
    "dp-sgd-single-pass": ("C1", "^-"),
    "dp-sgd-multi-epoch": ("C3", "v-"),
    "srgd-interior-preset": ("C4", "D"),
    "srgd-general-preset": ("C5", "P"),
}


def plot_single_epoch(path: Path, payload: dict) -> None:
    """Accuracy (Adult) and excess risk (synthetic) against sequential steps, one panel per
    problem and epsilon, from the JSON payload of
    :func:`~privopt.experiments.single_epoch.reproduce_single_epoch`."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    rows = [("synthetic", "excess population risk")]
    if "results" in payload["adult"]:
        rows.append(("adult", "Adult test accuracy"))
    epsilons = payload["epsilons"]
    fig, axes = plt.subplots(
        len(rows), len(epsilons), figsize=(4.6 * len(epsilons), 3.9 * len(rows)), squeeze=False
    )
    for r, (name, ylabel) in enumerate(rows):
        block = payload[name]
        reference = block["non_private"]["erm_excess_risk" if name == "synthetic" else "accuracy"]
        for c, epsilon in enumerate(epsilons):
            ax = axes[r][c]
            lowest = reference
            for method, per_eps in block["results"].items():
                points = per_eps[f"{epsilon:g}"]
                colour, fmt = STYLES[method]
                steps = [p["sequential_steps"] for p in points]
                means = [p["mean"] for p in points]
                if method in METHODS:
                    lowest = min(lowest, *(p["mean"] - p["std"] for p in points))
                ax.errorbar(
                    steps,
                    means,
                    yerr=[p["std"] for p in points],
                    fmt=fmt,
                    color=colour,
                    capsize=3,
                    ms=5,
                    label=LABELS[method],
                )
            ax.axhline(
                reference,
                color="k",
                ls=":",
                lw=1,
                label="non-private (synthetic: ERM on the same n; Adult: logistic regression)",
            )
            if name == "synthetic":
                ax.set_yscale("log")
            else:
                # presets far below the validated methods are marked at the bottom edge
                bottom = lowest - 0.01
                ax.set_ylim(bottom, max(reference, lowest) + 0.006)
                for method in PRESETS:
                    (point,) = block["results"][method][f"{epsilon:g}"]
                    if point["mean"] < bottom:
                        colour, _ = STYLES[method]
                        x = point["sequential_steps"]
                        ax.plot([x], [bottom + 0.002], "v", color=colour, ms=7)
                        ax.annotate(
                            f"{point['mean']:.3f}",
                            (x, bottom + 0.004),
                            color=colour,
                            fontsize=7,
                            ha="center",
                        )
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("sequential (batch) steps")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, epsilon = {epsilon:g}, delta = {payload['delta']:g}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(
        "Choquette-Choo, Ganesh & Thakurta (2025): single-epoch Accelerated-DP-SRGD vs DP-SGD "
        "(mean ± 1 sd over seeds; "
        "Adult presets below the axis are marked with their accuracy)",
        fontsize=10,
    )
    save_figure(fig, path, rect=(0, 0.1, 1, 0.97))
