"""The one private-training core: a frozen plan, one calibration, one loop.

Every algorithm is ``paper config -> TrainingPlan -> calibrate -> run``:

* :mod:`~privopt.training.batching`: Poisson sampling, fixed batches cycled over epochs (the
  min-separation pattern), one shuffled pass (whole, or Choquette-Choo, Ganesh & Thakurta's (2025)
  first T batches), sampling
  without replacement, Varshney et al.'s (2022) rounds;
* :mod:`~privopt.training.thresholds`: clip sources (fixed, quantile-adaptive, DP-STAT per
  round, RESIDUALEST) and the data handle the loop resolves row batches with;
* :mod:`~privopt.training.plan`: :class:`TrainingPlan` (batches, clip, mechanism, noise,
  neighbouring relation) and its :meth:`~TrainingPlan.event`;
* :mod:`~privopt.training.calibrate`: :func:`calibrate_noise_multiplier`, generic over an event
  factory, verified and rounded toward more noise;
* :mod:`~privopt.training.gradients`: per-example clipped gradient sums (closed forms for linear
  losses, any ``grad_fn``);
* :mod:`~privopt.training.adaptive`: quantile-based adaptive clipping for every mechanism;
* :mod:`~privopt.training.updates` and :mod:`~privopt.training.averaging`: post-processing;
* :mod:`~privopt.training.loop`: :func:`run`.
"""

from privopt.training.adaptive import QuantileClipping, adjusted_gradient_multiplier
from privopt.training.averaging import AVERAGING, Averager
from privopt.training.batching import (
    BatchStrategy,
    CyclicPoissonSampling,
    FixedBatches,
    PoissonSampling,
    Round,
    Rounds,
    SampledWithoutReplacement,
    SinglePass,
    shuffled_pass,
)
from privopt.training.calibrate import calibrate_noise_multiplier, event_epsilon, split_epsilon
from privopt.training.gradients import (
    GenericModel,
    GradientModel,
    LinearRegressionModel,
    LogisticRegressionModel,
    LossModel,
    as_model,
)
from privopt.training.loop import StepInfo, execute, iterate, iterate_rounds, open_stream, run
from privopt.training.plan import TiedThreshold, TrainingPlan
from privopt.training.thresholds import (
    ClipSource,
    DPStatThreshold,
    FixedClip,
    ResidualThreshold,
    RowData,
)
from privopt.training.updates import SGD, Projected, UpdateRule

__all__ = [
    "AVERAGING",
    "SGD",
    "Averager",
    "BatchStrategy",
    "ClipSource",
    "CyclicPoissonSampling",
    "DPStatThreshold",
    "FixedBatches",
    "FixedClip",
    "GenericModel",
    "GradientModel",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "LossModel",
    "PoissonSampling",
    "Projected",
    "QuantileClipping",
    "ResidualThreshold",
    "Round",
    "Rounds",
    "RowData",
    "SampledWithoutReplacement",
    "SinglePass",
    "StepInfo",
    "TiedThreshold",
    "TrainingPlan",
    "UpdateRule",
    "adjusted_gradient_multiplier",
    "as_model",
    "calibrate_noise_multiplier",
    "event_epsilon",
    "execute",
    "iterate",
    "iterate_rounds",
    "open_stream",
    "run",
    "shuffled_pass",
    "split_epsilon",
]
