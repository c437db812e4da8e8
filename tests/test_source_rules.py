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
