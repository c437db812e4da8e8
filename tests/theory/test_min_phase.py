"""Minimum-phase factorisation (docs/theory/correlated-noise.md#lower-bound-correlations): recovers
beta* and yields a causal inverse."""

import numpy as np
import pytest

from privopt.noise import custom, inverse_coefficients, nu_beta
from privopt.theory import min_phase_beta


@pytest.mark.parametrize("eta", [0.01, 0.05, 0.3])
def test_recovers_beta_star_from_its_spectrum(eta):
    beta = min_phase_beta(lambda w: np.abs(1 - eta - np.exp(1j * w)), 300)
    np.testing.assert_allclose(beta, nu_beta(eta, 300), atol=1e-6)


def test_factor_matches_the_target_spectrum_and_is_invertible():
    target = lambda w: 1.0 + 0.5 * np.cos(w) + 0.2 * np.cos(2 * w)  # noqa: E731 (positive)
    beta = min_phase_beta(target, 4096, grid_size=2**16)
    omega = np.linspace(0, 2 * np.pi, 257)
    response = np.exp(-1j * np.outer(omega, np.arange(beta.size))) @ beta
    ratio = np.abs(response) ** 2 / target(omega)
    np.testing.assert_allclose(ratio / ratio[0], 1.0, atol=1e-6)  # |B|^2 proportional to S
    c = inverse_coefficients(beta[:200], 2000)  # minimum phase: the inverse decays
    assert np.all(np.isfinite(c)) and abs(c[-1]) < 1e-6
    assert custom(beta[:200]).sensitivity(2000) < np.inf


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((lambda w: np.cos(w), 10), "positive"),
        ((np.ones(5), 2), "spectrum values"),
        ((lambda w: np.ones_like(w), 10**7), "n_coefficients"),
    ],
)
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        min_phase_beta(*args, grid_size=1024)
