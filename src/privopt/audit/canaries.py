"""White-box gradient canaries for the training core (one-run auditing of what ``run`` releases).

A gradient canary is a record whose clipped gradient is a fixed direction: canary j contributes
``G e_{j+1}`` (its own coordinate; coordinate 0 belongs to the ordinary "filler" records) at
every step its slot is in the batch, whatever the parameters. Each canary is included by a fair
coin; an excluded canary's slot holds a null record (zero gradient), so included and excluded
are zero-out neighbours and N stays the plan's public size. One call of
:func:`privopt.training.run` with the plan under audit trains on these records with plain SGD
(learning rate 1, no momentum), so the released noisy sums are read back exactly from the
iterates: ``r_t = (w_t - w_{t+1}) * divisor = g_t + (B z)_t sigma G``.

Scores (higher = "included"), per canary coordinate j:

* fixed batches (no amplification claimed): the whitened projection on the canary's
  contribution pattern ``g`` (``G`` at the steps its slot participated)::

      s_j = <L^-1 g, L^-1 r_j> / ||L^-1 g||,    L L^T = B B^T = noise covariance / (sigma G)^2

  the most powerful test of "g present": N(||L^-1 g|| / (sigma G), 1) in sigma G units against
  N(0, 1). Knowing the pattern is allowed: the accounting takes the worst pattern.
* Poisson sampling or sampling without replacement (amplification claimed, the batches secret):
  ``s_j = sum_t r_t[j]``, which does not use the secret batches.

Each coordinate carries independent noise (the mechanisms correlate noise over steps, never
over coordinates), so the m canaries are m tests of the same claim, which is what one-run
auditing needs (:mod:`privopt.audit.one_run`). Dirac canaries test the noise, its correlation
and the accounting, not the clipping or gradient code: input canaries
(:mod:`privopt.audit.input_one_run`) cover those.

The canaries' coins are drawn here (canary data is not noise; the source-rule test allows
``privopt.audit``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cholesky, solve_triangular

from privopt._validate import check_count, check_positive, check_probability
from privopt.accounting import PrivacyLedger
from privopt.audit.one_run import OneRunResult, audit_one_run
from privopt.training import SGD, GenericModel, StepInfo, TrainingPlan, event_epsilon, execute

__all__ = ["CanaryScores", "audit_training_plan", "gradient_canary_scores"]


@dataclass(frozen=True)
class CanaryScores:
    """Per-canary scores of one or more runs, with the canaries' secret coins."""

    scores: np.ndarray
    included: np.ndarray


class _CanaryRecorder:
    """The canary records' gradients, and which slots each step's batch held (white box)."""

    def __init__(self, n: int, clip: float) -> None:
        self.clip = clip
        self.current = np.zeros(n, dtype=bool)
        self.steps: list[np.ndarray] = []
        self.iterates: list[np.ndarray] = []

    def gradients(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        ids = X[:, 0].astype(int)  # canary j + 1, 0 for a null record, -1 for a filler record
        out = np.zeros((ids.size, w.size))
        rows = np.arange(ids.size)
        live = ids != 0
        out[rows[live], np.maximum(ids[live], 0)] = 2.0 * self.clip  # clipped to exactly G e_j
        self.current[y.astype(int)] = True  # y holds the slot index of every row
        return out

    def step(self, info: StepInfo) -> None:
        self.steps.append(self.current.copy())
        self.current[:] = False
        self.iterates.append(info.w.copy())


def gradient_canary_scores(
    plan: TrainingPlan,
    *,
    canaries: int,
    rng: np.random.Generator,
    noise_factor: float = 1.0,
) -> CanaryScores:
    """One run of ``plan`` with ``canaries`` gradient canaries; their scores and coins.

    Args:
        plan: a calibrated plan; ``plan.num_records`` >= ``canaries`` (the other records are
            fillers on coordinate 0).
        canaries: m, the number of canary slots (each included by a fair coin).
        rng: randomness of the coins and of the run.
        noise_factor: planted bug for controls: the run uses ``noise_factor`` times the plan's
            noise while the claim stays the plan's (1 = the plan as calibrated).
    """
    m = check_count("canaries", canaries)
    if plan.num_records < m:
        raise ValueError(f"The plan has {plan.num_records} records, fewer than {m} canaries.")
    factor = check_positive("noise_factor", noise_factor)
    if plan.noise_multiplier is None:
        raise ValueError("The plan has no noise multiplier yet: call plan.calibrate(...).")
    n = plan.num_records
    included = rng.random(m) < 0.5
    X = np.full((n, 1), -1.0)
    X[:m, 0] = np.where(included, np.arange(1, m + 1), 0)
    y = np.arange(n, dtype=float)
    recorder = _CanaryRecorder(n, plan.clip_norm)
    running = plan
    if factor != 1.0:
        running = dataclasses.replace(plan, noise_multiplier=plan.noise_multiplier * factor)
    execute(  # run() without its report: the claim is computed once by the caller
        running,
        GenericModel(recorder.gradients, name="gradient canaries"),
        SGD(1.0),
        X,
        y,
        rng=rng,
        ledger=PrivacyLedger(plan.neighbouring),
        w0=np.zeros(m + 1),
        callback=recorder.step,
    )
    w = np.vstack([np.zeros(m + 1), *recorder.iterates])
    released = -np.diff(w, axis=0)[:, 1:] * plan.divisor  # (T, m): r_t on the canary coordinates
    if plan.participation is None:  # amplified: the batches are secret
        return CanaryScores(released.sum(axis=0), included)
    pattern = np.vstack(recorder.steps)[:, :m].astype(float) * plan.clip_norm  # (T, m)
    b = plan.mechanism.decoder_matrix(pattern.shape[0])
    lower = cholesky(b @ b.T, lower=True)
    white_g = solve_triangular(lower, pattern, lower=True)
    white_r = solve_triangular(lower, released, lower=True)
    norms = np.linalg.norm(white_g, axis=0)
    projections = np.sum(white_g * white_r, axis=0)
    scores = np.divide(projections, norms, out=np.zeros(m), where=norms > 0)
    return CanaryScores(scores, included)


def audit_training_plan(
    plan: TrainingPlan,
    *,
    delta: float,
    canaries: int,
    runs: int = 1,
    rng: np.random.Generator,
    confidence: float = 0.95,
    method: str = "fdp",
    noise_factor: float = 1.0,
) -> tuple[float, OneRunResult]:
    """(claimed epsilon, one-run audit) of ``plan`` with gradient canaries.

    ``runs`` independent runs of ``canaries`` canaries each are pooled: the runs use disjoint
    canaries and independent randomness, so the pooled mechanism is still (epsilon, delta)-DP
    with respect to each canary and the one-run theorem applies to all ``runs * canaries``.
    The claim is the plan's own epsilon at ``delta`` (through the ledger a fit reports with).
    """
    delta = check_probability("delta", delta)
    runs = check_count("runs", runs)
    claimed = event_epsilon(plan.event(), delta, plan.neighbouring)
    parts = [
        gradient_canary_scores(plan, canaries=canaries, rng=rng, noise_factor=noise_factor)
        for _ in range(runs)
    ]
    scores = np.concatenate([p.scores for p in parts])
    included = np.concatenate([p.included for p in parts])
    result = audit_one_run(scores, included, delta=delta, confidence=confidence, method=method)
    return claimed, result
