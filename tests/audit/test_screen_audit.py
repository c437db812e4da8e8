"""Issue 31: black-box audit of the binary-column screen of the bounds-free default (the count
release that gives one-hot columns their range), with its planted bug."""

from __future__ import annotations

import pytest

from privopt.audit.pipeline_bounds import audit_binary_screen, screen_audit_data


def test_screen_audit_pair_differs_in_one_count():
    X, X_neighbour, _ = screen_audit_data(101, seed=0)
    outside = ((X[:, 0] != 0) & (X[:, 0] != 1)).sum()
    outside_neighbour = ((X_neighbour[:, 0] != 0) & (X_neighbour[:, 0] != 1)).sum()
    assert (outside, outside_neighbour) == (1, 0)
    assert (X != X_neighbour).sum() == 1


def test_screen_audit_passes_and_catches_counts_released_without_noise():
    """epsilon = 1, 3,001 rows, 40 fits a side (seed 0): correct 0.00, planted 1.60 against
    the claim 1.00."""
    claimed, correct = audit_binary_screen(runs=40)
    assert claimed <= 1.0 * (1 + 1e-9)
    assert correct.epsilon_lower_bound <= claimed
    claimed_bug, broken = audit_binary_screen(runs=40, planted=True)
    assert claimed_bug == pytest.approx(claimed, rel=1e-6)
    assert broken.epsilon_lower_bound > claimed_bug


def test_screen_audit_refuses_a_fit_without_a_screen():
    with pytest.raises(RuntimeError, match="released no binary-column screen"):
        audit_binary_screen(epsilon=0.3, runs=8)


@pytest.mark.slow
def test_screen_audit_with_more_fits():
    claimed, correct = audit_binary_screen(runs=400, seed=1)
    assert correct.epsilon_lower_bound <= claimed


def test_unit_count_audit_passes_and_catches_counts_released_without_noise():
    """The screen's counts of rows outside [0, 1] (the fallback range of a dropped feature):
    a pair whose feature-0 value is 0.5 against 2, on 3,001 rows. Measured 0.00 and, planted,
    1.60 against the claim 1.00."""
    X, X_neighbour, _ = screen_audit_data(101, seed=0, count="unit")
    assert ((X[:, 0] < 0) | (X[:, 0] > 1)).sum() == 0
    assert ((X_neighbour[:, 0] < 0) | (X_neighbour[:, 0] > 1)).sum() == 1
    claimed, correct = audit_binary_screen(runs=40, count="unit")
    assert correct.epsilon_lower_bound <= claimed <= 1.0 * (1 + 1e-9)
    claimed_bug, broken = audit_binary_screen(runs=40, planted=True, count="unit")
    assert broken.epsilon_lower_bound > claimed_bug


def test_unit_count_audit_refuses_a_fit_without_unit_counts():
    with pytest.raises(RuntimeError, match="with \\[0, 1\\] counts"):
        audit_binary_screen(rows=1001, runs=8, count="unit")  # too few for the [0, 1] counts
