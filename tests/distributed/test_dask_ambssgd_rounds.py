"""DP-AMBSSGD's rounds on the workers (privopt.distributed.round_statistics): the pieces that
make one pass per round exact (DP-STAT on counts, the candidate clips, the round cache and its
fallback to the source), and the equality with the in-memory fit on a 2-worker cluster for
every partition count and both kinds of bounds, from arrays and from Parquet files, with and
without the round cache.

Tolerances: counts and DP-STAT outputs are compared exactly (integers, and the same draws from
the same generator); candidate sums to 1e-12 relative (the in-memory product over all rows
against per-partition products added: summation order only, about 1e-16 per addition over a
few thousand rows); models to TOLERANCE = 1e-8, the issue's bound.
"""

import itertools
import os
import shutil

import numpy as np
import pytest
from dask_helpers import as_dask, assert_same_fit
from test_dask_ambssgd import N_ROWS, estimator, reference
from test_dask_cli import write_parts

from privopt.clipping.dp_stat import dp_stat
from privopt.distributed import rounds as dask_rounds
from privopt.distributed.round_statistics import (
    UNUSED,
    candidate_clips,
    dp_stat_grid,
    quantised_residuals,
    round_statistics,
    spill_path,
    spill_rounds,
    spilled_round_statistics,
)
from privopt.releases.preprocess import LinearBounds
from privopt.training.gradients import LinearRegressionModel

BOUNDS = LinearBounds(np.array([0.0, 1.0, -1.0]), 0.5, 3.0, 6.0, 1.2, "public")


@pytest.fixture(scope="module")
def big():  # the rows of test_dask_ambssgd.py (its references are shared through its cache)
    from test_dask_ambssgd import big as fixture

    return fixture.__wrapped__()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("margin", ["auto", 0.0, 40.0])
def test_quantised_residuals_give_dp_stat_the_same_release(seed, margin):
    # DP-STAT sees the values only through its K counts: the residuals rounded up to its grid
    # give the same gamma, the same number of queries and the same draws from rng
    values = np.abs(np.random.default_rng(seed).standard_cauchy(300)) * 10.0 ** (seed % 4 - 2)
    domain, queries, alpha = 50.0, 20, 0.7 + seed / 10
    grid, top = dp_stat_grid(domain, queries)
    counts = np.searchsorted(np.sort(values), grid, side="right")
    proxy = quantised_residuals(counts, grid, top, values.size)
    assert proxy.size == values.size
    np.testing.assert_array_equal(np.searchsorted(np.sort(proxy), grid, side="right"), counts)
    a, b = np.random.default_rng(100 + seed), np.random.default_rng(100 + seed)
    kwargs = dict(domain=domain, noise_multiplier=alpha, queries=queries, margin=margin)
    first, second = dp_stat(values, rng=a, **kwargs), dp_stat(proxy, rng=b, **kwargs)
    assert first == second
    assert a.bit_generator.state == b.bit_generator.state  # the same number of draws
    clips = candidate_clips(domain, queries, 2.5)
    assert np.count_nonzero(clips == 2.5 * first.gamma) == 1  # the released clip is a candidate


def test_the_grid_is_the_one_dp_stat_searches():
    # with no noise that can stop it early, DP-STAT stops at the first grid point holding every
    # value: each grid point and the no-stop output are reached exactly
    grid, top = dp_stat_grid(50.0, 20)
    assert grid[0] == 50.0 / 2**20 and top == 50.0 and np.all(grid[1:] == 2 * grid[:-1])
    for i in (0, 7, 19):
        values = np.full(30, grid[i])
        got = dp_stat(values, domain=50.0, noise_multiplier=1e-9, queries=20, margin=0.0,
                      rng=np.random.default_rng(0))  # fmt: skip
        assert got.gamma == grid[i]
    got = dp_stat(np.full(30, 60.0), domain=50.0, noise_multiplier=1e-9, queries=20, margin=0.0,
                  rng=np.random.default_rng(0))  # fmt: skip
    assert got.gamma == top


