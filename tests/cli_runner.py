"""Running privopt's command line in process, for the CLI tests (importable from tests/)."""

from __future__ import annotations

from privopt.cli import main


def run(capsys, *argv) -> tuple[int, str, str]:
    """``privopt *argv`` in this process: (exit code, stdout, stderr); arguments are str()-ed."""
    code = 0
    try:
        main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
