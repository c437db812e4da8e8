"""The black-box auditor: exact Clopper-Pearson arithmetic, validity on a correct mechanism, power
on a broken one."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from privopt.accounting import gdp_epsilon
from privopt.audit import audit_scores, epsilon_lower_bound


def test_clopper_pearson_bounds_are_exact_binomial_tails():
    # log(TPR_lo / FPR_hi) with each one-sided bound at level 0.025: check the tails directly.
    tp, n, fp = 900, 1000, 100
    bound = epsilon_lower_bound(tp, n, fp, n, confidence=0.95)
    # (the complement bound log(TNR_lo / FNR_hi) is the same here by symmetry); recover TPR_lo
    # and FPR_hi from their defining tail equations
    from scipy.optimize import brentq

    tpr_lo = brentq(lambda p: binom.sf(tp - 1, n, p) - 0.025, 1e-9, 1 - 1e-9)
    fpr_hi = brentq(lambda p: binom.cdf(fp, n, p) - 0.025, 1e-9, 1 - 1e-9)
    assert bound == pytest.approx(math.log(tpr_lo / fpr_hi), rel=1e-6)


def test_no_separation_gives_zero_and_delta_lowers_the_bound():
    assert epsilon_lower_bound(500, 1000, 500, 1000) == 0.0
    assert epsilon_lower_bound(990, 1000, 10, 1000, delta=0.1) < epsilon_lower_bound(
        990, 1000, 10, 1000
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [((5, 4, 0, 4), "true_positives"), ((1, 4, 0, 4, 2.0), "delta")],
)
def test_bad_counts_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        if len(args) == 5:
            epsilon_lower_bound(*args[:4], delta=args[4])
        else:
            epsilon_lower_bound(*args)


def test_audit_accepts_a_correct_gaussian_and_catches_one_with_a_third_of_the_noise():
    # A Gaussian mechanism with sensitivity 1 calibrated to epsilon = 1 at delta = 1e-5 is
    # mu-GDP with mu ~ 0.268; the canary shifts the release by mu noise stds.
    delta = 1e-5
    mu = 1.0
    while gdp_epsilon(mu, delta) > 1.0:
        mu *= 0.99
    rng = np.random.default_rng(0)
    n = 20000
    correct = audit_scores(rng.normal(mu, 1, n), rng.normal(0, 1, n), delta=delta)
    assert correct.epsilon_lower_bound <= 1.0
    broken = audit_scores(rng.normal(3 * mu, 1, n), rng.normal(0, 1, n), delta=delta)
    # noise divided by 3: mu -> 3 mu, true epsilon 3.4; the auditor must see above 1.
    assert broken.epsilon_lower_bound > 1.0
