r"""Recommended (T, η) for private SGD on α-Hölder losses (Wang et al. 2022, Theorems 9, 10 and 12).

The utility theorems of Wang et al. (2022) fix the number of SGD steps T (= gradient evaluations,
batch
size 1) and the constant step size η as functions of (α, n, d, ε, δ, γ), where γ is the
failure probability of the utility statement (docs/theory/non-smooth-sgd.md–6.4):

==========  ======================  ==========  =========================================
theorem     algorithm               domain      T ≍ n^k
==========  ======================  ==========  =========================================
9           output perturbation     R^d         k = (6-3α-α²)/((1+α)(3+α)) if α < (√73-7)/4,
                                                else 1
10          output perturbation     ball        k = (2-α)/(1+α) if α < 1/2, else 1
12          gradient perturbation   ball        k = (2-α)/(1+α) if α < 1/2, else 1
==========  ======================  ==========  =========================================

(exponent table: docs/theory/non-smooth-sgd.md). The step sizes are

* Theorem 9: ``η = n^{1/(3+α)} / (T log(1/γ)^{1/(3+α)})``, i.e. ``Tη = (n/log(1/γ))^{1/(3+α)}``;
* Theorem 10: ``η = 1 / (T max{a, b})``, ``a = sqrt(log(n/δ) log(n) log(1/γ) / n)``,
  ``b = (d log(1/δ))^{1/4} sqrt(log(n/δ)) log(1/γ)^{1/8} / sqrt(nε)``;
* Theorem 12 (**erratum fixed**, docs/theory/non-smooth-sgd.md and §11 item 2): ``η = 1 / (T max{a,
b})``
  with ``a = sqrt(log(n) log(n/γ) log(1/γ) / n)``, ``b = sqrt(d log(1/δ)) log(1/γ)^{1/4} / (nε)``;
  the paper prints ``η = max{a, b} / T``, which contradicts its own rate and its assumption
  ``η > 1/T``.

The theorems state T only up to a constant ("≍") and hide constants; this module sets every
hidden constant to 1 (``steps_scale`` and ``eta_scale`` expose them). Privacy never depends on
these choices: the DP algorithms calibrate their noise to the T and η they actually run. Only
the utility guarantees do, including their validity range for γ (``γ > 4 max{e^{-d/8}, δ}`` for
Theorems 9 and 10, ``γ > 18 e^{-Td/8}`` for Theorem 12; docs/theory/non-smooth-sgd.md).

>>> s = recommended_schedule(alpha=0.0, n=1000, d=50, epsilon=1.0, delta=1e-6,
...                          perturbation="output", bounded=True)
>>> s.theorem, s.exponent, s.steps
(10, 2.0, 1000000)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privopt._validate import (
    check_count,
    check_nonnegative,
    check_positive,
    check_probability,
)
from privopt.theory.holder_stability import _check_alpha

__all__ = [
    "THEOREM9_ALPHA_CUTOFF",
    "Schedule",
    "lemma13_epsilon_threshold",
    "recommended_schedule",
    "steps_exponent",
    "theorem9_step_size",
    "theorem10_step_size",
    "theorem12_step_size",
]

#: Theorem 9 uses the superlinear T below this α and T ≍ n from it on: (√73 - 7)/4 ≈ 0.386.
THEOREM9_ALPHA_CUTOFF = (math.sqrt(73.0) - 7.0) / 4.0

#: When the caller gives L, a step above min{1, 1/L} is clipped to this fraction of it, just
#: inside the open interval Theorem 7 (and Lemma 20) require.
_STEP_SAFETY = 0.99

_PERTURBATIONS = ("output", "gradient")


# -- T ≍ n^k ----------------------------------------------------------------------------------


def steps_exponent(alpha: float, *, bounded: bool) -> float:
    r"""The exponent k in ``T ≍ n^k`` of Wang et al.'s (2022) utility theorems
    (docs/theory/non-smooth-sgd.md).

    * ``bounded=True`` (Theorems 10 and 12, ``W ⊆ B(0, R)``): ``k = (2-α)/(1+α)`` for
      α < 1/2, else 1;
    * ``bounded=False`` (Theorem 9, ``W = R^d``): ``k = (6-3α-α²)/((1+α)(3+α))`` for
      ``α < (√73-7)/4 ≈ 0.386``, else 1. (The paper's statement uses ``<``, its proof ``<=``;
      both give k = 1 at the cut-off, docs/theory/non-smooth-sgd.md item 13.)

    Both are 2 at α = 0 (hinge, absolute loss: ``n^2`` gradients) and 1 (linear) for smooth
    enough losses.

    >>> steps_exponent(0.25, bounded=True), round(steps_exponent(0.25, bounded=False), 4)
    (1.4, 1.2769)
    """
    alpha = _check_alpha(alpha)
    if bounded:
        return (2.0 - alpha) / (1.0 + alpha) if alpha < 0.5 else 1.0
    if alpha < THEOREM9_ALPHA_CUTOFF:
        return (6.0 - 3.0 * alpha - alpha**2) / ((1.0 + alpha) * (3.0 + alpha))
    return 1.0


def _exponent_formula(alpha: float, bounded: bool) -> str:
    if bounded:
        if alpha < 0.5:
            return "n^{(2-α)/(1+α)}"
        return "n (α >= 1/2)"
    if alpha < THEOREM9_ALPHA_CUTOFF:
        return "n^{(6-3α-α²)/((1+α)(3+α))}"
    return "n (α >= (√73-7)/4 ≈ 0.386)"


# -- step sizes ---------------------------------------------------------------------------------


def _check_common(n: object, steps: object, gamma: object) -> tuple[int, int, float]:
    return (
        check_count("n", n, minimum=2),
        check_count("steps", steps),
        check_probability("failure_probability", gamma),
    )


def theorem9_step_size(*, n: int, steps: int, alpha: float, failure_probability: float) -> float:
    r"""Theorem 9's step size: ``η = n^{1/(3+α)} / (T log(1/γ)^{1/(3+α)})``
    (docs/theory/non-smooth-sgd.md).

    Output perturbation on ``W = R^d``; ``T η = (n / log(1/γ))^{1/(3+α)}`` depends on neither
    ε nor d. Hidden constant 1.

    >>> round(theorem9_step_size(n=1000, steps=1000, alpha=1.0, failure_probability=0.05), 6)
    0.004274
    """
    n, steps, gamma = _check_common(n, steps, failure_probability)
    alpha = _check_alpha(alpha)
    return (n / math.log(1.0 / gamma)) ** (1.0 / (3.0 + alpha)) / steps


def theorem10_step_size(
    *, n: int, steps: int, d: int, epsilon: float, delta: float, failure_probability: float
) -> float:
    r"""Theorem 10's step size (output perturbation on a ball, docs/theory/non-smooth-sgd.md).

    ``η = 1 / (T max{a, b})`` with ``a = sqrt(log(n/δ) log(n) log(1/γ) / n)`` and
    ``b = (d log(1/δ))^{1/4} sqrt(log(n/δ)) log(1/γ)^{1/8} / sqrt(nε)``. Hidden constant 1.
    """
    n, steps, gamma = _check_common(n, steps, failure_probability)
    d = check_count("d", d)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    lg = math.log(1.0 / gamma)
    a = math.sqrt(math.log(n / delta) * math.log(n) * lg / n)
    b = (
        (d * math.log(1.0 / delta)) ** 0.25
        * math.sqrt(math.log(n / delta))
        * lg**0.125
        / math.sqrt(n * epsilon)
    )
    return 1.0 / (steps * max(a, b))


def theorem12_step_size(
    *,
    n: int,
    steps: int,
    d: int,
    epsilon: float,
    delta: float,
    failure_probability: float,
    as_printed: bool = False,
) -> float:
    r"""Theorem 12's step size (gradient perturbation on a ball), with the erratum fixed.

    With ``a = sqrt(log(n) log(n/γ) log(1/γ) / n)`` and
    ``b = sqrt(d log(1/δ)) log(1/γ)^{1/4} / (nε)``, the correct step is
    ``η = 1 / (T max{a, b})`` (docs/theory/non-smooth-sgd.md, §11 item 2): minimising ``1/(Tη) +
    ηTB`` over η gives ``η = 1/(T sqrt(B))``, only this form yields the stated rate, and only it is
    consistent with the assumption ``η > 1/T`` and with Theorem 10. The paper prints
    ``η = max{a, b} / T``; ``as_printed=True`` returns that (for comparison only).
    Hidden constant 1.
    """
    n, steps, gamma = _check_common(n, steps, failure_probability)
    d = check_count("d", d)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    lg = math.log(1.0 / gamma)
    a = math.sqrt(math.log(n) * math.log(n / gamma) * lg / n)
    b = math.sqrt(d * math.log(1.0 / delta)) * lg**0.25 / (n * epsilon)
    if as_printed:
        return max(a, b) / steps
    return 1.0 / (steps * max(a, b))


# -- the advisor --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    r"""A recommended (T, η) from one of Wang et al.'s (2022) utility theorems
    (docs/theory/non-smooth-sgd.md).

    Attributes:
        steps: T, the number of SGD steps to run (= gradient evaluations, batch size 1); at
            most ``max_steps`` when one was given.
        eta: the constant step size η to run with (for the T actually run).
        exponent: k in ``T ≍ n^k`` (docs/theory/non-smooth-sgd.md).
        theorem: 9, 10 or 12.
        perturbation: ``"output"`` (Algorithm 1) or ``"gradient"`` (Algorithm 2).
        bounded: True for ``W ⊆ B(0, R)``, False for ``W = R^d``.
        alpha, n, d, epsilon, delta, failure_probability: the inputs (γ = failure_probability,
            the failure probability of the utility statement).
        steps_theory: ``ceil(steps_scale · n^k)``, the theorem's T before any cap.
        steps_capped: whether ``max_steps`` lowered T. Privacy is unaffected (the algorithms
            calibrate to the T they run), but the theorem's utility guarantee no longer
            applies as stated.
        eta_theory: the theorem's η at ``steps`` (times ``eta_scale``), before clipping.
        eta_clipped: whether η was lowered to ``0.99 min{1, 1/L}`` because the caller's L made
            ``eta_theory`` too large for Theorem 7 (output perturbation needs
            ``η < min{1, 1/L}``; the utility proofs assume it too).
        horizon: ``T η``; the analysis assumes ``T η > 1`` (docs/theory/non-smooth-sgd.md).
        gamma_range_valid: whether γ lies in the theorem's range (``γ > 4 max{e^{-d/8}, δ}``
            for Theorems 9/10, ``γ > 18 e^{-Td/8}`` for Theorem 12). Affects the utility
            guarantee only, never privacy.
        gamma_range_note: the check in words.
        explanation: a plain-English account of T, the gradient complexity and η.
    """

    steps: int
    eta: float
    exponent: float
    theorem: int
    perturbation: str
    bounded: bool
    alpha: float
    n: int
    d: int
    epsilon: float
    delta: float
    failure_probability: float
    steps_theory: int
    steps_capped: bool
    eta_theory: float
    eta_clipped: bool
    horizon: float
    gamma_range_valid: bool
    gamma_range_note: str
    explanation: str


def _gamma_range(theorem: int, gamma: float, d: int, delta: float, steps: int) -> tuple[bool, str]:
    if theorem in (9, 10):
        threshold = 4.0 * max(math.exp(-d / 8.0), delta)
        valid = gamma > threshold
        relation = ">" if valid else "<="
        note = (
            f"γ = {gamma:g} {relation} 4 max{{e^(-d/8), δ}} = {threshold:.3g} "
            f"(Theorem {theorem} needs γ in (4 max{{e^(-d/8), δ}}, 1))"
        )
        if not valid:
            note += (
                f": the utility guarantee is not established for d = {d}, δ = {delta:g} "
                f"(it needs d > 8 log(4/γ) ≈ {8.0 * math.log(4.0 / gamma):.1f} and δ < γ/4)"
            )
    else:
        log_threshold = math.log(18.0) - steps * d / 8.0
        valid = math.log(gamma) > log_threshold
        relation = ">" if valid else "<="
        note = (
            f"γ = {gamma:g} {relation} 18 e^(-Td/8) = 18 e^(-{steps * d / 8.0:.4g}) "
            "(Theorem 12 needs γ in (18 e^(-Td/8), 1))"
        )
        if not valid:
            note += ": the utility guarantee is not established for this T and d"
    note += "; this concerns the utility guarantee only, never privacy."
    return valid, note


def recommended_schedule(
    *,
    alpha: float,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    perturbation: str = "output",
    bounded: bool,
    failure_probability: float = 0.05,
    max_steps: int | None = None,
    L: float | None = None,
    steps_scale: float = 1.0,
    eta_scale: float = 1.0,
) -> Schedule:
    r"""Recommended (T, η) for α-Hölder private SGD from Wang et al.'s (2022) utility theorems.

    * ``perturbation="output"``, ``bounded=False``: Theorem 9 (Algorithm 1 on R^d);
    * ``perturbation="output"``, ``bounded=True``: Theorem 10 (Algorithm 1 on a ball);
    * ``perturbation="gradient"``, ``bounded=True``: Theorem 12 (Algorithm 2 on a ball), with
      the step-size erratum fixed (:func:`theorem12_step_size`);
    * ``perturbation="gradient"``, ``bounded=False``: refused, as the paper has no analysis.

    ``T = ceil(steps_scale · n^k)`` with k from :func:`steps_exponent`, and η from the theorem's
    formula evaluated at the T actually run, times ``eta_scale``
    (docs/theory/non-smooth-sgd.md–6.4). Every hidden constant of the theorems defaults to 1
    (``steps_scale = eta_scale = 1``); the theorems fix T and η only up to such constants.

    ``max_steps`` caps T (privopt's SGD engine is a Python loop, and ``T = n^2`` for α = 0 is
    ``10^8`` steps at ``n = 10^4``, docs/theory/non-smooth-sgd.md). Capping keeps privacy (the noise
    is calibrated to the T actually run) but changes the utility guarantee: the theorem's rate
    assumes its T (Theorem 12's proof needs ``n = O(T^{(1+α)/(2-α)})``). η is then taken from
    the theorem's formula at the capped T, which keeps the theorem's ``Tη``.

    Theorem 7 (hence Algorithm 1's privacy) needs ``η < min{1, 1/L}``; pass the loss's L to
    have a larger η clipped to ``0.99 min{1, 1/L}`` (reported in ``eta_clipped``; this binds
    only at small n, since η decreases with n). Without L the caller must check it.

    The returned ``gamma_range_valid`` says whether γ lies in the theorem's range
    (``γ > 4 max{e^{-d/8}, δ}`` for Theorems 9 and 10, ``γ > 18 e^{-Td/8}`` for Theorem 12,
    docs/theory/non-smooth-sgd.md); it concerns the utility guarantee only, never privacy.

    Args:
        alpha: Hölder exponent α in [0, 1] of the loss.
        n: number of records (n >= 2).
        d: dimension (d >= 1).
        epsilon, delta: the privacy target (ε > 0, δ in (0, 1)); they enter η only.
        perturbation: ``"output"`` or ``"gradient"``.
        bounded: True for a ball domain ``W ⊆ B(0, R)``, False for ``W = R^d``.
        failure_probability: γ in (0, 1) of the utility statement (default 0.05).
        max_steps: optional cap on T (an integer >= 1).
        L: optional Hölder constant of the loss, to keep η below ``min{1, 1/L}``.
        steps_scale, eta_scale: the hidden constants (default 1).

    Raises:
        ValueError: for an unknown perturbation, gradient perturbation on ``W = R^d``, or
            arguments out of range.
    """
    alpha = _check_alpha(alpha)
    n = check_count("n", n, minimum=2)
    d = check_count("d", d)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    gamma = check_probability("failure_probability", failure_probability)
    if not isinstance(bounded, bool):
        raise ValueError(
            f"Expected bounded to be True (ball domain) or False (R^d), got {bounded!r}."
        )
    if perturbation not in _PERTURBATIONS:
        raise ValueError(
            f"Unknown perturbation {perturbation!r}; expected 'output' (Algorithm 1, noise "
            "added once to the averaged iterate) or 'gradient' (Algorithm 2, noise added to "
            "every stochastic gradient)."
        )
    if perturbation == "gradient" and not bounded:
        raise ValueError(
            "Gradient perturbation (Algorithm 2) is analysed only on a bounded domain: on R^d "
            "the per-step sensitivity 2(M + L ||w_t||^alpha) cannot be bounded uniformly, "
            "because the noise makes ||w_t|| random (the paper's Remark 5 calls it an open "
            "problem; docs/theory/non-smooth-sgd.md), and no utility theorem covers it. Use "
            "bounded=True "
            "(a radius R) or perturbation='output'."
        )
    if max_steps is not None:
        max_steps = check_count("max_steps", max_steps)
    if L is not None:
        L = check_nonnegative("L", L)
    steps_scale = check_positive("steps_scale", steps_scale)
    eta_scale = check_positive("eta_scale", eta_scale)

    theorem = 9 if not bounded else (10 if perturbation == "output" else 12)
    k = steps_exponent(alpha, bounded=bounded)
    size = float(n) if k == 1.0 else n**k
    steps_theory = max(1, math.ceil(steps_scale * size))
    steps = steps_theory if max_steps is None else min(steps_theory, max_steps)
    steps_capped = steps < steps_theory

    if theorem == 9:
        eta_theory = theorem9_step_size(n=n, steps=steps, alpha=alpha, failure_probability=gamma)
    elif theorem == 10:
        eta_theory = theorem10_step_size(
            n=n, steps=steps, d=d, epsilon=epsilon, delta=delta, failure_probability=gamma
        )
    else:
        eta_theory = theorem12_step_size(
            n=n, steps=steps, d=d, epsilon=epsilon, delta=delta, failure_probability=gamma
        )
    eta_theory *= eta_scale
    eta = eta_theory
    eta_clipped = False
    if L is not None:
        step_limit = min(1.0, 1.0 / L) if L > 0.0 else 1.0
        if eta >= step_limit:
            eta = _STEP_SAFETY * step_limit
            eta_clipped = True

    gamma_valid, gamma_note = _gamma_range(theorem, gamma, d, delta, steps)

    names = {
        9: "Theorem 9 (output perturbation, W = R^d)",
        10: "Theorem 10 (output perturbation, W a ball B(0, R))",
        12: "Theorem 12 (gradient perturbation, W a ball B(0, R))",
    }
    if k == 1.0:
        growth = "linear in n"
    else:
        growth = f"superlinear in n (n^{k:.4g})"
    if bounded:
        context = (
            "The exponent (2-α)/(1+α) falls from 2 at α = 0 (hinge, absolute loss: n^2 "
            "gradient evaluations) to 1 at α = 1/2; for α >= 1/2 the cost is linear, T = n."
        )
    else:
        context = (
            "The exponent (6-3α-α²)/((1+α)(3+α)) falls from 2 at α = 0 (hinge, absolute loss: "
            "n^2 gradient evaluations) to 1 at α = (√73-7)/4 ≈ 0.386; above that the cost is "
            "linear, T = n."
        )
    if k == 1.0:
        size_text = f"T ≍ {_exponent_formula(alpha, bounded)}"
    else:
        size_text = f"T ≍ {_exponent_formula(alpha, bounded)} = {n}^{k:.4g}"
    parts = [
        f"{names[theorem]} at α = {alpha:g}: {size_text} -> T = {steps_theory} gradient "
        f"evaluations (one per SGD step, batch size 1), {growth}. {context}",
    ]
    if steps_capped:
        parts.append(
            f"T is capped at max_steps = {steps}: privacy is unaffected (the noise is "
            f"calibrated to the T actually run) but Theorem {theorem}'s utility guarantee "
            "assumes the uncapped T and no longer applies as stated."
        )
    if theorem == 12:
        eta_text = "η = 1/(T max{a, b}) (the paper's printed max{a, b}/T is an erratum)"
    elif theorem == 10:
        eta_text = "η = 1/(T max{a, b})"
    else:
        eta_text = "η = n^{1/(3+α)}/(T log(1/γ)^{1/(3+α)})"
    parts.append(f"Step size {eta_text} = {eta_theory:.4g}, so Tη = {steps * eta_theory:.4g}.")
    if eta_clipped:
        parts.append(
            f"η clipped to {eta:.4g} = 0.99 min{{1, 1/L}} (L = {L:g}): Theorem 7 needs "
            "η < min{1, 1/L}."
        )
    elif L is None:
        parts.append("η was not checked against min{1, 1/L} (no L given).")
    else:
        parts.append(f"η < min{{1, 1/L}} holds (L = {L:g}), as Theorem 7 requires.")
    if steps * eta <= 1.0:
        parts.append("Note: the analysis assumes Tη > 1, which fails here (small n).")
    parts.append(
        f"Hidden constants set to {steps_scale:g} (T) and {eta_scale:g} (η); the theorems "
        "fix T and η only up to constants."
    )
    parts.append(gamma_note)
    return Schedule(
        steps=steps,
        eta=eta,
        exponent=k,
        theorem=theorem,
        perturbation=perturbation,
        bounded=bounded,
        alpha=alpha,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        failure_probability=gamma,
        steps_theory=steps_theory,
        steps_capped=steps_capped,
        eta_theory=eta_theory,
        eta_clipped=eta_clipped,
        horizon=steps * eta,
        gamma_range_valid=gamma_valid,
        gamma_range_note=gamma_note,
        explanation=" ".join(parts),
    )


# -- Lemma 13 -----------------------------------------------------------------------------------


def lemma13_epsilon_threshold(n: int) -> float:
    r"""Lemma 13's sufficient ε for Algorithm 2 to admit a β (docs/theory/non-smooth-sgd.md).

    For ``n >= 18``, ``T = n`` and ``δ = 1/n^2``, the paper claims that

    ``ε >= (7 (n^{1/3} - 1) + 4 log(n) n + 7) / (2 n (n^{1/3} - 1))``  (≈ 2 log(n) / n^{1/3})

    guarantees a β in (0, 1) satisfying the RDP conditions (32)–(33) of Theorem 11, hence
    (ε, δ)-DP. Values: 3.881145 at n = 18, 3.102024 at n = 44, 0.896997 at n = 10^4.

    .. warning::
       The lemma is **false for 18 <= n <= 43** (docs/theory/non-smooth-sgd.md): at the threshold no
       β satisfies (32) and (33) together (the best min-slack is -0.41 at n = 18 and -0.016 at
       n = 43); it holds numerically from n = 44 on. Use this only to reproduce the paper's
       Fig. 1; never to certify privacy. Always check (32)–(33) numerically and refuse when
       no β is feasible.

    Raises ``ValueError`` for n < 18, where the lemma states nothing.

    >>> round(lemma13_epsilon_threshold(100), 6)
    2.57382
    """
    n = check_count("n", n, minimum=18)
    a = n ** (1.0 / 3.0) - 1.0
    return (7.0 * a + 4.0 * math.log(n) * n + 7.0) / (2.0 * n * a)
