"""``privopt reproduce federated``: the payload's shape and claims on a reduced quick run."""

import json

import pytest

pytest.importorskip("torch")

from privopt.experiments.federated import reproduce_federated
from privopt.experiments.federated_data import synthetic_corpus


def test_the_corpus_has_heterogeneous_users_and_fresh_test_users():
    corpus = synthetic_corpus(300, seed=0)
    counts = {u: (corpus.users == u).sum() for u in set(corpus.users.tolist())}
    assert len(counts) == 300 and min(counts.values()) >= 4 and max(counts.values()) <= 128
    assert max(counts.values()) >= 5 * min(counts.values())  # users write different amounts
    assert corpus.contexts.shape[1] == 2 and corpus.targets.max() < corpus.vocab
    other = synthetic_corpus(300, seed=0, user_seed=1)
    assert (
        len(other.test_targets) != len(corpus.test_targets)
        or (other.test_targets != corpus.test_targets).any()
    )


def test_a_reduced_quick_run_writes_flat_results_with_user_level_claims(tmp_path):
    payload = reproduce_federated(
        tmp_path, quick=True, methods=("dp-fedavg", "banded"), epsilons=(8.0,)
    )
    saved = json.loads((tmp_path / "federated.json").read_text())
    assert (tmp_path / "federated.png").stat().st_size > 10_000
    assert set(saved["results"]) == {"dp-fedavg@eps=8", "banded@eps=8"}
    for run in saved["results"].values():
        assert run["epsilon"] <= run["target_epsilon"] == 8.0
        assert run["privacy_unit"] == "user" and run["neighbouring"] == "user-level zero-out"
        assert 0.05 < run["test_accuracy"] < saved["non_private"]["test_accuracy"] + 0.05
    assert saved["results"]["dp-fedavg@eps=8"]["choices"]["sampling"] == "poisson"
    assert saved["results"]["banded@eps=8"]["choices"]["sampling"] == "fixed"
    assert saved["comparison"]["eps=8"]["best_correlated"] == "banded"
    assert payload["png"] == str(tmp_path / "federated.png")


def test_unknown_methods_and_epsilons_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Expected methods"):
        reproduce_federated(tmp_path, quick=True, methods=("fedprox",))
    with pytest.raises(ValueError, match="epsilons"):
        reproduce_federated(tmp_path, quick=True, epsilons=(-1.0,))


@pytest.mark.slow
def test_the_cli_quick_run_prints_every_run_as_json(capsys, tmp_path):
    from privopt.cli import main

    code = 0
    try:
        main(["reproduce", "federated", "--quick", "--json", "--out", str(tmp_path)])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    methods, epsilons = ("dp-fedavg", "nu-dpftrl", "banded", "tree"), (2, 8)
    assert set(data["results"]) == {f"{m}@eps={e}" for m in methods for e in epsilons}
    assert all(r["epsilon"] <= r["target_epsilon"] for r in data["results"].values())
    assert data["privacy_unit"] == "user" and "test_accuracy" in data["non_private"]
    assert (tmp_path / "federated.png").exists() and (tmp_path / "federated.json").exists()


def test_the_comparison_pairs_seeds_and_flags_a_significant_gap():
    from scipy import stats

    from privopt.experiments.federated import _comparison

    base = [0.20, 0.25, 0.18, 0.22]  # seeds differ a lot; each method's gap per seed is steady
    runs = {
        "dp-fedavg": base,
        "banded": [b + d for b, d in zip(base, [0.010, 0.012, 0.009, 0.011], strict=True)],
        "tree": [b + d for b, d in zip(base, [0.02, -0.03, 0.01, -0.02], strict=True)],
    }
    results = {
        f"{m}@eps=8": {"method": m, "target_epsilon": 8.0, "test_accuracies": accs,
                       "test_accuracy": sum(accs) / len(accs)}
        for m, accs in runs.items()
    }  # fmt: skip
    out = _comparison(results, (8.0,))["eps=8"]
    assert out["best_correlated"] == "banded" and out["winner"] == "banded"
    diff = [0.010, 0.012, 0.009, 0.011]
    half = stats.t.ppf(0.975, 3) * stats.tstd(diff) / 2
    assert out["gap_over_dp_fedavg"] == pytest.approx(0.0105)
    assert out["gap_ci95_halfwidth"] == pytest.approx(half)
    assert out["significant"]  # unpaired intervals (seed spread 0.03) would not show it
    assert out["gaps"]["tree"]["mean"] == pytest.approx(-0.005)
    assert out["gaps"]["tree"]["ci95_halfwidth"] > 0.005
