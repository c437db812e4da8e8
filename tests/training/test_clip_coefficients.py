"""The one-row path of ``clip_coefficients`` (DP-FTRL-Σ's steps) equals the vector path bit for
bit, never exceeds the clip in floating point, and refuses what the vector path refuses."""

import numpy as np
import pytest

from privopt.training.gradients import clip_coefficients


def test_one_row_path_equals_the_vector_path_bit_for_bit():
    rng = np.random.default_rng(0)
    residuals = rng.standard_cauchy(4000) * 10.0 ** rng.uniform(-8, 8, 4000)
    norms = 10.0 ** rng.uniform(-8, 8, 4000)
    clip = 0.37
    c_all, clipped_all = clip_coefficients(residuals, norms, clip)
    for i in range(residuals.size):
        c, clipped = clip_coefficients(residuals[i : i + 1], norms[i : i + 1], clip)
        assert c.tobytes() == c_all[i : i + 1].tobytes()
        assert bool(clipped[0]) == bool(clipped_all[i])
        assert abs(c[0]) * norms[i] <= clip
    assert 0.3 < clipped_all.mean() < 0.9  # both branches exercised


@pytest.mark.parametrize(
    ("residual", "norm", "clip"), [(np.nan, 1.0, 1.0), (1.0, np.inf, 1.0), (1.0, 1.0, -1.0)]
)
def test_one_row_path_refuses_non_finite_values_and_negative_clips(residual, norm, clip):
    with pytest.raises(ValueError):
        clip_coefficients(np.array([residual]), np.array([norm]), clip)
    with pytest.raises(ValueError):
        clip_coefficients(np.array([residual, 0.5]), np.array([norm, 1.0]), clip)
