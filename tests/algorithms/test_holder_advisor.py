"""Recommended (T, eta) from Wang et al.'s (2022) Theorems 9, 10, 12 and Lemma 13's threshold.

Reference formulas: docs/theory/non-smooth-sgd.md#test-vectors (transcribed below, independently of
the module);
exponent table: §6.6; Lemma 13 thresholds: §4.3; the Theorem 12 erratum: §6.4, §11 item 2.
"""

import math

import pytest

from privopt.theory.holder_advisor import (
    THEOREM9_ALPHA_CUTOFF,
    Schedule,
    lemma13_epsilon_threshold,
    recommended_schedule,
    steps_exponent,
    theorem9_step_size,
    theorem10_step_size,
    theorem12_step_size,
)
from privopt.theory.holder_stability import uas_bound

# -- docs/theory/non-smooth-sgd.md#test-vectors, verbatim
# ----------------------------------------------------------------


def T_bounded(n, alpha):
    return math.ceil(n ** ((2 - alpha) / (1 + alpha))) if alpha < 0.5 else n


def T_unbounded(n, alpha):
    if alpha < (math.sqrt(73) - 7) / 4:
        return math.ceil(n ** ((-(alpha**2) - 3 * alpha + 6) / ((1 + alpha) * (3 + alpha))))
    return n


def eta_thm9(n, T, alpha, gamma):
    return n ** (1 / (3 + alpha)) / (T * math.log(1 / gamma) ** (1 / (3 + alpha)))


def eta_thm10(n, T, d, eps, delta, gamma):
    a = math.sqrt(math.log(n / delta) * math.log(n) * math.log(1 / gamma) / n)
    b = (
        (d * math.log(1 / delta)) ** 0.25
        * math.sqrt(math.log(n / delta))
        * math.log(1 / gamma) ** 0.125
        / math.sqrt(n * eps)
    )
    return 1 / (T * max(a, b))


def eta_thm12(n, T, d, eps, delta, gamma):  # corrected form
    a = math.sqrt(math.log(n) * math.log(n / gamma) * math.log(1 / gamma) / n)
    b = math.sqrt(d * math.log(1 / delta)) * math.log(1 / gamma) ** 0.25 / (n * eps)
    return 1 / (T * max(a, b))


BASE = {"n": 1000, "d": 50, "epsilon": 1.0, "delta": 1e-6}

# -- Lemma 13 (docs/theory/non-smooth-sgd.md#lemma-13)
# ------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "threshold"),
    [
        (18, 3.881145),
        (44, 3.102024),
        (100, 2.573820),
        (10**3, 1.538946),
        (10**4, 0.896997),
        (10**5, 0.507036),
        (10**6, 0.279105),
    ],
)
def test_lemma13_thresholds(n, threshold):
    assert lemma13_epsilon_threshold(n) == pytest.approx(threshold, abs=1e-6)


def test_lemma13_behaves_like_two_log_n_over_cube_root():
    n = 10**9
    assert lemma13_epsilon_threshold(n) == pytest.approx(2 * math.log(n) / n ** (1 / 3), rel=0.01)


@pytest.mark.parametrize("n", [1, 17, 17.5])
def test_lemma13_outside_its_statement(n):
    with pytest.raises(ValueError, match="n"):
        lemma13_epsilon_threshold(n)


def test_lemma13_docstring_warns_it_is_false_for_small_n():
    assert "false for 18 <= n <= 43" in lemma13_epsilon_threshold.__doc__


# -- T exponents (docs/theory/non-smooth-sgd.md#iteration-counts)
# ----------------------------------------------------------


@pytest.mark.parametrize(
    ("alpha", "bounded_k", "unbounded_k"),
    [
        (0.0, 2.0, 2.0),
        (0.25, 1.4, 1.2769),
        (0.386, 1.1645, 1.0),
        (0.5, 1.0, 1.0),
        (0.75, 1.0, 1.0),
        (1.0, 1.0, 1.0),
    ],
)
def test_exponent_table(alpha, bounded_k, unbounded_k):
    assert steps_exponent(alpha, bounded=True) == pytest.approx(bounded_k, abs=1e-4)
    assert steps_exponent(alpha, bounded=False) == pytest.approx(unbounded_k, abs=1e-4)
    for perturbation in ("output", "gradient"):
        s = recommended_schedule(alpha=alpha, perturbation=perturbation, bounded=True, **BASE)
        assert s.exponent == steps_exponent(alpha, bounded=True)
    s = recommended_schedule(alpha=alpha, perturbation="output", bounded=False, **BASE)
    assert s.exponent == steps_exponent(alpha, bounded=False)


