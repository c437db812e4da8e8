r"""Quantile-based adaptive clipping (Andrew et al. 2021) for every mechanism of the core.

The clip norm kappa_t follows a target quantile gamma of the per-example gradient norms, learnt
from a **noisy count** released every step
(docs/theory/blt-and-adaptive-clipping.md#adaptive-clipping)::

    bits      b_i = 1[||g_i|| <= kappa_t]  (unclipped), centred b_i - 1/2 (sensitivity 1/2)
    release   r_t = sum_{i in batch} (b_i - 1/2) + N(0, sigma_b^2)        sigma_b = f_b m
    fraction  b~_t = clamp(r_t / m + 1/2, 0, 1)                         m: public batch size
    estimate  k^_{t+1} = max(floor, k^_t exp(-eta (b~_t - gamma)))       geometric rule
    in force  kappa_t = k^ adopted every ``adopt_every`` steps (kappa_0 = the plan's clip_norm)

Privacy argument (option N of the note, §5.4; the same for independent and correlated noise):

1. kappa_t is a function of the releases r_0 .. r_{t-1} only (the loop computes it after step
   t-1's release and before step t reads data), so it is public when step t runs.
2. Each contribution is clipped at kappa_t and divided by kappa_t: y_i = g_i / max(kappa_t,
   ||g_i||) has norm <= 1 whatever kappa_t is. The mechanism runs on the **unit-clip** stream
   sum_i y_i + sigma_g (B z)_t; the update uses kappa_t times it (post-processing).
3. The counts form a second stream with sensitivity 1/2 per participation and independent
   noise (C' = I). Both streams are lower-triangular in time and chosen adaptively; the Gaussian
   matrix mechanism on adaptive streams is as private as on fixed ones (Denisov et al. 2022;
   Choquette-Choo et al. 2022, 2023 for multiple participations), so the pair is mu-GDP with
   mu^2 = f^2 (s_C^2 / sigma_g^2 + s_I^2 / (4 sigma_b^2)), s_C the mechanism's unit sensitivity
   and s_I = sqrt(k) that of independent noise for the same participation pattern (f = 2 for
   replace-one: both contributions double).
4. With z the multiplier a **fixed unit clip** would need (the plan's ``noise_multiplier``),
   sigma_g = (z^-2 - (s_I / (2 sigma_b s_C))^2)^(-1/2) makes mu exactly f s_C / z: the plan's
   event, and its calibration, are those of fixed clipping. For DP-SGD (Poisson, B = I) this is
   Andrew et al.'s z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2), and the pair shares one sample, so
   the run is one Poisson-sampled Gaussian with multiplier z.

Restarts (option R, as TF Privacy does for trees) are the special case of a
:class:`privopt.noise.Restarted` mechanism with ``adopt_every`` equal to its block: kappa is then
constant within each block and B is block-diagonal. The argument above covers it unchanged (its
sensitivity is the restarted mechanism's). Adopting more often does not cost privacy, but jitter
in kappa spoils the cancellation of correlated noise (the note's §5.4 table): for correlated
noise adopt every 100-1000 steps.

The null record of zero-out neighbours contributes zero to both sums (its centred bit is 0).
Every constant here (gamma, eta, f_b, floor, the adoption schedule) is public and fixed before
the run.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.noise import NoiseStream

__all__ = ["AdaptiveClipController", "QuantileClipping", "adjusted_gradient_multiplier"]


def adjusted_gradient_multiplier(
    noise_multiplier: float, count_std: float, count_to_gradient_sensitivity: float = 1.0
) -> float:
    """sigma_g = (z^-2 - (r / (2 sigma_b))^2)^(-1/2), r = s_I / s_C (1 for DP-SGD).

    >>> round(adjusted_gradient_multiplier(1.0, 5.0), 6)   # Andrew et al.: m = 100, sigma_b = 5
    1.005038
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    sigma_b = check_positive("count_std", count_std)
    ratio = check_positive("count_to_gradient_sensitivity", count_to_gradient_sensitivity)
    remaining = z**-2 - (ratio / (2.0 * sigma_b)) ** 2
    if not remaining > 0:
        raise ValueError(
            f"The count release alone (std {sigma_b:.4g}, sensitivity ratio {ratio:.4g}) spends "
            f"more than the budget of noise multiplier {z:.4g}: use a larger "
            "count_noise_fraction, a larger batch, or fixed clipping."
        )
    return remaining**-0.5


