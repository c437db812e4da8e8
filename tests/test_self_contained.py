"""The repository stands on its own: nothing in it points outside it or to a paper by number.

Every tracked file (code, tests, docs, benchmarks, examples, the Makefile, CI) is read; none
may mention the sibling ``../shared`` folder, the notes files it held, or a paper as "seed
00N": papers are cited by authors, year and title, and the arguments behind a privacy claim
live in ``docs/theory``.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "a path to the sibling shared folder": re.compile(r"\.\./shared|\bshared/(seeds|notes|data)/"),
    "a notes file": re.compile(r"\bnotes/[A-Za-z0-9_]+\.md|\bnotes ?§"),
    "a paper by its seed number": re.compile(r"\bseeds? 00[0-4]\b|\bseed-00[0-4]\b", re.IGNORECASE),
}
#: this file names the patterns it forbids
ALLOWED = {"tests/test_self_contained.py", "tests/test_docs.py"}


def _tracked_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in listed if name not in ALLOWED]


def test_no_file_points_outside_the_repository_or_to_a_seed_number():
    offences = []
    for name in _tracked_files():
        path = ROOT / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:  # binary (the bundled gzip tables)
            continue
        text = data.decode("utf-8", errors="replace")
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offences.append(f"{name}:{line}: {what} ({match.group(0)!r})")
    assert not offences, "\n".join(offences[:50])


def test_the_rule_has_power(tmp_path):
    planted = "see notes/002.md §4.4 and ../shared/data/adult.csv (seed 002, Theorem 11)"
    found = [what for what, pattern in FORBIDDEN.items() if pattern.search(planted)]
    assert len(found) == 3


def test_cli_help_names_no_seed_number():
    from typer.main import get_command

    from privopt.cli import app

    def walk(command):
        yield command
        for sub in getattr(command, "commands", {}).values():
            yield from walk(sub)

    texts = []
    for command in walk(get_command(app)):
        texts.append(command.help or "")
        texts.extend(getattr(param, "help", None) or "" for param in command.params)
    joined = "\n".join(texts)
    for what, pattern in FORBIDDEN.items():
        assert not pattern.search(joined), what
