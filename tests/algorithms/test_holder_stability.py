"""Theorem 7 of Wang et al. (2022) (uniform argument stability of projected SGD) with explicit
constants.

Reference values are the test vectors of docs/theory/non-smooth-sgd.md#test-vectors; the long forms
are recomputed here
with mpmath at 50 digits, independently of the module's log-space evaluation.
"""

import math
import warnings

import mpmath
import numpy as np
import pytest

from privopt.losses import get_loss
from privopt.theory.holder_stability import (
    C_alpha,
    StabilityBound,
    c2sq_eta_pow,
    c_alpha_1,
    c_gamma_T,
    stability_bound,
    stability_bound_for_loss,
    uas_bound,
    uas_bound_for_loss,
)

mpmath.mp.dps = 50

# gamma = 0.01, eta = 0.01, T = 1000, n = 100 for every UAS vector of
# docs/theory/non-smooth-sgd.md#test-vectors
RUN = {"eta": 0.01, "steps": 1000, "n": 100, "failure_probability": 0.01}


def _paper_uas(alpha, L, M, eta, T, n, gamma, *, R=None, M0=None):
    """Theorem 7 transcribed literally, in 50-digit arithmetic
    (docs/theory/non-smooth-sgd.md#stability)."""
    alpha, L, M, eta = (mpmath.mpf(v) for v in (alpha, L, M, eta))
    x = 3 * n * mpmath.log(mpmath.mpf(n) / gamma) / T
    k = mpmath.mpf(T) / n * (1 + max(mpmath.sqrt(x), x))
    if alpha == 1:
        c2 = mpmath.mpf(0)
    else:
        c2 = (1 - alpha) / (1 + alpha) * (2**-alpha * L) ** (2 / (1 - alpha))
        c2 *= eta ** (2 / (1 - alpha))
    if R is not None:
        G = M + L * mpmath.mpf(R) ** alpha
    else:
        if alpha == 0:
            C = (M + L) ** 2 + 2 * M0
        elif alpha == 1:
            C = 2 * mpmath.mpf(M0)
        else:
            C = (1 - alpha) / (1 + alpha) * L ** (2 / (1 - alpha)) + 2 * M0
        G = M + L * (C * T * eta) ** (alpha / 2)
    return mpmath.sqrt(mpmath.e * (T * c2 + 4 * G**2 * eta**2 * (1 + k) * k))


# -- constants (docs/theory/non-smooth-sgd.md#constants, §12.2)
# -------------------------------------------------------


def test_c_alpha_1_vectors():
    assert c_alpha_1(0.0, 1.0, 1.0) == 2.0  # M + L at alpha = 0
    assert c_alpha_1(1.0, 2.0, 123.0) == pytest.approx(2.0, rel=1e-15)  # (2)^{1/2} 2^{1/2}
    assert c_alpha_1(0.5, 1.5, 1.5) == pytest.approx(1.889881575, abs=1e-9)


def test_C_alpha_vectors():
    assert C_alpha(0.0, 1.0, 1.0, 1.0) == 6.0  # (M + L)^2 + 2 M0
    assert C_alpha(1.0, 1.0, 1.0, 1.0) == 2.0  # 2 M0
    assert C_alpha(1.0, 50.0, 9.0, 1.0) == 2.0  # L and M do not enter at alpha = 1
    assert C_alpha(0.5, 1.5, 0.0, 1.0) == pytest.approx(3.6875, rel=1e-15)


def test_c_gamma_T_vectors():
    assert c_gamma_T(0.01, 1000, 100) == pytest.approx(2.763102112, abs=1e-9)  # x > 1: x
    assert c_gamma_T(0.01, 100, 100) == pytest.approx(27.63102112, abs=1e-8)
    # x = 3 n log(n/gamma)/T < 1 takes the square root branch
    x = 3 * 10 * math.log(10 / 0.5) / 10_000
    assert c_gamma_T(0.5, 10_000, 10) == pytest.approx(math.sqrt(x), rel=1e-14)