@pytest.mark.parametrize("as_taker", [False, True], ids=["blocks", "taker"])
def test_round_statistics_equal_the_in_memory_model(as_taker):
    # one round's rows split over 3 partitions: the counts add to the in-memory counts exactly,
    # the candidate sums to the in-memory clipped sums at each clip (summation order only)
    rng = np.random.default_rng(5)
    n = 3_000
    X = rng.normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -1.0]
    y = X @ [1.5, -0.5, 2.0] + rng.normal(size=n)
    Z, t = BOUNDS.transform(X, y)
    order = rng.permutation(n)
    stat, rows = np.sort(order[:400]), np.sort(order[400:2400])
    w = np.array([0.8, -0.2, 1.1, 0.3])
    grid, _ = dp_stat_grid(8.0, 12)
    clips = candidate_clips(8.0, 12, BOUNDS.row_bound)
    cuts = [0, 700, 1900, n]
    total = None
    for a, b in itertools.pairwise(cuts):
        local = [ix[(ix >= a) & (ix < b)] - a for ix in (stat, rows)]
        block = (X[a:b], y[a:b])
        source = (lambda ix, blk=block: (blk[0][ix], blk[1][ix])) if as_taker else block
        part = round_statistics(source, *local, BOUNDS, w, grid, clips)
        total = part if total is None else tuple(u + v for u, v in zip(total, part, strict=True))
    counts, sums, clipped = total
    residuals = np.abs(Z[stat] @ w - t[stat])
    np.testing.assert_array_equal(counts, np.searchsorted(np.sort(residuals), grid, "right"))
    model = LinearRegressionModel()
    assert 0 < clipped[0] and clipped[-1] < rows.size  # the candidates clip differently
    for k, clip in enumerate(clips):
        expected, fraction = model.clipped_gradient_sum(w, Z[rows], t[rows], clip)
        np.testing.assert_allclose(sums[k], expected, rtol=1e-12, atol=1e-12)
        assert clipped[k] / rows.size == fraction


def test_the_round_cache_holds_the_rounds_rows(tmp_path, monkeypatch):
    # spill_rounds: round 0's statistics and the later rounds' files give what reading the
    # source gives (round_statistics), round by round; each file is deleted once read
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rng = np.random.default_rng(9)
    m, T = 2_000, 4
    X = rng.normal(size=(m, 3)) * [1.0, 2.0, 0.5]
    y = X @ [1.5, -0.5, 2.0] + rng.normal(size=m)
    order = rng.permutation(m)
    codes = np.full(m, UNUSED, dtype=np.uint16)
    for j in range(T):  # 60 stat + 400 gradient rows per round, 160 rows unused
        codes[order[460 * j : 460 * j + 60]] = 2 * j
        codes[order[460 * j + 60 : 460 * (j + 1)]] = 2 * j + 1
    w = np.array([0.8, -0.2, 1.1, 0.3])
    grid, _ = dp_stat_grid(8.0, 12)
    clips = candidate_clips(8.0, 12, BOUNDS.row_bound)
    stats, directory = spill_rounds((X, y), codes, BOUNDS, "cache", 5, T, w, grid, clips)
    assert directory == str(tmp_path / "cache")
    for j in range(T):
        local = [np.flatnonzero(codes == 2 * j + k) for k in (0, 1)]
        expected = round_statistics((X, y), *local, BOUNDS, w, grid, clips)
        if j > 0:
            assert os.path.exists(spill_path(directory, 5, j))
            stats = spilled_round_statistics(directory, 5, j, None, *local, BOUNDS, w, grid, clips)
            assert not os.path.exists(spill_path(directory, 5, j))
        np.testing.assert_array_equal(stats[0], expected[0])
        np.testing.assert_allclose(stats[1], expected[1], rtol=1e-13, atol=1e-13)
        np.testing.assert_array_equal(stats[2], expected[2])


