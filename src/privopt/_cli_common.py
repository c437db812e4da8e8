"""Pieces every ``privopt`` command shares: option types, the table/JSON printer, the checks of
input and output paths, ``--version`` / ``--debug``, and the error policy of :func:`run_app`.

Error policy (what a user sees):

* a user mistake (bad option, missing or unreadable file, unwritable or existing output,
  malformed JSON, data that cannot be used, an argument out of range) is one line on stderr,
  ``error: ...`` naming the problem, and exit status 2;
* an unexpected internal error is one line saying it is a bug, with where to report it, and
  exit status 1; ``privopt --debug ...`` shows its traceback instead.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.exceptions import Abort, Exit, TyperException

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
Delta = Annotated[float, typer.Option("--delta", help="Target delta, in (0, 1).")]
PlotOption = Annotated[
    Path | None,
    typer.Option("--plot", help="Also draw a figure there (PNG; .svg or .pdf by suffix)."),
]
PlotOverwrite = Annotated[
    bool, typer.Option("--overwrite", help="Replace an existing --plot file.")
]


def plot_target(path: Path | None, overwrite: bool) -> Path | None:
    """The figure file of ``--plot`` (suffix checked, ``.png`` added when missing), refused
    when it exists and ``--overwrite`` is not given; None without ``--plot``."""
    if path is None:
        return None
    from privopt.plots import figure_path

    target = figure_path(path)
    return output_file(target, overwrite=overwrite, what="figure file")


def input_file(help: str) -> Any:
    """A path argument that must be an existing, readable file (typer checks it first)."""
    return typer.Argument(help=help, exists=True, dir_okay=False, readable=True)


#: Where to report bugs when the package metadata names no issue tracker.
ISSUES_URL = "https://github.com/privopt/privopt/issues"


@dataclass
class _State:
    debug: bool = False


STATE = _State()


def _emit(title: str, result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value")
    for key, value in result.items():
        text = f"{value:.8g}" if isinstance(value, float) else str(value)
        table.add_row(key, text)
    Console().print(table)


def version_text() -> str:
    from privopt import __version__

    return f"privopt {__version__}"


def issues_url() -> str:
    """The issue tracker from the installed package's metadata, else :data:`ISSUES_URL`."""
    try:
        from importlib.metadata import metadata

        for entry in metadata("privopt").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() in ("issues", "bug tracker", "bugs"):
                return url.strip()
    except Exception:  # metadata is best effort; the fallback is always valid
        pass
    return ISSUES_URL


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise Exit(0)


def root_callback(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of internal errors.")
    ] = False,
) -> None:
    """Differentially private optimisation with exact, stated privacy accounting."""
    STATE.debug = debug


def output_file(path: Path, *, overwrite: bool = False, what: str = "output") -> Path:
    """``path`` if a file can be written there: refuses a directory, a missing or read-only
    folder, and an existing file unless ``overwrite``."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"The {what} {path} is a directory; give a file name.")
    if path.exists() and not overwrite:
        raise ValueError(f"The {what} {path} already exists; remove it or pass --overwrite.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"Cannot write the {what} {path}: folder {parent} does not exist.")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"Cannot write the {what} {path}: permission denied.")
    return path


def output_dir(path: Path, *, what: str = "output folder") -> Path:
    """``path`` if a command may write its files into it: an existing folder is fine, an
    existing file is refused, a missing folder is created (its parent must exist)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"The {what} {path} exists and is not a folder.")
    if not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise ValueError(f"Cannot create the {what} {path}: folder {parent} does not exist.")
        try:
            path.mkdir()
        except OSError as exc:
            raise ValueError(f"Cannot create the {what} {path}: {exc.strerror}.") from None
    if not os.access(path, os.W_OK):
        raise ValueError(f"Cannot write into the {what} {path}: permission denied.")
    return path


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class _NoticeCounter(logging.Handler):
    """Counts the log records and warnings of dependencies (dp_accounting's absl notices print
    ~180 lines for one audit) so that the command prints one line about them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: str | None = None

    def note(self, source: str, text: str) -> None:
        self.count += 1
        if self.first is None:
            first = _one_line(text)
            self.first = f"{source}: {first[:100]}{'...' if len(first) > 100 else ''}"

    def emit(self, record: logging.LogRecord) -> None:
        self.note(record.name, record.getMessage())


def _is_own_warning(category: type[Warning], filename: str) -> bool:
    package = os.path.dirname(os.path.abspath(__file__))
    own = getattr(category, "__module__", "").startswith("privopt")
    return own or os.path.abspath(filename).startswith(package + os.sep)


@contextmanager
def dependency_notices(debug: bool) -> Iterator[None]:
    """While a command runs: privopt's own warnings print as one line each (``warning: ...``);
    dependencies' warnings and log records are counted and summarised in one line at the end
    (all of them shown with ``--debug``)."""
    if debug:
        yield
        return
    counter = _NoticeCounter()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = [counter]
    root.setLevel(logging.WARNING)
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if _is_own_warning(category, filename):
            print(f"warning: {_one_line(message)}", file=sys.stderr)
        else:
            counter.note(category.__name__, str(message))

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        warnings.showwarning = show
        root.handlers, root.level = handlers, level
        if counter.count:
            print(
                f"warning: {counter.count} notice{'s' if counter.count > 1 else ''} from "
                f"dependencies not shown (first: {counter.first}); rerun with --debug to see "
                "them.",
                file=sys.stderr,
            )


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run ``app`` with the error policy of the module docstring (never returns normally with a
    failure: exits 1 or 2)."""
    STATE.debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    with dependency_notices(STATE.debug):
        _run_app(app, argv)


