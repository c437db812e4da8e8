"""Checkpoints of a private run as plain data (loadable with ``torch.load(weights_only=True)``).

A checkpoint holds, in one atomic write: the model and optimizer state, the noise stream's state
(step, secret key, BLT buffers / tree nodes / Toeplitz history on their device), the secret key
of the batch order and the number of batches read, the plan's signature (so that a checkpoint is
never resumed under another plan) and the optimizer's type. It holds no privacy ledger: the
resuming trainer keeps the one it recorded from its own plan (the whole run's event, recorded
before any record is read), so nothing in the file can lower the report. Resuming regenerates
the batch order and continues the same noise stream: no released step is ever re-drawn with
fresh noise (which would be a second, unaccounted release of that step).

The checkpoint holds the secret keys: anyone who reads it can regenerate the noise. Keep it as
secret as the data.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from privopt import accounting
from privopt.accounting import PrivacyEvent, PrivacyLedger
from privopt.training import TrainingPlan

__all__ = [
    "CHECKPOINT_FIELDS",
    "FORMAT",
    "atomic_save",
    "ledger_from_dict",
    "ledger_to_dict",
    "plan_signature",
]

#: v2: the ledger is no longer written (a resume rebuilds it from the plan), the optimizer's
#: type is; v1 files are refused (their ledger would be trusted)
FORMAT = "privopt.torch checkpoint v2"
#: the fields a checkpoint must hold
CHECKPOINT_FIELDS = (
    "plan",
    "step",
    "batch_key",
    "noise",
    "adaptive",
    "model",
    "optimizer_type",
    "optimizer",
    "lr_scheduler",
    "torch_rng",
    "cuda_rng",
)


def plan_signature(plan: TrainingPlan) -> dict[str, Any]:
    """The public fields that define a plan (compared on resume)."""
    return {
        "num_records": plan.num_records,
        "steps": plan.steps,
        "batches": plan.batches.describe(plan.num_records),
        "clip_norm": plan.clip_norm,
        "noise_multiplier": plan.noise_multiplier,
        "mechanism": plan.mechanism.name,
        "neighbouring": plan.neighbouring.value,
        "event": repr(plan.event()),
    }


def _event_classes() -> dict[str, type]:
    return {
        name: cls
        for name in dir(accounting)
        if isinstance(cls := getattr(accounting, name), type)
        and issubclass(cls, PrivacyEvent)
        and dataclasses.is_dataclass(cls)
    }


def ledger_to_dict(ledger: PrivacyLedger) -> dict[str, Any]:
    """Events (type and fields), partitions, assumptions and disclosures as plain data."""
    entries = []
    for entry in ledger.entries:
        event = entry.event
        if type(event).__name__ not in _event_classes():
            raise ValueError(f"Cannot checkpoint a ledger holding a {type(event).__name__}.")
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
        partition = entry.partition
        if partition is not None and not isinstance(partition, str | int):
            raise ValueError("Only str or int partition labels can be checkpointed.")
        entries.append({"type": type(event).__name__, "fields": fields, "partition": partition})
    return {
        "neighbouring": ledger.neighbouring.value,
        "entries": entries,
        "assumptions": list(ledger.assumptions),
        "disclosures": list(ledger.disclosures),
    }


def ledger_from_dict(data: dict[str, Any]) -> PrivacyLedger:
    """The ledger written by :func:`ledger_to_dict` (event types from a fixed list)."""
    classes = _event_classes()
    ledger = PrivacyLedger(data["neighbouring"], data["assumptions"])
    for entry in data["entries"]:
        if entry["type"] not in classes:
            raise ValueError(f"Unknown privacy event type {entry['type']!r} in the checkpoint.")
        ledger.record(classes[entry["type"]](**entry["fields"]), partition=entry["partition"])
    for text in data["disclosures"]:
        ledger.disclose(text)
    return ledger


def atomic_save(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """``torch.save`` to a temporary file in the same folder, then an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(handle)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