def test_round_tasks_hold_no_randomness(synchronous, big, monkeypatch):
    # what the workers receive: the rows' source, positions, the bounds, w and public grids (no
    # generator); a task run twice returns the same values
    calls = []
    submit = dask_rounds.delayed

    def recording(fn, **options):
        task = submit(fn, **options)
        return lambda *args: calls.append((fn.__name__, args)) or task(*args)

    monkeypatch.setattr(dask_rounds, "delayed", recording)
    X, y = big
    fitted = estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(False, X, y), fitted)
    steps = fitted.fit_info_["steps"]
    names = [name for name, _ in calls]
    # one task per partition and round: round 0 also writes the round cache
    assert names == ["spill_rounds"] * 3 + ["spilled_round_statistics"] * 3 * (steps - 1)
    for _, args in calls:
        assert not any(isinstance(a, np.random.Generator) for a in args)
    _, partition, round_, source, *rest = calls[-1][1]
    assert round_ == steps - 1 and partition == 2
    assert isinstance(source, dask_rounds._LazyPartition)  # read only if the file is missing
    blocks = dask_rounds.compute_sync(source.part)
    first, second = round_statistics(blocks, *rest), round_statistics(blocks, *rest)
    for u, v in zip(first, second, strict=True):
        np.testing.assert_array_equal(u, v)
    assert first[0][-1] > 0 and np.any(first[1])  # a real share of the round


