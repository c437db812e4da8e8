"""Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison (issue 8), at the quick size.

Files and keys, every reported epsilon at most its target, finite numbers, the known optimum of
the synthetic problem (quadrature against Monte Carlo), the schedule of every method, and bad
input.
"""

import json
import math

import numpy as np
import pytest

from privopt.experiments.single_epoch import (
    ADULT_PATH,
    DEFAULT_HYPERPARAMETERS,
    METHODS,
    PRESETS,
    QUICK_STEP_EXPONENTS,
    SyntheticLogistic,
    reproduce_single_epoch,
    steps_grid,
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("single_epoch")
    return out, reproduce_single_epoch(out, quick=True)


def _numbers(value, path="payload"):
    """Every number of a JSON-like tree, with its path."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for k, item in enumerate(value):
            yield from _numbers(item, f"{path}[{k}]")


def _blocks(payload):
    blocks = [("synthetic", payload["synthetic"])]
    if "results" in payload["adult"]:
        blocks.append(("adult", payload["adult"]))
    return blocks


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_files_and_keys(quick_run):
    out, payload = quick_run
    assert (out / "single_epoch.png").stat().st_size > 10_000
    assert payload["png"] == str(out / "single_epoch.png")
    on_disk = json.loads((out / "single_epoch.json").read_text())
    assert on_disk == json.loads(json.dumps(payload))
    for key in (
        "figure",
        "quick",
        "epsilons",
        "delta",
        "delta_note",
        "neighbouring",
        "seeds",
        "methods",
        "hyperparameters",
        "hyperparameter_selection",
        "synthetic",
        "adult",
        "wall_time_s",
        "png",
    ):
        assert key in payload, key
    assert payload["quick"] is True
    assert payload["epsilons"] == [0.5, 1.0, 4.0]
    assert payload["delta"] == 1e-6
    assert set(payload["methods"]) == set(METHODS) | set(PRESETS)
    assert "how" in payload["synthetic"]["optimum"]
    if ADULT_PATH.exists():
        assert payload["adult"]["dataset"]["split"] == "80/20, random_state=0"
        assert payload["adult"]["dataset"]["n_train"] + payload["adult"]["dataset"]["n_test"] > 0
    else:
        assert "skipped" in payload["adult"]


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_every_reported_epsilon_is_at_most_its_target(quick_run):
    _, payload = quick_run
    count = 0
    for _, block in _blocks(payload):
        for method, per_eps in block["results"].items():
            for key, points in per_eps.items():
                target = float(key)
                for point in points:
                    for reported in point["reported_epsilons"]:
                        assert 0.0 < reported <= target, (method, key, reported)
                        count += 1
    assert count >= 2 * len(METHODS) * 3 * len(QUICK_STEP_EXPONENTS)


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_all_numbers_are_finite(quick_run):
    _, payload = quick_run
    numbers = list(_numbers(payload))
    assert len(numbers) > 100
    for path, value in numbers:
        assert math.isfinite(value), path


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_schedules_and_scores(quick_run):
    _, payload = quick_run
    for name, block in _blocks(payload):
        grid = block["steps_grid"]
        n = block["problem"]["n"] if name == "synthetic" else block["dataset"]["n_train"]
        assert len(grid) == len(QUICK_STEP_EXPONENTS)
        for epsilon in payload["epsilons"]:
            key = f"{epsilon:g}"
            single = block["results"]["dp-sgd-single-pass"][key]
            srgd = block["results"]["srgd"][key]
            multi = block["results"]["dp-sgd-multi-epoch"][key]
            # same T batch steps for SRGD and single-pass DP-SGD; 5 epochs of Poisson DP-SGD
            assert [p["sequential_steps"] for p in srgd] == grid
            assert [p["sequential_steps"] for p in single] == grid
            assert [p["sequential_steps"] for p in multi] == [5 * t for t in grid]
            for a, b in zip(srgd, single, strict=True):
                assert a["batch_size"] == b["batch_size"]
                assert a["batch_size"] == n // a["sequential_steps"]  # one pass, B = n // T
            for preset in PRESETS:
                assert len(block["results"][preset][key]) == 1
            for method, per_eps in block["results"].items():
                for point in per_eps[key]:
                    assert len(point["values"]) == len(payload["seeds"]), method
                    if name == "synthetic":
                        assert all(v >= 0.0 for v in point["values"])
                        # never worse than the worst point of the ball by a wide margin
                        assert point["mean"] < 1.0
                    else:
                        assert all(0.0 <= v <= 1.0 for v in point["values"])


def test_synthetic_optimum_is_known():
    """The excess risk is 0 at w*, positive elsewhere, and the quadrature matches Monte Carlo."""
    problem = SyntheticLogistic.make(seed=3)
    assert problem.excess_risk(problem.w_star) == pytest.approx(0.0, abs=1e-14)
    for w in (np.zeros(problem.dim), 0.5 * problem.w_star, 1.5 * problem.w_star + 0.2):
        value = problem.excess_risk(w)
        assert value > 0.0
        assert value == pytest.approx(problem.excess_risk(w, nodes=200), rel=1e-10)
        mean, se = problem.excess_risk_monte_carlo(w, 2**17, seed=5)
        assert abs(mean - value) < 5 * se


def test_steps_grid_matches_the_theory_schedules():
    assert steps_grid(2**16) == [16, 32, 64, 128, 256]
    assert steps_grid(26_048, (0.5,)) == [26_048 // 161]


def test_hyperparameters_cover_every_exponent():
    for problem in ("synthetic", "adult"):
        for method in METHODS:
            assert set(DEFAULT_HYPERPARAMETERS[problem][method]) == {
                "0.25",
                "0.3125",
                "0.375",
                "0.4375",
                "0.5",
            }


@pytest.mark.parametrize("epsilons", [(), (0.0,), (-1.0,), (1.0, 0.0), (math.inf,), (math.nan,)])
def test_bad_epsilons_raise_before_any_work(tmp_path, epsilons):
    with pytest.raises(ValueError, match="epsilon"):
        reproduce_single_epoch(tmp_path / "bad", quick=True, epsilons=epsilons)
    assert not (tmp_path / "bad").exists()


def test_other_bad_input(tmp_path):
    with pytest.raises(ValueError, match="seed"):
        reproduce_single_epoch(tmp_path, quick=True, seeds=())
    with pytest.raises(ValueError, match="delta"):
        reproduce_single_epoch(tmp_path, quick=True, delta=0.0)
    with pytest.raises(ValueError, match="accountant"):
        reproduce_single_epoch(tmp_path, quick=True, dpsgd_accountant="moments")


def test_missing_adult_file_is_skipped(tmp_path):
    payload = reproduce_single_epoch(
        tmp_path,
        quick=True,
        epsilons=(1.0,),
        seeds=(0,),
        n_synthetic=256,
        adult_path=tmp_path / "missing.csv",
    )
    assert "skipped" in payload["adult"]
    assert (tmp_path / "single_epoch.png").exists()
    assert json.loads((tmp_path / "single_epoch.json").read_text())["adult"] == payload["adult"]
