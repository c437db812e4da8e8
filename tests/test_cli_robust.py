"""The CLI never shows a traceback for a user mistake (issue 17): one line on stderr, exit 2;
internal errors say they are bugs (exit 1); --version; help renders; resource bounds."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run
from privopt import __version__

BOUNDS = {"features": {"a": [-3, 3], "b": [-3, 3]}, "target": [-10, 10]}


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(300, 2))
    y = X @ [1.0, -2.0] + rng.uniform(-1, 1, size=300)
    path = tmp_path / "d.csv"
    path.write_text(
        "a,b,y\n" + "\n".join(f"{u},{v},{w}" for (u, v), w in zip(X, y, strict=True)) + "\n"
    )
    bounds = tmp_path / "b.json"
    bounds.write_text(json.dumps(BOUNDS))
    return path, bounds


def assert_one_line_error(code, err, needle, status=2):
    assert code == status
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    assert needle.lower() in lines[0].lower()


def fit_args(table, out, *extra):
    data, bounds = table
    return ("fit", data, "--target", "y", "--out", out, "--bounds", bounds, "--seed", "1", *extra)


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"privopt {__version__}"


def test_fit_help_shows_the_bounds_format(capsys):
    code, out, _ = run(capsys, "fit", "--help")
    assert code == 0
    text = " ".join(out.replace("│", " ").split())
    assert '"col": [lo, hi]' in text and '"target": [lo, hi]' in text


@pytest.mark.parametrize(
    ("make_args", "needle"),
    [
        (lambda t, p: ("fit", p / "nosuch.csv", "--target", "y", "--out", p / "m.json"), "exist"),
        (lambda t, p: fit_args(t, p / "nodir" / "m.json"), "does not exist"),
        (lambda t, p: fit_args(t, p), "directory"),
        (lambda t, p: fit_args(t, p / "m.json", "--delta", "0.01"), "1/N"),
        (lambda t, p: fit_args(t, p / "m.json", "--epsilon", "-1"), "epsilon"),
        (lambda t, p: fit_args(t, p / "m.json", "--epsilon", "nan"), "epsilon"),
        (lambda t, p: fit_args(t, p / "m.json", "--method", "magic"), "method"),
        (lambda t, p: ("reproduce", "fig1", "--out", t[0], "--quick"), "not a folder"),
        (lambda t, p: ("reproduce", "fig1", "--out", p / "a" / "b", "--quick"), "does not"),
    ],
)
def test_user_mistakes_are_one_line_errors(capsys, tmp_path, table, make_args, needle):
    code, _, err = run(capsys, *make_args(table, tmp_path))
    assert_one_line_error(code, err, needle)


def test_existing_output_file_is_refused_unless_overwrite(capsys, tmp_path, table):
    out = tmp_path / "m.json"
    assert run(capsys, *fit_args(table, out, "--json"))[0] == 0
    code, _, err = run(capsys, *fit_args(table, out))
    assert_one_line_error(code, err, "already exists")
    assert run(capsys, *fit_args(table, out, "--overwrite", "--json"))[0] == 0


def test_large_delta_is_accepted_only_when_insisted(capsys, tmp_path, table):
    code, _, _ = run(
        capsys, *fit_args(table, tmp_path / "m.json", "--delta", "0.01", "--allow-large-delta")
    )
    assert code == 0 and json.loads(Path(tmp_path / "m.json").read_text())["delta"] == 0.01


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("a,b,y\n1,2,3\nnan,1,2\n" * 3, "nan"),
        ("a,b,y\n1,x,3\n2,1,2\n", "numeric"),
        ("a,b\n1,3\n", "y"),
    ],
)
def test_bad_data_is_a_one_line_error(capsys, tmp_path, table, content, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    code, _, err = run(capsys, *fit_args((bad, table[1]), tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "bounds_text",
    [
        '{"features": {"a": [0, 1]}}',
        "not json",
        '{"features": {"a": [0,1], "b": 3}, "target": [0]}',
    ],
)
def test_malformed_bounds_are_one_line_errors(capsys, tmp_path, table, bounds_text):
    bad = tmp_path / "bad.json"
    bad.write_text(bounds_text)
    code, _, err = run(capsys, *fit_args((table[0], bad), tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("tamper", "needle"),
    [
        (lambda m: m.update(coef=m["coef"][:1]), "coef"),
        (lambda m: m.update(coef=["x", 1.0]), "coef"),
        (lambda m: m.update(intercept=None), "intercept"),
        (lambda m: m.update(features="a"), "features"),
        (lambda m: m.update(format="other"), "not a privopt"),
    ],
)
def test_tampered_model_files_are_one_line_errors(capsys, tmp_path, table, tamper, needle):
    model_path = tmp_path / "m.json"
    assert run(capsys, *fit_args(table, model_path, "--json"))[0] == 0
    model = json.loads(model_path.read_text())
    tamper(model)
    model_path.write_text(json.dumps(model))
    code, _, err = run(capsys, "predict", model_path, table[0])
    assert_one_line_error(code, err, needle)


def test_predict_writes_to_exactly_one_place(capsys, tmp_path, table):
    model_path = tmp_path / "m.json"
    assert run(capsys, *fit_args(table, model_path, "--json"))[0] == 0
    out = tmp_path / "p.csv"
    code, stdout, _ = run(capsys, "predict", model_path, table[0], "--json", "--out", out)
    assert code == 0
    assert json.loads(stdout) == {"out": str(out), "rows": 300}
    assert out.read_text().count("\n") == 301
    code, stdout, _ = run(capsys, "predict", model_path, table[0], "--json")
    assert len(json.loads(stdout)["predictions"]) == 300


def test_internal_errors_say_bug_and_debug_shows_the_traceback(capsys, monkeypatch):
    import privopt.accounting as acc

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(acc, "gaussian_epsilon", broken)
    argv = ("account", "gaussian", "--sigma", "1", "--delta", "1e-5")
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, "bug", status=1)
    assert "issues" in err and "boom" in err
    code, _, err = run(capsys, "--debug", *argv)
    assert code == 1 and "Traceback" in err


def test_audit_selftest_json(capsys):
    code, out, _ = run(capsys, "audit", "selftest", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["correct"]["epsilon_lower_bound"] <= result["correct"]["claimed_epsilon"]
    assert result["broken"]["epsilon_lower_bound"] > result["broken"]["claimed_epsilon"]


def test_audit_algorithm_json_and_bad_name(capsys):
    code, out, _ = run(capsys, "audit", "ftrl-tree", "--json", "--canaries", "500")
    result = json.loads(out)
    assert code == 0 and result["claimed_epsilon"] == pytest.approx(2.0)
    assert 0.0 <= result["epsilon_lower_bound"] <= result["claimed_epsilon"]
    assert result["confidence"] == 0.95
    code, _, err = run(capsys, "audit", "no-such-algorithm")
    assert code == 2 and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for ulimit")
def test_absurd_epsilon_finishes_in_bounded_time_and_memory(tmp_path):
    # 3,000 rows, epsilon 1e9, 4 GB of virtual memory: DP-SGD's calibration is capped
    # (DPSGD_MAX_EPSILON), so the fit finishes (unloaded: about 15 s, 0.3 GB).
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(3000, 2))
    y = X @ [1.0, -2.0] + rng.uniform(-1, 1, size=3000)
    data = tmp_path / "d.csv"
    data.write_text(
        "a,b,y\n" + "\n".join(f"{u},{v},{w}" for (u, v), w in zip(X, y, strict=True)) + "\n"
    )
    bounds = tmp_path / "b.json"
    bounds.write_text(json.dumps(BOUNDS))
    exe = Path(sys.executable).with_name("privopt")
    command = (
        f"ulimit -v 4000000; {exe} fit {data} --target y --out {tmp_path / 'm.json'} "
        f"--bounds {bounds} --epsilon 1e9 --method dpsgd --json"
    )
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=90, env=dict(os.environ)
    )
    assert done.returncode in (0, 2), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    if done.returncode == 0:
        assert json.loads(done.stdout)["epsilon"] <= 1e9
