"""Issue 12 item 3: per-record diagnostics are not released by default.

DP-FTRL-Σ takes one example per step, so ``fit_trace_.clip_fraction[t]`` says whether the record
of step t was clipped. The audit below runs ``DPLinearRegression(method="ftrl-sigma")`` at a
claimed epsilon of 1 on neighbouring datasets that differ in the last row: small rows (never
clipped) and, in D, a canary at a corner of the box with the opposite target, clipped whenever
the noisy model leans towards it at its step. The method reads the rows in a secret order, so
the score of the released flags is their sum, the number of clipped steps (0 without the
canary, 1 with it about half of the time). By default the estimator exposes no clip fraction
and the auditor, reading the released model only, stays at or below the claim; the planted bug
(``diagnostics=True``, which publishes the per-step clip flags) is caught well above it.
"""

import warnings

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.audit import audit_scores

N, D = 128, 2
CANARY = N - 1
RUNS = 300  # per side; half pick the threshold, half give the Clopper-Pearson bound


def _data():
    rng = np.random.default_rng(0)
    # small rows: their gradients stay far below the clip threshold whatever the noise does
    X = rng.uniform(-0.2, 0.2, size=(N, D))
    y = X @ np.array([0.5, -0.5]) + 0.01 * rng.normal(size=N)
    return X, y


def _fit(with_canary: bool, seed: int, diagnostics: bool) -> DPLinearRegression:
    X, y = _data()
    if with_canary:
        # a corner of the box with the opposite target: clipped (residual > the public
        # threshold 1) whenever the noisy model leans towards (1, -1) at its step
        X[CANARY], y[CANARY] = (1.0, -1.0), -1.0
    model = DPLinearRegression(
        epsilon=1.0,
        delta=1e-5,
        method="ftrl-sigma",
        feature_bounds=(-1, 1),
        target_bounds=(-1, 1),
        random_state=seed,
        diagnostics=diagnostics,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateDiagnosticsWarning)
        return model.fit(X, y)


def _scores(diagnostics: bool) -> tuple[list[float], list[float]]:
    def score(model: DPLinearRegression) -> float:
        if model.fit_trace_.clip_fraction is not None:  # what a released trace would show
            # the number of clipped steps: DP-FTRL-Σ reads the rows in a secret order, so
            # the canary's step is unknown, but its clipping adds one to the count
            return float(np.sum(model.fit_trace_.clip_fraction))
        return float(model.coef_ @ np.array([1.0, -1.0]))  # the model, on the canary

    with_canary = [score(_fit(True, seed, diagnostics)) for seed in range(RUNS)]
    without = [score(_fit(False, 10_000 + seed, diagnostics)) for seed in range(RUNS)]
    return with_canary, without


@pytest.mark.slow
def test_default_fit_releases_no_clip_flags_and_passes_the_audit():
    with_canary, without = _scores(diagnostics=False)
    result = audit_scores(with_canary, without, delta=1e-5)
    assert result.epsilon_lower_bound <= 1.0


@pytest.mark.slow
def test_planted_bug_publishing_clip_flags_is_caught():
    # 30 + 30 runs: 16 of 30 with the canary had one clipped step, none of 30 without. The
    # bound can only exceed 1 if the released clip flags separate the neighbours far beyond
    # what epsilon = 1 allows (with FPR 0 of 150 and TPR about 0.5, about 2.8).
    with_canary, without = _scores(diagnostics=True)
    result = audit_scores(with_canary, without, delta=1e-5)
    assert result.epsilon_lower_bound > 1.0


@pytest.mark.parametrize("method", ["dpsgd", "ambssgd", "ftrl-sigma"])  # ssgd: algorithm test
def test_diagnostics_are_absent_by_default_and_stated_when_asked(method):
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(40_000, 2))
    y = X @ np.array([1.0, -1.0]) + 0.1 * rng.normal(size=40_000)
    kwargs = dict(
        epsilon=1.0, method=method, feature_bounds=(-1, 1), target_bounds=(-3, 3), random_state=0
    )
    model = DPLinearRegression(**kwargs).fit(X, y)
    assert model.fit_trace_.clip_fraction is None
    assert "clip_fraction" not in model.fit_trace_.to_dict()
    assert "clipped_fraction" not in model.fit_info_
    assert model.privacy_report_.non_private_releases == ()
    with pytest.warns(NonPrivateDiagnosticsWarning, match="clip_fraction"):
        loud = DPLinearRegression(**kwargs, diagnostics=True).fit(X, y)
    assert loud.fit_trace_.clip_fraction is not None
    released = loud.privacy_report_.non_private_releases
    assert any("clip_fraction" in text for text in released)
    assert "WITHOUT privacy" in str(loud.privacy_report_)
    assert loud.privacy_report_.to_dict()["non_private_releases"] == list(released)
