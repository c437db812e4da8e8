"""``privopt noise ...``: correlated-noise mechanisms (sensitivity, tuning, BLT, comparison)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from privopt import noise
from privopt._cli_common import JsonFlag, PlotOption, PlotOverwrite, _emit, plot_target

noise_app = typer.Typer(
    help="Correlated-noise mechanisms: sensitivity, tuning, BLT, comparison.", no_args_is_help=True
)

MECHANISMS = {
    "independent": lambda nu: noise.independent(),
    "nu-dpftrl": lambda nu: noise.nu_dpftrl(_require_nu(nu)),
    "optimal-cc": lambda nu: noise.optimal_cc(),
    "anti-pgd": lambda nu: noise.anti_pgd(),
    "damped-anti-pgd": lambda nu: noise.damped_anti_pgd(_require_nu(nu)),
    "tree": lambda nu: noise.TreeAggregation(),
    "tree-honaker": lambda nu: noise.TreeAggregation(variance_reduction=True),
}


#: Largest horizon the ``noise`` commands accept: their losses and references hold O(steps)
#: float64 arrays (80 MB each at the limit; ``--steps 1e9`` asked for 7.45 GiB and more).
MAX_STEPS = 10_000_000


def _check_steps(steps: int | None) -> None:
    if steps is not None and steps > MAX_STEPS:
        raise ValueError(
            f"Expected --steps <= {MAX_STEPS:,} (the stated limit of privopt noise: its losses "
            f"hold arrays of steps float64 values), got {steps:,}; use a shorter horizon."
        )


def _require_nu(nu: float | None) -> float:
    if nu is None:
        raise ValueError("--nu is required for this mechanism.")
    return nu


def _participation(min_sep: int | None, participations: int | None) -> noise.Participation:
    if (min_sep is None) != (participations is None):
        raise ValueError("Give both --min-sep and --participations, or neither.")
    if min_sep is None:
        return noise.Participation.single()
    return noise.Participation.multiple(min_sep, participations)  # type: ignore[arg-type]


def _with_pattern(
    result: dict[str, Any], min_sep: int | None, participations: int | None
) -> dict[str, Any]:
    """``result`` with the run's min-separation pattern appended (none: single participation)."""
    if min_sep is not None:
        result.update(min_sep=min_sep, participations=participations)
    return result


#: default bands of ``noise compare``'s banded rows under single participation
DEFAULT_SINGLE_BANDS = 32

MinSep = Annotated[int | None, typer.Option("--min-sep", help="Min steps between participations.")]
Participations = Annotated[
    int | None, typer.Option("--participations", help="Max participations per record.")
]