@dataclass(frozen=True)
class QuantileClipping:
    """Andrew et al. (2021) adaptive clipping: track the ``target_quantile`` of gradient norms.

    Args:
        target_quantile: gamma, the fraction of per-example gradients to leave unclipped.
        learning_rate: eta of the geometric update ``kappa <- kappa exp(-eta (b~ - gamma))``.
        count_noise_fraction: sigma_b / m, the std of the released unclipped fraction
            (0.05, Andrew et al.'s m / 20).
        adopt_every: the estimate is put in force every this many steps (1: every step, as for
            DP-SGD; 100-1000 for correlated noise; the block of a Restarted mechanism gives
            the restart variant).
        floor: smallest clip norm, relative to the initial one (kappa never reaches 0).

    The defaults are Andrew et al.'s (gamma 0.5, eta 0.2, sigma_b = m / 20).
    """

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_noise_fraction: float = 0.05
    adopt_every: int = 1
    floor: float = 1e-6
    #: internal test hook: the count is released without noise (NOT private; never set by users)
    _count_noise: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        gamma = float(self.target_quantile)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"Expected target_quantile in [0, 1], got {self.target_quantile!r}.")
        object.__setattr__(self, "target_quantile", gamma)
        object.__setattr__(
            self, "learning_rate", check_positive("learning_rate", self.learning_rate)
        )
        object.__setattr__(
            self,
            "count_noise_fraction",
            check_positive("count_noise_fraction", self.count_noise_fraction),
        )
        object.__setattr__(self, "adopt_every", check_count("adopt_every", self.adopt_every))
        floor = check_positive("floor", self.floor)
        if floor >= 1.0:
            raise ValueError(f"Expected floor < 1 (relative to the initial clip), got {floor!r}.")
        object.__setattr__(self, "floor", floor)

    def count_std(self, expected_batch: float) -> float:
        """sigma_b = count_noise_fraction * m, the std of the centred count's noise."""
        return self.count_noise_fraction * check_positive("expected_batch", expected_batch)

    def describe(self) -> str:
        return (
            f"adaptive clipping toward the {self.target_quantile:g} quantile of gradient norms "
            f"(Andrew et al. 2021: geometric rate {self.learning_rate:g}, noisy unclipped count "
            f"with std {self.count_noise_fraction:g} m, adopted every {self.adopt_every} "
            "step(s)); the clip in force depends only on earlier releases"
        )


class AdaptiveClipController:
    """The loop's side of :class:`QuantileClipping`: the clip in force, the count release.

    ``clip`` is kappa_t for the coming step; after the step, :meth:`observe` releases the noisy
    count (drawn from ``count_stream``, a 1-dimensional independent stream of std sigma_b) and
    updates the estimate. ``clips`` and ``released`` keep the public history for the trace.
    """

    def __init__(
        self,
        rule: QuantileClipping,
        initial: float,
        expected_batch: float,
        count_stream: NoiseStream,
    ) -> None:
        self.rule = rule
        self.clip = check_positive("initial clip", initial)
        self.estimate = self.clip
        self.minimum = rule.floor * self.clip
        self.expected_batch = check_positive("expected_batch", expected_batch)
        self.count_stream = count_stream
        self.clips: list[float] = []
        self.released: list[float] = []

    # -- the clip-source protocol of privopt.training.thresholds --------------------------------
    def threshold(self, step: int, w: np.ndarray, data: object, stat_rows: object) -> float:
        """kappa_t: computed from the releases before step t only."""
        return self.clip

    def noise(self, stream: NoiseStream, clip: float) -> np.ndarray:
        """The unit-clip stream's noise scaled back by kappa_t (post-processing)."""
        return stream.next() * clip

    def after_step(self, step: int, rows: int, fraction: float) -> None:
        """Release the step's noisy count (unclipped rows, from the loop's fraction)."""
        self.observe(step, rows - round(fraction * rows), rows)

    def observe(self, step: int, unclipped: int, batch_size: int) -> None:
        """Release step ``step``'s noisy centred count and update kappa (public from now on)."""
        self.clips.append(self.clip)
        noise = float(self.count_stream.next()[0])
        released = (unclipped - 0.5 * batch_size) + (noise if self.rule._count_noise else 0.0)
        self.released.append(released)
        fraction = min(1.0, max(0.0, released / self.expected_batch + 0.5))
        factor = math.exp(-self.rule.learning_rate * (fraction - self.rule.target_quantile))
        self.estimate = max(self.minimum, self.estimate * factor)
        if (step + 1) % self.rule.adopt_every == 0:
            self.clip = self.estimate

    def state(self) -> dict:
        """A checkpoint of the controller (public values and its count stream's position)."""
        return {
            "clip": self.clip,
            "estimate": self.estimate,
            "clips": list(self.clips),
            "released": list(self.released),
            "counts": self.count_stream.state(),
        }

    def restore(self, state: dict) -> None:
        """Resume from :meth:`state` (same rule, initial clip and count stream seed)."""
        self.clip, self.estimate = float(state["clip"]), float(state["estimate"])
        self.clips = [float(c) for c in state["clips"]]
        self.released = [float(r) for r in state["released"]]
        self.count_stream.restore(state["counts"])

    def history(self) -> tuple[np.ndarray, np.ndarray]:
        """(clip in force at each step, released centred counts): both public."""
        return np.asarray(self.clips), np.asarray(self.released)


def warn_if_costly(gradient_multiplier: float, noise_multiplier: float) -> None:
    """TFF's check: the count should not take more than a modest share of the budget."""
    if gradient_multiplier >= 2.0 * noise_multiplier:
        factor = gradient_multiplier / noise_multiplier
        warnings.warn(
            f"Adaptive clipping's count release raises the gradient noise multiplier from "
            f"{noise_multiplier:.4g} to {gradient_multiplier:.4g} (x{factor:.2f}): "
            "use a larger count_noise_fraction or a larger batch.",
            UserWarning,
            stacklevel=3,
        )
