"""The split of srgd / convex_bound and the move of Wang et al.'s (2022) theorems keep every old
import.

``privopt.algorithms.holder_stability`` / ``holder_advisor`` are shims over
``privopt.theory``; ``privopt.algorithms`` still re-exports their names (deprecated);
``privopt.algorithms.srgd`` and ``privopt.theory.convex_bound`` still expose every public name
of the single-module layout; and neither package needs the other to be imported first.
"""

import importlib
import subprocess
import sys

import pytest

import privopt.algorithms as algorithms
import privopt.theory as theory
from privopt.algorithms import holder_advisor as advisor_shim
from privopt.algorithms import holder_stability as stability_shim
from privopt.theory import holder_advisor, holder_stability

THEORY_NAMES = (
    "Schedule",
    "StabilityBound",
    "lemma13_epsilon_threshold",
    "recommended_schedule",
    "stability_bound",
    "stability_bound_for_loss",
    "uas_bound",
    "uas_bound_for_loss",
)


@pytest.mark.parametrize(
    ("shim", "module"), [(stability_shim, holder_stability), (advisor_shim, holder_advisor)]
)
def test_shims_re_export_every_public_name(shim, module):
    assert shim.__all__ == module.__all__
    for name in module.__all__:
        assert getattr(shim, name) is getattr(module, name)


@pytest.mark.parametrize("name", THEORY_NAMES)
def test_theory_names_stay_importable_from_algorithms(name):
    assert getattr(algorithms, name) is getattr(theory, name)
    assert name in algorithms.__all__ and name in theory.__all__


def test_srgd_names_are_the_split_modules_objects():
    srgd = importlib.import_module("privopt.algorithms.srgd")
    expected = {
        "SRGDParameters": "srgd_parameters",
        "SRGDWarning": "srgd_parameters",
        "srgd_parameters": "srgd_parameters",
        "srgd_increment": "srgd_gradients",
        "tree_leaf_levels": "srgd_privacy",
        "SRGDStep": "srgd",
        "accelerated_dp_srgd": "srgd",
    }
    assert sorted(srgd.__all__) == sorted(expected)
    for name, home in expected.items():
        obj = getattr(srgd, name)
        assert obj.__module__ == f"privopt.algorithms.{home}"
        assert getattr(algorithms, name) is obj


def test_convex_bound_keeps_its_public_names():
    convex_bound = importlib.import_module("privopt.theory.convex_bound")
    for name in (*convex_bound.__all__, "DEFAULT_N_FREQ", "DEFAULT_TAPS", "DEFAULT_KNOTS"):
        assert hasattr(convex_bound, name), name
    for name in ("ConvexBoundResult", "OptimizedCorrelation", "PowerSpectrum"):
        assert getattr(theory, name) is getattr(convex_bound, name)


@pytest.mark.parametrize(
    "statement",
    [
        "import privopt.theory, privopt.algorithms",
        "import privopt.algorithms, privopt.theory",
        "import privopt.algorithms.holder_stability",
        "import privopt.theory.holder_advisor",
        "import privopt.algorithms.srgd_parameters",
        "import privopt.theory.convex_bound_program",
    ],
)
def test_no_import_cycle(statement):
    """A fresh interpreter imports either package (or a split module) first without a cycle."""
    subprocess.run([sys.executable, "-c", statement], check=True)
