"""``privopt audit ALGORITHM`` and ``privopt audit selftest``: empirical privacy lower bounds.

Registered in :mod:`privopt.cli` with one ``add_typer`` line. Each audit prints the claimed
epsilon, the empirical lower bound and its confidence; a bound above the claim is a privacy bug
(at that confidence), a bound below it is expected (audits are not tight).
"""

from __future__ import annotations

from typing import Annotated

import typer

from privopt._cli_common import JsonFlag, _emit

__all__ = ["audit_app"]

audit_app = typer.Typer(
    help="Empirical privacy auditing: lower bounds on epsilon from canaries.",
    no_args_is_help=True,
)


@audit_app.command("selftest")
def audit_selftest(
    seed: Annotated[int, typer.Option("--seed", help="Seed of the canaries and noise.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Audit a correct Gaussian mechanism and one with a third of its noise (must be caught)."""
    from privopt.audit.registry import selftest

    result = selftest(seed=seed)
    if as_json:
        _emit("", result, True)
        return
    for label, values in result.items():
        verdict = (
            "VIOLATION (bound above the claim)"
            if values["epsilon_lower_bound"] > values["claimed_epsilon"]
            else "consistent with the claim"
        )
        _emit(f"{label} Gaussian mechanism: {verdict}", values, False)


#: bounds on the work one audit command may start (issue 33: huge values ran for minutes or
#: printed pages of warnings before failing)
MAX_RUNS = 64
MAX_CANARIES = 100_000


def _audit(
    algorithm: str,
    epsilon: float | None,
    delta: float,
    runs: int | None,
    canaries: int,
    confidence: float,
    noise_factor: float,
    seed: int,
    as_json: bool,
) -> None:
    """Run one registered audit and print it (the typer options live on each command)."""
    from privopt.audit.registry import audit_algorithm

    result = audit_algorithm(
        algorithm,
        epsilon=epsilon,
        delta=delta,
        runs=runs,
        canaries=canaries,
        confidence=confidence,
        noise_factor=noise_factor,
        seed=seed,
    )
    verdict = "VIOLATION" if result["violation"] else "consistent with the claim"
    _emit(f"Audit of {algorithm}: {verdict}", result, as_json)


def _command(name: str) -> None:
    def command(
        epsilon: Annotated[
            float | None,
            typer.Option("--epsilon", help="Claimed epsilon (default 2; 1 for regression-ssgd)."),
        ] = None,
        delta: Annotated[float, typer.Option("--delta", help="delta of the claim, in (0, 1).")] = (
            1e-5
        ),
        runs: Annotated[
            int | None,
            typer.Option(
                "--runs",
                min=1,
                max=MAX_RUNS,
                help="Core paths: one-run audits pooled (default 1); estimators: fits "
                f"pooled (default: the audit's own); at most {MAX_RUNS}.",
            ),
        ] = None,
        canaries: Annotated[
            int,
            typer.Option(
                "--canaries",
                min=2,
                max=MAX_CANARIES,
                help=f"Gradient canaries per core run (at most {MAX_CANARIES:,}).",
            ),
        ] = 1000,
        confidence: Annotated[
            float, typer.Option("--confidence", help="Confidence of the bound, in (0, 1).")
        ] = 0.95,
        noise_factor: Annotated[
            float,
            typer.Option(
                "--noise-factor",
                help="Planted bug for a control: scale the noise (e.g. 0.33), keep the claim.",
            ),
        ] = 1.0,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the canaries and runs.")] = 0,
        as_json: JsonFlag = False,
    ) -> None:
        _audit(name, epsilon, delta, runs, canaries, confidence, noise_factor, seed, as_json)

    audit_app.command(name, help=f"Audit {_description(name)}.", short_help=_short(name))(command)


def _short(name: str) -> str:
    from privopt.audit.registry import CORE_AUDITS

    if name in CORE_AUDITS:
        return f"Audit the training core: {CORE_AUDITS[name].description}."
    if name.startswith("estimator-"):
        return f"Audit {name.removeprefix('estimator-')}: white-box canaries in its releases."
    method = name.removeprefix("regression-")
    return f"Audit DPLinearRegression ({method}), one-run input canaries."


def _description(name: str) -> str:
    from privopt.audit.input_one_run import ONE_RUN_ESTIMATOR_AUDITS
    from privopt.audit.registry import CORE_AUDITS, ESTIMATOR_AUDIT_NAMES

    if name in CORE_AUDITS:
        return f"the training core, {CORE_AUDITS[name].description} (white-box, one run)"
    if name.startswith("estimator-"):
        from privopt.audit.pipeline_audits import PIPELINE_AUDITS

        pipeline = PIPELINE_AUDITS[name.removeprefix("estimator-")]
        return (
            f"{pipeline.describe()} (white-box canaries in the pipeline's releases; control: "
            f"--noise-factor {pipeline.control_factor:.3g})"
        )
    audit = ONE_RUN_ESTIMATOR_AUDITS[ESTIMATOR_AUDIT_NAMES[name]]
    return (
        f"DPLinearRegression(method={audit.method!r}) (one-run input canaries, black box; "
        f"control: --noise-factor {audit.control_factor:.3g}): {audit.note}"
    )


def _register() -> None:
    from privopt.audit.registry import audit_names

    for name in audit_names():
        _command(name)


_register()