def test_exponent_cutoffs():
    assert THEOREM9_ALPHA_CUTOFF == pytest.approx(0.3860009, abs=1e-7)
    below = math.nextafter(THEOREM9_ALPHA_CUTOFF, 0.0)
    assert steps_exponent(below, bounded=False) == pytest.approx(1.0, abs=1e-12)  # continuous
    assert steps_exponent(THEOREM9_ALPHA_CUTOFF, bounded=False) == 1.0
    assert steps_exponent(0.4999999, bounded=True) == pytest.approx(1.0, abs=1e-6)
    assert steps_exponent(0.5, bounded=True) == 1.0


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.25, 0.386, 0.45, 0.5, 1.0])
def test_steps_match_reference(alpha):
    for n in (100, 1000):
        args = {**BASE, "n": n}
        bounded = recommended_schedule(alpha=alpha, bounded=True, **args)
        assert bounded.steps == bounded.steps_theory == T_bounded(n, alpha)
        unbounded = recommended_schedule(alpha=alpha, bounded=False, **args)
        assert unbounded.steps == T_unbounded(n, alpha)


def test_hinge_needs_n_squared_and_smooth_losses_n():
    hinge = recommended_schedule(alpha=0.0, perturbation="gradient", bounded=True, **BASE)
    assert hinge.steps == 1000**2 and hinge.theorem == 12
    assert "n^2" in hinge.explanation and "superlinear" in hinge.explanation
    smooth = recommended_schedule(alpha=1.0, perturbation="output", bounded=True, **BASE)
    assert smooth.steps == 1000 and smooth.theorem == 10
    assert "linear in n" in smooth.explanation and "1000 gradient evaluations" in smooth.explanation
    unb = recommended_schedule(alpha=0.25, perturbation="output", bounded=False, **BASE)
    assert unb.theorem == 9 and "(6-3α-α²)/((1+α)(3+α))" in unb.explanation
    assert "hidden constants set to 1" in unb.explanation.lower()


# -- step sizes ------------------------------------------------------------------------------


def test_theorem12_step_size_is_corrected():
    n, T, d, eps, delta, gamma = 1000, 1000, 50, 1.0, 1e-6, 0.05
    args = {
        "n": n,
        "steps": T,
        "d": d,
        "epsilon": eps,
        "delta": delta,
        "failure_probability": gamma,
    }
    corrected = theorem12_step_size(**args)
    assert corrected == pytest.approx(eta_thm12(n, T, d, eps, delta, gamma), rel=1e-14)
    a = math.sqrt(math.log(n) * math.log(n / gamma) * math.log(1 / gamma) / n)
    b = math.sqrt(d * math.log(1 / delta)) * math.log(1 / gamma) ** 0.25 / (n * eps)
    assert corrected == pytest.approx(1 / (T * max(a, b)), rel=1e-14)  # ≈ 1.53e-3 here
    printed = theorem12_step_size(**args, as_printed=True)
    assert printed == pytest.approx(max(a, b) / T, rel=1e-14)  # the paper's typo
    assert printed != pytest.approx(corrected, rel=0.1)
    assert printed / corrected == pytest.approx(max(a, b) ** 2, rel=1e-12)
    # only the corrected step honours the paper's standing assumption T eta > 1
    assert T * corrected > 1.0 > T * printed
    schedule = recommended_schedule(
        alpha=1.0, perturbation="gradient", bounded=True, failure_probability=gamma, **BASE
    )
    assert schedule.eta == corrected and schedule.theorem == 12
    assert "erratum" in schedule.explanation


def test_theorem9_and_10_step_sizes():
    gamma = 0.05
    for alpha in (0.0, 0.25, 0.7):
        T = T_unbounded(1000, alpha)
        s9 = recommended_schedule(alpha=alpha, bounded=False, **BASE)
        assert s9.eta == pytest.approx(eta_thm9(1000, T, alpha, gamma), rel=1e-14)
        assert s9.horizon == pytest.approx((1000 / math.log(1 / gamma)) ** (1 / (3 + alpha)))
        assert theorem9_step_size(n=1000, steps=T, alpha=alpha, failure_probability=gamma) == (
            s9.eta
        )
        T = T_bounded(1000, alpha)
        s10 = recommended_schedule(alpha=alpha, bounded=True, **BASE)
        assert s10.eta == pytest.approx(eta_thm10(1000, T, 50, 1.0, 1e-6, gamma), rel=1e-14)
        assert theorem10_step_size(steps=T, failure_probability=gamma, **BASE) == s10.eta
    # epsilon and d enter Theorem 10's eta through b only
    small_eps = recommended_schedule(alpha=1.0, bounded=True, **{**BASE, "epsilon": 0.01})
    assert small_eps.eta < recommended_schedule(alpha=1.0, bounded=True, **BASE).eta


def test_schedule_eta_is_admissible_for_theorem7():
    s = recommended_schedule(alpha=1.0, bounded=True, L=2.0, **BASE)
    assert not s.eta_clipped and s.eta < 0.5
    # the schedule feeds straight into the stability bound (squared hinge, ||x|| <= 1, R = 1)
    value = uas_bound(
        alpha=1.0,
        L=2.0,
        M=2.0,
        radius=1.0,
        eta=s.eta,
        steps=s.steps,
        n=s.n,
        failure_probability=s.delta / 2,
    )
    assert 0.0 < value <= 2.0