@pytest.mark.parametrize("alpha", [0.05, 0.25, 0.5, 0.75, 0.9, 0.97])
@pytest.mark.parametrize("L", [0.3, 1.5, 4.0])
@pytest.mark.parametrize("M0", [0.0, 1.0])
def test_C_alpha_simplification_matches_paper_long_form(alpha, L, M0):
    """(1-a)/(1+a) c_{a,1}^{2(1+a)/(1-a)} (a/(1+a))^{2a/(1-a)} + 2 M0 == (1-a)/(1+a) L^{2/(1-a)}
    + 2 M0 (docs/theory/non-smooth-sgd.md#constants), the long form evaluated in 50-digit
    arithmetic."""
    a, Lm = mpmath.mpf(alpha), mpmath.mpf(L)
    c1 = (1 + 1 / a) ** (a / (1 + a)) * Lm ** (1 / (1 + a))
    assert float(c1) == pytest.approx(c_alpha_1(alpha, L, 7.0), rel=1e-13)
    long_form = (1 - a) / (1 + a) * c1 ** (2 * (1 + a) / (1 - a)) * (a / (1 + a)) ** (
        2 * a / (1 - a)
    ) + 2 * M0
    assert C_alpha(alpha, L, 7.0, M0) == pytest.approx(float(long_form), rel=1e-12)


def test_C_alpha_long_form_at_zero_uses_c01_and_zero_power_zero():
    # alpha = 0: exponents 2 and 0, c_{0,1} = M + L and 0^0 = 1 give (M + L)^2 + 2 M0
    M, L, M0 = 0.7, 1.9, 0.4
    assert C_alpha(0.0, L, M, M0) == pytest.approx((M + L) ** 2 * 0.0**0 + 2 * M0, rel=1e-15)


def test_c2sq_eta_pow_special_cases_and_value():
    assert c2sq_eta_pow(1.0, 3.0, 0.2) == 0.0  # gradient map non-expansive at alpha = 1
    assert c2sq_eta_pow(0.4, 0.0, 0.2) == 0.0  # L = 0
    assert c2sq_eta_pow(0.0, 2.0, 0.1) == pytest.approx(0.04, rel=1e-14)  # (L eta)^2
    exact = mpmath.mpf(1) / 3 * (2**-0.5 * mpmath.mpf(1.5) * mpmath.mpf(0.01)) ** 4
    assert c2sq_eta_pow(0.5, 1.5, 0.01) == pytest.approx(float(exact), rel=1e-12)


def test_c2sq_eta_pow_is_one_quantity_where_the_pieces_overflow():
    """docs/theory/non-smooth-sgd.md#numerics: (2^-a L)^{2/(1-a)} overflows while eta^{2/(1-a)}
    underflows; the
    product ~1e-305 is representable and must come out right."""
    alpha, L, eta = 0.998, 10.0, 0.099
    with pytest.raises(OverflowError):
        _ = (2**-alpha * L) ** (2 / (1 - alpha))
    value = c2sq_eta_pow(alpha, L, eta)
    a = mpmath.mpf(alpha)
    exact = (1 - a) / (1 + a) * (2**-a * mpmath.mpf(L) * mpmath.mpf(eta)) ** (2 / (1 - a))
    assert 0.0 < value < 1e-300
    assert value == pytest.approx(float(exact), rel=1e-9)


# -- the five UAS vectors (docs/theory/non-smooth-sgd.md#test-vectors)
# ----------------------------------------------


BALL_VECTORS = [
    (0.0, 1.0, 1.0, 2.567964562),
    (0.5, 1.5, 1.5, 3.771722754),
    (1.0, 2.0, 2.0, 5.028961645),
]
UNBOUNDED_VECTORS = [
    (1.0, 2.0, 2.0, 13.75958092),
    (0.5, 1.5, 1.5, 6.533074708),
]


@pytest.mark.parametrize(("alpha", "L", "M", "expected"), BALL_VECTORS)
def test_ball_uas_vectors(alpha, L, M, expected):
    bound = stability_bound(alpha=alpha, L=L, M=M, radius=1.0, **RUN)
    assert bound.paper_value == pytest.approx(expected, abs=1e-9)
    assert bound.paper_value == pytest.approx(
        float(_paper_uas(alpha, L, M, 0.01, 1000, 100, 0.01, R=1.0)), rel=1e-13
    )
    assert uas_bound(alpha=alpha, L=L, M=M, radius=1.0, cap=False, **RUN) == bound.paper_value
    # every vector exceeds the trivial bound 2R = 2 at R = 1
    # (docs/theory/non-smooth-sgd.md#validation)
    assert bound.capped and bound.value == 2.0
    assert uas_bound(alpha=alpha, L=L, M=M, radius=1.0, **RUN) == 2.0
    assert bound.domain == "ball" and bound.theorem == "Theorem 7(b)"


