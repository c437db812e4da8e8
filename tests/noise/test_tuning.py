"""tune_nu: the regression values of docs/theory/correlated-noise.md#catalogue and §6.4 item 10."""

import pytest

from privopt.noise import Participation, nu_dpftrl, tune_nu


def test_tune_nu_multi_participation_geometry():
    # CIFAR-10 geometry: n = 2000 steps, b = 100, k = 20
    # (docs/theory/correlated-noise.md#catalogue).
    choice = tune_nu(2000, min_sep=100, participations=20)
    pattern = Participation.multiple(100, 20)
    assert 2.5e-3 < choice.nu < 5e-3  # notes: nu* about 3.5e-3
    assert choice.loss == pytest.approx(9.94e5, rel=2e-3)
    assert nu_dpftrl(0.0).prefix_sum_error(2000, pattern) == pytest.approx(1.87e6, rel=2e-3)
    assert nu_dpftrl(1.0).prefix_sum_error(2000, pattern) == pytest.approx(4.0e7, rel=2e-3)
    assert choice.loss < nu_dpftrl(0.0).prefix_sum_error(2000, pattern)


def test_tune_nu_single_participation():
    choice = tune_nu(2000)
    assert 2.5e-4 < choice.nu < 5e-4  # notes: nu* about 3.5e-4
    assert choice.loss <= nu_dpftrl(0.0).prefix_sum_error(2000)
    assert choice.loss <= nu_dpftrl(1.0).prefix_sum_error(2000)


def test_tune_nu_validation():
    with pytest.raises(ValueError, match="both"):
        tune_nu(100, min_sep=5)
    with pytest.raises(ValueError, match="steps"):
        tune_nu(0)
