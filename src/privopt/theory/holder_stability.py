r"""Uniform argument stability of projected SGD for α-Hölder smooth losses.

Wang et al. (2022), Theorem 7.

Projected SGD (docs/theory/non-smooth-sgd.md): ``w_1 = 0``, ``i_t ~ Unif([n])`` i.i.d. (with
replacement, batch size 1), ``w_{t+1} = Proj_W(w_t - η ∂ℓ(w_t; z_{i_t}))`` with a constant step η,
output ``w̄ = (1/T) Σ_{t=1}^T w_t``. For a convex loss whose subgradient is α-Hölder,
``||∂ℓ(w, z) - ∂ℓ(w', z)|| <= L ||w - w'||^α``, Theorem 7 bounds the uniform argument stability
(UAS) ``sup_{S ≃ S'} ||w̄(S) - w̄(S')||`` over replace-one neighbours, for the index sequence
shared by both runs, with probability at least ``1 - γ`` over that sequence
(docs/theory/non-smooth-sgd.md):

``Δ(γ) = ( e ( T c_{α,2}^2 η^{2/(1-α)} + 4 G^2 η^2 (1 + K) K ) )^{1/2}``,
``K = (T/n)(1 + c_{γ,T})``,

where ``K`` is a Chernoff bound on how often one index is drawn in T draws (union-bounded over
the n indices) and G bounds the gradient norm along the run:

* (b) ball ``W ⊆ B(0, R)``: ``G = M + L R^α``, giving ``Δ̃_SGD(γ)``;
* (a) ``W = R^d`` (nonnegative loss): ``G = M + L (C_α T η)^{α/2}`` by the iterate-norm bound
  ``||w_t||^2 <= C_α T η`` of Lemma 20 (docs/theory/non-smooth-sgd.md), giving ``Δ_SGD(γ)``.

Theorem 7 requires ``0 < η < min{1, 1/L}``; outside that range nothing is certified, and
output perturbation (Algorithm 1) loses its privacy proof, so every bound here refuses such η
(docs/theory/non-smooth-sgd.md). On a ball the average lies in ``B(0, R)`` for both neighbours, so
``min{Δ̃_SGD(γ), 2R}`` is also valid (docs/theory/non-smooth-sgd.md); :func:`uas_bound` applies that
cap by default. All quantities that can overflow as α → 1 are evaluated in log space
(docs/theory/non-smooth-sgd.md). The privacy calibration of Algorithm 1 evaluates these at
``γ = δ/2`` (docs/theory/non-smooth-sgd.md, §10 item 2); that is the caller's choice of
``failure_probability``.

Reference values (docs/theory/non-smooth-sgd.md):

>>> round(uas_bound(alpha=1.0, L=2.0, M=2.0, M0=1.0, eta=0.01, steps=1000, n=100,
...                 failure_probability=0.01), 6)
13.759581
>>> uas_bound(alpha=0.0, L=1.0, M=1.0, radius=1.0, eta=0.01, steps=1000, n=100,
...           failure_probability=0.01)  # paper value 2.568 > 2R: the trivial cap applies
2.0
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec

from privopt._validate import (
    check_count,
    check_finite,
    check_nonnegative,
    check_positive,
    check_probability,
)
from privopt.losses import get_loss

if TYPE_CHECKING:
    from privopt.losses import LinearLoss

__all__ = [
    "C_alpha",
    "StabilityBound",
    "c2sq_eta_pow",
    "c_alpha_1",
    "c_gamma_T",
    "stability_bound",
    "stability_bound_for_loss",
    "uas_bound",
    "uas_bound_for_loss",
]

_P = ParamSpec("_P")
_LOG_MAX_FLOAT = math.log(1.7976931348623157e308)


# -- small log-space helpers -----------------------------------------------------------------


def _log(x: float) -> float:
    """Natural log with ``log 0 = -inf`` and ``log inf = inf``."""
    if x == 0.0:
        return -math.inf
    return math.log(x)


def _exp(x: float) -> float:
    """``exp`` that returns inf instead of raising ``OverflowError``."""
    if x > _LOG_MAX_FLOAT:
        return math.inf
    return math.exp(x)


def _logaddexp(a: float, b: float) -> float:
    """``log(e^a + e^b)`` without overflow; handles ``-inf`` (a zero term)."""
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    hi, lo = (a, b) if a >= b else (b, a)
    return hi + math.log1p(math.exp(lo - hi))


def _check_alpha(alpha: object) -> float:
    out = check_finite("alpha", alpha)
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"Expected alpha in [0, 1] (the Hölder exponent), got {out!r}.")
    return out


def _check_constant(name: str, value: object, what: str) -> float:
    out = check_nonnegative(name, value, allow_inf=True)
    if math.isinf(out):
        raise ValueError(
            f"{name} = inf ({what}): Theorem 7 needs finite constants. For regression losses "
            "state a public bound y_bound on |y| (docs/theory/non-smooth-sgd.md, §9.2)."
        )
    return out


# -- the constants of docs/theory/non-smooth-sgd.md
# -------------------------------------------------------


def c_alpha_1(alpha: float, L: float, M: float) -> float:
    r"""``c_{α,1}`` of eq. (2) (docs/theory/non-smooth-sgd.md), the self-bounding constant of Lemma
    19.

    ``c_{α,1} = (1 + 1/α)^{α/(1+α)} L^{1/(1+α)}`` for α in (0, 1], and ``c_{0,1} = M + L``.
    Lemma 19: ``||∂ℓ(w, z)|| <= c_{α,1} ℓ(w, z)^{α/(1+α)}`` for a nonnegative convex α-Hölder
    loss. Evaluated through logs, so tiny α > 0 is safe (the value tends to L as α → 0+,
    a jump from M + L at α = 0, as in the paper).

    >>> c_alpha_1(0.0, 1.0, 1.0), c_alpha_1(1.0, 2.0, 0.0)
    (2.0, 2.0)
    >>> round(c_alpha_1(0.5, 1.5, 1.5), 9)
    1.889881575
    """
    alpha = _check_alpha(alpha)
    L = check_nonnegative("L", L)
    M = check_nonnegative("M", M)
    if alpha == 0.0:
        return M + L
    if L == 0.0:
        return 0.0
    log_value = alpha / (1.0 + alpha) * (math.log1p(alpha) - math.log(alpha))
    log_value += math.log(L) / (1.0 + alpha)
    return _exp(log_value)


def _log_c2sq_eta_pow(alpha: float, L: float, eta: float) -> float:
    if alpha == 1.0 or L == 0.0:
        return -math.inf
    return math.log((1.0 - alpha) / (1.0 + alpha)) + 2.0 / (1.0 - alpha) * (
        math.log(L) + math.log(eta) - alpha * math.log(2.0)
    )


def c2sq_eta_pow(alpha: float, L: float, eta: float) -> float:
    r"""``c_{α,2}^2 η^{2/(1-α)} = (1-α)/(1+α) (2^{-α} L η)^{2/(1-α)}``, as one quantity.

    This is the per-step expansion of Lemma 21 (approximate non-expansiveness of the gradient
    map, docs/theory/non-smooth-sgd.md): ``||w - η∂ℓ(w) - w' + η∂ℓ(w')||^2 <= ||w - w'||^2 +
    c2sq_eta_pow`` for η <= 2/L. It is 0 at α = 1 (the gradient map of a smooth convex loss is
    non-expansive) and when L = 0. Computed in log space as one quantity, because
    ``(2^{-α} L)^{2/(1-α)}`` alone overflows as α → 1 while ``η^{2/(1-α)}`` underflows
    (docs/theory/non-smooth-sgd.md); for ``2^{-α} L η < 1`` (always so under Theorem 7's
    ``η < min{1, 1/L}``) it lies in ``[0, (1-α)/(1+α))`` and merely underflows to 0.

    >>> c2sq_eta_pow(1.0, 5.0, 0.1), c2sq_eta_pow(0.0, 1.0, 0.5)
    (0.0, 0.25)
    >>> 0.0 <= c2sq_eta_pow(0.999, 10.0, 0.05) < 1e-300
    True
    """
    alpha = _check_alpha(alpha)
    L = check_nonnegative("L", L)
    eta = check_positive("eta", eta)
    return _exp(_log_c2sq_eta_pow(alpha, L, eta))


def _log_C_alpha(alpha: float, L: float, M: float, M0: float) -> float:
    if alpha == 0.0:
        return _log((M + L) ** 2 + 2.0 * M0)
    if alpha == 1.0:
        return _log(2.0 * M0)
    first = (
        -math.inf
        if L == 0.0
        else math.log((1.0 - alpha) / (1.0 + alpha)) + 2.0 / (1.0 - alpha) * math.log(L)
    )
    return _logaddexp(first, _log(2.0 * M0))


def _C_alpha_with_log(alpha: float, L: float, M: float, M0: float) -> tuple[float, float]:
    """(C_α, log C_α): the closed form where it is representable, else (inf, log-space value)."""
    log_value = _log_C_alpha(alpha, L, M, M0)
    if log_value >= _LOG_MAX_FLOAT - 1.0:
        return math.inf, log_value
    if alpha == 0.0:
        value = (M + L) ** 2 + 2.0 * M0
    elif alpha == 1.0:
        value = 2.0 * M0
    else:
        try:
            value = (1.0 - alpha) / (1.0 + alpha) * L ** (2.0 / (1.0 - alpha)) + 2.0 * M0
        except OverflowError:  # L^{2/(1-α)} alone overflows although C_α does not
            return _exp(log_value), log_value
    return value, _log(value)


def C_alpha(alpha: float, L: float, M: float, M0: float) -> float:
    r"""``C_α`` of Lemma 20: ``||w_{t+1}||^2 <= C_α Σ_{j<=t} η_j`` for SGD on R^d.

    The paper's form (docs/theory/non-smooth-sgd.md) is
    ``C_α = (1-α)/(1+α) c_{α,1}^{2(1+α)/(1-α)} (α/(1+α))^{2α/(1-α)} + 2 M_0``, with
    ``M_0 = sup_z ℓ(0; z)``. Since ``c_{α,1}^{2(1+α)/(1-α)} = (1+1/α)^{2α/(1-α)} L^{2/(1-α)}``,
    the two α-factors cancel and, for α in (0, 1),

    ``C_α = (1-α)/(1+α) L^{2/(1-α)} + 2 M_0``     [derived, docs/theory/non-smooth-sgd.md];

    the special cases are ``C_0 = (M + L)^2 + 2 M_0`` (eq. 6, with ``0^0 = 1``) and
    ``C_1 = 2 M_0`` (eq. 7). Evaluated in log space. For α near 1 with L > 1 the value is
    astronomically large (and jumps down to 2 M_0 at α = 1, docs/theory/non-smooth-sgd.md); when it
    exceeds the float range this returns ``inf`` and emits a ``RuntimeWarning``.
    :func:`stability_bound` uses the logarithm internally, so its bound stays finite whenever
    the bound itself is representable.

    >>> C_alpha(0.0, 1.0, 1.0, 1.0), C_alpha(1.0, 7.0, 7.0, 1.0), C_alpha(0.5, 1.5, 0.0, 1.0)
    (6.0, 2.0, 3.6875)
    """
    alpha = _check_alpha(alpha)
    L = check_nonnegative("L", L)
    M = check_nonnegative("M", M)
    M0 = check_nonnegative("M0", M0)
    value, log_value = _C_alpha_with_log(alpha, L, M, M0)
    if math.isinf(value):
        warnings.warn(
            f"C_alpha(alpha={alpha!r}, L={L!r}) = exp({log_value:.6g}) overflows float64: "
            "L^(2/(1-alpha)) explodes as alpha -> 1 with L > 1 (docs/theory/non-smooth-sgd.md). "
            "The "
            "unbounded-domain stability bound built on it is correspondingly huge; rescale the "
            "data (smaller L), use a ball domain, or treat the loss as 1-Hölder.",
            RuntimeWarning,
            stacklevel=2,
        )
    return value


def c_gamma_T(gamma: float, T: int, n: int) -> float:
    r"""``c_{γ,T} = max{ (3 n log(n/γ) / T)^{1/2}, 3 n log(n/γ) / T }`` (Theorem 7).

    ``(T/n)(1 + c_{γ,T})`` bounds, by a Chernoff bound, the number of draws of one fixed index
    among T uniform draws with probability ``>= 1 - γ/n``; a union bound over the n indices
    gives probability ``>= 1 - γ`` for all of them (docs/theory/non-smooth-sgd.md).

    >>> round(c_gamma_T(0.01, 1000, 100), 9), round(c_gamma_T(0.01, 100, 100), 8)
    (2.763102112, 27.63102112)
    """
    gamma = check_probability("gamma", gamma)
    T = check_count("T", T)
    n = check_count("n", n)
    x = 3.0 * n * math.log(n / gamma) / T
    return max(math.sqrt(x), x)


# -- Theorem 7 ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StabilityBound:
    r"""Theorem 7's UAS bound with its pieces, for privacy reports (docs/theory/non-smooth-sgd.md).

    Attributes:
        value: the bound to use as the ℓ2-sensitivity of the averaged iterate: on a ball
            ``min{paper_value, 2R}`` when ``capped``, otherwise ``paper_value``.
        paper_value: Theorem 7's ``Δ̃_SGD(γ)`` (ball) or ``Δ_SGD(γ)`` (R^d), uncapped.
        capped: whether the trivial bound 2R was smaller and was applied
        (docs/theory/non-smooth-sgd.md).
        domain: ``"ball"`` (Theorem 7(b)) or ``"unbounded"`` (Theorem 7(a)).
        theorem: ``"Theorem 7(b)"`` or ``"Theorem 7(a)"``.
        visit_bound: ``K = (T/n)(1 + c_{γ,T})``, the high-probability bound on the number of
            draws of any one index.
        c_gamma_T: ``c_{γ,T}``.
        gradient_bound: G, the gradient-norm bound used (``M + L R^α``, ``M + L (C_α T η)^{α/2}``,
            or a smaller user-supplied valid bound); inf if it overflows float64.
        gradient_bound_source: ``"paper"`` or ``"user"`` (which of the two was smaller).
        expansion_term: ``T c_{α,2}^2 η^{2/(1-α)}``, the part due to non-smoothness (0 at α = 1).
        C_alpha: ``C_α`` of Lemma 20 on R^d (inf if it overflows float64), None on a ball.
        alpha, L, M, M0, eta, steps, n, failure_probability, radius: the inputs
            (``M0`` as given, None if not; ``radius`` None on R^d).
    """

    value: float
    paper_value: float
    capped: bool
    domain: str
    theorem: str
    visit_bound: float
    c_gamma_T: float
    gradient_bound: float
    gradient_bound_source: str
    expansion_term: float
    C_alpha: float | None
    alpha: float
    L: float
    M: float
    M0: float | None
    eta: float
    steps: int
    n: int
    failure_probability: float
    radius: float | None


def stability_bound(
    *,
    alpha: float,
    L: float,
    M: float,
    eta: float,
    steps: int,
    n: int,
    failure_probability: float,
    radius: float | None = None,
    M0: float | None = None,
    gradient_bound: float | None = None,
    cap: bool = True,
) -> StabilityBound:
    r"""Theorem 7's UAS bound of projected SGD, with its pieces (docs/theory/non-smooth-sgd.md).

    With ``K = (T/n)(1 + c_{γ,T})`` (``T = steps``, ``γ = failure_probability``),

    ``Δ = ( e ( T c_{α,2}^2 η^{2/(1-α)} + 4 G^2 η^2 (1 + K) K ) )^{1/2}``

    bounds ``sup_{S ≃ S'} ||w̄(S) - w̄(S')||`` with probability ``>= 1 - γ`` over the index
    sequence, where

    * ``radius=R`` (``W ⊆ B(0, R)``, Theorem 7(b)): ``G = M + L R^α`` and the result is
      ``Δ̃_SGD(γ)``; with ``cap=True`` the returned ``value`` is ``min{Δ̃_SGD(γ), 2R}``
      (both averages lie in ``B(0, R)``; docs/theory/non-smooth-sgd.md);
    * ``radius=None`` (``W = R^d``, Theorem 7(a), needs a nonnegative loss and
      ``M0 = sup_z ℓ(0; z)``): ``G = M + L (C_α T η)^{α/2}`` and the result is ``Δ_SGD(γ)``.

    ``0^0 = 1`` throughout, so for α = 0 both give ``G = M + L``. The proof
    (docs/theory/non-smooth-sgd.md §3.1) uses G only as a bound on ``||∂ℓ(w_t, z)||`` along the run,
    so any valid ``gradient_bound >= sup_{w ∈ W, z} ||∂ℓ(w, z)||`` may replace it (paper's Remark 1;
    e.g. the tight :meth:`privopt.losses.LinearLoss.lipschitz`); the smaller of the two is used.
    The whole expression is evaluated in log space, so it is finite whenever Δ is
    representable, even when ``C_α`` itself overflows (then a ``RuntimeWarning`` is emitted).

    Args:
        alpha: Hölder exponent α in [0, 1].
        L: Hölder constant L >= 0 (finite).
        M: ``sup_z ||∂ℓ(0; z)||`` (finite, a sup over the data domain, never the sample).
        eta: constant step size, ``0 < η < min{1, 1/L}`` (Theorem 7's hypothesis).
        steps: T >= 1, the number of SGD steps (= gradient evaluations).
        n: the number of records, n >= 2.
        failure_probability: γ in (0, 1); use δ/2 for Algorithm 1's privacy calibration.
        radius: R > 0 for ``W ⊆ B(0, R)``; None for ``W = R^d``.
        M0: ``sup_z ℓ(0; z)``; required and finite when ``radius`` is None, unused (any
            value, inf included) on a ball.
        gradient_bound: optional valid bound on the gradient norm over W and the data domain.
        cap: apply the trivial 2R cap on a ball (default True; False gives the paper's value).

    Raises:
        ValueError: for η outside ``(0, min{1, 1/L})``, γ outside (0, 1), ``radius <= 0`` or
            infinite, ``radius=None`` without M0, n < 2, steps < 1, or non-finite constants.
    """
    alpha = _check_alpha(alpha)
    L = _check_constant("L", L, "Hölder constant")
    M = _check_constant("M", M, "sup of the gradient norm at w = 0")
    eta = check_positive("eta", eta)
    step_limit = min(1.0, 1.0 / L) if L > 0.0 else 1.0
    if not eta < step_limit:
        raise ValueError(
            f"Theorem 7 requires 0 < eta < min{{1, 1/L}} = {step_limit!r}, got eta = {eta!r} "
            f"(L = {L!r}). Outside that range the stability bound, and with it the privacy "
            "proof of output perturbation, does not hold (docs/theory/non-smooth-sgd.md); use a "
            "smaller "
            "step size."
        )
    steps = check_count("steps", steps)
    n = check_count("n", n, minimum=2)
    gamma = check_probability("failure_probability", failure_probability)
    if radius is not None:
        radius = check_positive("radius", radius)
    elif M0 is None:
        raise ValueError(
            "radius=None means the unbounded domain W = R^d, where Theorem 7(a) needs "
            "M0 = sup_z loss(0; z) (through C_alpha of Lemma 20, docs/theory/non-smooth-sgd.md); "
            "pass M0, or a radius for a ball domain."
        )
    if M0 is not None:
        if radius is None:
            M0 = _check_constant("M0", M0, "sup of the loss at w = 0")
        else:  # not used on a ball: inf (a regression loss without y_bound) is fine there
            M0 = check_nonnegative("M0", M0, allow_inf=True)
    if gradient_bound is not None:
        gradient_bound = check_nonnegative("gradient_bound", gradient_bound, allow_inf=True)

    cgt = c_gamma_T(gamma, steps, n)
    visits = steps / n * (1.0 + cgt)
    log_expansion = math.log(steps) + _log_c2sq_eta_pow(alpha, L, eta)

    C_value: float | None = None
    if radius is not None:
        # ||∂ℓ(w)|| <= M + L ||w||^α <= M + L R^α on the ball (0^0 = 1).
        G = M + L * radius**alpha
        log_G = _log(G)
    else:
        assert M0 is not None
        C_value, log_C = _C_alpha_with_log(alpha, L, M, M0)
        if math.isinf(C_value):
            warnings.warn(
                f"C_alpha = exp({log_C:.6g}) overflows float64 (alpha={alpha!r}, L={L!r}): the "
                "unbounded-domain bound of Theorem 7(a) is astronomically large "
                "(docs/theory/non-smooth-sgd.md). Consider a ball domain, or data scaled to a "
                "smaller L.",
                RuntimeWarning,
                stacklevel=2,
            )
        if alpha == 0.0:
            G = M + L
            log_G = _log(G)
        else:
            # log(L (C_α T η)^{α/2}), then log(M + that).
            log_growth = _log(L) + alpha / 2.0 * (log_C + math.log(steps) + math.log(eta))
            log_G = _logaddexp(_log(M), log_growth)
            G = _exp(log_G)
    source = "paper"
    if gradient_bound is not None and _log(gradient_bound) < log_G:
        G = gradient_bound
        log_G = _log(G)
        source = "user"

    log_visits = math.log(4.0) + 2.0 * math.log(eta) + math.log(visits) + math.log1p(visits)
    log_sq = 1.0 + _logaddexp(log_expansion, 2.0 * log_G + log_visits)
    paper_value = _exp(0.5 * log_sq)

    value = paper_value
    capped = False
    if radius is not None and cap and 2.0 * radius < paper_value:
        value = 2.0 * radius
        capped = True
    return StabilityBound(
        value=value,
        paper_value=paper_value,
        capped=capped,
        domain="ball" if radius is not None else "unbounded",
        theorem="Theorem 7(b)" if radius is not None else "Theorem 7(a)",
        visit_bound=visits,
        c_gamma_T=cgt,
        gradient_bound=G,
        gradient_bound_source=source,
        expansion_term=_exp(log_expansion),
        C_alpha=C_value,
        alpha=alpha,
        L=L,
        M=M,
        M0=M0,
        eta=eta,
        steps=steps,
        n=n,
        failure_probability=gamma,
        radius=radius,
    )


def stability_bound_for_loss(
    loss: str | LinearLoss,
    *,
    x_bound: float,
    y_bound: float | None = None,
    radius: float | None,
    eta: float,
    steps: int,
    n: int,
    failure_probability: float,
    tight: bool = False,
    cap: bool = True,
) -> StabilityBound:
    r""":func:`stability_bound` with (α, L, M, M_0) taken from ``loss.constants(...)``.

    ``loss`` is a :class:`privopt.losses.LinearLoss` or a name for
    :func:`privopt.losses.get_loss`. The constants are suprema over data with
    ``||x|| <= x_bound`` and ``|y| <= y_bound`` (docs/theory/non-smooth-sgd.md); the data must
    satisfy these bounds or the bound, and privacy, silently fail (docs/theory/non-smooth-sgd.md
    item 2). ``radius=None`` is ``W = R^d`` (needs finite M_0: regression losses need ``y_bound``).
    ``tight=True`` also passes the tight gradient bound ``loss.lipschitz``
    (docs/theory/non-smooth-sgd.md), used where smaller than the paper's G; the default reproduces
    the paper.
    """
    constants = get_loss(loss).constants(x_bound, y_bound, radius)
    if radius is None and math.isinf(constants.M0):
        raise ValueError(
            f"The {constants.loss} loss has M0 = sup loss(0; z) = inf without a bound on |y|; "
            "the unbounded domain (Theorem 7(a)) needs a finite M0: pass y_bound."
        )
    return stability_bound(
        alpha=constants.alpha,
        L=constants.L,
        M=constants.M,
        eta=eta,
        steps=steps,
        n=n,
        failure_probability=failure_probability,
        radius=radius,
        M0=constants.M0,
        gradient_bound=constants.lipschitz if tight else None,
        cap=cap,
    )


def _value_of(bound: Callable[_P, StabilityBound], name: str, doc: str) -> Callable[_P, float]:
    """``bound(...).value`` as the public function ``name``, with ``bound``'s very parameters.

    Both the structured result and the number exist (a caller that only needs Δ should not
    unpack a record); they share one signature, and the number is by definition the record's
    ``value``.
    """

    @functools.wraps(bound)
    def value(*args: _P.args, **kwargs: _P.kwargs) -> float:
        return bound(*args, **kwargs).value

    value.__name__ = value.__qualname__ = name
    value.__doc__ = doc
    value.__annotations__ = {**bound.__annotations__, "return": "float"}
    setattr(  # noqa: B010 (what inspect.signature, and so help() and the docs, read)
        value, "__signature__", inspect.signature(bound).replace(return_annotation="float")
    )
    return value


uas_bound = _value_of(
    stability_bound,
    "uas_bound",
    r"""Theorem 7's UAS bound as a number: ``Δ̃_SGD(γ)`` (capped at 2R) or ``Δ_SGD(γ)``.

    ``stability_bound(...).value``; see :func:`stability_bound` for the formula, the arguments
    and the errors (docs/theory/non-smooth-sgd.md, §9.2).
    """,
)

uas_bound_for_loss = _value_of(
    stability_bound_for_loss,
    "uas_bound_for_loss",
    r"""Theorem 7's UAS bound for a loss of :mod:`privopt.losses`, as a number.

    ``stability_bound_for_loss(...).value``; see :func:`stability_bound_for_loss`.

    >>> round(uas_bound_for_loss("hinge", x_bound=1.0, radius=10.0, eta=0.01, steps=1000,
    ...                          n=100, failure_probability=0.01), 6)  # α=0, L=M=1
    2.567965
    """,
)