def _no_type(ctx: Any) -> None:
    return None


def _hide_flag_metavars(command: Any) -> None:
    """Blank the type column of on/off flags (typer shows ``<bool>``, as if a value followed),
    the help option included, in ``command`` and every sub-command."""
    ctx = command.context_class(command, info_name=command.name)
    for param in [*command.params, command.get_help_option(ctx)]:
        if getattr(param, "is_flag", False):
            param.display_type_rich = _no_type
    for sub in getattr(command, "commands", {}).values():
        _hide_flag_metavars(sub)


def _run_app(app: typer.Typer, argv: list[str] | None) -> None:
    command = typer.main.get_command(app)
    _hide_flag_metavars(command)
    try:
        result = command.main(args=argv, prog_name="privopt", standalone_mode=False)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(1)
    except TyperException as exc:
        message = _one_line(exc.format_message())
        if message:  # usage errors that already printed help carry no message
            print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    except (ValueError, OSError) as exc:  # bad arguments; missing or unreadable/unwritable files
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # the last line of defence: a bug, said so
        if STATE.debug:
            traceback.print_exc()
        else:
            print(
                f"error: internal error ({type(exc).__name__}: {_one_line(exc)}). This is a bug "
                f"in {version_text()}; please report it at {issues_url()} (rerun with --debug "
                "for the traceback).",
                file=sys.stderr,
            )
        sys.exit(1)
    if isinstance(result, int) and result != 0:
        sys.exit(result)


MODEL_FORMAT = "privopt-linear-model/1"


def read_linear_model(path: Path) -> tuple[Any, float, list[str], Any]:
    """(coef, intercept, feature names, feature range (d, 2)) of a ``privopt fit`` model file,
    validated: a tampered or foreign file is a one-line ``ValueError`` naming what is wrong. The
    range (null: unbounded) is what a prediction clips each feature to; files written before it
    existed have none (no clipping)."""
    import math

    import numpy as np

    try:
        model = json.loads(Path(path).read_text())
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a privopt model file (not text).") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not a privopt model file (invalid JSON: {exc.msg}).") from None
    if not isinstance(model, dict) or model.get("format") != MODEL_FORMAT:
        raise ValueError(f"{path} is not a privopt linear model file (format {MODEL_FORMAT}).")
    names = model.get("features")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"Model file {path}: 'features' must be a non-empty list of names.")
    coef = model.get("coef")
    if (
        not isinstance(coef, list)
        or len(coef) != len(names)
        or not all(isinstance(c, int | float) and not isinstance(c, bool) for c in coef)
    ):
        raise ValueError(
            f"Model file {path}: 'coef' must be a list of {len(names)} numbers, one per feature."
        )
    intercept = model.get("intercept")
    if not isinstance(intercept, int | float) or isinstance(intercept, bool):
        raise ValueError(f"Model file {path}: 'intercept' must be a number.")
    values = np.asarray(coef, dtype=float)
    if not (np.all(np.isfinite(values)) and math.isfinite(float(intercept))):
        raise ValueError(f"Model file {path}: coefficients must be finite.")
    return values, float(intercept), list(names), _feature_range(path, model, len(names))


def _feature_range(path: Path, model: dict, d: int) -> Any:
    """The model file's optional ``feature_range``: d pairs [low, high], null for unbounded."""
    import numpy as np

    given = model.get("feature_range")
    bad = ValueError(
        f"Model file {path}: 'feature_range' must be a list of {d} [low, high] pairs (numbers "
        "or null) with low < high."
    )
    if given is None:
        return np.tile([-np.inf, np.inf], (d, 1))
    if not isinstance(given, list) or len(given) != d:
        raise bad
    out = np.empty((d, 2))
    for j, pair in enumerate(given):
        if not isinstance(pair, list) or len(pair) != 2:
            raise bad
        for k, (value, none) in enumerate(zip(pair, (-np.inf, np.inf), strict=True)):
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not number:
                raise bad
            out[j, k] = none if value is None else float(value)
    if not np.all(out[:, 0] < out[:, 1]) or np.any(np.isnan(out)):
        raise bad
    return out
