"""Private selection: the exponential mechanism, sampled by the Gumbel-max trick.

Given candidates with utilities ``u_j`` of l-infinity sensitivity ``Delta`` (changing one record
moves every ``u_j`` by at most ``Delta``), the exponential mechanism (McSherry & Talwar 2007)
selects candidate j with probability::

    P[j] = exp(epsilon u_j / (2 Delta)) / sum_k exp(epsilon u_k / (2 Delta))

and is epsilon-DP: the log-ratio of P[j] under neighbours is at most
``epsilon / 2 + epsilon / 2``. The sampler is ``argmax_j (epsilon u_j / (2 Delta) + G_j)`` with
``G_j`` i.i.d. standard Gumbel, which has exactly that law (Gumbel-max: the argmax of
``log w_j + G_j`` is distributed proportionally to ``w_j``), with no normalising constant and no
overflow however large the scores are.

``noise`` knows nothing of accounting: the caller records the release (for example as the
mu-GDP mechanism that dominates every epsilon-DP one, see
:func:`privopt.clipping.quantiles.pure_dp_gdp_mu`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exponential_mechanism", "gumbel_noise"]


def gumbel_noise(rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
    """Standard Gumbel(0, 1) noise of shape ``size`` (the selection noise of privopt).

    >>> gumbel_noise(np.random.default_rng(0), 3).shape
    (3,)
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy Generator, got {type(rng).__name__}.")
    return rng.gumbel(0.0, 1.0, size=size)


def exponential_mechanism(
    rng: np.random.Generator,
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
) -> int:
    """Index of the candidate chosen by the epsilon-DP exponential mechanism.

    Args:
        rng: source of the Gumbel noise.
        scores: (k,) finite utilities ``u_j`` (higher is better).
        epsilon: privacy parameter, > 0 and finite.
        sensitivity: ``Delta`` > 0, the largest change of any ``u_j`` between neighbours.

    >>> exponential_mechanism(np.random.default_rng(0), np.array([0.0, 1e6]), 1.0, 1.0)
    1
    """
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("Expected a non-empty 1-D array of scores.")
    if not np.all(np.isfinite(scores)):
        raise ValueError("Expected finite scores (a NaN or inf score would void the guarantee).")
    if not (isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon < math.inf):
        raise ValueError(f"Expected epsilon > 0 and finite, got {epsilon!r}.")
    if not (isinstance(sensitivity, (int, float, np.floating)) and 0 < sensitivity < math.inf):
        raise ValueError(f"Expected sensitivity > 0 and finite, got {sensitivity!r}.")
    logits = scores * (float(epsilon) / (2.0 * float(sensitivity)))
    return int(np.argmax(logits + gumbel_noise(rng, scores.size)))
