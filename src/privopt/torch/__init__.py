"""Private training of PyTorch models with correlated noise (optional extra ``privopt[torch]``).

* :func:`clipped_grad_sum`: the clipped sum of per-example gradients, each parameter counted once
  by identity and every layer's batch dimension found by a probe (ghost norms / book-keeping for
  Linear, Conv1d/2d, Embedding, LayerNorm, GroupNorm and subclasses keeping ``forward``;
  ``torch.func`` or a per-example loop for any other module, nn.RNN/GRU/LSTM with
  PackedSequence included; BatchNorm refused; a module whose examples cannot be followed
  refused with a :class:`LayoutError` naming it);
* :func:`check_model`: the type checks, and with a sample a probe of the examples' independence
  and of the clipped sum against a per-example loop (:class:`ModelCheck`);
* :func:`make_private`: private training in the user's own loop (``run.model``,
  ``run.optimizer``, ``run.loader``; exact per-example clipping of the loop's loss, mixed
  precision with GradScaler, gradient accumulation, checkpoints; :class:`PrivateRun`); the
  same call in every rank of a ``torch.distributed`` group trains one plan data-parallel
  (:mod:`privopt.torch.distributed`: each rank's share of every batch, the clipped sums
  all-reduced before the noise, which is added once);
* :class:`PrivateTrainer`: the same run in a loop privopt owns, driven by a
  :class:`privopt.training.TrainingPlan` (one calibration, the plan's event in the ledger,
  the plan's batch order, the mechanism's noise on the device, exact checkpoints, progress
  with the epsilon spent);
* :func:`build_plan`: the plan of a run by mechanism name (``"blt"``, ``"nu-dpftrl"``,
  ``"optimal-cc"``, ``"tree"``, ``"banded"``, ``"dpsgd"``).

The noise streams themselves live in :mod:`privopt.noise.torch_streams` (noise is drawn only in
``privopt.noise``).
"""

from privopt.torch.clipping import (
    GradientClipper,
    LayoutError,
    ModelCheck,
    check_model,
    clipped_grad_sum,
)
from privopt.torch.data import as_records
from privopt.torch.mechanisms import MECHANISMS, RUN_MECHANISMS, build_plan
from privopt.torch.private_run import PrivateRun, make_private
from privopt.torch.trainer import PrivateTrainer, TrainerStep

__all__ = [
    "MECHANISMS",
    "RUN_MECHANISMS",
    "GradientClipper",
    "LayoutError",
    "ModelCheck",
    "PrivateRun",
    "PrivateTrainer",
    "TrainerStep",
    "as_records",
    "build_plan",
    "check_model",
    "clipped_grad_sum",
    "make_private",
]
