"""Pieces every ``privopt`` command shares: option types and the table/JSON printer."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
Delta = Annotated[float, typer.Option("--delta", help="Target delta, in (0, 1).")]


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