@pytest.mark.parametrize(("alpha", "L", "M", "expected"), UNBOUNDED_VECTORS)
def test_unbounded_uas_vectors(alpha, L, M, expected):
    bound = stability_bound(alpha=alpha, L=L, M=M, M0=1.0, **RUN)
    assert bound.value == bound.paper_value == pytest.approx(expected, abs=1e-8)
    assert bound.value == pytest.approx(
        float(_paper_uas(alpha, L, M, 0.01, 1000, 100, 0.01, M0=1.0)), rel=1e-13
    )
    assert uas_bound(alpha=alpha, L=L, M=M, M0=1.0, **RUN) == bound.value
    assert not bound.capped and bound.domain == "unbounded" and bound.theorem == "Theorem 7(a)"
    assert bound.C_alpha == C_alpha(alpha, L, M, 1.0)


def test_bound_pieces():
    bound = stability_bound(alpha=0.5, L=1.5, M=1.5, radius=1.0, **RUN)
    assert isinstance(bound, StabilityBound)
    assert bound.c_gamma_T == pytest.approx(2.763102112, abs=1e-9)
    assert bound.visit_bound == pytest.approx(10 * (1 + 2.763102112), abs=1e-8)  # T/n (1+c)
    assert bound.gradient_bound == 3.0  # M + L R^alpha
    assert bound.gradient_bound_source == "paper"
    assert bound.expansion_term == pytest.approx(1000 * c2sq_eta_pow(0.5, 1.5, 0.01), rel=1e-12)
    assert bound.C_alpha is None and bound.M0 is None and bound.radius == 1.0
    unbounded = stability_bound(alpha=0.5, L=1.5, M=1.5, M0=1.0, **RUN)
    # G = M + L (C_alpha T eta)^{alpha/2} with C_alpha = 3.6875, T eta = 10
    assert unbounded.gradient_bound == pytest.approx(1.5 + 1.5 * 36.875**0.25, rel=1e-13)
    # alpha = 0: G = M + L on every domain (0^0 = 1)
    assert stability_bound(alpha=0.0, L=1.0, M=0.5, M0=1.0, **RUN).gradient_bound == 1.5


# -- the 2R cap -----------------------------------------------------------------------------


def test_two_r_cap_applies_only_when_smaller():
    # T/n small: the visit-count bound is huge and the paper's bound exceeds 2R = 1
    args = {"alpha": 0.0, "L": 1.0, "M": 1.0, "eta": 0.01, "steps": 10, "n": 1000}
    capped = stability_bound(radius=0.5, failure_probability=0.01, **args)
    assert capped.paper_value > 1.0
    assert capped.capped and capped.value == 1.0
    uncapped = stability_bound(radius=0.5, failure_probability=0.01, cap=False, **args)
    assert not uncapped.capped and uncapped.value == capped.paper_value
    # large R (alpha = 0: G does not depend on R): the cap is inactive, same paper value
    wide = stability_bound(radius=100.0, failure_probability=0.01, **args)
    assert not wide.capped and wide.value == wide.paper_value == capped.paper_value


# -- numerics as alpha -> 1 (docs/theory/non-smooth-sgd.md#numerics)
# ----------------------------------------------


def test_no_overflow_at_alpha_0999_with_L_10():
    alpha, L, eta = 0.999, 10.0, 0.05
    c2 = c2sq_eta_pow(alpha, L, eta)
    assert math.isfinite(c2) and c2 >= 0.0
    bound = stability_bound(
        alpha=alpha,
        L=L,
        M=1.0,
        radius=1.0,
        eta=eta,
        steps=1000,
        n=100,
        failure_probability=0.01,
        cap=False,
    )
    assert math.isfinite(bound.paper_value) and not math.isnan(bound.paper_value)
    expected = _paper_uas(alpha, L, 1.0, eta, 1000, 100, 0.01, R=1.0)
    assert bound.paper_value == pytest.approx(float(expected), rel=1e-12)
    assert c_alpha_1(alpha, L, 1.0) == pytest.approx(
        float((1 + 1 / mpmath.mpf(alpha)) ** (alpha / (1 + alpha)) * L ** (1 / (1 + alpha))),
        rel=1e-13,
    )
    # C_alpha = e^{~4600} is not representable: inf with a warning, never NaN
    with pytest.warns(RuntimeWarning, match="overflows"):
        assert C_alpha(alpha, L, 1.0, 1.0) == math.inf
    with pytest.warns(RuntimeWarning, match="overflows"):
        huge = uas_bound(
            alpha=alpha, L=L, M=1.0, M0=1.0, eta=eta, steps=1000, n=100, failure_probability=0.01
        )
    assert huge == math.inf


