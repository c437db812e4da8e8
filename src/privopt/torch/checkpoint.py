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

import copy
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
    "RunCheckpoints",
    "atomic_save",
    "ledger_from_dict",
    "ledger_to_dict",
    "load_run",
    "plan_signature",
    "read",
    "run_state",
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
        "unit": ledger.unit.value,
        "entries": entries,
        "assumptions": list(ledger.assumptions),
        "disclosures": list(ledger.disclosures),
    }


def ledger_from_dict(data: dict[str, Any]) -> PrivacyLedger:
    """The ledger written by :func:`ledger_to_dict` (event types from a fixed list)."""
    classes = _event_classes()
    ledger = PrivacyLedger(
        data["neighbouring"], data["assumptions"], unit=data.get("unit", "record")
    )
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


def run_state(run) -> dict[str, Any]:
    """Everything a resume of a :class:`privopt.torch.PrivateRun` needs (holds the secret keys:
    keep it secret). The ledger is not part of it: a resume rebuilds it from the plan."""
    optimizer = run.optimizer.original_optimizer
    return {
        "format": FORMAT,
        "plan": plan_signature(run.plan),
        "step": run.step_count,
        "batch_key": run._batch_key,
        "noise": run._stream.state(),
        "adaptive": None if run._adaptive is None else run._adaptive.state(),
        "model": run.model.state_dict(),
        "optimizer_type": type(optimizer).__name__,
        "optimizer": optimizer.state_dict(),
        "lr_scheduler": None if run.lr_scheduler is None else run.lr_scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def check_state(run, state: Any) -> None:
    """Refuse, before anything changes, what is not a checkpoint of this run: not ours, a
    missing field, another plan, a step outside the plan, another optimizer type or groups."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"Not a privopt.torch checkpoint (expected {FORMAT!r}).")
    missing = [k for k in CHECKPOINT_FIELDS if k not in state]
    if missing:
        raise ValueError(f"The checkpoint misses {missing}; it is truncated or not ours.")
    mine = plan_signature(run.plan)
    if state["plan"] != mine:
        theirs = state["plan"] if isinstance(state["plan"], dict) else {}
        diff = sorted(k for k in mine if theirs.get(k) != mine[k])
        raise ValueError(f"The checkpoint was written under another plan (differs in {diff}).")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= run.steps:
        raise ValueError(
            f"The checkpoint's step {step!r} is not within this plan's 0..{run.steps} steps."
        )
    optimizer = run.optimizer.original_optimizer
    if state["optimizer_type"] != type(optimizer).__name__:
        raise ValueError(
            f"The checkpoint was written with a {state['optimizer_type']} optimizer, this "
            f"{run.kind} has a {type(optimizer).__name__}; build the same optimizer."
        )
    groups = (
        state["optimizer"].get("param_groups") if isinstance(state["optimizer"], dict) else None
    )
    mine_groups = optimizer.state_dict()["param_groups"]
    if (
        not isinstance(groups, list)
        or [len(g.get("params", ())) for g in groups] != [len(g["params"]) for g in mine_groups]
        or [sorted(g) for g in groups] != [sorted(g) for g in mine_groups]
    ):
        raise ValueError(
            "The checkpoint's optimizer has other parameter groups or settings than this "
            f"{run.kind}'s; build the optimizer as in the run that wrote it."
        )


def load_run(run, state: Any) -> None:
    """Resume ``run`` from :func:`run_state`: the same plan, optimizer type and parameter
    groups, a step within the plan.

    Nothing the file says about privacy is trusted: the ledger stays the one the run recorded
    from its plan before reading any record (the whole run's event), so a tampered or emptied
    ledger cannot lower the report; the position only says where the batch order and the
    noise stream continue (no released step is re-drawn with fresh noise). Either everything
    loads or nothing changes: on any failure the model, optimizer, scheduler and run are as
    before, and the error is one line (:class:`ValueError`).
    """
    check_state(run, state)
    optimizer, scheduler = run.optimizer.original_optimizer, run.lr_scheduler
    saved = (
        copy.deepcopy(run.model.state_dict()),
        copy.deepcopy(optimizer.state_dict()),
        None if scheduler is None else copy.deepcopy(scheduler.state_dict()),
        dict(run.__dict__),
        torch.get_rng_state(),
    )
    try:
        run.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None and state["lr_scheduler"] is not None:
            scheduler.load_state_dict(state["lr_scheduler"])
        run._start(int(state["batch_key"]), int(state["noise"]["key"]), int(state["step"]))
        run._stream.restore(state["noise"])
        if run._adaptive is not None:
            run._adaptive.restore(state["adaptive"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        run._checked = False  # the model is checked again before the next private step
    except Exception as error:
        run.model.load_state_dict(saved[0])
        optimizer.load_state_dict(saved[1])
        if scheduler is not None:
            scheduler.load_state_dict(saved[2])
        run.__dict__.clear()
        run.__dict__.update(saved[3])
        torch.set_rng_state(saved[4])
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(
            f"The checkpoint could not be restored ({detail}); nothing was changed."
        ) from None


def read(path: str | os.PathLike, device: Any) -> Any:
    """``torch.load(path, weights_only=True)``; a missing file or one that is not a checkpoint
    is one line."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"No checkpoint at {str(path)!r}.") from None
    except Exception as error:  # unpickling errors of any kind: not a checkpoint
        raise ValueError(
            f"{str(path)!r} is not a privopt.torch checkpoint ({type(error).__name__})."
        ) from None


class RunCheckpoints:
    """The checkpoint methods of :class:`privopt.torch.PrivateRun` (a mixin)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (holds the secret keys: keep it secret); no ledger: a
        resume keeps the one recorded from the plan. Only between logical steps."""
        between = self._phase == "idle" and self._chunk >= len(self._chunks)
        if not (between or (self._phase == "batch" and self._chunk == 0)):
            raise RuntimeError(
                "A checkpoint is taken between steps (after run.optimizer.step() ends a "
                "logical batch), not in the middle of one."
            )
        return run_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (:func:`privopt.torch.checkpoint.load_run`): the
        same plan, optimizer type and groups, a step within the plan; all or nothing."""
        load_run(self, state)

    def save(self, path) -> None:
        """Write :meth:`state_dict` atomically to ``path`` (data-parallel: rank 0 writes, the
        other ranks, which hold the same state, write nothing; any world size resumes it)."""
        state = self.state_dict()
        if self._dist is None or self._dist.rank == 0:
            atomic_save(state, path)

    def load(self, path) -> None:
        """Resume from a file written by :meth:`save` (refused in one line, nothing changed,
        if it is not one)."""
        self.load_state_dict(read(path, self.device))
