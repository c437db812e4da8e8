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
from torch.utils.data import DataLoader, Dataset, SequentialSampler, TensorDataset
from torch.utils.data.dataloader import default_collate

import torch

__all__ = ["Records", "as_records"]


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
        if self.tensors is not None:
            index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
            items = [t[index.to(t.device)].to(device, non_blocking=True) for t in self.tensors]
            return (items[0] if len(items) == 2 else tuple(items[:-1])), items[-1]
        items = self.collate([self.dataset[int(i)] for i in indices])
        if not isinstance(items, list | tuple) or len(items) < 2:
            raise ValueError("Each record must be an (input, target) pair.")
        moved = [_to(x, device) for x in items]
        return (moved[0] if len(moved) == 2 else tuple(moved[:-1])), moved[-1]


def _to(value, device):
    if isinstance(value, torch.Tensor | PackedSequence):  # a PackedSequence is a tuple too
        return value.to(device, non_blocking=True)
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list | tuple):
        return type(value)(_to(v, device) for v in value)
    return value


def as_records(data: Any) -> Records:
    """The private records from a dataset, tensors or a sequential DataLoader (see module)."""
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
