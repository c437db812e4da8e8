"""The ``privopt`` command line.

``privopt account ...`` answers accounting questions (epsilon of a mechanism, the noise a target
needs); each command prints a readable table, or one JSON object with ``--json``. Bad arguments
exit with status 2 and a one-line reason on stderr.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from privopt import accounting as acc
from privopt._cli_common import (
    Delta,
    JsonFlag,
    PlotOption,
    PlotOverwrite,
    _emit,
    input_file,
    output_dir,
    output_file,
    plot_target,
    read_linear_model,
    root_callback,
    run_app,
)
from privopt._cli_datasets import datasets_app
from privopt._cli_fit_backend import (
    BackendOption,
    DataArgument,
    SchedulerOption,
    WorkersOption,
    load_training_data,
)
from privopt._cli_noise import noise_app
from privopt.audit.cli_audit import audit_app

app = typer.Typer(
    name="privopt",
    help="Differentially private optimisation with exact, stated privacy accounting.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
account_app = typer.Typer(
    help="Privacy accounting: epsilon of a mechanism, or the noise a target needs.",
    no_args_is_help=True,
)
app.add_typer(account_app, name="account")
app.add_typer(noise_app, name="noise")
app.add_typer(audit_app, name="audit")
app.add_typer(datasets_app, name="datasets")
app.callback()(root_callback)
# name -> (module, function, payload keys too large for stdout). Each function takes
# (out: Path, *, quick: bool) and writes NAME.png and NAME.json into out.
REPRODUCTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "fig1": ("privopt.experiments.fig1", "reproduce_fig1", ("ratio_curve", "eta_grid")),
    "fig2": ("privopt.experiments.fig2", "reproduce_fig2", ()),
    "fig3": ("privopt.experiments.fig3", "reproduce_fig3", ()),
    "cifar-style": ("privopt.experiments.cifar_style", "reproduce_cifar_style", ()),
    "overparam": ("privopt.experiments.overparam", "reproduce_overparam", ()),
    "single-epoch": ("privopt.experiments.single_epoch", "reproduce_single_epoch", ()),
    "federated": ("privopt.experiments.federated", "reproduce_federated", ()),
}


#: the options the accounting commands share (a forward command and its calibration mirror)
TargetEpsilon = Annotated[float, typer.Option("--epsilon", help="Target epsilon, > 0.")]
Sensitivity = Annotated[float, typer.Option("--sensitivity", help="l2 sensitivity.")]
Accountant = Annotated[
    str, typer.Option("--accountant", help="pld (privacy loss distribution) or rdp.")
]
SampleRate = Annotated[float, typer.Option("--sample-rate", help="Poisson rate q in (0, 1].")]
Steps = Annotated[int, typer.Option("--steps", help="Number of steps T >= 1.")]


@account_app.command("gaussian")
def account_gaussian(
    sigma: Annotated[float, typer.Option("--sigma", help="Noise standard deviation.")],
    delta: Delta,
    sensitivity: Sensitivity = 1.0,
    as_json: JsonFlag = False,
    plot: PlotOption = None,
    overwrite: PlotOverwrite = False,
) -> None:
    """Exact epsilon of one Gaussian release (Balle & Wang 2018); --plot draws epsilon
    against the noise std from sigma/4 to 4 sigma."""
    figure = plot_target(plot, overwrite)
    epsilon = acc.gaussian_epsilon(sigma, delta, sensitivity)
    result = {
        "epsilon": epsilon,
        "sigma": sigma,
        "sensitivity": sensitivity,
        "delta": delta,
        "mu": sensitivity / sigma,
        "rho": acc.gaussian_rho(sensitivity, sigma),
        "method": "exact",
    }
    if figure is not None:
        sigmas = np.geomspace(sigma / 4, sigma * 4, 61)
        curve = [acc.gaussian_epsilon(s, delta, sensitivity) for s in sigmas]
        result["plot"] = _plot_epsilon(
            figure, sigmas, curve, "noise std sigma", (sigma, epsilon),
            f"One Gaussian release, sensitivity {sensitivity:g}, delta = {delta:g}",
        )  # fmt: skip
    _emit("Gaussian mechanism (exact)", result, as_json)


@account_app.command("calibrate-gaussian")
def account_calibrate_gaussian(
    epsilon: TargetEpsilon,
    delta: Delta,
    sensitivity: Sensitivity = 1.0,
    as_json: JsonFlag = False,
) -> None:
    """Smallest Gaussian noise std for a target (epsilon, delta), exact and rounded up."""
    # A what-if calculator of accounting, not a calibration of a run: it prints what
    # privopt.accounting.calibrate_gaussian_sigma answers (next to the classical formula) and
    # trains nothing; a fit's noise comes from its plan (TrainingPlan.calibrate).
    sigma = acc.calibrate_gaussian_sigma(epsilon, delta, sensitivity)
    result = {
        "sigma": sigma,
        "epsilon": epsilon,
        "delta": delta,
        "sensitivity": sensitivity,
        "classical_sigma": acc.classical_gaussian_sigma(epsilon, delta, sensitivity),
        "classical_sigma_delta": acc.gaussian_delta(
            acc.classical_gaussian_sigma(epsilon, delta, sensitivity), epsilon, sensitivity
        ),
        "method": "exact",
    }
    _emit("Gaussian calibration (exact)", result, as_json)


@account_app.command("zcdp")
def account_zcdp(
    delta: Delta,
    rho: Annotated[float | None, typer.Option("--rho", help="rho of rho-zCDP.")] = None,
    epsilon: Annotated[
        float | None, typer.Option("--epsilon", help="Target epsilon: print the largest rho.")
    ] = None,
    conversion: Annotated[
        str, typer.Option("--conversion", help="tight (Canonne et al.) or bun-steinke.")
    ] = "tight",
    as_json: JsonFlag = False,
) -> None:
    """Convert rho-zCDP to (epsilon, delta), or with --epsilon find the largest rho."""
    if (rho is None) == (epsilon is None):
        raise ValueError("Give exactly one of --rho or --epsilon.")
    if rho is not None:
        result: dict[str, Any] = {
            "epsilon": acc.zcdp_epsilon(rho, delta, conversion),  # type: ignore[arg-type]
            "rho": rho,
        }
    else:
        result = {"rho": acc.zcdp_rho(epsilon, delta, conversion), "epsilon": epsilon}  # type: ignore[arg-type]
    result.update({"delta": delta, "conversion": conversion})
    _emit("zCDP conversion", result, as_json)


@account_app.command("gdp")
def account_gdp(
    mu: Annotated[float, typer.Option("--mu", help="mu of mu-GDP.")],
    delta: Delta,
    as_json: JsonFlag = False,
    plot: PlotOption = None,
    overwrite: PlotOverwrite = False,
) -> None:
    """Exact epsilon at delta of a mu-GDP mechanism; --plot draws epsilon against mu from
    mu/4 to 4 mu."""
    figure = plot_target(plot, overwrite)
    result: dict[str, Any] = {"epsilon": acc.gdp_epsilon(mu, delta), "mu": mu, "delta": delta}
    if figure is not None:
        mus = np.geomspace(mu / 4, mu * 4, 61)
        result["plot"] = _plot_epsilon(
            figure, mus, [acc.gdp_epsilon(m, delta) for m in mus], "mu",
            (mu, result["epsilon"]), f"mu-GDP at delta = {delta:g}",
        )  # fmt: skip
    _emit("Gaussian DP conversion (exact)", result, as_json)


def _plot_epsilon(path, x, epsilons, xlabel: str, mark, title: str) -> str:
    """Draw epsilon against ``x`` (log x axis) with the asked point marked; the file name."""
    from privopt.plots import plot_curve

    return str(
        plot_curve(
            x, epsilons, path, xlabel=xlabel, ylabel="epsilon", title=title, mark=mark, logx=True
        )
    )


def _dpsgd_setting(sample_rate: float, steps: int, delta: float, accountant: str) -> dict:
    """The public setting that ``account dpsgd`` and ``calibrate-dpsgd`` report alike."""
    return {"sample_rate": sample_rate, "steps": steps, "delta": delta, "accountant": accountant}


@account_app.command("dpsgd")
def account_dpsgd(
    sigma: Annotated[float, typer.Option("--sigma", help="Noise multiplier (std / clip).")],
    sample_rate: SampleRate,
    steps: Steps,
    delta: Delta,
    accountant: Accountant = "pld",
    as_json: JsonFlag = False,
    plot: PlotOption = None,
    overwrite: PlotOverwrite = False,
) -> None:
    """epsilon of DP-SGD with Poisson sampling (add/remove-one), via dp_accounting; --plot
    draws epsilon against the number of steps, 1 to --steps."""
    figure = plot_target(plot, overwrite)
    epsilon = acc.dpsgd_epsilon(sigma, sample_rate, steps, delta, accountant)  # type: ignore[arg-type]
    result: dict[str, Any] = {
        "epsilon": epsilon,
        "sigma": sigma,
        **_dpsgd_setting(sample_rate, steps, delta, accountant),
    }
    if figure is not None:
        counts = np.unique(np.geomspace(1, steps, min(steps, 24)).round().astype(int))
        curve = [acc.dpsgd_epsilon(sigma, sample_rate, int(t), delta, accountant) for t in counts]  # type: ignore[arg-type]
        result["plot"] = _plot_epsilon(
            figure, counts, curve, "steps", (steps, epsilon),
            f"DP-SGD, sigma = {sigma:g}, q = {sample_rate:g}, delta = {delta:g} ({accountant})",
        )  # fmt: skip
    _emit("DP-SGD (Poisson-sampled Gaussian)", result, as_json)


@account_app.command("calibrate-dpsgd")
def account_calibrate_dpsgd(
    epsilon: TargetEpsilon,
    sample_rate: SampleRate,
    steps: Steps,
    delta: Delta,
    accountant: Accountant = "pld",
    as_json: JsonFlag = False,
) -> None:
    """Smallest DP-SGD noise multiplier for a target (epsilon, delta), rounded up."""
    # A what-if calculator of accounting (dp_accounting's answer for q and T), not a
    # calibration of a run: it trains nothing; a fit's noise comes from its plan
    # (TrainingPlan.calibrate, which routes a Poisson plan to this same function).
    sigma = acc.calibrate_dpsgd_noise(epsilon, delta, sample_rate, steps, accountant)  # type: ignore[arg-type]
    result = {
        "sigma": sigma,
        "epsilon": epsilon,
        **_dpsgd_setting(sample_rate, steps, delta, accountant),
    }
    _emit("DP-SGD calibration", result, as_json)


@account_app.command("shuffle")
def account_shuffle(
    noise_multiplier: Annotated[
        float, typer.Option("--noise-multiplier", help="Std / replace-one sensitivity per step.")
    ],
    num_records: Annotated[int, typer.Option("--num-records", help="Records n (one step each).")],
    delta: Delta,
    as_json: JsonFlag = False,
) -> None:
    """epsilon of one shuffled pass of Gaussian steps (FMT21 amplification by shuffling)."""
    g = acc.shuffled_gaussian_guarantee(noise_multiplier, num_records, delta)
    result = {
        "epsilon": g.epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "num_records": num_records,
        "local_epsilon": g.local_epsilon,
        "local_delta": g.local_delta,
    }
    _emit("Amplification by shuffling (FMT21)", result, as_json)


@app.command("fit")
def fit(
    data: Annotated[Path, DataArgument],
    target: Annotated[str, typer.Option("--target", help="Name of the target column.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the model (JSON).")],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Privacy loss, > 0.")] = 1.0,
    delta: Annotated[float, typer.Option("--delta", help="In (0, 1); below 1/N.")] = 1e-6,
    method: Annotated[
        str,
        typer.Option(
            "--method", help="auto (by N, d, epsilon), newton, dpsgd, adassp, ambssgd or ssgd."
        ),
    ] = "auto",
    features: Annotated[
        str | None, typer.Option("--features", help="Comma-separated feature columns.")
    ] = None,
    bounds: Annotated[
        Path | None,
        typer.Option(
            "--bounds",
            help='Public bounds JSON: {"features": {"col": \\[lo, hi], ...}, '
            '"target": \\[lo, hi]}.',
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    no_intercept: Annotated[bool, typer.Option("--no-intercept", help="Fit y = <x, w>.")] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed of all randomness, noise included, in [0, 2^32 - 1]: keep it secret, use "
            "it for one fit only (omit for fresh noise).",
            min=0,
            max=2**32 - 1,
        ),
    ] = None,
    neighbouring: Annotated[
        str,
        typer.Option(
            "--neighbouring",
            help="auto (each method's own), zero-out (every method) or replace-one (not dpsgd).",
        ),
    ] = "auto",
    secure: Annotated[
        bool,
        typer.Option(
            "--secure", help="Draw the noise with ChaCha20 keyed by the OS (not with --seed)."
        ),
    ] = False,
    allow_large_delta: Annotated[
        bool, typer.Option("--allow-large-delta", help="Accept delta >= 1/N (not advised).")
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out.")] = (
        False
    ),
    as_json: JsonFlag = False,
    backend: BackendOption = "numpy",
    scheduler: SchedulerOption = None,
    workers: WorkersOption = None,
) -> None:
    """Fit a private linear regression and save it; prints the privacy report."""
    from privopt.estimators import DPLinearRegression

    if secure and seed is not None:
        raise ValueError("Give --seed (reproducible noise) or --secure (OS-keyed noise), not both.")
    out = output_file(out, overwrite=overwrite, what="model file")
    names = [c.strip() for c in features.split(",")] if features else None
    table = load_training_data(data, target, names, backend, scheduler, workers)
    feature_bounds, target_bounds = _read_bounds(bounds, table.feature_names, target)
    model = DPLinearRegression(
        epsilon=epsilon,
        delta=delta,
        method=method,
        fit_intercept=not no_intercept,
        feature_bounds=feature_bounds,
        target_bounds=target_bounds,
        random_state=seed,
        secure_mode=secure,
        neighbouring=neighbouring,
        allow_large_delta=allow_large_delta,
    )
    console = Console(stderr=as_json)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        progress.add_task(f"Fitting {method} on {table.X.shape[0]} rows", total=None)
        model.fit(table.X, table.y)
    report = model.privacy_report_
    payload = {
        "format": "privopt-linear-model/1",
        "method": model.fit_info_["method"],  # the one "auto" chose
        "features": list(table.feature_names),
        "target": table.target,
        "coef": model.coef_.tolist(),
        "intercept": float(model.intercept_),
        # where predict clips each feature (null: unbounded)
        "feature_range": [
            [float(v) if np.isfinite(v) else None for v in pair] for pair in model.feature_range_
        ],
        "epsilon": report.epsilon,
        "delta": report.delta,
        "rho": report.rho,
        # N is public under every relation privopt uses (replace-one, zero-out): see
        # "neighbouring" and the report's assumptions.
        "n_rows": int(table.X.shape[0]),
        "neighbouring": report.neighbouring,
        # a private estimate of the model's R^2 on its training rows (a recorded release;
        # null for methods that do not make it)
        "private_r2": _finite_or_none(getattr(model, "private_r2_", math.nan)),
        "private_r2_se": _finite_or_none(model.fit_info_.get("private_r2_se", math.nan)),
        "privacy_report": report.to_dict(),
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    if as_json:
        print(json.dumps(payload))
        return
    report.render(console)
    if model.fit_info_["method"] == "intercept-only":  # a constant: R^2 <= 0, nothing released
        console.print("\nThe model is the intercept only (its R^2 is at most 0); see the warning.")
    elif payload["private_r2"] is not None:
        console.print(
            f"\nPrivate estimate of the model's R^2 on its training rows: "
            f"{payload['private_r2']:.3f} (standard error {payload['private_r2_se']:.3f}; "
            "a recorded release, listed above)."
        )
    console.print(f"\nModel ({method}) written to {out}.")


def _finite_or_none(value: float) -> float | None:
    """``value`` as a float, or None (JSON null) when it is NaN or infinite."""
    value = float(value)
    return value if math.isfinite(value) else None


def _read_bounds(path: Path | None, features, target: str):
    if path is None:
        return None, None
    try:
        spec = json.loads(Path(path).read_text())
        feature_spec, target_spec = spec["features"], spec["target"]
        feature_bounds = [feature_spec[name] for name in features]
    except FileNotFoundError:
        raise ValueError(f"Bounds file {path} does not exist.") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(
            f"Bounds file {path} must hold {{'features': {{column: [lo, hi]}}, 'target': [lo, hi]}}"
            f" for every feature and the target {target!r} ({exc!s})."
        ) from None
    return feature_bounds, target_spec


@app.command("predict")
def predict(
    model_path: Annotated[Path, input_file("A model written by `privopt fit`.")],
    data: Annotated[Path, input_file("Rows to predict (.csv, .csv.gz, .parquet).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the predictions (CSV) there instead of stdout."),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out.")] = (
        False
    ),
    as_json: JsonFlag = False,
) -> None:
    """Predict with a saved model (post-processing: no privacy cost).

    The predictions go to exactly one place: the --out CSV if given (then --json prints only
    {"out": ..., "rows": ...}), else stdout (CSV, or {"predictions": [...]} with --json).
    """
    if out is not None:
        out = output_file(out, overwrite=overwrite, what="predictions file")

    from privopt.datasets import load_features

    coef, intercept, names, feature_range = read_linear_model(model_path)
    low, high = feature_range.T  # the model's features, clipped as in its fit
    predictions = np.clip(load_features(data, names), low, high) @ coef + intercept
    text = "prediction\n" + "\n".join(f"{p:.10g}" for p in predictions) + "\n"
    if out is not None:
        out.write_text(text)
        if as_json:
            print(json.dumps({"out": str(out), "rows": int(predictions.size)}))
    elif as_json:
        print(json.dumps({"predictions": predictions.tolist()}))
    else:
        sys.stdout.write(text)


@app.command("reproduce")
def reproduce(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(REPRODUCTIONS)}.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the PNG and JSON.")],
    quick: Annotated[bool, typer.Option("--quick", help="Small size (for tests).")] = False,
    as_json: JsonFlag = False,
    backend: Annotated[
        str, typer.Option("--backend", help="numpy, or torch (cifar-style: a GroupNorm CNN).")
    ] = "numpy",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace result files already in --out.")
    ] = False,
) -> None:
    """Reproduce a figure of the papers privopt implements (writes a PNG plot and a JSON)."""
    if name not in REPRODUCTIONS:
        raise ValueError(f"Expected a reproduction in ({', '.join(REPRODUCTIONS)}), got {name!r}.")
    if backend not in ("numpy", "torch") or (backend == "torch" and name != "cifar-style"):
        raise ValueError(f"--backend is numpy, or torch for cifar-style; got {backend!r}.")
    out = output_dir(out)
    import importlib

    module, function, large = REPRODUCTIONS[name]
    if backend == "torch":  # privopt[torch]: the digits CNN with privopt.torch.PrivateTrainer
        module, function = "privopt.experiments.cifar_torch", "reproduce_cifar_torch"
    stem = function.removeprefix("reproduce_")  # each writes STEM.png and STEM.json
    for result in (out / f"{stem}.json", out / f"{stem}.png"):
        if result.exists() and not overwrite:
            raise ValueError(
                f"The result file {result} already exists; remove it, choose another --out, "
                "or pass --overwrite."
            )
    payload = getattr(importlib.import_module(module), function)(out, quick=quick)
    if as_json:
        print(json.dumps({k: v for k, v in payload.items() if k not in large}))
        return
    Console().print(f"{name} written to {payload['png']} and {out}")


@app.command("demo")
def demo(
    n_samples: Annotated[int, typer.Option("--n-samples", help="N.")] = 200_000,
    n_features: Annotated[int, typer.Option("--n-features", help="d.")] = 20,
    epsilon: Annotated[float, typer.Option("--epsilon")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed, >= 0.", min=0)] = 0,
) -> None:
    """Private linear regression on Varshney et al.'s (2022) model: DP-AMBSSGD, DP-SGD, AdaSSP
    against OLS."""
    from privopt.experiments.regression_demo import run_regression_demo

    console = Console()
    console.print(
        f"[bold]privopt demo[/bold]: y = <x, w*> + N(0, 1), x ~ N(0, I_{n_features}), "
        f"N = {n_samples:,}, epsilon = {epsilon:g}, delta = 1e-6; nothing else is known to the "
        "private methods (bounds are estimated privately).\n"
    )
    with console.status("Fitting ..."):
        rows = run_regression_demo(n_samples, n_features, epsilon=epsilon, seed=seed)
    table = Table(title="Excess risk 1/2 ||w - w*||_H^2 (+ intercept^2 / 2)")
    for col in ("method", "excess risk", "x OLS", "epsilon spent", "seconds"):
        table.add_column(col, justify="right" if col != "method" else "left")
    for r in rows:
        eps = "-" if r.epsilon is None else f"{r.epsilon:.4f}"
        table.add_row(
            r.method, f"{r.excess_risk:.3e}", f"{r.ratio_to_ols:.2f}", eps, f"{r.seconds:.2f}"
        )
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes are one line on stderr and exit 2; bugs say so (exit 1)."""
    run_app(app, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
