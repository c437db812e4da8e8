"""``privopt datasets ...``: the small public tables bundled with privopt, as CSV files."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from privopt._cli_common import JsonFlag, output_file

datasets_app = typer.Typer(
    help="The public tables bundled with privopt (for examples and tests).", no_args_is_help=True
)

#: name -> (bundled file, loader in privopt.datasets, rows, target)
BUNDLED: dict[str, tuple[str, str, int, str]] = {
    "power-plant": ("ccpp_power_plant.csv.gz", "load_power_plant", 9_568, "PE"),
    "adult": ("adult.csv.gz", "load_adult", 32_561, "income"),
}


def _source(name: str) -> str:
    from privopt.datasets.adult import ADULT_SOURCE
    from privopt.datasets.bundled import POWER_PLANT_SOURCE

    return POWER_PLANT_SOURCE if name == "power-plant" else ADULT_SOURCE


@datasets_app.command("list")
def list_datasets(as_json: JsonFlag = False) -> None:
    """List the bundled tables: name, rows, target, loader and source."""
    rows = [
        {"name": name, "rows": n, "target": target, "loader": f"privopt.datasets.{loader}()",
         "source": _source(name)}
        for name, (_, loader, n, target) in BUNDLED.items()
    ]  # fmt: skip
    if as_json:
        print(json.dumps({"datasets": rows}))
        return
    table = Table(title="Bundled tables (privopt datasets export NAME --out FILE)")
    for column in ("name", "rows", "target", "loader"):
        table.add_column(column, justify="right" if column == "rows" else "left")
    for row in rows:
        table.add_row(row["name"], f"{row['rows']:,}", row["target"], row["loader"])
    console = Console()
    console.print(table)
    for row in rows:
        console.print(f"{row['name']}: {row['source']}")


@datasets_app.command("export")
def export(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(BUNDLED)}.")],
    out: Annotated[Path, typer.Option("--out", help="The CSV file to write (.csv or .csv.gz).")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out.")] = (
        False
    ),
    as_json: JsonFlag = False,
) -> None:
    """Write a bundled table as CSV with a header row (e.g. to try `privopt fit` on it)."""
    if name not in BUNDLED:
        raise ValueError(f"Expected a bundled table in ({', '.join(BUNDLED)}), got {name!r}.")
    out = output_file(out, overwrite=overwrite, what="CSV file")
    from privopt.datasets.bundled import bundled_path

    filename, _, rows, _ = BUNDLED[name]
    source = bundled_path(filename)
    if out.name.endswith(".gz"):
        shutil.copyfile(source, out)
    else:
        with gzip.open(source, "rb") as packed, open(out, "wb") as plain:
            shutil.copyfileobj(packed, plain)
    with gzip.open(source, "rt", newline="") as handle:
        columns = next(csv.reader(handle))
    if as_json:
        print(json.dumps({"out": str(out), "rows": rows, "columns": columns}))
        return
    Console().print(f"{name}: {rows:,} rows, columns {', '.join(columns)} written to {out}")