def _spied(monkeypatch, tmp_path, after=None):
    """Round caches under ``tmp_path`` (the synchronous scheduler runs the tasks here);
    ``after(directory)`` runs after each partition's cache is written. Returns the
    directories written."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    written = []
    spill = dask_rounds.spill_rounds

    def spy(*args):
        stats, directory = spill(*args)
        written.append(directory)
        if after is not None:
            after(directory)
        return stats, directory

    monkeypatch.setattr(dask_rounds, "spill_rounds", spy)
    return written


def test_the_round_cache_is_used_and_removed(synchronous, big, monkeypatch, tmp_path):
    read = []
    spilled = dask_rounds.spilled_round_statistics

    def spy(directory, partition, round_, *args):
        read.append(os.path.exists(spill_path(directory, partition, round_)))
        return spilled(directory, partition, round_, *args)

    written = _spied(monkeypatch, tmp_path)
    monkeypatch.setattr(dask_rounds, "spilled_round_statistics", spy)
    X, y = big
    fitted = estimator("ambssgd", True).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(True, X, y), fitted)
    assert fitted.fit_info_["round_cache"] is True
    assert len(written) == 3 and all(d is not None for d in written)
    assert len(read) == 3 * (fitted.fit_info_["steps"] - 1) and all(read)  # every file there
    assert list(tmp_path.iterdir()) == []  # read files deleted, the directory removed


def test_a_missing_round_cache_falls_back_to_the_source(synchronous, big, monkeypatch, tmp_path):
    # the files gone (a lost worker's disk, another host): the rounds read the source instead
    written = _spied(monkeypatch, tmp_path, after=shutil.rmtree)
    X, y = big
    fitted = estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(False, X, y), fitted)
    assert len(written) == 3 and fitted.fit_info_["round_cache"] is True


def test_an_unwritable_disk_reads_the_source(synchronous, big, monkeypatch, tmp_path):
    import tempfile

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # makedirs under a file: OSError
    X, y = big
    fitted = estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(False, X, y), fitted)
    assert fitted.fit_info_["round_cache"] is False
    assert fitted.fit_info_["round_passes"] == fitted.fit_info_["steps"]


def test_a_shared_directory_is_not_used(synchronous, big, monkeypatch, tmp_path):
    # a directory of that name that others can read (here made in advance) gets no rows
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(dask_rounds.secrets, "token_hex", lambda n: "fixed")
    shared = tmp_path / "privopt-rounds-fixed"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    X, y = big
    fitted = estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(False, X, y), fitted)
    assert fitted.fit_info_["round_cache"] is False
    assert not shared.exists() or list(shared.iterdir()) == []


def test_without_the_round_cache_every_round_reads_the_source(synchronous, big, monkeypatch):
    monkeypatch.setattr(dask_rounds, "SPILL_ROUNDS", False)
    X, y = big
    for public in (True, False):
        fitted = estimator("ambssgd", public).fit(*as_dask(X, y, 3))
        assert_same_fit(reference(public, X, y), fitted)
        assert fitted.fit_info_["round_cache"] is False


def test_a_failed_fit_removes_the_round_cache(synchronous, big, monkeypatch, tmp_path):
    _spied(monkeypatch, tmp_path)
    spilled = dask_rounds.spilled_round_statistics

    def failing(directory, partition, round_, *args):
        if round_ == 2:
            raise ValueError("partition unreadable")
        return spilled(directory, partition, round_, *args)

    monkeypatch.setattr(dask_rounds, "spilled_round_statistics", failing)
    X, y = big
    with pytest.raises(ValueError, match="partition unreadable"):
        estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert list(tmp_path.iterdir()) == []  # rounds 3 .. T - 1's files removed too


@pytest.mark.parametrize("partitions", [1, 3, 17])
@pytest.mark.parametrize("public", [True, False], ids=["public-bounds", "private-bounds"])
def test_cluster_equals_in_memory(client, big, public, partitions):
    X, y = big
    fitted = estimator("ambssgd", public).fit(*as_dask(X, y, partitions))
    assert_same_fit(reference(public, X, y), fitted)
    assert fitted.fit_info_["round_passes"] == fitted.fit_info_["steps"]


def test_cluster_without_the_round_cache_equals_in_memory(client, big, monkeypatch):
    monkeypatch.setattr(dask_rounds, "SPILL_ROUNDS", False)  # read on the client
    X, y = big
    fitted = estimator("ambssgd", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference(False, X, y), fitted)
    assert fitted.fit_info_["round_cache"] is False


def test_parquet_files_on_the_cluster_equal_in_memory(client, big, tmp_path):
    # the rows read by the files' takers (each task reads its file and keeps the round's rows)
    from privopt.distributed.files import read_directory

    X, y = big
    rows = read_directory(write_parts(tmp_path / "table", big, "parquet", files=5), "y")
    assert rows.takers is not None and rows.n_rows == N_ROWS
    fitted = estimator("ambssgd", False).fit(rows)
    assert_same_fit(reference(False, X, y), fitted)
    assert fitted.fit_info_["round_cache"] is True


def test_diagnostics_equal_in_memory(synchronous, big):
    # the non-private clip fractions (diagnostics=True) come from the candidate's clipped count
    # at the released clip: the same fractions as the in-memory fit's, and the same gamma_t
    X, y = big
    with pytest.warns(UserWarning):
        expected = estimator("ambssgd", True, diagnostics=True).fit(X, y)
    with pytest.warns(UserWarning):
        fitted = estimator("ambssgd", True, diagnostics=True).fit(*as_dask(X, y, 3))
    assert_same_fit(expected, fitted)
    fractions = fitted.fit_trace_.clip_fraction
    np.testing.assert_array_equal(fractions, expected.fit_trace_.clip_fraction)
    assert np.any(fractions > 0) and np.all(fractions < 1)
    np.testing.assert_array_equal(
        fitted.fit_trace_.extra["gamma"], expected.fit_trace_.extra["gamma"]
    )


_READS = []


def _counted(X, y, partition):
    _READS.append(partition)
    return X, y


@pytest.mark.parametrize("cache", [True, False], ids=["round-cache", "source"])
def test_partition_reads(synchronous, big, monkeypatch, cache):
    # with the round cache, each partition is read a fixed number of times whatever T is (the
    # setup passes and round 0); without it once more per later round
    from dask import delayed

    from privopt.distributed.rows import PartitionedRows

    monkeypatch.setattr(dask_rounds, "SPILL_ROUNDS", cache)
    X, y = big
    cuts = np.array([0, 6_000, 13_000, N_ROWS])
    parts = tuple(
        delayed(_counted, pure=True)(X[a:b], y[a:b], q)
        for q, (a, b) in enumerate(itertools.pairwise(cuts))
    )
    _READS.clear()
    fitted = estimator("ambssgd", True).fit(PartitionedRows(parts, cuts, 3))
    assert_same_fit(reference(True, X, y), fitted)
    steps = fitted.fit_info_["steps"]
    reads = [_READS.count(q) for q in range(3)]
    assert reads == [reads[0]] * 3 and steps > 4
    # the estimator's preprocessing take and the moment subset's take, then the rounds, then
    # the quality release's take (private_r2_, once the model is released)
    assert reads[0] == 2 + (1 if cache else steps) + 1
