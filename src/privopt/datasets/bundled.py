"""Small public tables shipped inside the package, for examples, tests and benchmarks.

Each loader returns a :class:`~privopt.datasets.loaders.Table` with every row of the published
table, plus ``description`` (what a row is) and ``source`` (origin and licence). The files are
gzip-compressed CSV package data under ``privopt/datasets/data/``; nothing is downloaded.

These tables are public; in the examples they stand in for private data. Anything a private
algorithm takes from them (ranges for clipping, category lists, scaling) must be public
knowledge or be released privately and charged to the budget, as if the rows were private.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from privopt.datasets.loaders import Table, load_table

__all__ = ["POWER_PLANT_SOURCE", "bundled_path", "load_power_plant"]

#: Origin and licence of the power-plant table.
POWER_PLANT_SOURCE = (
    "UCI Machine Learning Repository, 'Combined Cycle Power Plant' (Tufekci 2014, "
    "doi:10.24432/C5002N), licensed CC BY 4.0."
)

_POWER_PLANT_DESCRIPTION = (
    "9,568 hourly averages of a combined cycle power plant's sensors (2006-2011) at full load: "
    "ambient temperature AT (deg C), exhaust vacuum V (cm Hg), ambient pressure AP (mbar) and "
    "relative humidity RH (%); target PE, the net hourly electrical output (MW)."
)


def bundled_path(name: str) -> Path:
    """Path of a bundled data file (``"ccpp_power_plant.csv.gz"`` or ``"adult.csv.gz"``)."""
    path = resources.files("privopt.datasets").joinpath("data", name)
    if not path.is_file():
        raise FileNotFoundError(
            f"privopt's bundled data file {name!r} is missing: reinstall privopt "
            "(the wheel ships privopt/datasets/data/*.csv.gz)."
        )
    return Path(str(path))


def load_power_plant() -> Table:
    """The Combined Cycle Power Plant table: 9,568 rows, 4 numeric features, target ``PE``.

    Returns
    -------
    Table
        ``X`` (9568, 4) float64 in the order ``AT, V, AP, RH``; ``y`` the net electrical output
        ``PE`` in MW; ``description`` and ``source`` (UCI, Tufekci 2014, CC BY 4.0).

    Examples
    --------
    >>> from privopt.datasets import load_power_plant
    >>> table = load_power_plant()
    >>> table.X.shape, table.feature_names
    ((9568, 4), ('AT', 'V', 'AP', 'RH'))
    """
    table = load_table(bundled_path("ccpp_power_plant.csv.gz"), target="PE")
    return dataclasses.replace(
        table, description=_POWER_PLANT_DESCRIPTION, source=POWER_PLANT_SOURCE
    )
