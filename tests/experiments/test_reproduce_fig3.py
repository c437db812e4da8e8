"""Fig. 3 of Choquette-Choo et al. (2024): the Theorem 3.1 bound against kappa for DP-SGD,
nu-DP-FTRL, Optimized."""

import itertools
import json

import pytest

pytest.importorskip("cvxpy")

from privopt.experiments.fig3 import QUICK_KAPPAS, reproduce_fig3


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig3")
    return out, reproduce_fig3(out, quick=True)


def test_files_and_keys(quick_run):
    out, payload = quick_run
    assert (out / "fig3.png").stat().st_size > 0
    stored = json.loads((out / "fig3.json").read_text())
    assert stored == json.loads(json.dumps(payload))
    assert stored["figure"] == "fig3"
    assert stored["kappa"] == list(QUICK_KAPPAS)
    assert set(stored["bounds"]) == {"dp_sgd", "nu_dp_ftrl", "optimized"}
    for curve in stored["bounds"].values():
        assert len(curve) == len(QUICK_KAPPAS)
    settings = stored["settings"]
    for key in ("eta", "L", "G", "rho", "sigma_sgd", "multiplier_taps", "n_freq", "convention"):
        assert key in settings
    assert settings["L"] == 1.0 and settings["G"] == 1.0 and settings["sigma_sgd"] == 0.0
    for row in stored["rows"]:
        assert row["nu"] == pytest.approx(settings["eta"] / row["kappa"])
        assert row["n_freq"] * settings["eta"] / row["kappa"] >= 2 * 3.141592653589793


def test_ordering_and_growing_gap(quick_run):
    _, payload = quick_run
    sgd, ftrl, opt = (payload["bounds"][k] for k in ("dp_sgd", "nu_dp_ftrl", "optimized"))
    for s, f, o in zip(sgd, ftrl, opt, strict=True):
        assert s >= f >= o > 0
    gap = payload["ratio_dpsgd_over_optimized"]
    assert all(b > a for a, b in itertools.pairwise(gap))
    assert gap[-1] > 1.5
    for curve in (sgd, ftrl, opt):  # each bound grows with kappa
        assert all(b > a for a, b in itertools.pairwise(curve))


def test_bad_kappas(tmp_path):
    with pytest.raises(ValueError, match="kappa >= 1"):
        reproduce_fig3(tmp_path, kappas=[0.5])
