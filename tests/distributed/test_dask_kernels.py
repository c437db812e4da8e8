"""The fused per-partition kernels and the fast Parquet reader of the Dask backend (issue 19):
each equals the code it replaces (in-memory transform and clip, the table loader) on data built
to exercise every branch. Tolerances: the kernels only reassociate float64 sums of at most a few
thousand terms of size <= 100, so 1e-12 relative is ~1000x the rounding; the readers copy
values and must be exact."""

import math

import numpy as np
import pandas as pd
import pytest

from privopt.clipping import row_norms
from privopt.datasets.loaders import load_table
from privopt.distributed import statistics as stats
from privopt.distributed.files import _read_file, _take_file, read_directory
from privopt.releases.preprocess import LinearBounds

RTOL = 1e-12


def _data(n=3_001, d=4, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 3.0, 0.3, 10.0] + [0.5, -1.0, 0.0, 2.0]
    y = X @ np.array([1.0, -2.0, 0.5, 0.1]) + rng.normal(size=n) * 3
    return X, y


BOUNDS = {
    "plain": LinearBounds(np.zeros(4), 0.0, 4.0, 5.0, 1.0, "public"),
    "scaled-boxed-masked": LinearBounds(
        np.array([0.5, -1.0, 0.0, 2.0]),
        0.3,
        2.5,
        4.0,
        2.0,
        "private",
        x_scale=np.array([1.0, 3.0, 0.3, np.inf]),
        x_box=1.5,
        box_mask=np.array([True, True, True, False]),
    ),
    "boxed-no-intercept": LinearBounds(
        np.zeros(4), 0.0, 3.0, 2.0, 0.0, "public", x_scale=np.full(4, 2.0), x_box=1.0
    ),
}


def _reference(X, y, offset, excluded, bounds, row_bound, target_bound, norms):
    Z, t = stats._clipped(
        *stats.main_rows((X, y), offset, excluded, bounds), row_bound, target_bound, norms
    )
    return Z.T @ Z, Z.T @ t, Z


@pytest.mark.parametrize("name", sorted(BOUNDS))
@pytest.mark.parametrize("norms", ["linalg", "row"])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_fused_gram_equals_transform_then_clip(monkeypatch, name, norms, layout):
    monkeypatch.setattr(stats, "BLOCK_ROWS", 256)  # 12 blocks, the last one partial
    X, y = _data()
    X = np.asarray(X, order=layout)
    bounds = BOUNDS[name]
    offset = 1_000
    excluded = np.array([3, 999, 1_000, 1_001, 1_255, 1_256, 2_700, 3_999, 4_000, 9_000])
    # the method's clip at the transform's bound (rounding only) and below it (clips rows)
    for row_bound in (bounds.row_bound, 0.5 * bounds.row_bound):
        gram, moment = stats.gram_moment(
            (X, y), offset, excluded, bounds, row_bound, 0.9 * bounds.y_radius, norms
        )
        ref_gram, ref_moment, Z = _reference(
            X, y, offset, excluded, bounds, row_bound, 0.9 * bounds.y_radius, norms
        )
        assert Z.shape[0] == X.shape[0] - 7  # the seven excluded rows inside [1000, 4001)
        np.testing.assert_allclose(gram, ref_gram, rtol=RTOL, atol=RTOL * np.abs(ref_gram).max())
        np.testing.assert_allclose(
            moment, ref_moment, rtol=RTOL, atol=RTOL * np.abs(ref_moment).max()
        )
    # the data do exercise the method's clip: some rows end on its bound
    assert np.isclose(np.linalg.norm(Z, axis=1).max(), 0.5 * bounds.row_bound, rtol=1e-12)


def test_fused_gram_keeps_every_row_within_the_row_bound(monkeypatch):
    # the sensitivity rests on ||z|| <= R: rows are rescaled by clip_factors (f ||z|| <= R for
    # the computed norm); the norm of the rescaled row, recomputed, may round an ulp or two
    # above R, as in the in-memory clip
    monkeypatch.setattr(stats, "BLOCK_ROWS", 100)
    X, y = _data(n=500)
    bounds = BOUNDS["plain"]
    block = np.empty((100, 6), order="F")
    for start in range(0, 500, 100):
        stats._clipped_block(
            X[start : start + 100], y[start : start + 100], bounds, 3.0, 1.0, "row", block
        )
        assert np.all(row_norms(block[:, :5]) <= 3.0 * (1 + 4 * np.finfo(float).eps))
        assert np.all(np.abs(block[:, 5]) <= 1.0)


