"""The records of a private run and how a batch is read: the trainer owns the order.

The privacy analysis depends on *which* records each step reads, so the batch order is drawn by
the plan (:mod:`privopt.training.batching`) from a secret key, never by a user ``DataLoader``:

* amplified DP-SGD needs Poisson sampling (each record in each step independently with
  probability q); a shuffling loader's fixed-size batches are a different, weaker analysis
  (Opacus issues #80 and #813 show how a loader's sampler silently breaks the accounting);
* correlated noise (BLT, nu-DP-FTRL, tree, banded) is calibrated with the min-separation
  sensitivity of fixed batches cycled in the same order every epoch; a loader that reshuffles
  each epoch can put a record in two nearby steps, which voids that sensitivity.

So :func:`as_records` accepts a map-style dataset (``dataset[i] -> (input, target)``), a
``TensorDataset``, a tuple ``(inputs, targets)`` of tensors, or a ``DataLoader`` whose sampler is
sequential (only its dataset and ``collate_fn`` are used), and refuses any other loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch.nn.utils.rnn import PackedSequence
from torch.utils.data import DataLoader, Dataset, IterableDataset, SequentialSampler, TensorDataset
from torch.utils.data.dataloader import default_collate

import torch
from privopt.torch._calls import call_model

__all__ = ["Records", "as_records", "check_inputs", "parse_autocast"]


class Records:
    """N records and ``batch(indices, device) -> (inputs, targets)``."""

    def __init__(self, tensors: tuple[torch.Tensor, ...] | None, dataset: Any, collate) -> None:
        self.tensors = tensors
        self.dataset = dataset
        self.collate = collate
        self.size = len(tensors[0]) if tensors is not None else len(dataset)
        if self.size < 1:
            raise ValueError("The dataset is empty.")

    def __len__(self) -> int:
        return self.size

    def batch(self, indices: np.ndarray, device: torch.device) -> tuple[Any, Any]:
        if len(indices) == 0 and self.tensors is None:  # no record read: record 0's form, 0 rows
            inputs, targets = self.batch(np.zeros(1, dtype=np.int64), device)
            return _rows(inputs, 0), _rows(targets, 0)
        if self.tensors is not None:
            index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
            items = [t[index.to(t.device)].to(device, non_blocking=True) for t in self.tensors]
            return (items[0] if len(items) == 2 else tuple(items[:-1])), items[-1]
        items = self.collate([self.dataset[int(i)] for i in indices])
        if not isinstance(items, list | tuple) or len(items) < 2:
            raise ValueError("Each record must be an (input, target) pair.")
        moved = [_to(x, device) for x in items]
        return (moved[0] if len(moved) == 2 else tuple(moved[:-1])), moved[-1]


def _rows(value, rows: int, fill: bool = False):
    """The tensors of ``value`` cut to their first ``rows`` rows (or zero-filled with ``rows``
    rows: ``fill``); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        if fill:
            return torch.zeros((rows, *value.shape[1:]), dtype=value.dtype, device=value.device)
        return value[:rows]
    if isinstance(value, list | tuple) and not isinstance(value, PackedSequence):
        return type(value)(_rows(v, rows, fill) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _rows(v, rows, fill)) for k, v in value.items())
    return value


def zero_inputs(records: Records, device: torch.device, rows: int = 2) -> Any:
    """Inputs of the records' structure, dtypes and per-example shapes, all zeros (no value of
    any record is kept: record 0 is read for its form only, the schema privopt treats as
    public); None when they hold a PackedSequence."""
    inputs, _ = records.batch(np.zeros(1, dtype=np.int64), torch.device("cpu"))
    if any(isinstance(v, PackedSequence) for v in _walk(inputs)):
        return None
    return _to(_rows(inputs, rows, fill=True), device)


def _walk(value):
    yield value
    if isinstance(value, list | tuple) and not isinstance(value, PackedSequence):
        for v in value:
            yield from _walk(v)
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)


def _to(value, device):
    if isinstance(value, torch.Tensor | PackedSequence):  # a PackedSequence is a tuple too
        return value.to(device, non_blocking=True)
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list | tuple):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):  # keyword inputs (model(**x)), e.g. input_ids, attention_mask
        return type(value)((k, _to(v, device)) for k, v in value.items())
    return value


