"""Figures of public quantities: per-step prefix errors, epsilon curves, a search's budget split."""

import json

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from privopt import DPLinearRegression, noise
from privopt.cli import main
from privopt.model_selection import PrivateGridSearchCV
from privopt.model_selection._search import budget_split

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys, *argv):
    code = 0
    try:
        main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


MECHANISMS = [
    noise.independent(),
    noise.TreeAggregation(),
    noise.TreeAggregation(variance_reduction=True),
    noise.nu_dpftrl(0.2),
    noise.optimal_cc(),
    noise.banded_toeplitz(noise.optimal_cc(), 4),
]


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize(
    "pattern", [noise.Participation.single(), noise.Participation.multiple(8, 4)], ids=str
)
def test_prefix_errors_are_the_per_step_terms_of_the_prefix_losses(mechanism, pattern):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.SensitivityUpperBoundWarning)
        errors = mechanism.prefix_errors(32, pattern)
        max_loss, mean_loss = mechanism.prefix_losses(32, pattern)
    assert errors.shape == (32,) and np.all(errors > 0)
    assert errors.max() == pytest.approx(max_loss, rel=1e-12)
    assert errors.mean() == pytest.approx(mean_loss, rel=1e-12)


def test_independent_noise_error_grows_linearly_with_the_step():
    # the t-th prefix sum of independent unit noise has variance t (closed form)
    np.testing.assert_allclose(noise.independent().prefix_errors(16), np.arange(1, 17))


@pytest.mark.parametrize("name", ["cmp.png", "cmp.svg", "cmp"])
def test_noise_compare_draws_every_mechanism(capsys, tmp_path, name):
    code, out, err = run(
        capsys, "noise", "compare", "--steps", "32", "--plot", str(tmp_path / name), "--json"
    )
    assert code == 0, err
    written = tmp_path / (name if "." in name else name + ".png")
    assert json.loads(out)["plot"] == str(written)
    data = written.read_bytes()
    assert data.startswith(PNG_MAGIC) if written.suffix == ".png" else b"<svg" in data[:2000]


def test_a_figure_is_not_overwritten_without_overwrite(capsys, tmp_path):
    target = tmp_path / "fig.png"
    target.write_bytes(b"keep")
    code, _, err = run(capsys, "noise", "compare", "--steps", "8", "--plot", str(target))
    assert code == 2 and "--overwrite" in err and target.read_bytes() == b"keep"
    code, _, _ = run(
        capsys, "noise", "compare", "--steps", "8", "--plot", str(target), "--overwrite"
    )
    assert code == 0 and target.read_bytes().startswith(PNG_MAGIC)


def test_a_figure_needs_a_known_suffix_and_an_existing_folder(capsys, tmp_path):
    code, _, err = run(capsys, "account", "gdp", "--mu", "1", "--delta", "1e-5", "--plot", "x.txt")
    assert code == 2 and ".png, .svg, .pdf" in err and err.count("\n") == 1
    missing = tmp_path / "no" / "fig.png"
    code, _, err = run(
        capsys, "account", "gdp", "--mu", "1", "--delta", "1e-5", "--plot", str(missing)
    )
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize(
    ("argv", "x_of_mark"),
    [
        (["account", "gaussian", "--sigma", "2", "--delta", "1e-5"], 2.0),
        (["account", "gdp", "--mu", "0.5", "--delta", "1e-5"], 0.5),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "200",
                "--delta",
                "1e-5",
                "--accountant",
                "rdp",
            ],
            200,
        ),
    ],
    ids=["gaussian", "gdp", "dpsgd"],
)
def test_account_plots_the_curve_through_the_reported_epsilon(
    capsys, tmp_path, monkeypatch, argv, x_of_mark
):
    import privopt.plots

    drawn = {}
    original = privopt.plots.plot_curve

    def spy(x, y, path, **kwargs):
        drawn.update(x=np.asarray(x), y=np.asarray(y), mark=kwargs["mark"])
        return original(x, y, path, **kwargs)

    monkeypatch.setattr(privopt.plots, "plot_curve", spy)
    code, out, err = run(capsys, *argv, "--plot", str(tmp_path / "eps.png"), "--json")
    assert code == 0, err
    epsilon = json.loads(out)["epsilon"]
    assert drawn["mark"] == (x_of_mark, epsilon)
    assert (tmp_path / "eps.png").read_bytes().startswith(PNG_MAGIC)
    # epsilon falls with more noise and grows with more steps: the curve is monotone
    slopes = np.diff(drawn["y"])
    assert np.all(slopes <= 1e-12) or np.all(slopes >= -1e-12)
    assert np.min(np.abs(drawn["x"] - x_of_mark)) < 1e-9 * max(1.0, x_of_mark)


def _search(seed: int) -> PrivateGridSearchCV:
    grid = {"method": ["newton", "adassp"], "fit_intercept": [True, False]}
    estimator = DPLinearRegression(feature_bounds=(-5, 5), target_bounds=(-20, 20))
    return PrivateGridSearchCV(estimator, grid, epsilon=1.0, delta=1e-6, random_state=seed)


def test_budget_split_is_the_split_the_search_ran():
    search = _search(0).fit(*_data(0))
    eps_c, delta_c, eps_s = budget_split(1.0, 1e-6, 4, refit=search.refit)
    assert (eps_c, delta_c, eps_s) == (
        search.candidate_epsilon_,
        search.candidate_delta_,
        search.selection_epsilon_,
    )


def _data(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(3000, 3))
    return X, X @ np.ones(3) + rng.normal(size=3000)


def test_search_tradeoff_reads_no_data(tmp_path, monkeypatch):
    import privopt.plots

    with pytest.raises(NotFittedError):
        _search(0).plot_tradeoff(tmp_path / "a.png")
    curves = []
    original = privopt.plots.plot_search_tradeoff

    def spy(counts, eps_c, shortfall, chosen, path, **kwargs):
        curves.append((np.asarray(counts), np.asarray(eps_c), np.asarray(shortfall), chosen))
        return original(counts, eps_c, shortfall, chosen, path, **kwargs)

    monkeypatch.setattr(privopt.plots, "plot_search_tradeoff", spy)
    first = _search(0).fit(*_data(0))
    written = first.plot_tradeoff(tmp_path / "a.png")
    assert written.read_bytes().startswith(PNG_MAGIC)
    second = _search(0).fit(*_data(1))  # other data, same public settings
    second.plot_tradeoff(tmp_path / "b.svg")
    for a, b in zip(curves[0], curves[1], strict=True):
        np.testing.assert_array_equal(a, b)
    counts, eps_c, shortfall, chosen = curves[0]
    assert chosen == 4 and eps_c[counts == 4][0] == pytest.approx(first.candidate_epsilon_)
    # McSherry-Talwar: 2 ln(k / 0.05) / epsilon_s validation records at 95%
    assert shortfall[counts == 4][0] == pytest.approx(
        2 * np.log(4 / 0.05) / first.selection_epsilon_
    )
    assert np.all(np.diff(eps_c) < 0) and np.all(np.diff(shortfall) > 0)
    with pytest.raises(ValueError, match="confidence"):
        first.plot_tradeoff(tmp_path / "c.png", confidence=1.0)
