r"""Data-parallel private training with ``torch.distributed``: several processes, one plan.

Every rank calls the same ``make_private(...)`` (same arguments and seed, the plain model)
after ``torch.distributed.init_process_group(...)``; together they run the one
:class:`~privopt.training.TrainingPlan` a single process would run:

* **batches**: every rank draws the plan's batch order from the same secret key; rank r of
  W reads ``np.array_split(b_t, W)[r]`` of each logical batch b_t (contiguous chunks, public,
  sizes differing by at most one, possibly empty; a Poisson batch is split the same way),
  then chunks it by ``max_physical_batch_size``;
* **clipped sums**: each rank clips per example on its share and the shares' sums are
  all-reduced (SUM) in one flat buffer, before any noise
  (:meth:`privopt.torch.PrivateRun._reduce`): sum_r sum_{i in b_t^r} clip_G(grad_i) is
  exactly the clipped sum of b_t, since the shares partition b_t;
* **noise, once**: every rank draws the same (B z)_t from the same key on its own device (no
  communication), adds it to the *reduced* sum, divides by the plan's public D and steps, so
  every rank holds the same parameters and the release is the single-process one
  p.grad = (sum_{i in b_t} clip_G(grad_i) + sigma G (B z)_t) / D. The privacy analysis is
  the plan's, unchanged (same event, same report on every rank): only the place where the
  per-example terms are computed moved. With adaptive clipping the exact unclipped count is
  all-reduced as well, before the (shared-key) noisy count is drawn;
* **checkpoints** hold the position in logical steps and no world size: a file ``save``\ d
  by rank 0 (other ranks' ``save`` writes nothing) resumes at any world size.

Refused in one line, before anything is recorded: a model wrapped in
``DistributedDataParallel`` (it would all-reduce *unclipped* gradients in its backward
hooks; privopt reduces what must be reduced: pass the plain model), arguments that differ
across ranks (a hash of each public argument, of the seed, and of the data's size and first
and last records is all-gathered and compared; the differing ones are named: every rank
passes the whole data set, not a shard), a data-parallel run asked for (``distributed=True``, or
``WORLD_SIZE`` > 1 as ``torchrun`` sets it) without an initialised process group, and an NCCL
group with a model on the CPU. Rank 0's parameters and buffers are broadcast to every rank at
the start (as ``DistributedDataParallel`` does), so an unseeded initialisation per rank is
fine. With ``seed=None`` rank 0 draws the secret root and broadcasts it.

Collectives run in ``make_private`` (the argument check, the parameter broadcast, the root)
and in the ``step()`` that ends each logical batch (the all-reduce): every rank must run the
same number of steps, as the shared plan makes it. Torch's RNG state (dropout) is per rank,
so with dropout the masks differ from a single process's (any fixed masks are valid; the
analysis holds for any model randomness independent of the data).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

import numpy as np
import torch.distributed as dist

import torch
from privopt.torch.checkpoint import plan_signature
from privopt.torch.data import _walk
from torch import nn

__all__ = ["DataParallel", "data_parallel", "public_fields"]


def data_parallel(distributed: Any, model: nn.Module, device: torch.device):
    """The :class:`DataParallel` of this process, or None for a single-process run.

    ``distributed``: None (default: data-parallel when a process group of more than one
    process is initialised), True (data-parallel, a group must be initialised) or False
    (this process runs its own plan)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        raise ValueError(
            "make_private got a DistributedDataParallel model: it would all-reduce unclipped "
            "gradients in its backward; privopt reduces the clipped sums itself. Pass the plain "
            "model (model.module) and call make_private in every rank."
        )
    if distributed not in (None, True, False):
        raise ValueError(f"Expected distributed to be None, True or False, got {distributed!r}.")
    ready = dist.is_available() and dist.is_initialized()
    if distributed is False:
        return None
    if not ready:
        world = os.environ.get("WORLD_SIZE", "1")
        if distributed or (world.isdigit() and int(world) > 1):
            reason = "distributed=True" if distributed else f"WORLD_SIZE={world}"
            raise ValueError(
                f"A data-parallel run is requested ({reason}) but torch.distributed's process "
                "group is not initialised; call torch.distributed.init_process_group(...) in "
                "every rank before make_private (or pass distributed=False)."
            )
        return None
    if distributed is None and dist.get_world_size() == 1:
        return None
    backend = str(dist.get_backend())
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(
            f"The process group's backend is nccl but the model is on {device}; move the model "
            "to this rank's GPU (model.to(f'cuda:{local_rank}')) or use the gloo backend."
        )
    return DataParallel(device)