def as_records(data: Any) -> Records:
    """The private records from a dataset, tensors or a sequential DataLoader (see module)."""
    if isinstance(data, IterableDataset) or (
        isinstance(data, DataLoader) and isinstance(data.dataset, IterableDataset)
    ):
        raise ValueError(
            f"data is an IterableDataset ({type(data).__name__}): the plan samples its batches "
            "from N records by index (Poisson sampling, or fixed batches cycled every epoch), "
            "which needs len(data) and data[i]; pass a map-style Dataset or tensors instead."
        )
    if isinstance(data, DataLoader):
        if not isinstance(data.sampler, SequentialSampler):
            raise ValueError(
                f"This DataLoader draws its own batch order ({type(data.sampler).__name__}); "
                "privopt.torch must own the order for the privacy analysis to hold: Poisson "
                "sampling for DP-SGD, and for correlated noise fixed batches cycled in the same "
                "order every epoch (a loader that reshuffles puts a record in two nearby steps "
                "and voids the min-separation sensitivity). Pass the dataset itself (or a "
                "DataLoader with shuffle=False, of which only the dataset and collate_fn are "
                "used)."
            )
        return as_records(_Collated(data.dataset, data.collate_fn))
    if isinstance(data, _Collated):
        if isinstance(data.dataset, TensorDataset):
            return Records(data.dataset.tensors, None, None)
        return Records(None, data.dataset, data.collate)
    if isinstance(data, TensorDataset):
        return Records(tuple(data.tensors), None, None)
    if isinstance(data, tuple | list) and data and all(isinstance(t, np.ndarray) for t in data):
        return as_records(tuple(torch.as_tensor(t) for t in data))  # numpy arrays converted
    if isinstance(data, tuple | list) and all(isinstance(t, torch.Tensor) for t in data):
        if len(data) < 2 or len({len(t) for t in data}) != 1:
            raise ValueError("Expected (inputs..., targets) tensors with one row per record.")
        return Records(tuple(data), None, None)
    if isinstance(data, Dataset) or (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        return Records(None, data, default_collate)
    raise ValueError(
        f"Expected a map-style Dataset, a TensorDataset, (inputs, targets) tensors or a "
        f"sequential DataLoader, got {type(data).__name__}."
    )


class _Collated:
    def __init__(self, dataset, collate) -> None:
        self.dataset = dataset
        self.collate = collate


_AUTOCAST = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
}


def parse_autocast(value: Any) -> torch.dtype | None:
    """``autocast``: None, ``torch.bfloat16`` / ``torch.float16`` or their names ("bf16",
    "fp16", ...); anything else refused in one line."""
    if value is None or value in (torch.bfloat16, torch.float16):
        return value
    if isinstance(value, str) and value.lower() in _AUTOCAST:
        return _AUTOCAST[value.lower()]
    raise ValueError(
        f"Expected autocast to be None, torch.bfloat16 or torch.float16 (or 'bf16' / 'fp16'), "
        f"got {value!r}."
    )


def check_inputs(model, records: Records, device: torch.device, autocast=None) -> None:
    """Refuse, before anything is calibrated or recorded, data the model cannot take, in one
    line naming the argument and the fix (issue 33): floating inputs of another precision
    than the model's parameters; a float64 model under autocast (autocast leaves float64
    alone, so it would silently do nothing); and anything a forward of the model on zeros of
    the data's per-example shapes and dtypes raises (integer inputs to a float layer, wrong
    shapes). The forward runs in eval mode, without gradients and with torch's RNG state
    restored afterwards; it reads no value of any record."""
    params = [p for p in model.parameters() if p.requires_grad and p.is_floating_point()]
    if not params:
        return
    dtype = params[0].dtype
    if autocast is not None and dtype == torch.float64:
        raise ValueError(
            f"autocast={autocast} with a float64 model: torch.autocast leaves float64 "
            "computations in float64, so it would do nothing; drop autocast or convert the "
            "model with model.float()."
        )
    inputs = zero_inputs(records, device)
    if inputs is None:
        return
    leaves = [v for v in _walk(inputs) if isinstance(v, torch.Tensor)]
    for t in leaves:
        if t.is_floating_point() and t.dtype != dtype:
            raise ValueError(
                f"data: the inputs are {t.dtype} but the model's parameters are {dtype}; "
                f"convert the data (e.g. x.to({dtype})) or the model (model.to({t.dtype}))."
            )
    modes = {m: m.training for m in model.modules()}
    devices = [device.index or 0] if device.type == "cuda" else []
    context = (
        torch.autocast(device.type, dtype=autocast)
        if autocast is not None
        else torch.autocast(device.type, enabled=False)
    )
    try:
        model.eval()
        with torch.random.fork_rng(devices=devices), torch.no_grad(), context:
            call_model(model, inputs)
    except Exception as error:
        detail = (str(error).splitlines() or [""])[0][:200]
        kinds = sorted({str(t.dtype) for t in leaves})
        if any(not t.is_floating_point() for t in leaves):
            raise ValueError(
                f"data: the model fails on inputs of dtype {', '.join(kinds)} "
                f"({type(error).__name__}: {detail}); convert them to the model's {dtype} "
                f"(e.g. torch.as_tensor(x, dtype={dtype})) unless they are indices for an "
                "nn.Embedding."
            ) from None
        raise ValueError(
            f"data: the model fails on inputs of the data's per-example shapes and dtypes "
            f"({', '.join(kinds)}; {type(error).__name__}: {detail}); fix the data or the model."
        ) from None
    finally:
        for m, flag in modes.items():
            m.train(flag)
