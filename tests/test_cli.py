"""The privopt command line: JSON outputs, tables, and one-line errors with non-zero exit."""

import json
import subprocess
import sys

import pytest

from privopt.cli import main


def run(capsys, *argv):
    code = 0
    try:
        main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["account", "gaussian", "--sigma", "1", "--delta", "1e-5"], "epsilon", 4.377178),
        (["account", "zcdp", "--rho", "1", "--delta", "1e-5"], "epsilon", 7.07720),
        (["account", "zcdp", "--epsilon", "8", "--delta", "1e-5"], "rho", 1.229715),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "1000",
                "--delta",
                "1e-5",
                "--accountant",
                "rdp",
            ],
            "epsilon",
            2.10137,
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "1000",
                "--delta",
                "1e-5",
                "--accountant",
                "pld",
            ],
            "epsilon",
            1.82824,
        ),
        (
            ["account", "calibrate-gaussian", "--epsilon", "1", "--delta", "1e-5"],
            "sigma",
            3.7306316,
        ),
        (["account", "gdp", "--mu", "1", "--delta", "1e-5"], "epsilon", 4.377178),
    ],
)
def test_json_outputs(capsys, argv, key, value):
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    data = json.loads(out)
    assert data[key] == pytest.approx(value, abs=1e-3)


def test_json_echoes_inputs(capsys):
    _, out, _ = run(
        capsys,
        "account",
        "gaussian",
        "--sigma",
        "2",
        "--sensitivity",
        "3",
        "--delta",
        "1e-6",
        "--json",
    )
    data = json.loads(out)
    assert data["sigma"] == 2.0 and data["sensitivity"] == 3.0 and data["delta"] == 1e-6


def test_table_output(capsys):
    code, out, _ = run(capsys, "account", "calibrate-gaussian", "--epsilon", "1", "--delta", "1e-5")
    assert code == 0
    assert "sigma" in out and "3.7306316" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["account", "gaussian", "--sigma", "-1", "--delta", "1e-5"], "sigma"),
        (["account", "gaussian", "--sigma", "nan", "--delta", "1e-5"], "sigma"),
        (["account", "gaussian", "--sigma", "1", "--delta", "2"], "delta"),
        (["account", "gaussian", "--sigma", "abc", "--delta", "1e-5"], "--sigma"),
        (["account", "calibrate-gaussian", "--epsilon", "0", "--delta", "1e-5"], "epsilon"),
        (["account", "calibrate-gaussian", "--epsilon", "inf", "--delta", "1e-5"], "epsilon"),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "1.5",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "sample_rate",
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "-3",
                "--delta",
                "1e-5",
            ],
            "steps",
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "3",
                "--delta",
                "1e-5",
                "--accountant",
                "moments",
            ],
            "accountant",
        ),
        (["account", "zcdp", "--delta", "1e-5"], "--rho"),
        (["account", "gaussian", "--delta", "1e-5"], "--sigma"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(capsys, argv, needle):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0]


def test_demo_runs(capsys):
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert "Privacy report" in out


def test_console_script_entry_point():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "privopt.cli",
            "account",
            "gdp",
            "--mu",
            "0.5",
            "--delta",
            "1e-5",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["mu"] == 0.5


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (
            ["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--nu", "0.01", "--anytime"],
            "sensitivity_squared",
            2.1368782611,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "optimal-cc", "--steps", "1024"],
            "sensitivity_squared",
            3.2725541503,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "tree", "--steps", "1024"],
            "sensitivity_squared",
            11.0,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "anti-pgd", "--steps", "37"],
            "sensitivity_squared",
            37.0,
        ),
        (
            [
                "noise",
                "sensitivity",
                "--mechanism",
                "nu-dpftrl",
                "--nu",
                "0.05",
                "--steps",
                "200",
                "--min-sep",
                "20",
                "--participations",
                "10",
            ],
            "sensitivity_squared",
            19.6000,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "independent", "--steps", "10"],
            "sensitivity",
            1.0,
        ),
        (
            ["noise", "tune-nu", "--steps", "2000", "--min-sep", "100", "--participations", "20"],
            "loss",
            993938.4,
        ),
    ],
)
def test_noise_json_outputs(capsys, argv, key, value):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out)[key] == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["noise", "sensitivity", "--mechanism", "optimal-cc", "--anytime"], "infinite"),
        (["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--steps", "10"], "--nu"),
        (["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--nu", "1.5", "--steps", "9"], "nu"),
        (["noise", "sensitivity", "--mechanism", "foo", "--steps", "10"], "--mechanism"),
        (["noise", "sensitivity", "--mechanism", "tree"], "--steps"),
        (
            ["noise", "sensitivity", "--mechanism", "tree", "--steps", "10", "--min-sep", "3"],
            "--participations",
        ),
        (
            ["noise", "tune-nu", "--steps", "100", "--min-sep", "50", "--participations", "5"],
            "steps",
        ),
    ],
)
def test_noise_bad_arguments(capsys, argv, needle):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err
