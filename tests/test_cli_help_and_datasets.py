"""Every help page of the command line, and ``privopt datasets`` (the bundled tables as CSV)."""

import csv
import json

import pytest
import typer

from cli_runner import run
from privopt.cli import app
from privopt.datasets import load_power_plant


def _command_paths(command, prefix=()):
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*prefix, name))


COMMANDS = list(_command_paths(typer.main.get_command(app)))


def test_the_walk_finds_every_group_and_leaf():
    assert ("datasets", "export") in COMMANDS and ("noise", "compare") in COMMANDS
    assert len(COMMANDS) > 20


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "privopt")
def test_no_help_page_shows_a_bool_metavar(capsys, path):
    code, out, err = run(capsys, *path, "--help")
    assert code == 0, err
    assert "--help" in out
    assert "<bool>" not in out


def test_flags_still_work_after_their_type_column_is_blanked(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("privopt ")


def test_datasets_list_names_every_bundled_table_with_its_source(capsys):
    code, out, _ = run(capsys, "datasets", "list", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)["datasets"]}
    assert rows["power-plant"]["rows"] == 9568 and rows["adult"]["rows"] == 32561
    assert all("CC BY 4.0" in row["source"] for row in rows.values())


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_datasets_export_writes_the_table_the_loader_returns(capsys, tmp_path, suffix):
    out = tmp_path / f"ccpp{suffix}"
    code, text, err = run(capsys, "datasets", "export", "power-plant", "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(text)["columns"] == ["AT", "V", "AP", "RH", "PE"]
    from privopt.datasets import load_table

    exported, bundled = load_table(out, "PE"), load_power_plant()
    assert (exported.X == bundled.X).all() and (exported.y == bundled.y).all()


def test_datasets_export_refuses_an_unknown_name_and_an_existing_file(capsys, tmp_path):
    code, _, err = run(capsys, "datasets", "export", "iris", "--out", str(tmp_path / "x.csv"))
    assert code == 2 and err.count("\n") == 1 and "power-plant, adult" in err
    target = tmp_path / "adult.csv"
    target.write_text("keep me\n")
    code, _, err = run(capsys, "datasets", "export", "adult", "--out", str(target))
    assert code == 2 and "--overwrite" in err and target.read_text() == "keep me\n"
    code, _, _ = run(capsys, "datasets", "export", "adult", "--out", str(target), "--overwrite")
    with open(target, newline="") as handle:
        assert next(csv.reader(handle))[-1] == "income"
