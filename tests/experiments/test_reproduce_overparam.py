"""`reproduce_overparam(quick=True)` (issue 7, the DP-FTRL-Σ paper (Private Overparameterized Linear
Regression, anonymous submission)): files, keys, budgets, slopes, input."""

import itertools
import json
import math

import pytest

from privopt.experiments.overparam import (
    corollary_step_size,
    paper_slopes,
    reproduce_overparam,
)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("overparam")
    return out, reproduce_overparam(out, quick=True)


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_files_and_keys(quick):
    out, data = quick
    assert (out / "overparam.png").stat().st_size > 10_000
    assert data["png"] == str(out / "overparam.png")
    on_disk = json.loads((out / "overparam.json").read_text())
    assert on_disk["slopes"] == data["slopes"]
    for key in (
        "settings",
        "step_size_rule",
        "results",
        "slopes",
        "slope_range_over_seeds",
        "paper_rates",
        "epsilon",
        "ambssgd",
        "theory",
        "notes",
        "timing_s",
        "png",
    ):
        assert key in data, key
    assert set(data["results"]) == {"poly_r2", "exponential"}
    assert data["settings"]["n_features"] >= 2 * max(data["settings"]["n_grid"])
    for res in data["results"].values():
        for method in ("ftrl_identity", "ftrl_designed", "dpsgd", "ambssgd", "nonprivate_sgd"):
            assert len(res[method]["median"]) == len(data["settings"]["n_grid"])
    assert data["notes"] and all(isinstance(n, str) for n in data["notes"])
    assert data["timing_s"]["total_s"] < 120  # quick: well under a minute on 2 cores


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_every_reported_epsilon_is_within_the_target(quick):
    _, data = quick
    target = data["settings"]["epsilon"]
    assert data["epsilon"]["target"] == target == 1.0
    assert data["epsilon"]["max_reported"] <= target * (1 + 1e-9)
    for res in data["results"].values():
        for method in ("ftrl_identity", "ftrl_designed", "dpsgd", "ambssgd"):
            eps = res[method]["max_epsilon"]
            assert eps is None or eps <= target * (1 + 1e-9), method


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_slopes_are_finite_and_paper_rates_are_table_1(quick):
    _, data = quick
    for key, slopes in data["slopes"].items():
        for method in ("ftrl_identity", "ftrl_designed", "dpsgd", "nonprivate_sgd"):
            assert slopes[method] is not None and math.isfinite(slopes[method]), (key, method)
        assert slopes["ambssgd"] is None  # infeasible below ~11,000 rows at epsilon = 1
    rates = data["paper_rates"]
    assert rates["poly_r2"]["ftrl_identity"] == pytest.approx(-0.4)
    assert rates["poly_r2"]["ftrl_designed"] == pytest.approx(-0.4)
    assert rates["poly_r2"]["nonprivate_sgd"] == pytest.approx(-2 / 3)
    assert rates["exponential"]["ftrl_identity"] == pytest.approx(-0.5)
    assert rates["exponential"]["ftrl_designed"] == pytest.approx(-2 / 3)
    assert paper_slopes("polynomial", 3.0)["ftrl_designed"] == pytest.approx(-0.5)
    assert paper_slopes("polynomial", 1.5)["ftrl_identity"] == pytest.approx(-0.375)


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_step_size_rule_is_fixed_in_advance(quick):
    _, data = quick
    rule = data["step_size_rule"]
    for key, res in data["results"].items():
        for method in ("ftrl_identity", "ftrl_designed"):
            assert res[method]["c"] == rule["pilot"][key][method]["c"]
            assert res[method]["c"] in rule["candidates"]
            etas = res[method]["learning_rate"]
            assert all(a > b for a, b in itertools.pairwise(etas))  # shrinks with N


def test_corollary_step_size_branches():
    # Cor. 4.4, r = 2: min(N^-1/3, N^-3/5 tau^-4/5); Cor. 4.6 exponential: (N tau^2)^-1/3.
    assert corollary_step_size(1000, 25.0, "polynomial", 2.0, "identity") == pytest.approx(
        1000**-0.6 * 25**-0.8
    )
    assert corollary_step_size(1000, 25.0, "exponential", None, "designed") == pytest.approx(
        (1000 * 625) ** (-1 / 3)
    )
    assert corollary_step_size(10, 0.1, "exponential", None, "identity") == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_grid": []}, "non-empty"),
        ({"n_grid": [64, 64]}, "two distinct"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"n_grid": [64, 128], "n_features": 200}, "over-parameterised"),
        ({"spectra": ["poly_r7"]}, "spectra"),
        ({"seeds": 0}, "seeds"),
    ],
)
def test_bad_input(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        reproduce_overparam(tmp_path, quick=True, **kwargs)
    assert not (tmp_path / "overparam.json").exists()