def test_unbounded_bound_stays_finite_when_C_alpha_overflows():
    """C_alpha = e^917 overflows but Delta_SGD ~ 1.7e198 does not: log-space evaluation."""
    args = {"alpha": 0.9985, "L": 2.0, "M": 1.0, "eta": 1e-3, "steps": 1000, "n": 100}
    with pytest.warns(RuntimeWarning, match="C_alpha"):
        bound = stability_bound(M0=1.0, failure_probability=0.01, **args)
    assert bound.C_alpha == math.inf
    expected = _paper_uas(0.9985, 2.0, 1.0, 1e-3, 1000, 100, 0.01, M0=1.0)
    assert math.isfinite(bound.value)
    assert bound.value == pytest.approx(float(expected), rel=1e-9)


def test_no_warning_in_ordinary_use():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uas_bound(alpha=0.9, L=1.5, M=1.0, M0=1.0, **RUN)


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(("L", "eta"), [(2.0, 0.5), (2.0, 0.7), (0.5, 1.0), (0.0, 1.0)])
def test_step_size_at_or_above_min_one_over_L_is_refused(L, eta):
    with pytest.raises(ValueError, match=r"min\{1, 1/L\}"):
        uas_bound(
            alpha=0.5, L=L, M=1.0, radius=1.0, eta=eta, steps=10, n=10, failure_probability=0.1
        )


@pytest.mark.parametrize("gamma", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_failure_probability_outside_unit_interval(gamma):
    with pytest.raises(ValueError, match="failure_probability"):
        uas_bound(
            alpha=0.5, L=1.0, M=1.0, radius=1.0, eta=0.1, steps=10, n=10, failure_probability=gamma
        )


@pytest.mark.parametrize("radius", [0.0, -1.0, math.inf])
def test_bad_radius(radius):
    with pytest.raises(ValueError, match="radius"):
        uas_bound(
            alpha=0.5, L=1.0, M=1.0, radius=radius, eta=0.1, steps=10, n=10, failure_probability=0.1
        )


def test_M0_is_unused_on_a_ball():
    # a regression loss without y_bound has M0 = inf; on a ball Theorem 7(b) does not need it
    with_inf = stability_bound(alpha=0.0, L=2.0, M=1.0, M0=math.inf, radius=1.0, **RUN)
    assert with_inf.value == uas_bound(alpha=0.0, L=2.0, M=1.0, radius=1.0, **RUN)
    assert uas_bound_for_loss("absolute", x_bound=1.0, radius=5.0, **RUN) == pytest.approx(
        uas_bound(alpha=0.0, L=2.0, M=1.0, radius=5.0, **RUN), rel=1e-15
    )
    with pytest.raises(ValueError, match="M0 = inf"):
        uas_bound(alpha=0.0, L=2.0, M=1.0, M0=math.inf, **RUN)


def test_unbounded_domain_needs_M0():
    with pytest.raises(ValueError, match="M0"):
        uas_bound(alpha=0.5, L=1.0, M=1.0, eta=0.1, steps=10, n=10, failure_probability=0.1)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"n": 1}, "n"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"eta": 0.0}, "eta"),
        ({"M": math.inf}, "M = inf"),
        ({"M": -1.0}, "M"),
        ({"L": math.inf}, "L = inf"),
    ],
)
def test_other_validation(overrides, match):
    args = {
        "alpha": 0.5,
        "L": 1.0,
        "M": 1.0,
        "radius": 1.0,
        "eta": 0.1,
        "steps": 10,
        "n": 10,
        "failure_probability": 0.1,
    }
    args.update(overrides)
    with pytest.raises(ValueError, match=match):
        stability_bound(**args)


