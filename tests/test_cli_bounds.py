"""Bounded time and memory on the CLI (issue 33, items 5 and 6): every size that drives time or
memory is checked against a stated limit before work starts, the Dask cluster start has a time
bound, and dependencies' notices are one line."""

from __future__ import annotations

import time

import pytest

from cli_runner import run as run_cli
from privopt import _cli_fit_backend


def run(capsys, *argv):
    """(exit code, stdout, stderr, seconds) of ``privopt *argv`` in this process."""
    start = time.perf_counter()
    return (*run_cli(capsys, *argv), time.perf_counter() - start)


def one_line_error(code, err, *needles):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for needle in needles:
        assert needle in lines[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ("noise", "blt", "--steps", "1000000000"),
        ("noise", "sensitivity", "--mechanism", "optimal-cc", "--steps", "1000000000"),
        ("noise", "tune-nu", "--steps", "1000000000"),
    ],
)
def test_noise_horizon_is_bounded_with_the_limit_in_the_message(capsys, argv):
    code, _, err, seconds = run(capsys, *argv)
    one_line_error(code, err, "--steps <= 10,000,000", "1,000,000,000")
    assert seconds < 10


def _csv(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("a,y\n" + "".join(f"{i % 7},{i % 5}\n" for i in range(50)))
    return path


def test_workers_are_bounded_with_the_limit_in_the_message(capsys, tmp_path):
    pytest.importorskip("distributed")
    argv = ("fit", _csv(tmp_path), "--target", "y", "--out", tmp_path / "m.json")
    code, _, err, seconds = run(capsys, *argv, "--backend", "dask", "--workers", "100000")
    limit = _cli_fit_backend.max_workers()
    one_line_error(code, err, f"--workers <= {limit}", "100,000", "--scheduler")
    assert seconds < 10
    assert not (tmp_path / "m.json").exists()


def test_a_cluster_that_does_not_start_is_refused_in_bounded_time(capsys, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")

    class Hangs:
        def __init__(self, *args, **kwargs):
            time.sleep(30)

    monkeypatch.setattr(distributed, "LocalCluster", Hangs)
    monkeypatch.setattr(_cli_fit_backend, "CLUSTER_START_TIMEOUT_S", 0.5)
    argv = ("fit", _csv(tmp_path), "--target", "y", "--out", tmp_path / "m.json")
    code, _, err, seconds = run(capsys, *argv, "--backend", "dask", "--workers", "2")
    one_line_error(code, err, "did not start within 0.5 s", "--scheduler")
    assert seconds < 10


def test_dependency_notices_are_one_line(capsys, caplog):
    # dp_accounting's "Excluding this order" notices are dropped at the source (an excluded
    # RDP order keeps epsilon an upper bound), so this RDP run prints nothing on stderr
    argv = ("account", "dpsgd", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10")
    code, _, err, _ = run(capsys, *argv, "--delta", "1e-6", "--accountant", "rdp")
    assert code == 0 and err == "", err
    # any other dependency notice is counted and summarised in one line; --debug shows it
    import logging
    import warnings

    from privopt._cli_common import dependency_notices

    with dependency_notices(False):
        logging.getLogger("absl").warning("a dependency's notice")
        logging.getLogger("absl").warning("another one")
        warnings.warn("a dependency's warning", FutureWarning, stacklevel=1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "3 notices from dependencies not shown" in lines[0] and "--debug" in lines[0]
    assert "a dependency's notice" in lines[0]
    caplog.clear()
    with dependency_notices(True):
        logging.getLogger("absl").warning("a dependency's notice")
    assert "notices from dependencies" not in capsys.readouterr().err
    assert any("a dependency's notice" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("flag", "limit"), [("--runs=1000000", "64"), ("--canaries=1000000000", "100000")]
)
def test_audit_sizes_are_bounded_before_work_starts(flag, limit):
    from typer.testing import CliRunner

    from privopt.cli import app

    result = CliRunner().invoke(app, ["audit", "dpsgd", flag])
    assert result.exit_code == 2
    assert limit in result.output
