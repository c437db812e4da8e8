"""Figures of public quantities: noise per step, epsilon curves, a search's budget split.

Every function here draws only public values (mechanism matrices, accountant outputs, the
budget a user chose); none reads data. Figures are written with matplotlib's Agg backend
(imported on first use): PNG by default, SVG or PDF when the file name says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FIGURE_SUFFIXES",
    "figure_path",
    "plot_curve",
    "plot_prefix_errors",
    "plot_search_tradeoff",
    "save_figure",
]

#: file suffixes a figure can be written as (matplotlib's format is taken from the suffix)
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def figure_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with a figure suffix (none: ``.png`` is appended), its folder existing."""
    path = Path(path)
    if path.suffix == "":
        path = path.with_suffix(".png")
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise ValueError(
            f"Expected a figure file ending in {', '.join(FIGURE_SUFFIXES)}, got {str(path)!r}."
        )
    if path.is_dir():
        raise ValueError(f"The figure file {path} is a directory; give a file name.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"Cannot write the figure {path}: folder {parent} does not exist.")
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain_ticks(axis: Any) -> None:
    """Plain numbers (2, 5, 20 rather than 2 x 10^0) on a log axis."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    formatter = ScalarFormatter()
    formatter.set_scientific(False)
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


def save_figure(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` (tight layout, 100 dpi) to ``path`` and close it; returns the path."""
    target = figure_path(path)
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    _pyplot().close(fig)
    return target


def plot_prefix_errors(
    errors: Mapping[str, np.ndarray], path: str | os.PathLike[str], *, title: str = ""
) -> Path:
    """Root-mean-square error of each released prefix sum against the step, one line per
    mechanism (unit clip norm and unit noise multiplier), log scale."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for name, squared in errors.items():
        steps = np.arange(1, len(squared) + 1)
        ax.plot(steps, np.sqrt(np.asarray(squared, dtype=float)), label=name, linewidth=1.4)
    ax.set_xlabel("step t")
    ax.set_ylabel("RMS error of the t-th prefix sum")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or "Noise in the released prefix sums, per step")
    return save_figure(fig, path)


def plot_curve(
    x: Sequence[float],
    y: Sequence[float],
    path: str | os.PathLike[str],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    mark: tuple[float, float] | None = None,
    logx: bool = False,
) -> Path:
    """One curve ``y(x)`` with the requested point ``mark`` highlighted."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    ax.plot(x, y, linewidth=1.6)
    if mark is not None:
        ax.plot([mark[0]], [mark[1]], "o", color="C3", label=f"({mark[0]:.4g}, {mark[1]:.4g})")
        ax.legend(loc="best")
    if logx:
        ax.set_xscale("log")
        _plain_ticks(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path)


def plot_search_tradeoff(
    counts: Sequence[int],
    candidate_epsilon: Sequence[float],
    shortfall: Sequence[float],
    chosen: int,
    path: str | os.PathLike[str],
    *,
    title: str,
    confidence: float,
) -> Path:
    """Two panels against the number of candidates: each candidate's epsilon, and the
    selection's utility shortfall (in validation records) at ``confidence``; ``chosen``
    marked."""
    plt = _pyplot()
    counts = np.asarray(counts)
    at = int(np.flatnonzero(counts == chosen)[0])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    for ax, values, label in (
        (left, candidate_epsilon, "epsilon of each candidate's fit"),
        (right, shortfall, f"selection shortfall ({confidence:.0%}), records"),
    ):
        ax.plot(counts, values, linewidth=1.6)
        ax.plot([chosen], [values[at]], "o", color="C3", label=f"k = {chosen}: {values[at]:.3g}")
        ax.set_xlabel("number of candidates k")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best")
    fig.suptitle(title)
    return save_figure(fig, path)