def public_fields(arguments: dict[str, Any], plan, model: nn.Module, records) -> dict[str, str]:
    """What must agree across ranks, as text per field: make_private's arguments (the seed
    included; a scheduler, scaler or Mechanism instance by its type, the ledger not at all),
    the calibrated plan, the data (its number of records and a hash of its first and last
    records: every rank must hold the whole data set, not a shard), the model's parameter
    names, shapes and dtypes, and the optimizer's type and hyperparameters."""
    fields = {}
    for key, value in arguments.items():
        if key == "optimizer":
            groups = [{k: v for k, v in g.items() if k != "params"} for g in value.param_groups]
            value = (type(value).__name__, [sorted(g.items(), key=str) for g in groups])
        elif key in ("lr_scheduler", "grad_scaler") or (key == "mechanism" and value is not None):
            value = value if isinstance(value, str) else type(value).__name__
        elif key == "ledger":
            continue
        fields[key] = repr(value)
    fields["plan"] = repr(sorted(plan_signature(plan).items()))
    fields["data"] = _fingerprint(records)
    params = [
        (n, tuple(p.shape), str(p.dtype), p.requires_grad) for n, p in model.named_parameters()
    ]
    fields["model"] = repr(params)
    return fields


def _fingerprint(records) -> str:
    """The number of records and a hash of the first and last one (their bytes)."""
    n = len(records)
    digest = hashlib.blake2b(digest_size=16)
    for value in _walk(records.batch(np.array([0, n - 1]), torch.device("cpu"))):
        if isinstance(value, torch.Tensor):
            digest.update(value.detach().reshape(-1).contiguous().view(torch.uint8).numpy())
        elif not isinstance(value, list | tuple | dict):
            digest.update(repr(value).encode())
    return f"{n} records, {digest.hexdigest()}"


def _digest(text: str) -> int:
    """A 63-bit hash of ``text`` (an int64 that fits a tensor)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


class DataParallel:
    """This process's part of a data-parallel run (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = device  # collectives run on the model's device (gloo: CPU or CUDA)

    def __repr__(self) -> str:
        return f"DataParallel(rank={self.rank}, world={self.world})"

    def share(self, indices: np.ndarray) -> np.ndarray:
        """This rank's contiguous share of a logical batch (possibly empty)."""
        return np.array_split(np.asarray(indices), self.world)[self.rank]

    def check_same(self, fields: dict[str, str]) -> None:
        """Refuse (on every rank) arguments that differ across ranks, naming them: each
        field's 63-bit hash is all-gathered and compared with rank 0's."""
        names = sorted(fields)
        mine = torch.tensor([_digest(fields[k]) for k in names], dtype=torch.int64)
        gathered = [torch.empty_like(mine, device=self.device) for _ in range(self.world)]
        dist.all_gather(gathered, mine.to(self.device))
        hashes = torch.stack(gathered).cpu()
        differ = [k for j, k in enumerate(names) if bool((hashes[:, j] != hashes[0, j]).any())]
        if differ:
            ranks = [r for r in range(self.world) if bool((hashes[r] != hashes[0]).any())]
            hint = " (pass the whole data set on every rank, not a shard)" * ("data" in differ)
            raise ValueError(
                f"make_private got different {', '.join(differ)} on ranks {ranks} than on rank "
                "0; every rank must make the same call (same arguments and seed) to run one "
                f"plan{hint}."
            )

    def broadcast_model(self, model: nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (as DistributedDataParallel does)."""
        with torch.no_grad():
            for tensor in model.state_dict(keep_vars=True).values():
                if isinstance(tensor, torch.Tensor):
                    dist.broadcast(tensor.data, 0)

    def root(self, seed: int | None) -> int:
        """The secret root: the seed, or (seed=None) drawn by rank 0 and broadcast."""
        value = seed if seed is not None else (secrets.randbits(128) if self.rank == 0 else 0)
        words = torch.tensor([(value >> (32 * i)) & 0xFFFFFFFF for i in range(4)])
        words = words.to(self.device)
        dist.broadcast(words, 0)
        return sum(int(w) << (32 * i) for i, w in enumerate(words.cpu().tolist()))

    def all_reduce(self, sums: dict[str, torch.Tensor], dtype: torch.dtype):
        """The sums over every rank: one flat SUM all-reduce, in ``dtype``."""
        names = list(sums)
        flat = torch.cat([sums[k].to(dtype).reshape(-1) for k in names])
        dist.all_reduce(flat)
        out, offset = {}, 0
        for k in names:
            n = sums[k].numel()
            out[k] = flat[offset : offset + n].view(sums[k].shape)
            offset += n
        return out

    def all_reduce_count(self, count: int) -> int:
        """A count summed over every rank (int64, exact)."""
        total = torch.tensor([int(count)], dtype=torch.int64, device=self.device)
        dist.all_reduce(total)
        return int(total.item())
