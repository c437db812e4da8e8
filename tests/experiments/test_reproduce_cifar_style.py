"""The cifar-style reproduction (Choquette-Choo et al. (2024) §4 on scikit-learn's digits) at its
quick size."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privopt.algorithms import dp_ftrl
from privopt.experiments.cifar_style import (
    METHODS,
    dpsgd_poisson,
    load_digits_split,
    multinomial_per_example_gradients,
    reproduce_cifar_style,
)
from privopt.noise import Participation, Restarted, TreeAggregation, TreeIncrements, independent

RESULT_KEYS = {
    "accuracies",
    "mean_accuracy",
    "ci95_halfwidth",
    "noise_multiplier",
    "sensitivity",
    "unit_sensitivity",
    "reported_epsilon",
    "reported_epsilons",
    "target_epsilon",
    "delta",
    "steps",
}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("cifar_style")
    return out, reproduce_cifar_style(out, quick=True)


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_files_written_and_json_matches_the_payload(quick):
    out, payload = quick
    assert (out / "cifar_style.png").stat().st_size > 10_000
    on_disk = json.loads((out / "cifar_style.json").read_text())
    assert on_disk == json.loads(json.dumps(payload))
    for key in (
        "participation",
        "delta",
        "epsilons",
        "seeds",
        "hyperparameters",
        "hyperparameter_selection",
        "non_private_accuracy",
        "results",
        "wall_time_s",
    ):
        assert key in on_disk
    part = on_disk["participation"]
    assert part["n"] == 1437 and part["batch_size"] == 64 and part["epochs"] == 5
    assert part["steps_per_epoch"] == 22 and part["min_separation"] == 22
    assert part["steps"] == 110 and part["participations"] == 5
    assert set(on_disk["results"]) == set(METHODS)
    for per_eps in on_disk["results"].values():
        assert list(per_eps) == [f"{e:g}" for e in on_disk["epsilons"]]
        for entry in per_eps.values():
            assert RESULT_KEYS <= set(entry)
            assert len(entry["accuracies"]) == len(on_disk["seeds"])


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_reported_epsilon_never_exceeds_the_target(quick):
    _, payload = quick
    for per_eps in payload["results"].values():
        for entry in per_eps.values():
            assert len(entry["reported_epsilons"]) == len(payload["seeds"])
            for eps in entry["reported_epsilons"]:
                assert 0.0 < eps <= entry["target_epsilon"] + 1e-9
            # calibration is tight: the budget is used, not wasted
            assert entry["reported_epsilon"] >= 0.99 * entry["target_epsilon"]


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_accuracies_and_intervals(quick):
    _, payload = quick
    assert payload["non_private_accuracy"] > 0.85
    for per_eps in payload["results"].values():
        for entry in per_eps.values():
            assert all(0.0 <= a <= 1.0 for a in entry["accuracies"])
            assert entry["mean_accuracy"] == pytest.approx(np.mean(entry["accuracies"]))
            assert entry["ci95_halfwidth"] >= 0.0 and math.isfinite(entry["ci95_halfwidth"])


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_correlated_methods_beat_chance_at_the_largest_epsilon(quick):
    _, payload = quick
    largest = f"{max(payload['epsilons']):g}"
    for method in ("nu-dpftrl", "optimal-cc", "tree", "blt", "banded"):
        entry = payload["results"][method][largest]
        assert entry["mean_accuracy"] > payload["chance_accuracy"] + 0.4, method


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_sensitivities_follow_the_participation_pattern(quick):
    _, payload = quick
    part = payload["participation"]
    steps, k, sep = part["steps"], part["participations"], part["min_separation"]
    results = payload["results"]
    for entry in results["dpsgd"].values():
        assert entry["sensitivity"] == 1.0 and entry["sample_rate"] == pytest.approx(64 / 1437)
    for method in ("nu-dpftrl", "optimal-cc", "tree", "blt", "banded"):
        for entry in results[method].values():
            # k participations: between one participation and k perfectly aligned ones
            assert 1.0 < entry["unit_sensitivity"] <= k
    # the tree restarted every epoch: one participation per block, floor(log2 S) + 1 levels
    tree = next(iter(results["tree"].values()))
    if tree["restart_block_steps"] == sep:
        assert tree["unit_sensitivity"] == pytest.approx(math.sqrt(k * sep.bit_length()))
    # banded: L = S bands, so one record's k columns are disjoint and sens^2 = k ||c||^2 exactly
    banded = next(iter(results["banded"].values()))
    assert banded["bands"] == sep
    c = np.asarray(banded["band_coefficients"])
    assert c.size == sep and c[0] == 1.0
    assert banded["unit_sensitivity"] == pytest.approx(math.sqrt(k * np.sum(c**2)), rel=1e-12)
    assert not banded["sensitivity_flagged_upper_bound"]
    occ = next(iter(results["optimal-cc"].values()))
    assert occ["unit_sensitivity"] > next(iter(results["nu-dpftrl"].values()))["unit_sensitivity"]
    assert steps == k * sep


@pytest.mark.parametrize("epsilons", [(), (0.0,), (-1.0,), (1.0, float("inf")), (float("nan"),)])
def test_bad_epsilons_are_refused(tmp_path, epsilons):
    with pytest.raises(ValueError, match="epsilon"):
        reproduce_cifar_style(tmp_path, quick=True, epsilons=epsilons)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seeds": ()},
        {"methods": ("dpsgd", "adam")},
        {"methods": ()},
        {"epochs": 0},
        {"batch_size": 5000},
        {"delta": 1.5},
        {"dpsgd_accountant": "gdp"},
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs):
    with pytest.raises(ValueError):
        reproduce_cifar_style(tmp_path, quick=True, **kwargs)


# -- building blocks ---------------------------------------------------------------------------
def test_per_example_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(4, 3)), np.array([0, 2, 1, 2])
    w = rng.normal(size=9)

    def loss(v, i):
        logits = X[i] @ v.reshape(3, 3)
        return np.log(np.sum(np.exp(logits))) - logits[y[i]]

    grads = multinomial_per_example_gradients(w, X, y, num_classes=3)
    eye = np.eye(9)
    for i in range(4):
        numeric = [(loss(w + 1e-6 * e, i) - loss(w - 1e-6 * e, i)) / 2e-6 for e in eye]
        np.testing.assert_allclose(grads[i], numeric, atol=1e-6)


def test_digits_features_use_the_public_range_only():
    x_train, y_train, x_test, y_test = load_digits_split()
    assert x_train.shape == (1437, 65) and x_test.shape == (360, 65) and y_test.shape == (360,)
    assert x_train.min() >= 0.0 and x_train.max() <= 1.0
    assert np.all(x_train[:, -1] == 1.0)
    assert set(np.unique(y_train)) == set(range(10))


@pytest.mark.parametrize("variance_reduction", [False, True])
def test_tree_increments_sum_to_the_tree_prefix_noise(variance_reduction):
    tree = TreeAggregation(variance_reduction)
    mech = TreeIncrements(tree)
    steps = 13
    prefix = tree.noise_stream(3, 1.0, seed=7)
    increments = mech.noise_stream(3, 1.0, seed=7)
    total = np.zeros(3)
    for _ in range(steps):
        total = total + increments.next()
        np.testing.assert_allclose(total, prefix.next(), atol=1e-12)
    # decoder A^{-1} B with B C = A: the per-step form of the same C G + W
    b, c = mech.decoder_matrix(steps), mech.encoder_matrix(steps)
    np.testing.assert_allclose(b @ c, np.eye(steps), atol=1e-12)
    assert mech.sensitivity(steps) == tree.sensitivity(steps)


def test_restarted_tree_increments_sensitivity():
    mech = Restarted(TreeIncrements(), 8)
    with pytest.warns(UserWarning):
        value = mech.sensitivity_squared(32, Participation.multiple(8, 4))
    assert value == pytest.approx(4 * 4)  # one participation per block, 4 levels in 8 steps


def test_dpsgd_poisson_report_and_noise_free_limit():
    x_train, y_train, _, _ = load_digits_split()
    X, y = x_train[:300], y_train[:300]

    def grad_fn(w, xb, yb):
        return multinomial_per_example_gradients(w, xb, yb, 10)

    w, info = dpsgd_poisson(
        X,
        y,
        grad_fn=grad_fn,
        w0=np.zeros(650),
        epsilon=2.0,
        delta=1e-5,
        sample_rate=0.1,
        steps=30,
        clip_norm=1.0,
        learning_rate=0.5,
        rng=np.random.default_rng(0),
        accountant="rdp",
    )
    report = info["ledger"].report(1e-5, "rdp")
    assert 1.98 <= report.epsilon <= 2.0 + 1e-9
    assert report.neighbouring == "zero-out" and w.shape == (650,)
    assert np.all(np.isfinite(w))
    with pytest.raises(ValueError):
        dpsgd_poisson(
            X,
            y,
            grad_fn=grad_fn,
            w0=np.zeros(650),
            epsilon=0.0,
            delta=1e-5,
            sample_rate=0.1,
            steps=3,
            clip_norm=1.0,
            learning_rate=0.5,
            rng=np.random.default_rng(0),
        )


def test_dp_ftrl_trains_a_generic_model_with_more_parameters_than_features():
    """A generic model's parameter count comes from w0 (650 = 65 features x 10 classes)."""
    x_train, y_train, _, _ = load_digits_split()
    X = x_train[:200]

    def grad_fn(w, xb, yb):
        return multinomial_per_example_gradients(w, xb, yb, 10)

    from privopt.algorithms import GenericModel

    fit = dp_ftrl(
        X,
        y_train[:200],
        mechanism=independent(),
        epsilon=50.0,
        delta=1e-5,
        clip_norm=1.0,
        learning_rate=0.5,
        rng=np.random.default_rng(0),
        model=GenericModel(grad_fn),
        batch_size=20,
        epochs=2,
        w0=np.zeros(650),
    )
    assert fit.coef.shape == (650,)
    assert fit.report.epsilon <= 50.0 + 1e-9
