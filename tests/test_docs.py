"""Every ```python block of the documentation site and of the README runs on its own.

Each block runs in a fresh interpreter, in an empty temporary directory, importing privopt from
a temporary copy of ``src/privopt`` with nothing beside it: a block that needs a name from another
block, a file of the repository or a path outside it (``../shared``) fails here. Blocks that are
not meant to run are fenced as ```text, ```console or ```bash.

Every block runs in ``make test-all`` (CI), with the site's strict build; ``make test`` runs the
README's first block (the quick start) only: each block costs a fresh interpreter importing
privopt (seconds of CPU), and together they were the largest item of the fast suite.

The site itself (``make docs``: ``mkdocs build --strict``) is built in CI; the checks here are the
runnable examples and what the pages must never say.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
#: Languages a fence may declare; anything else (or none) is a block nobody decided about.
LANGUAGES = {"python", "console", "text", "bash", "yaml", "toml", "json"}
BLOCK_TIMEOUT_S = 900


def _pages() -> list[Path]:
    pages = sorted(DOCS.rglob("*.md"))
    readme = ROOT / "README.md"
    return [*pages, readme] if readme.exists() else pages


def _fences(path: Path):
    """(first line number, language, code) of every fenced block of ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, ticks = match["indent"], match["ticks"]
        language = match["info"].strip().split(" ")[0].lstrip("{.").rstrip("}")
        body = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        yield i + 1, language, "\n".join(body) + "\n"
        i = j + 1


def _blocks():
    params = []
    for path in _pages():
        name = path.relative_to(ROOT).as_posix()
        python_blocks = [
            (line, code) for line, language, code in _fences(path) if language == "python"
        ]
        for index, (line, code) in enumerate(python_blocks):
            slow = name != "README.md" or index > 0  # the README's quick start stays fast
            marks = [pytest.mark.slow] if slow else []
            params.append(pytest.param(code, id=f"{name}:{line}", marks=marks))
    return params


@pytest.fixture(scope="session")
def isolated_package(tmp_path_factory) -> Path:
    """A copy of src/privopt in a folder with nothing beside it (no ../shared, no repository)."""
    site = tmp_path_factory.mktemp("isolated") / "site"
    shutil.copytree(
        ROOT / "src" / "privopt",
        site / "privopt",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return site


def _run(code: str, cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=str(site), MPLBACKEND="Agg", PYTHONHASHSEED="0")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


def test_blocks_import_the_isolated_copy(isolated_package, tmp_path):
    done = _run("import privopt; print(privopt.__file__)", tmp_path, isolated_package)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(isolated_package)


@pytest.mark.parametrize("code", _blocks())
def test_python_block_runs_on_its_own(code, isolated_package, tmp_path):
    done = _run(code, tmp_path, isolated_package)
    assert done.returncode == 0, (
        f"the block failed (exit {done.returncode}):\n{code}\n--- stderr ---\n{done.stderr[-4000:]}"
    )


def test_every_fence_names_its_language():
    unnamed = [
        f"{path.relative_to(ROOT)}:{line} ({language or 'no language'})"
        for path in sorted(DOCS.rglob("*.md"))
        for line, language, _ in _fences(path)
        if language not in LANGUAGES
    ]
    assert not unnamed, (
        "fence these as python (runs), console or text (does not run): " + ", ".join(unnamed)
    )


def test_docs_have_python_blocks_to_run():
    assert len([p for p in _blocks() if "README.md" not in p.id]) >= 10


@pytest.mark.parametrize(
    "forbidden",
    [re.compile(r"seed 00\d", re.IGNORECASE), re.compile(r"notes/"), re.compile(r"\.\./shared")],
    ids=["seed-numbers", "notes-files", "shared-folder"],
)
def test_docs_name_papers_not_internal_files(forbidden):
    """The pages cite papers by author, year and title, never the project's internal files."""
    texts = [*sorted(DOCS.rglob("*.md")), ROOT / "mkdocs.yml"]
    hits = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in texts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if forbidden.search(line)
    ]
    assert not hits, f"{forbidden.pattern!r} found at " + ", ".join(hits)


def _hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rst_roles", DOCS / "hooks" / "rst_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hook_renders_sphinx_roles_and_math_on_api_pages():
    rewrite = _hook().rewrite
    assert (
        rewrite("see :func:<code>~privopt.noise.nu_dpftrl</code>") == "see <code>nu_dpftrl</code>"
    )
    assert (
        rewrite(":class:<code>privopt.PrivacyBudget</code>") == "<code>privopt.PrivacyBudget</code>"
    )
    assert rewrite(":math:<code>x^2 &lt; 1</code>") == (
        '<span class="arithmatex">\\(x^2 &lt; 1\\)</span>'
    )
    block = (
        '<p>.. math::</p>\n<div class="highlight"><pre><span></span>'
        "<code>a = b\n</code></pre></div>"
    )
    assert rewrite(block) == '<div class="arithmatex">\\[a = b\\]</div>'
    assert rewrite("<code>:func:</code> and plain text") == "<code>:func:</code> and plain text"


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    """``make docs``: no warning (strict), every internal link and anchor resolves (~40 s)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "theory" / "correlated-noise" / "index.html").exists()