def _frame(n=1_000, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.integers(-5, 5, size=n),
            "c": rng.normal(size=n).astype(np.float32),
            "flag": rng.random(n) < 0.5,
            "y": rng.normal(size=n),
        }
    )


def test_fast_reader_returns_the_loaders_values(tmp_path):
    path = tmp_path / "part.parquet"
    _frame().to_parquet(path, row_group_size=300)  # 4 row groups: chunked columns
    features = ("c", "a", "flag", "b")  # not in file order
    X, y = _read_file(str(path), "y", features, 1_000)
    table = load_table(path, "y", features=list(features))
    assert X.dtype == y.dtype == np.float64
    np.testing.assert_array_equal(X, table.X)
    np.testing.assert_array_equal(y, table.y)


@pytest.mark.parametrize(
    ("value", "needle"),
    [(np.nan, "1 missing or NaN"), (np.inf, "1 infinite"), (None, "1 missing or NaN")],
)
def test_fast_reader_leaves_bad_values_to_the_loaders_message(tmp_path, value, needle):
    frame = _frame()
    frame["a"] = frame["a"].astype(object)
    frame.loc[17, "a"] = value
    frame["a"] = frame["a"].astype(float)
    path = tmp_path / "part.parquet"
    frame.to_parquet(path)
    for read in (
        lambda: _read_file(str(path), "y", ("a", "b"), None),
        lambda: _take_file(str(path), "y", ("a", "b"), None, np.array([0, 1])),
    ):
        with pytest.raises(ValueError, match=f"part.parquet.*Column 'a' has {needle}"):
            read()


def test_a_sum_that_overflows_is_not_an_error(tmp_path):
    frame = pd.DataFrame({"a": [1e308, 1e308, -1.0], "y": [0.0, 1.0, 2.0]})
    path = tmp_path / "big.parquet"
    frame.to_parquet(path)
    X, _ = _read_file(str(path), "y", ("a",), 3)
    assert X[:, 0].tolist() == [1e308, 1e308, -1.0] and math.isfinite(X.max())


def test_take_reads_the_same_rows_as_the_partition(tmp_path, synchronous):
    frame = _frame(n=3_000)
    for k in range(3):
        frame.iloc[k * 1_000 : (k + 1) * 1_000].to_parquet(
            tmp_path / f"part-{k}.parquet", row_group_size=333
        )
    rows = read_directory(tmp_path, "y")
    assert rows.takers is not None
    wanted = np.array([0, 332, 333, 999, 1_000, 1_666, 2_999])
    X, y = rows.take(wanted)
    expected = frame.drop(columns="y").to_numpy(dtype=np.float64)[wanted]
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(y, frame["y"].to_numpy()[wanted])


def test_kernels_of_an_empty_partition_are_zero():
    bounds = BOUNDS["scaled-boxed-masked"]
    part = (np.empty((0, 4)), np.empty(0))
    args = (part, 0, np.empty(0, np.int64), bounds, bounds.row_bound, bounds.y_radius)
    gram, moment = stats.gram_moment(*args)
    assert gram.shape == (5, 5) and moment.shape == (5,)
    assert not gram.any() and not moment.any()
    below, at_or_below = stats.residual_counts(*args, np.ones(5), np.array([0.5, 1.0]))
    assert below.tolist() == at_or_below.tolist() == [0, 0]
    assert not stats.clipped_residual_gradient(*args, np.ones(5), 1.0).any()


def test_newton_kernels_equal_transform_then_clip(monkeypatch):
    monkeypatch.setattr(stats, "BLOCK_ROWS", 300)
    X, y = _data()
    bounds = BOUNDS["plain"]
    excluded = np.array([5, 2_000])
    args = ((X, y), 0, excluded, bounds, 0.7 * bounds.row_bound, bounds.y_radius)
    Z, t = stats._clipped(*stats.main_rows(*args[:4]), *args[4:], "row")
    w = np.array([0.3, -0.2, 0.1, 0.05, 0.5])
    r = Z @ w - t
    grid = np.quantile(np.abs(r), [0.1, 0.5, 0.9])
    below, at_or_below = stats.residual_counts(*args, w, grid)
    assert below.tolist() == [int(np.sum(np.abs(r) < c)) for c in grid]
    assert at_or_below.tolist() == [int(np.sum(np.abs(r) <= c)) for c in grid]
    gradient = stats.clipped_residual_gradient(*args, w, 0.8)
    expected = Z.T @ np.clip(r, -0.8, 0.8)
    np.testing.assert_allclose(gradient, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())