@noise_app.command("sensitivity")
def noise_sensitivity(
    mechanism: Annotated[str, typer.Option("--mechanism", help=", ".join(MECHANISMS))],
    steps: Annotated[int | None, typer.Option("--steps", help="Horizon T.")] = None,
    nu: Annotated[float | None, typer.Option("--nu", help="nu in [0, 1].")] = None,
    min_sep: MinSep = None,
    participations: Participations = None,
    anytime: Annotated[bool, typer.Option("--anytime", help="Limit as T -> infinity.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """l2 sensitivity of a mechanism's C = B^{-1} (single, anytime or min-separation)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"Expected --mechanism in ({', '.join(MECHANISMS)}), got {mechanism!r}.")
    _check_steps(steps)
    mech = MECHANISMS[mechanism](nu)
    if anytime:
        if min_sep is not None or participations is not None:
            raise ValueError("--anytime applies to single participation only.")
        pattern = noise.Participation.anytime()
    else:
        if steps is None:
            raise ValueError("--steps is required unless --anytime is given.")
        pattern = _participation(min_sep, participations)
    squared = mech.sensitivity_squared(steps, pattern)
    result = {
        "sensitivity": squared**0.5,
        "sensitivity_squared": squared,
        "mechanism": mech.name,
        "steps": steps,
        "participation": pattern.kind,
    }
    _emit("Mechanism sensitivity", result, as_json)


@noise_app.command("tune-nu")
def noise_tune_nu(
    steps: Annotated[int, typer.Option("--steps", help="Horizon T.")],
    min_sep: MinSep = None,
    participations: Participations = None,
    as_json: JsonFlag = False,
) -> None:
    """nu minimising nu-DP-FTRL's normalised prefix-sum error (data-independent)."""
    _check_steps(steps)
    choice = noise.tune_nu(steps, min_sep, participations)
    result = {"nu": choice.nu, "loss": choice.loss, "steps": steps}
    _emit("nu tuning", _with_pattern(result, min_sep, participations), as_json)


@noise_app.command("blt")
def noise_blt(
    steps: Annotated[int, typer.Option("--steps", help="Horizon n (number of steps).")],
    min_sep: MinSep = None,
    participations: Participations = None,
    error: Annotated[
        str, typer.Option("--error", help="Loss to minimise: max or mean prefix-sum error.")
    ] = "max",
    buffers: Annotated[
        int | None, typer.Option("--buffers", help="Number of buffers (default: grown to < 1%).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Optimised BLT noise for a run: buffer decays, output scales, sensitivity and losses.

    The loss ratio compares with the optimal Toeplitz (the square root of the prefix-sum
    matrix) for single participation, and with a tuned nu-DP-FTRL under min-separation.
    """
    if error not in ("max", "mean"):
        raise ValueError(f"Expected --error in (max, mean), got {error!r}.")
    _check_steps(steps)
    pattern = _participation(min_sep, participations)
    pattern.check_steps(steps)
    mech = noise.optimize_blt(
        steps, min_sep=min_sep, participations=participations, error=error, buffers=buffers
    )
    max_loss, mean_loss = mech.prefix_losses(steps, pattern)
    if min_sep is None:
        reference_name = "optimal Toeplitz"
        reference = noise.optimal_cc().prefix_losses(steps)
    else:
        nu = noise.tune_nu(steps, min_sep, participations).nu
        reference_name = f"nu-DP-FTRL (tuned nu = {nu:.4g})"
        reference = noise.nu_dpftrl(nu).prefix_losses(steps, pattern)
    ours = max_loss if error == "max" else mean_loss
    result: dict[str, Any] = {
        "buf_decay": mech.buf_decay.tolist(),
        "output_scale": mech.output_scale.tolist(),
        "buffers": mech.buffers,
        "sensitivity_squared": mech.sensitivity_squared(steps, pattern),
        "max_loss": max_loss,
        "mean_loss": mean_loss,
        "error": error,
        "reference": reference_name,
        "loss_ratio_to_reference": ours / (reference[0] if error == "max" else reference[1]),
        "steps": steps,
    }
    _emit("Optimised BLT", _with_pattern(result, min_sep, participations), as_json)


@noise_app.command("compare")
def noise_compare(
    steps: Annotated[int, typer.Option("--steps", help="Horizon n (at most 4096).")],
    min_sep: MinSep = None,
    participations: Participations = None,
    bands: Annotated[
        int | None,
        typer.Option(
            "--bands",
            help="Bands L of the banded mechanisms (default: min(min-sep, steps), or "
            f"min({DEFAULT_SINGLE_BANDS}, steps) for single participation).",
        ),
    ] = None,
    as_json: JsonFlag = False,
    plot: PlotOption = None,
    overwrite: PlotOverwrite = False,
) -> None:
    """Every mechanism's prefix-sum losses and stream state for the same run (one table).

    With --plot FILE, also a figure of each mechanism's RMS error of the t-th prefix sum
    against t (unit clip norm and noise multiplier).

    Banded rows: the square root of A truncated to the best L <= --bands (``choose_bands``),
    banded Toeplitz coefficients optimised for the run's max loss at L = --bands, and their
    column-normalised banded MF; each streams with L - 1 model-sized buffers. Their
    sensitivities are exact when --bands <= --min-sep (disjoint columns).
    """
    import warnings

    if not 1 <= steps <= 4096:
        raise ValueError(f"Expected --steps in [1, 4096] (dense tree losses), got {steps}.")
    pattern = _participation(min_sep, participations)
    pattern.check_steps(steps)
    if bands is None:
        bands = min(steps, DEFAULT_SINGLE_BANDS if min_sep is None else min_sep)
    if not 1 <= bands <= steps or (min_sep is not None and bands > min_sep):
        raise ValueError(f"Expected --bands in [1, min(steps, min-sep)], got {bands}.")
    figure = plot_target(plot, overwrite)
    nu = noise.tune_nu(steps, min_sep, participations).nu
    blt = noise.optimize_blt(steps, min_sep=min_sep, participations=participations)
    bsr = noise.choose_bands(steps, min_sep, participations, max_bands=bands).bands
    banded = noise.optimize_banded_toeplitz(
        steps, bands, min_sep=min_sep, participations=participations
    )
    levels = noise.TreeAggregation.levels(steps)
    rows: dict[str, dict[str, Any]] = {}
    errors: dict[str, Any] = {}
    candidates = [
        ("independent", noise.independent(), 0),
        ("tree", noise.TreeAggregation(), levels),
        ("tree-honaker", noise.TreeAggregation(variance_reduction=True), levels),
        (f"nu-dpftrl (nu={nu:.4g})", noise.nu_dpftrl(nu), steps),
        ("optimal-cc", noise.optimal_cc(), steps),
        (f"blt ({blt.buffers} buffers)", blt, blt.buffers),
        (f"banded sqrt(A) (L={bsr})", noise.banded_toeplitz(noise.optimal_cc(), bsr), bsr - 1),
        (f"banded optimised (L={bands})", banded, bands - 1),
        (
            f"banded MF, column-normalised (L={bands})",
            noise.column_normalized_banded(banded.coefficients, bands, steps),
            bands - 1,
        ),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.SensitivityUpperBoundWarning)  # stated below
        for name, mech, state in candidates:
            max_loss, mean_loss = mech.prefix_losses(steps, pattern)
            rows[name] = {"max_loss": max_loss, "mean_loss": mean_loss, "state_vectors": state}
            if figure is not None:
                errors[name] = mech.prefix_errors(steps, pattern)
    result = _with_pattern({"steps": steps, "mechanisms": rows}, min_sep, participations)
    if figure is not None:
        from privopt.plots import plot_prefix_errors

        pattern_text = (
            "single participation"
            if min_sep is None
            else (f"min-separation {min_sep}, {participations} participations")
        )
        result["plot"] = str(
            plot_prefix_errors(
                errors, figure, title=f"Prefix-sum noise, n = {steps}, {pattern_text}"
            )
        )
    if min_sep is not None:
        result["note"] = "tree sensitivities under min-separation are upper bounds"
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"Prefix-sum losses, n = {steps}", title_justify="left")
    for column in ("mechanism", "max loss", "mean loss", "state (model-sized vectors)"):
        table.add_column(column)
    for name, row in rows.items():
        table.add_row(
            name, f"{row['max_loss']:.6g}", f"{row['mean_loss']:.6g}", str(row["state_vectors"])
        )
    Console().print(table)
    if figure is not None:
        Console().print(f"figure written to {result['plot']}")
