r"""The theorems' presets for Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025): B, T,
beta and clip_difference.

Used by :func:`privopt.algorithms.srgd_parameters.srgd_parameters` for every parameter the caller
leaves out (each appends what it chose, in words, to ``notes``):

* ``setting="general"`` (Theorem 14, no assumption on the minimiser): ``B = floor(sqrt n)``,
  ``T = floor(n / B)``, ``beta = (16 c_M + 8) L n^{3/2} / (R B^2)`` with ``c_M = M R / L``
  (so ``beta >= 2 M T``, Lemma 11's requirement). These constants are usable as printed.
  ``clip_difference = (12 c_M + 4) L`` (``constants="practical"``): Lemma 11's recursion gives
  ``||Delta_t(d)|| <= 2 (M b_max + 4 M R + L)`` (the paper's ``2 M R`` uses
  ``||z_t - x_{t-1}|| <= R``, but two points of a ball of radius R can be 2R apart), and with
  Corollary 12's ``M b_max <= (2 c_M + 1) L`` this is ``(12 c_M + 4) L``. ``constants="paper"``
  uses the printed ``(8 c_M + 4) L``.
* ``setting="interior"`` (Eq. 19, the minimiser of the population risk inside the ball).
  Eq. (19)'s ``c_DP = 4 sqrt 2 log^{3/2}(n) sqrt(ln(2n/delta)) ln(2.5/delta)`` is ~4e4 at
  n = 1e6, giving ``T = c_DP n^{1/4} > n`` (B < 1) below n ~ 1e7 and fewer steps than the general
  setting only beyond n ~ 1e25 (docs/theory/single-epoch-srgd.md#constants). ``constants="paper"``
  computes it literally
  (log base 2) and refuses when B < 1; the default ``"practical"`` drops the polylog factor:
  ``T = ceil(n^{1/4})``, ``B = floor(n / T)``, ``beta = max(M, L / R) max{1, sqrt(d)/(eps sqrt
  n)}`` (Eq. 19 with ``c_DP^2`` replaced by the smallest value keeping Theorem 3's
  ``beta >= M``), and ``clip_difference = (12 c_M + 4) L`` (the general threshold; Lemma 7's own
  constant has unspecified c_1). Its optimisation error ``beta R^2 / T^2`` is ``O(M R^2 /
  sqrt n)``, the point of the interior setting.
* ``clip_first = L`` (the Lipschitz bound on the ball, so the first-gradient clip is inactive).
"""

from __future__ import annotations

import math

__all__: list[str] = []


def eq19_c_dp(n: int, delta: float) -> float:
    """Eq. (19)'s ``c_DP = 4 sqrt 2 log2^{3/2}(n) sqrt(ln(2n/delta)) ln(2.5/delta)``."""
    log_n = math.log2(n) if n > 1 else 0.0
    return (
        4.0
        * math.sqrt(2.0)
        * log_n**1.5
        * math.sqrt(math.log(2.0 * n / delta))
        * math.log(2.5 / delta)
    )


def preset_schedule(setting: str, n: int, c_DP: float | None, notes: list[str]) -> tuple[int, int]:
    if setting == "general":
        b = max(1, math.isqrt(n))
        notes.append("B = floor(sqrt n), T = floor(n / B) (Theorem 14's largest batch)")
        return b, n // b
    if c_DP is not None:
        t_paper = max(1, math.ceil(c_DP * n**0.25))
        if t_paper > n:
            raise ValueError(
                f"Eq. (19) gives c_DP = {c_DP:.4g} and T = c_DP n^(1/4) = {t_paper} > n = {n}, "
                "i.e. a batch size below 1: the paper's constants for the interior setting "
                "need n of order 1e7 or more (docs/theory/single-epoch-srgd.md#constants). Use "
                "constants='practical' "
                "or give batch_size/steps."
            )
        notes.append(f"Eq. (19): c_DP = {c_DP:.6g} (log base 2), T = ceil(c_DP n^(1/4))")
        return n // t_paper, t_paper
    t_int = max(1, math.ceil(n**0.25))
    notes.append(
        "interior, practical: T = ceil(n^(1/4)), B = floor(n / T) (Eq. 19 without its "
        "polylog factor c_DP, which makes T > n below n ~ 1e7)"
    )
    return n // t_int, t_int


def preset_beta(
    setting: str,
    n: int,
    d: int,
    epsilon: float,
    radius: float,
    B: int,
    L: float,
    M: float,
    c_DP: float | None,
    notes: list[str],
) -> float:
    if setting == "general":
        notes.append("beta = (16 c_M + 8) L n^(3/2) / (R B^2) (Theorem 14)")
        return (16.0 * M + 8.0 * L / radius) * n**1.5 / (B * B)
    scale = max(1.0, math.sqrt(d) / (epsilon * math.sqrt(n)))
    if c_DP is not None:
        notes.append("beta = c_DP^2 L max{1, sqrt(d)/(eps sqrt n)} / R (Eq. 19)")
        return c_DP**2 * L * scale / radius
    notes.append(
        "interior, practical: beta = max(M, L/R) max{1, sqrt(d)/(eps sqrt n)} (Eq. 19 "
        "with c_DP^2 replaced by the least value keeping beta >= M, Theorem 3)"
    )
    return max(M, L / radius) * scale


def preset_clip_difference(
    constants: str, radius: float, L: float, M: float, c_DP: float | None, notes: list[str]
) -> float:
    if constants == "paper":
        if c_DP is not None:
            notes.append("clip_difference = c_DP L (Eq. 19 / Corollary 9)")
            return c_DP * L
        notes.append("clip_difference = (8 c_M + 4) L (Corollary 12, as printed)")
        return 8.0 * M * radius + 4.0 * L
    notes.append(
        "clip_difference = (12 c_M + 4) L: Lemma 11 with ||z_t - x_{t-1}|| <= 2R "
        "gives 2 (M b_max + 4 M R + L), and M b_max <= (2 c_M + 1) L (Corollary 12)"
    )
    return 12.0 * M * radius + 4.0 * L