def test_eta_clipped_below_one_over_L():
    args = {"n": 10, "d": 1, "epsilon": 10.0, "delta": 1e-3}
    free = recommended_schedule(alpha=1.0, bounded=True, **args)
    assert free.eta == pytest.approx(eta_thm10(10, 10, 1, 10.0, 1e-3, 0.05), rel=1e-14)
    assert free.eta > 1 / 50  # ~0.040
    clipped = recommended_schedule(alpha=1.0, bounded=True, L=50.0, **args)
    assert clipped.eta_clipped and clipped.eta == pytest.approx(0.99 / 50, rel=1e-14)
    assert clipped.eta_theory == free.eta
    assert "clipped" in clipped.explanation
    assert "not checked" in free.explanation  # no L given


def test_hidden_constants():
    s = recommended_schedule(alpha=0.25, bounded=True, steps_scale=2.0, eta_scale=0.5, **BASE)
    assert s.steps == math.ceil(2 * 1000**1.4)
    assert s.eta == pytest.approx(0.5 * eta_thm10(1000, s.steps, 50, 1.0, 1e-6, 0.05))


# -- max_steps -------------------------------------------------------------------------------


def test_max_steps_caps_T_and_says_what_it_costs():
    s = recommended_schedule(alpha=0.0, bounded=True, max_steps=10_000, **BASE)
    assert s.steps_theory == 1_000_000 and s.steps == 10_000 and s.steps_capped
    # eta from the theorem's formula at the T actually run: T eta is the theorem's
    assert s.eta == pytest.approx(eta_thm10(1000, 10_000, 50, 1.0, 1e-6, 0.05), rel=1e-14)
    full = recommended_schedule(alpha=0.0, bounded=True, **BASE)
    assert s.horizon == pytest.approx(full.horizon, rel=1e-12)
    assert "privacy is unaffected" in s.explanation
    assert "no longer applies" in s.explanation
    loose = recommended_schedule(alpha=1.0, bounded=True, max_steps=10**9, **BASE)
    assert loose.steps == 1000 and not loose.steps_capped


# -- gamma range (utility only) ----------------------------------------------------------------


def test_gamma_range_theorems_9_and_10():
    ok = recommended_schedule(alpha=1.0, bounded=True, **BASE)  # 4 e^{-50/8} = 0.0077 < 0.05
    assert ok.gamma_range_valid
    small_d = recommended_schedule(alpha=1.0, bounded=False, **{**BASE, "d": 5})
    assert not small_d.gamma_range_valid  # 4 e^{-5/8} = 2.14
    assert "never privacy" in small_d.gamma_range_note
    big_delta = recommended_schedule(alpha=1.0, bounded=True, **{**BASE, "d": 200, "delta": 0.02})
    assert not big_delta.gamma_range_valid  # 4 delta = 0.08 > 0.05
    assert recommended_schedule(
        alpha=1.0, bounded=True, failure_probability=0.1, **{**BASE, "d": 200, "delta": 0.02}
    ).gamma_range_valid


def test_gamma_range_theorem_12():
    ok = recommended_schedule(alpha=1.0, perturbation="gradient", bounded=True, **BASE)
    assert ok.gamma_range_valid  # 18 e^{-1000 * 50 / 8}
    tiny = recommended_schedule(
        alpha=1.0, perturbation="gradient", bounded=True, n=2, d=1, epsilon=1.0, delta=1e-3
    )
    assert tiny.steps == 2 and not tiny.gamma_range_valid  # 18 e^{-1/4} = 14 > 0.05
    assert "18 e^(-Td/8)" in tiny.gamma_range_note


# -- errors ------------------------------------------------------------------------------------


def test_unknown_perturbation():
    with pytest.raises(ValueError, match="Unknown perturbation"):
        recommended_schedule(alpha=0.5, perturbation="input", bounded=True, **BASE)


def test_gradient_perturbation_refuses_unbounded_domain():
    with pytest.raises(ValueError, match="bounded domain"):
        recommended_schedule(alpha=0.0, perturbation="gradient", bounded=False, **BASE)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"n": 1}, "n"),
        ({"d": 0}, "d"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"failure_probability": 1.0}, "failure_probability"),
        ({"alpha": 1.2}, "alpha"),
        ({"bounded": "yes"}, "bounded"),
        ({"max_steps": 0}, "max_steps"),
        ({"L": -1.0}, "L"),
        ({"steps_scale": 0.0}, "steps_scale"),
    ],
)
def test_validation(overrides, match):
    args = {"alpha": 0.5, "bounded": True, **BASE, **overrides}
    with pytest.raises(ValueError, match=match):
        recommended_schedule(**args)


def test_schedule_is_frozen():
    s = recommended_schedule(alpha=0.5, bounded=True, **BASE)
    assert isinstance(s, Schedule)
    with pytest.raises(AttributeError):
        s.steps = 3  # type: ignore[misc]
