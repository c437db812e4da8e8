"""Per-example l2 clipping (docs/theory/linear-regression-adaptive-clipping.md#data-model, §4.5 item
1 and §8 "Tests that verify correctness").

``clip_zeta(v) = v * min(1, zeta / ||v||)``: the clipped norm never exceeds zeta (even in floating
point), rows below the threshold are untouched, directions are preserved, zero rows stay zero,
non-finite input is refused and the input is never modified. The replace-one sensitivity of the
mean of b clipped rows is 2 zeta / b, the quantity DP-AMBSSGD's noise is calibrated to.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privopt.clipping import clip_factors, clip_rows

# Magnitudes of entries for the property tests: zero, ordinary, huge (squares overflow float64
# above ~1.3e154) and tiny (squares underflow below ~1.5e-154, subnormals included), mixed
# freely within a row. Entries stay below 1e300 so that a row norm (<= sqrt(6) 1e300) is finite.
ORDINARY = st.floats(min_value=1e-150, max_value=1e150)
HUGE = st.floats(min_value=1e150, max_value=1e300)
TINY = st.floats(min_value=5e-324, max_value=1e-150, allow_subnormal=True)
MAGNITUDE = st.one_of(st.just(0.0), ORDINARY, HUGE, TINY)
ENTRY = st.builds(lambda m, neg: -m if neg else m, MAGNITUDE, st.booleans())
THRESHOLD = st.one_of(st.just(0.0), ORDINARY, HUGE, TINY)
# A clipped row is rows * factor, one rounding per entry; when the products are subnormal that
# rounding is absolute (spacing 4.9e-324), so bounds get a few subnormal ulps of absolute slack.
SUBNORMAL_SLACK = 4 * 5e-324


@st.composite
def matrices(draw):
    n = draw(st.integers(1, 8))
    d = draw(st.integers(1, 6))
    return draw(arrays(np.float64, (n, d), elements=ENTRY))


def exact_norms(rows: np.ndarray) -> np.ndarray:
    """Row norms computed after rescaling by the largest magnitude, immune to under/overflow."""
    scale = np.max(np.abs(rows), axis=1, keepdims=True)
    safe = np.where(scale > 0, scale, 1.0)
    return (np.linalg.norm(rows / safe, axis=1) * safe[:, 0]).astype(float)


# -- the norm bound ----------------------------------------------------------------------------


@given(matrices(), THRESHOLD)
def test_clipped_norm_never_exceeds_threshold(rows, threshold):
    clipped = clip_rows(rows, threshold)
    norms = exact_norms(clipped)
    # The implementation guarantees factor * (its computed norm) <= threshold; the norm of the
    # product row differs from that by the rounding of the products and of the norm (a few ulps),
    # hence the 1e-12 relative slack of
    # docs/theory/linear-regression-adaptive-clipping.md#guarantees item 1.
    assert np.all(norms <= threshold * (1.0 + 1e-12) + SUBNORMAL_SLACK)


@given(
    arrays(
        np.float64,
        st.integers(1, 50),
        elements=st.floats(min_value=0.0, max_value=1e300, allow_nan=False),
    ),
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False),
)
def test_clip_factors_bound_is_exact_in_floating_point(norms, threshold):
    factors = clip_factors(norms, threshold)
    assert np.all(factors >= 0.0) and np.all(factors <= 1.0)
    # clip_factors guarantees factor * norm <= threshold exactly (the product as computed).
    assert np.all(factors * norms <= threshold)


def test_threshold_zero_maps_everything_to_zero():
    rows = np.array([[1.0, -2.0], [0.0, 0.0], [1e100, 3.0], [5e-324, 0.0]])
    assert np.array_equal(clip_rows(rows, 0.0), np.zeros_like(rows))
    norms = np.array([0.0, 1.0, 1e300, 5e-324])
    factors = clip_factors(norms, 0.0)
    # A zero norm may keep factor 1 (0 * 1 = 0); every positive norm gets factor 0.
    assert np.all(factors * norms == 0.0) and np.all(factors[1:] == 0.0)


def test_rows_clipped_to_exactly_the_threshold():
    rows = np.array([[3.0, 4.0], [0.0, -10.0]])
    clipped = clip_rows(rows, 1.0)
    np.testing.assert_allclose(clipped, [[0.6, 0.8], [0.0, -1.0]], rtol=1e-15)


# -- identity below the threshold, direction, zeros ----------------------------------------------


@given(matrices(), st.floats(min_value=1.0, max_value=1e6))
def test_identity_below_threshold(rows, inflate):
    # A threshold above every row norm by more than rounding (relative 1e-9, plus a few subnormal
    # ulps for subnormal norms): every row is returned bit-for-bit.
    threshold = (float(exact_norms(rows).max()) * (1.0 + 1e-9) + SUBNORMAL_SLACK) * inflate
    assert np.array_equal(clip_rows(rows, threshold), rows)
    assert np.all(clip_factors(exact_norms(rows), threshold) == 1.0)


@given(matrices(), THRESHOLD)
def test_direction_preserved(rows, threshold):
    clipped = clip_rows(rows, threshold)
    # Clipping multiplies each row by one scalar in [0, 1]: never flipped, never grown ...
    assert np.all(np.sign(clipped) * np.sign(rows) >= 0)
    assert np.all(np.abs(clipped) <= np.abs(rows))
    # ... and the same scalar for every entry: entry-wise ratios agree to rounding (two roundings,
    # clipped = fl(row * c) and fl(clipped / row), < 1e-15 relative) wherever the clipped entry is
    # a normal float (subnormal results carry absolute, not relative, rounding).
    normal = (np.abs(clipped) >= np.finfo(float).tiny) & (rows != 0)
    for i in range(rows.shape[0]):
        ratios = clipped[i, normal[i]] / rows[i, normal[i]]
        if ratios.size:
            np.testing.assert_allclose(ratios, ratios[0], rtol=1e-15, atol=0)
            assert 0.0 < ratios[0] <= 1.0


def test_zero_rows_stay_zero():
    rows = np.zeros((3, 4))
    for threshold in (0.0, 1e-300, 1.0, 1e300):
        out = clip_rows(rows, threshold)
        assert np.array_equal(out, rows) and np.all(np.isfinite(out))
    assert np.array_equal(clip_factors(np.zeros(3), 1.0), np.ones(3))


def test_single_vector():
    # A 1-D input is one row (clip_rows uses axis=-1); this case needs no one-ulp nudge.
    np.testing.assert_allclose(clip_rows(np.array([3.0, 4.0]), 2.5), [1.5, 2.0], rtol=1e-15)


# -- refusals and side effects -----------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rows_raise(bad):
    rows = np.ones((3, 2))
    rows[1, 0] = bad
    with pytest.raises(ValueError, match="non-finite"):
        clip_rows(rows, 1.0)
    with pytest.raises(ValueError, match="non-finite"):
        clip_factors(np.array([1.0, abs(bad)]), 1.0)


@pytest.mark.parametrize("threshold", [-1.0, np.nan, np.inf])
def test_bad_threshold_raises(threshold):
    with pytest.raises(ValueError, match="threshold"):
        clip_rows(np.ones((2, 2)), threshold)


@given(matrices(), THRESHOLD)
def test_input_not_modified(rows, threshold):
    before = rows.copy()
    norms = exact_norms(rows)
    norms_before = norms.copy()
    out = clip_rows(rows, threshold)
    clip_factors(norms, threshold)
    assert np.array_equal(rows, before) and np.array_equal(norms, norms_before)
    assert out is not rows


# -- replace-one sensitivity -------------------------------------------------------------------


def _mean_clipped(rows, zeta):
    return clip_rows(rows, zeta).mean(axis=0)


@pytest.mark.parametrize("seed", range(20))
def test_replace_one_sensitivity_of_clipped_mean(seed):
    """||mean(clip(B)) - mean(clip(B'))|| <= 2 zeta / b for B, B' differing in one row."""
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 64))
    d = int(rng.integers(1, 16))
    zeta = float(10.0 ** rng.uniform(-3, 3))
    # Rows on all scales, so that some are clipped and some are not.
    batch = rng.normal(size=(b, d)) * 10.0 ** rng.uniform(-4, 4, size=(b, 1)) * zeta
    base = _mean_clipped(batch, zeta)
    bound = 2.0 * zeta / b
    worst = 0.0
    for i in range(b):
        clipped_i = clip_rows(batch[i : i + 1], zeta)[0]
        norm_i = np.linalg.norm(clipped_i)
        direction = -clipped_i / norm_i if norm_i > 0 else np.eye(d)[0]
        # Adversarial replacements: the opposite direction at huge norm (the worst case, distance
        # ||clip(x_i)|| + zeta), plus random rows of assorted scales.
        candidates = [direction * 1e6 * zeta] + [
            rng.normal(size=d) * zeta * s for s in (1e-3, 1.0, 1e3)
        ]
        for replacement in candidates:
            other = batch.copy()
            other[i] = replacement
            gap = float(np.linalg.norm(base - _mean_clipped(other, zeta)))
            worst = max(worst, gap)
            assert gap <= bound * (1.0 + 1e-12)  # rounding of a mean of b terms
    # The bound is attained (up to rounding) when a clipped row is replaced by its opposite.
    assert worst >= bound * 0.5 or np.all(np.linalg.norm(batch, axis=1) < zeta / 2)


def test_replace_one_sensitivity_is_tight():
    zeta, b = 1.5, 4
    batch = np.array([[10.0, 0.0], [0.1, 0.2], [0.0, 0.0], [-1.0, 1.0]])
    other = batch.copy()
    other[0] = [-1e9, 0.0]
    gap = np.linalg.norm(_mean_clipped(batch, zeta) - _mean_clipped(other, zeta))
    assert gap == pytest.approx(2.0 * zeta / b, rel=1e-15)


# -- extreme magnitudes (regressions: these once under/overflowed or raised) --------------------


def test_huge_finite_rows_are_clipped():
    # Squared norms overflow float64; the rows are finite and must be clipped, not refused.
    rows = np.array([[1e200, -1e200], [1e155, 0.0], [1e300, 1e300]])
    clipped = clip_rows(rows, 1.0)
    np.testing.assert_allclose(exact_norms(clipped), 1.0, rtol=1e-15)
    assert np.all(exact_norms(clipped) <= 1.0 * (1 + 1e-12))
    np.testing.assert_allclose(clipped[0], [math.sqrt(0.5), -math.sqrt(0.5)], rtol=1e-15)


def test_tiny_rows_respect_the_bound():
    # Squared norms underflow: [1e-160, 1e-160] with threshold 1e-161 once came back with norm
    # 1.0000056e-161, and [1e-170, 1e-170] unclipped (computed norm 0).
    for v in (1e-160, 1e-170, 1e-200):
        rows = np.array([[v, v]])
        threshold = v / 10.0
        norm = exact_norms(clip_rows(rows, threshold))[0]
        assert norm <= threshold * (1 + 1e-12)
        assert norm == pytest.approx(threshold, rel=1e-12)


def test_identity_below_subnormal_threshold():
    # A subnormal norm below a subnormal threshold is not clipped (factor exactly 1).
    assert clip_factors(np.array([1e-323]), 1e-322)[0] == 1.0
    rows = np.array([[5e-324, 0.0]])
    assert np.array_equal(clip_rows(rows, 1e-322), rows)


# Found by the sensitivity test: for this (norm, threshold), (threshold / norm) * norm > threshold
# in float64, so clip_factors has to step the factor down below threshold / norm.
NUDGE_NORM, NUDGE_THRESHOLD = 9.406391643606247, 0.35779519670907023


def test_nudge_branch_on_2d_input():
    assert (NUDGE_THRESHOLD / NUDGE_NORM) * NUDGE_NORM > NUDGE_THRESHOLD  # the branch is needed
    factor = clip_factors(np.array([NUDGE_NORM]), NUDGE_THRESHOLD)
    assert factor[0] * NUDGE_NORM <= NUDGE_THRESHOLD
    out = clip_rows(np.array([[NUDGE_NORM, 0.0]]), NUDGE_THRESHOLD)
    assert np.linalg.norm(out) <= NUDGE_THRESHOLD


def test_nudge_branch_on_single_vector():
    # A 0-d norm / a 1-D row once raised TypeError when the step-down branch was taken.
    out = clip_rows(np.array([NUDGE_NORM, 0.0]), NUDGE_THRESHOLD)
    assert out.shape == (2,)
    assert np.linalg.norm(out) <= NUDGE_THRESHOLD
    factor = clip_factors(np.float64(NUDGE_NORM), NUDGE_THRESHOLD)
    assert np.all(np.asarray(factor) * NUDGE_NORM <= NUDGE_THRESHOLD)
