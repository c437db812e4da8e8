"""Rules of the source tree that keep the privacy story auditable (issue 13)."""

import ast
from pathlib import Path

import privopt

SOURCE = Path(privopt.__file__).parent
#: Noise is drawn only in privopt.noise; synthetic data, Monte-Carlo and canaries are not noise.
ALLOWED = ("noise", "datasets", "theory", "audit")
SAMPLERS = {"normal", "standard_normal", "laplace", "randn", "normal_"}


def test_noise_is_drawn_only_inside_privopt_noise():
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE)
        if relative.parts[0] in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SAMPLERS
            ):
                offenders.append(f"{relative}:{node.lineno}")
    assert offenders == []


def test_no_module_over_600_lines():
    # issue 13: small modules with one job each
    long = {
        str(path.relative_to(SOURCE)): n
        for path in SOURCE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert long == {}


#: batch strategies: the plan calls their methods (event, check_plan, noise_scale), never
#: switches on their type (issue 28)
STRATEGIES = {
    "PoissonSampling",
    "CyclicPoissonSampling",
    "FixedBatches",
    "SampledWithoutReplacement",
    "SinglePass",
    "Rounds",
}


def test_the_plan_never_dispatches_on_the_batch_strategy():
    offenders = []
    for name in ("training/plan.py", "training/loop.py"):
        tree = ast.parse((SOURCE / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if named & STRATEGIES:
                    offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_the_replace_one_factor_is_written_once():
    """The relation's factor on a contribution lives in Neighbouring.contribution_factor."""
    offenders = []
    for path in SOURCE.rglob("*.py"):
        text = path.read_text()
        for pattern in ("REPLACE_ONE else 1", '== "replace-one" else 1'):
            if pattern in text and path.name != "events.py":
                offenders.append(f"{path.relative_to(SOURCE)}: {pattern}")
    assert offenders == []


#: where a calibration may search (issue 28): the accounting package and the one calibration
SEARCH_ALLOWED = ("accounting", "training/calibrate.py")
#: packages outside privopt's calibration that search for other things (audit lower bounds,
#: experiment sizes, noise-shape tuning, theory programs)
SEARCH_ELSEWHERE = ("audit", "experiments", "noise/tuning.py", "theory")


def test_no_calibration_search_outside_accounting():
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = str(path.relative_to(SOURCE))
        if relative.startswith(SEARCH_ALLOWED + SEARCH_ELSEWHERE):
            continue
        text = path.read_text()
        for pattern in ("brentq", "root_scalar", "bisect", "for _ in range(60)"):
            if pattern in text.replace("bisects a noise parameter", ""):
                offenders.append(f"{relative}: {pattern}")
    assert offenders == []
