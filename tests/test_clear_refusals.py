"""Unclear errors made clear (issue 33, item 6, outside torch and audit): each case is one line
naming the argument and the fix (CLI: exit 2) within 10 s, before any work."""

from __future__ import annotations

import time

import numpy as np
import pytest

from privopt.cli import main
from privopt.estimators import DPLinearRegression
from privopt.model_selection import PrivateGridSearchCV


def run(capsys, *argv):
    code = 0
    start = time.perf_counter()
    try:
        main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err, time.perf_counter() - start


def _data(n=2000):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (n, 3))
    return X, X @ [1.0, 2.0, 3.0] + 0.1 * rng.normal(size=n)


def _search(**kwargs):
    base = DPLinearRegression(feature_bounds=[(-1, 1)] * 3, target_bounds=(-7, 7))
    return PrivateGridSearchCV(base, **kwargs)


def test_an_empty_param_grid_is_named():
    with pytest.raises(ValueError, match=r"param_grid=\[\] holds no candidate; give a dict"):
        _search(param_grid=[]).fit(*_data())


def test_a_huge_search_epsilon_is_refused_with_its_limit():
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"Expected epsilon <= 700 for a private grid search"):
        _search(param_grid={"method": ["adassp", "newton"]}, epsilon=1e6).fit(*_data())
    assert time.perf_counter() - start < 10


def test_a_candidate_refused_at_its_share_is_named_with_the_fix():
    grid = {"method": ["adassp", "dpsgd"], "fit_intercept": [True, False]}
    with pytest.raises(ValueError, match=r"Candidate .*'dpsgd'.* larger epsilon or fewer"):
        _search(param_grid=grid, epsilon=1e-3).fit(*_data(1600))


def test_public_refusals_of_any_candidate_come_before_any_fit(monkeypatch):
    fitted = []
    original = DPLinearRegression.fit

    def counting_fit(self, *args, **kwargs):
        fitted.append(self.method)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DPLinearRegression, "fit", counting_fit)
    # 2,000 rows: the training part has ~1,600, so delta_c = 0.1 / 4 = 0.025 >= 1/N
    grid = {"method": ["adassp", "newton"]}
    with pytest.raises(ValueError, match=r"Candidate .* refused .* nothing was fitted"):
        _search(param_grid=grid, epsilon=1.0, delta=0.1).fit(*_data())
    assert fitted == []


def test_a_negative_seed_names_the_option(capsys, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("a,y\n" + "".join(f"{i % 7},{i % 5}\n" for i in range(50)))
    argv = ("fit", data, "--target", "y", "--out", tmp_path / "m.json", "--seed", "-1")
    code, _, err, seconds = run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "'--seed'" in err and ">= 0" in err.replace("greater than or equal to", ">=")
    assert seconds < 10


def test_reproduce_never_overwrites_a_result_without_overwrite(capsys, tmp_path):
    existing = tmp_path / "fig1.json"
    existing.write_text("{}")
    code, _, err, seconds = run(capsys, "reproduce", "fig1", "--out", tmp_path, "--quick")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "fig1.json already exists" in err and "--overwrite" in err
    assert existing.read_text() == "{}" and not (tmp_path / "fig1.png").exists()
    assert seconds < 10


@pytest.mark.parametrize("case", ["empty file", "different columns"])
def test_dask_file_failures_exit_2_with_one_line_in_a_real_process(tmp_path, case):
    """An empty CSV or files with different columns: exit 2, one line (a pyarrow thread-pool
    race at interpreter exit used to abort one run in six with exit 134)."""
    import subprocess
    import sys

    pytest.importorskip("dask")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "0.csv").write_text("a,b,y\n1,2,3\n4,5,6\n")
    (folder / "1.csv").write_text("" if case == "empty file" else "a,y\n1,3\n4,6\n")
    argv = ["fit", str(folder), "--target", "y", "--out", str(tmp_path / "m.json")]
    code = "from privopt.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, *argv, "--backend", "dask"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert "1.csv" in lines[0]
