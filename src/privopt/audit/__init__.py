"""Empirical privacy auditing: lower bounds on epsilon from what a mechanism actually releases.

An (epsilon, delta)-DP mechanism bounds every membership test: for neighbouring datasets D (with
a canary) and D' (without), any test's true- and false-positive rates satisfy
``TPR <= e^epsilon FPR + delta`` (and the same for the complements). Running the mechanism many
times on both datasets and bounding the two rates with exact Clopper-Pearson intervals turns an
observed test into a lower bound on the epsilon the mechanism really has, at a stated confidence.
A lower bound above the claimed epsilon is a privacy bug (up to the confidence level).
"""

from privopt.audit.blackbox import AuditResult, audit_scores, epsilon_lower_bound

__all__ = ["AuditResult", "audit_scores", "epsilon_lower_bound"]