# -- from a loss of privopt.losses -----------------------------------------------------------


def test_for_loss_reproduces_vectors():
    # hinge with ||x|| <= 1: alpha = 0, L = M = 1 (docs/theory/non-smooth-sgd.md#losses); R = 10
    # leaves 2R = 20 idle
    assert uas_bound_for_loss("hinge", x_bound=1.0, radius=10.0, **RUN) == pytest.approx(
        2.567964562, abs=1e-9
    )
    # squared hinge: alpha = 1, L = M = 2, M0 = 1
    sq = get_loss("squared_hinge")
    assert uas_bound_for_loss(sq, x_bound=1.0, radius=1.0, cap=False, **RUN) == pytest.approx(
        5.028961645, abs=1e-9
    )
    assert uas_bound_for_loss(sq, x_bound=1.0, radius=None, **RUN) == pytest.approx(
        13.75958092, abs=1e-8
    )
    # q-norm hinge, q = 1.5: alpha = 0.5, L = M = 1.5, M0 = 1
    q15 = get_loss("qnorm_hinge", q=1.5)
    assert uas_bound_for_loss(q15, x_bound=1.0, radius=None, **RUN) == pytest.approx(
        6.533074708, abs=1e-8
    )
    assert uas_bound_for_loss(q15, x_bound=1.0, radius=1.0, cap=False, **RUN) == pytest.approx(
        3.771722754, abs=1e-9
    )


def test_for_loss_tight_gradient_bound():
    paper = stability_bound_for_loss("hinge", x_bound=1.0, radius=10.0, **RUN)
    tight = stability_bound_for_loss("hinge", x_bound=1.0, radius=10.0, tight=True, **RUN)
    assert paper.gradient_bound == 2.0 and paper.gradient_bound_source == "paper"
    assert tight.gradient_bound == 1.0 and tight.gradient_bound_source == "user"  # G = B_x
    assert tight.value < paper.value
    # a larger user bound is ignored: the paper's G is valid and smaller
    loose = stability_bound(alpha=0.0, L=1.0, M=1.0, radius=10.0, gradient_bound=5.0, **RUN)
    assert loose.gradient_bound == 2.0 and loose.value == paper.value


def test_for_loss_regression_needs_y_bound_on_unbounded_domain():
    with pytest.raises(ValueError, match="y_bound"):
        uas_bound_for_loss("absolute", x_bound=1.0, radius=None, **RUN)
    with pytest.raises(ValueError, match="y_bound"):  # squared loss: M = inf without y_bound
        uas_bound_for_loss("squared", x_bound=1.0, radius=1.0, **{**RUN, "eta": 0.5})
    # least squares on R^d with |y| <= 1: alpha = 1, L = 1, M = 1, M0 = 1/2 (1/2-scaled loss)
    value = uas_bound_for_loss("squared", x_bound=1.0, y_bound=1.0, radius=None, **RUN)
    assert value == pytest.approx(uas_bound(alpha=1.0, L=1.0, M=1.0, M0=0.5, **RUN), rel=1e-15)


# -- the bound holds on coupled SGD runs (a quick sanity check,
# docs/theory/non-smooth-sgd.md#implementation item 4) -------


def test_bound_dominates_coupled_sgd_runs_hinge():
    rng = np.random.default_rng(0)
    n, d, T, eta, R = 30, 3, 300, 0.05, 1.0
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    Xp, yp = X.copy(), y.copy()
    Xp[0], yp[0] = -X[0], -y[0]  # adversarial replacement of record 0

    def run(X, y, idx):
        w, total = np.zeros(d), np.zeros(d)
        for i in idx:
            total += w
            g = -y[i] * X[i] if y[i] * (X[i] @ w) < 1.0 else np.zeros(d)
            w = w - eta * g
            w *= min(1.0, R / max(np.linalg.norm(w), 1e-300))
        return total / len(idx)

    bound = uas_bound_for_loss(
        "hinge", x_bound=1.0, radius=R, eta=eta, steps=T, n=n, failure_probability=0.05, cap=False
    )
    gaps = [
        np.linalg.norm(run(X, y, idx) - run(Xp, yp, idx))
        for idx in (rng.integers(0, n, size=T) for _ in range(10))
    ]
    assert max(gaps) <= bound
