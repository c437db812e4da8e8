"""Empirical privacy auditing: lower bounds on epsilon from what a mechanism actually releases.

An (epsilon, delta)-DP mechanism bounds every membership test: for neighbouring datasets D (with
a canary) and D' (without), any test's true- and false-positive rates satisfy
``TPR <= e^epsilon FPR + delta`` (and the same for the complements). A lower bound above the
claimed epsilon is a privacy bug (up to the confidence level); a bound below it says nothing
about how tight the claim is.

* :mod:`~privopt.audit.blackbox`: many runs with and without one canary, exact Clopper-Pearson
  bounds, threshold chosen on held-out runs.
* :mod:`~privopt.audit.one_run`: one run with m canaries each included by a fair coin
  (Steinke, Nasr & Jagielski 2023; the f-DP refinement of Mahloujifar et al. 2024).
* :mod:`~privopt.audit.canaries`: white-box gradient canaries for the training core.
* :mod:`~privopt.audit.input_one_run`: one-run input canaries for every estimator method
  (many canaries per fit, fits pooled), and the planted bug of the controls
  (:func:`~privopt.audit.input_one_run.scaled_noise`).
* :mod:`~privopt.audit.input_canaries`: black-box input canaries for the estimators, one per
  fit, over many fits.
* :mod:`~privopt.audit.registry`: what ``privopt audit`` audits, and the selftest.
"""

from privopt.audit.blackbox import AuditResult, audit_scores, epsilon_lower_bound
from privopt.audit.one_run import (
    OneRunResult,
    audit_one_run,
    epsilon_one_run,
    fdp_rejects,
    one_run_p_value,
)

__all__ = [
    "AuditResult",
    "OneRunResult",
    "audit_one_run",
    "audit_scores",
    "epsilon_lower_bound",
    "epsilon_one_run",
    "fdp_rejects",
    "one_run_p_value",
]
