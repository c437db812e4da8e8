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
#: root finders and scalar minimisers (scipy.optimize and the bisect module)
SEARCHERS = {
    "brentq",
    "brenth",
    "ridder",
    "bisect",
    "bisect_left",
    "bisect_right",
    "root_scalar",
    "minimize_scalar",
    "fsolve",
}
#: nudges outside privopt.accounting that invert a map one relative ulp at a time (not a
#: search over noise); each named with what it inverts
NUDGES_ELSEWHERE = {
    # the exponential mechanism's epsilon for a GDP mu (bounded range), rounded toward privacy
    "clipping/quantiles.py",
}


def _multiplier_loops(tree: ast.AST) -> list[int]:
    """Lines of ``while`` loops that multiply or divide a variable their test reads: doubling
    or halving a bracket, or nudging a multiplier until a privacy test passes."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.While):
            continue
        tested = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.AugAssign)
                and isinstance(sub.op, ast.Mult | ast.Div)
                and isinstance(sub.target, ast.Name)
                and sub.target.id in tested
            ):
                lines.append(node.lineno)
                break
    return lines


def _search_calls(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in SEARCHERS:
                lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and (node.module or "") in ("scipy.optimize", "bisect"):
            if {a.name for a in node.names} & SEARCHERS:
                lines.append(node.lineno)
        if isinstance(node, ast.Import) and any(a.name == "bisect" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_no_calibration_search_outside_accounting():
    """Issue 28: one search routine (privopt.accounting, called from training/calibrate.py)
    for every calibration; no root finder, bisection or multiplier loop anywhere else."""
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE).as_posix()
        if relative.startswith(SEARCH_ALLOWED + SEARCH_ELSEWHERE):
            continue
        tree = ast.parse(path.read_text())
        offenders += [f"{relative}:{line} search" for line in _search_calls(tree)]
        if relative not in NUDGES_ELSEWHERE:
            offenders += [f"{relative}:{line} multiplier loop" for line in _multiplier_loops(tree)]
    assert offenders == []


def test_the_search_rule_has_power():
    planted = ast.parse(
        "from scipy.optimize import brentq\n"
        "def f(excess):\n"
        "    sigma = 1.0\n"
        "    while excess(sigma) > 0:\n"
        "        sigma *= 2.0\n"
        "    return brentq(excess, sigma / 2, sigma)\n"
    )
    assert _search_calls(planted) == [1, 6]
    assert _multiplier_loops(planted) == [4]


def _imports_distributed(path: Path) -> list[int]:
    """Lines importing privopt.distributed: absolute, relative (``..distributed``), function-
    local, or by name through importlib."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[:2] == ["privopt", "distributed"] for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            absolute = node.level == 0 and module.split(".")[:2] == ["privopt", "distributed"]
            relative = node.level >= 2 and module.split(".")[:1] == ["distributed"]
            from_parent = (
                node.level >= 2 and not module and any(a.name == "distributed" for a in node.names)
            )
            from_root = (
                node.level == 0
                and module == "privopt"
                and any(a.name == "distributed" for a in node.names)
            )
            if absolute or relative or from_parent or from_root:
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("privopt.distributed")
        ):
            lines.append(node.lineno)
    return lines


def test_estimators_never_import_the_dask_backend():
    """Issue 28: privopt.distributed reaches the estimator through a row source; the estimators
    never import privopt.distributed (the circle estimators -> distributed -> estimators)."""
    offenders = [
        f"{path.relative_to(SOURCE).as_posix()}:{line}"
        for path in (SOURCE / "estimators").rglob("*.py")
        for line in _imports_distributed(path)
    ]
    assert offenders == []


def test_the_import_rule_has_power(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import privopt.distributed\n"
        "from privopt.distributed import fit\n"
        "from ..distributed import rows\n"
        "from .. import distributed\n"
        "from privopt import distributed\n"
        "def f():\n"
        "    import importlib\n"
        "    return importlib.import_module('privopt.distributed.rows')\n"
    )
    assert _imports_distributed(planted) == [1, 2, 3, 4, 5, 8]


#: privopt.accounting's calibrations: outside accounting, only training/calibrate.py calls them
#: (every method calibrates through its plan, issue 28)
CALIBRATORS = {
    "calibrate_dpsgd_noise",
    "calibrate_gaussian_sigma",
    "calibrate_shuffled_gaussian",
    "smallest_feasible_multiplier",
    "feasible_boundary",
}
#: declared what-if calculators of accounting (they print accounting's answer and train
#: nothing), by module and function
WHAT_IF_CALCULATORS = {
    "cli.py": {"account_calibrate_gaussian", "account_calibrate_dpsgd"},
}


def _calibrator_uses(tree: ast.AST) -> list[tuple[int, str | None]]:
    """(line, enclosing function) of every call or import of an accounting calibration."""
    uses: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in CALIBRATORS:
                uses.append((node.lineno, function))
        if isinstance(node, ast.ImportFrom) and {a.name for a in node.names} & CALIBRATORS:
            uses.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return sorted(uses, key=lambda use: use[0])


def test_accounting_calibrations_are_called_only_by_the_one_calibration():
    """Issue 28: epsilon becomes noise in training/calibrate.py only (privopt.accounting does
    the math); elsewhere a method calibrates its plan (TrainingPlan.calibrate) or a one-shot
    event (calibrate_noise_multiplier). Declared what-if calculators excepted."""
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE).as_posix()
        if relative.startswith(SEARCH_ALLOWED):
            continue
        allowed = WHAT_IF_CALCULATORS.get(relative, set())
        offenders += [
            f"{relative}:{line} {function}"
            for line, function in _calibrator_uses(ast.parse(path.read_text()))
            if function not in allowed
        ]
    assert offenders == []


def test_the_calibrator_rule_has_power():
    planted = ast.parse(
        "from privopt.accounting import calibrate_dpsgd_noise\n"
        "import privopt.accounting as acc\n"
        "def account_calibrate_dpsgd(e, d):\n"
        "    return acc.calibrate_dpsgd_noise(e, d, 0.1, 10)\n"
        "def fit(e, d):\n"
        "    sigma = acc.calibrate_gaussian_sigma(e, d, 1.0)\n"
        "    return calibrate_dpsgd_noise(e, d, 0.1, 10)\n"
    )
    uses = _calibrator_uses(planted)
    assert uses == [(1, None), (4, "account_calibrate_dpsgd"), (6, "fit"), (7, "fit")]
    allowed = WHAT_IF_CALCULATORS["cli.py"]
    assert [line for line, function in uses if function not in allowed] == [1, 6, 7]
