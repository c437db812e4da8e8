"""`privopt reproduce fig2 --quick --json` (issue 5): simulated slopes track the exact formula."""

import json

import pytest

from privopt.cli import main


@pytest.fixture(scope="module")
def quick_fig2(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig2")
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main(["reproduce", "fig2", "--out", str(out), "--quick", "--json"])  # exits only on error
    return out, json.loads(buffer.getvalue())


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_files_and_keys(quick_fig2):
    out, data = quick_fig2
    assert (out / "fig2.png").stat().st_size > 10_000
    assert json.loads((out / "fig2.json").read_text())["slopes"] == data["slopes"]
    for key in ("slopes", "theory_slopes", "paper_slopes"):
        assert {"sgd_vs_d", "sgd_vs_deff", "ftrl_vs_deff"} <= set(data[key])


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_simulated_slopes_are_within_0_1_of_the_exact_formula(quick_fig2):
    # 16 chains per point: each simulated F_inf has a ~2% (SGD) / ~0.3% (FTRL) standard error,
    # so a fitted slope over a 8x range of x moves by ~0.02; 0.1 is ~5 standard errors.
    _, data = quick_fig2
    for key, theory in data["theory_slopes"].items():
        assert data["slopes"][key] == pytest.approx(theory, abs=0.1), key


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_noisy_sgd_slopes_against_the_paper(quick_fig2):
    _, data = quick_fig2
    assert data["slopes"]["sgd_vs_d"] == pytest.approx(1.00, abs=0.15)
    assert data["slopes"]["sgd_vs_deff"] == pytest.approx(0.18, abs=0.15)
    # The exact formula's nu-FTRL slope at the quick size (d = 64): 0.872; the paper plots 1.27.
    assert data["theory_slopes"]["ftrl_vs_deff"] == pytest.approx(0.8723, abs=1e-3)
    assert data["paper_slopes"]["ftrl_vs_deff"] == 1.27


@pytest.mark.slow  # the quick reproduction takes 10-40 s
def test_simulation_agrees_with_the_exact_formula_pointwise(quick_fig2):
    _, data = quick_fig2
    for panel in data["panels"].values():
        for method in ("sgd", "ftrl"):
            series = panel[method]
            for sim, se, theory in zip(
                series["simulated"], series["std_error"], series["theory"], strict=True
            ):
                assert abs(sim - theory) < 5 * se + 0.02 * theory
