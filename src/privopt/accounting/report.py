"""The privacy report every fit returns: what ran, how it was accounted, and the resulting claim.

A report states the mechanisms (grouped by kind and label, with their sensitivities and noise),
the accountant, the neighbouring relation, rho-zCDP and mu-GDP where they exist, epsilon at the
fit's delta, and the assumptions the claim relies on. It renders as a rich table and as JSON,
with a plain-language :meth:`PrivacyReport.summary` beside the expert tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # pragma: no cover
    from privopt.accounting.ledger import LedgerEntry

__all__ = ["EventSummary", "PrivacyReport", "summarise_events"]


@dataclass(frozen=True)
class EventSummary:
    """Events of one mechanism and label, aggregated.

    Attributes:
        mechanism: the mechanism kind (e.g. ``"gaussian"``).
        label: what was released (e.g. ``"gradient step"``).
        releases: number of recorded events.
        partitions: number of distinct partitions they touched (0 = shared by all records).
        parameters: each numeric parameter as a value, or ``[min, max]`` when it varies.
    """

    mechanism: str
    label: str
    releases: int
    partitions: int
    parameters: dict[str, Any]


def _summarise_values(values: list[Any]) -> Any:
    if all(v == values[0] for v in values):
        return values[0]
    if all(isinstance(v, int | float) for v in values):
        return [min(values), max(values)]
    return sorted({str(v) for v in values})


def summarise_events(entries: Iterable[LedgerEntry]) -> tuple[EventSummary, ...]:
    """Group ledger entries by (mechanism, label), keeping first-seen order."""
    groups: dict[tuple[str, str], list[LedgerEntry]] = {}
    for entry in entries:
        key = (entry.event.mechanism, getattr(entry.event, "label", entry.event.mechanism))
        groups.setdefault(key, []).append(entry)
    out = []
    for (mechanism, label), group in groups.items():
        params = [g.event.parameters() for g in group]
        names = list(params[0])
        summary = {n: _summarise_values([p[n] for p in params if n in p]) for n in names}
        partitions = {g.partition for g in group if g.partition is not None}
        out.append(EventSummary(mechanism, label, len(group), len(partitions), summary))
    return tuple(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class PrivacyReport:
    """The privacy claim of one fit.

    Attributes:
        epsilon: epsilon at ``delta`` under ``accountant``.
        delta: the delta of the claim.
        rho: rho-zCDP of the whole fit, or None when an event has no zCDP form.
        mu: mu-GDP of the whole fit, or None when an event is not a Gaussian release.
        accountant: name of the accountant that produced ``epsilon``.
        accountant_description: what that accountant does, with its citation.
        neighbouring: the neighbouring relation ("add-remove", "replace-one", "zero-out"; with
            the user as the privacy unit "user-level zero-out", "user-level replace-one").
        neighbouring_description: that relation in words.
        composition: how events were composed (sequential, parallel over partitions, ...).
        num_partitions: number of disjoint data partitions used by parallel composition.
        events: the recorded releases, aggregated by mechanism and label.
        assumptions: statements the guarantee relies on.
        non_private_releases: what the fit also released without a private mechanism, on the
            caller's explicit request (e.g. ``diagnostics=True``): NOT covered by ``epsilon``.
        private_outputs: the fitted attributes computed from the recorded releases (post-
            processing, covered by ``epsilon``), e.g. ``coef_``, ``classes_``; every other
            attribute of a fitted estimator is the same on neighbouring data sets under the
            same seed (public configuration only).
        privacy_unit: what one neighbouring step changes: ``"record"``, or ``"user"`` (all the
            records of one user; :class:`~privopt.accounting.events.PrivacyUnit`).
    """

    epsilon: float
    delta: float
    rho: float | None
    mu: float | None
    accountant: str
    accountant_description: str
    neighbouring: str
    neighbouring_description: str
    composition: str
    num_partitions: int
    events: tuple[EventSummary, ...]
    assumptions: tuple[str, ...]
    non_private_releases: tuple[str, ...] = ()
    private_outputs: tuple[str, ...] = ()
    privacy_unit: str = "record"

    def __getitem__(self, key: str) -> Any:
        """Dict-style access to the fields (``report["epsilon"]``)."""
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def summary(self) -> str:
        """Two or three plain sentences: what is protected, against whom, with which guarantee.

        The guarantee in words: for any one person's record, the probability of anything an
        observer sees changes by at most a factor e^epsilon whether or not that record (in the
        sense of the neighbouring relation) was used, except with probability delta.
        """
        unit = _PLAIN_UNIT.get(self.neighbouring, "one record is changed")
        if math.isinf(self.epsilon):
            guarantee = "no differential-privacy guarantee (epsilon is infinite)"
        else:
            strength = (
                "strong" if self.epsilon <= 1.0 else "moderate" if self.epsilon <= 5.0 else "weak"
            )
            guarantee = (
                f"differential privacy with epsilon = {self.epsilon:.3g} and delta = "
                f"{self.delta:.2g} ({strength} protection): the chance of any outcome changes by "
                f"at most a factor {math.exp(min(self.epsilon, 700.0)):.3g} whether or not "
                f"{unit}, except with probability {self.delta:.2g}"
            )
        about = (
            "any one person's record"
            if self.privacy_unit == "record"
            else ("any one person, all of their records together")
        )
        text = [
            "This result limits what anyone who sees it (the model, its predictions, this "
            f"report), whatever else they know, can learn about {about} in the training data.",
            f"The guarantee is {guarantee}.",
        ]
        caveats = []
        if self.assumptions:
            n = len(self.assumptions)
            caveats.append(f"it relies on the {n} assumption{'s' if n > 1 else ''} listed")
        if self.non_private_releases:
            n = len(self.non_private_releases)
            caveats.append(
                f"{n} release{'s' if n > 1 else ''} requested without privacy "
                f"{'are' if n > 1 else 'is'} NOT covered"
            )
        if caveats:
            text.append("It holds as stated below: " + "; ".join(caveats) + ".")
        return " ".join(text)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (infinite epsilon becomes the string "inf")."""
        out = asdict(self)
        out["events"] = [asdict(e) for e in self.events]
        out["assumptions"] = list(self.assumptions)
        out["non_private_releases"] = list(self.non_private_releases)
        out["private_outputs"] = list(self.private_outputs)
        if math.isinf(self.epsilon):
            out["epsilon"] = "inf"
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __rich__(self) -> Group:
        head = Table(title="Privacy report", show_header=False, title_justify="left")
        head.add_column("field", style="bold")
        head.add_column("value")
        head.add_row("guarantee", f"({_fmt(self.epsilon)}, {self.delta:g})-DP")
        if self.rho is not None:
            head.add_row("rho-zCDP", _fmt(self.rho))
        if self.mu is not None:
            head.add_row("mu-GDP", _fmt(self.mu))
        head.add_row("accountant", f"{self.accountant}: {self.accountant_description}")
        head.add_row("neighbouring", f"{self.neighbouring}: {self.neighbouring_description}")
        if self.privacy_unit != "record":
            head.add_row(
                "privacy unit", f"{self.privacy_unit} (all of one {self.privacy_unit}'s records)"
            )
        head.add_row("composition", self.composition)
        events = Table(title="Recorded releases", title_justify="left")
        for col in ("mechanism", "label", "releases", "partitions", "parameters"):
            events.add_column(col)
        for e in self.events:
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in e.parameters.items())
            parts = str(e.partitions) if e.partitions else "all records"
            events.add_row(e.mechanism, e.label, str(e.releases), parts, params)
        items: list[Any] = [Text(self.summary(), style="italic"), head, events]
        if self.assumptions:
            items.append(Text("Assumptions:", style="bold"))
            items.extend(Text(f"  - {a}") for a in self.assumptions)
        if self.private_outputs:
            items.append(
                Text(
                    "Released under this guarantee (post-processing of the recorded releases): "
                    + ", ".join(self.private_outputs)
                )
            )
        if self.non_private_releases:
            items.append(
                Text("Released WITHOUT privacy (not covered by this guarantee):", style="bold red")
            )
            items.extend(Text(f"  - {a}") for a in self.non_private_releases)
        return Group(*items)

    def render(self, console: Console | None = None) -> None:
        """Print the report as rich tables."""
        (console or Console()).print(self)

    def __str__(self) -> str:
        console = Console(width=110, record=True, file=_NullFile())
        console.print(self)
        return console.export_text()


#: The neighbouring relation in plain words (what "one person's record" means).
_PLAIN_UNIT = {
    "replace-one": "one person's record is replaced by anyone else's",
    "zero-out": "one person's record is blanked out",
    "add-remove": "one person's record is added or removed",
    "user-level replace-one": "all of one person's records are replaced by anyone else's",
    "user-level zero-out": "all of one person's records are blanked out",
    "user-level add-remove": "all of one person's records are added or removed",
}


class _NullFile:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        return None
