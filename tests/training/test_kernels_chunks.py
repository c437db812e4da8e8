"""The single-row kernel's chunks: gathered rows, next_many noise and BLAS steps change speed only.

The kernel takes its batches and noise a chunk of steps at a time; these tests pin that the
chunking is invisible (bit-identical results for any chunk length), that empty batches are
noise-only steps as in the generic loop, that the stream ends where ``steps`` calls of ``next``
would leave it (its state stays a restorable checkpoint), and that bad inputs are refused.
"""

import numpy as np
import pytest

import privopt.training.kernels as kernels
from privopt.noise import independent, nu_dpftrl
from privopt.training import SGD, LinearRegressionModel, LossModel, Projected
from privopt.training.averaging import Averager
from privopt.training.loop import iterate, open_stream


def _data(seed=0, n=200, d=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.1, 3.0, size=(n, 1))  # some rows get clipped
    return X, rng.normal(size=n), rng


def _run(
    X, y, schedule, steps, *, single_row, mechanism=None, model=None, update=None, clip=0.7, **kw
):
    d = X.shape[1]
    stream = open_stream(
        mechanism or independent(), d, 0.3, np.random.default_rng(0), noise_seed=99
    )
    averager = Averager(kw.pop("averaging", "tail"), steps, d)
    w, flags = iterate(
        model or LinearRegressionModel(), X, y, iter(schedule), steps, stream, clip, 2.0,
        update or SGD(0.05), averager, np.full(d, 0.1), single_row=single_row, **kw,
    )  # fmt: skip
    return w, flags, averager.last, stream


def test_chunk_length_does_not_change_a_bit(monkeypatch):
    # 601 steps: chunks of 256 (default) against chunks of 7 (a wide model's), ragged ends
    X, y, _ = _data()
    schedule = np.random.default_rng(4).integers(0, len(X), size=601).reshape(-1, 1)
    for mechanism, update in (
        (independent(), SGD(0.05)),
        (nu_dpftrl(0.3), Projected(SGD(0.1), 0.5)),
    ):
        wide = _run(X, y, schedule, 601, single_row=True, mechanism=mechanism, update=update)
        monkeypatch.setattr(kernels, "_CHUNK_FLOATS", 7 * X.shape[1])
        narrow = _run(X, y, schedule, 601, single_row=True, mechanism=mechanism, update=update)
        monkeypatch.undo()
        for a, b in zip(wide[:3], narrow[:3], strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_stream_is_left_where_steps_calls_of_next_leave_it():
    X, y, _ = _data(1)
    schedule = np.random.default_rng(5).integers(0, len(X), size=300).reshape(-1, 1)
    for mechanism in (independent(), nu_dpftrl(0.3)):
        *_, stream = _run(X, y, schedule, 300, single_row=True, mechanism=mechanism)
        assert stream.state()["step"] == 300
        reference = open_stream(mechanism, X.shape[1], 0.3, np.random.default_rng(0), 99)
        for _ in range(300):
            reference.next()
        # the checkpoint restores into a fresh stream that continues with the same noise
        resumed = open_stream(mechanism, X.shape[1], 0.3, np.random.default_rng(0), 99)
        resumed.restore(stream.state())
        np.testing.assert_array_equal(resumed.next(), reference.next())


def test_empty_batches_are_noise_only_steps_as_in_the_generic_loop():
    X, y, _ = _data(2)
    rng = np.random.default_rng(6)
    schedule = [
        np.array([], dtype=np.int64) if rng.random() < 0.2 else rng.integers(0, len(X), size=1)
        for _ in range(500)
    ]
    assert sum(len(b) == 0 for b in schedule) > 50
    generic = _run(X, y, schedule, 500, single_row=False, averaging="mean")
    kernel = _run(X, y, schedule, 500, single_row=True, averaging="mean")
    np.testing.assert_array_equal(generic[1], kernel[1])  # the same steps clipped
    assert 0 < kernel[1].mean() < 1
    # same iteration, floating-point operations in another order (see the module docstring)
    np.testing.assert_allclose(kernel[0], generic[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(kernel[2], generic[2], rtol=1e-12, atol=1e-13)


def test_any_layout_of_X_gives_the_same_bits():
    # unclipped (the row norms of model.prepare may round differently on another layout)
    X, y, _ = _data(3)
    schedule = np.random.default_rng(7).integers(0, len(X), size=300).reshape(-1, 1)
    model = LossModel("huber")
    base = _run(X, y, schedule, 300, single_row=True, model=model, clip=None)
    for other in (np.asfortranarray(X), np.hstack([X, X])[:, : X.shape[1]]):
        again = _run(other, y, schedule, 300, single_row=True, model=model, clip=None)
        np.testing.assert_array_equal(base[0], again[0])


def test_callback_sees_every_step_and_the_current_iterate():
    X, y, _ = _data(4)
    schedule = np.random.default_rng(8).integers(0, len(X), size=260).reshape(-1, 1)
    seen = []
    _, _, last, _ = _run(
        X,
        y,
        schedule,
        260,
        single_row=True,
        callback=lambda info: seen.append((info.step, info.w.copy())),
    )
    assert [s for s, _ in seen] == list(range(260))
    np.testing.assert_array_equal(seen[-1][1], last)


def test_bad_batches_and_values_are_refused():
    X, y, _ = _data(5)
    two_rows = [np.array([0, 1])] * 10
    with pytest.raises(ValueError, match="at most one row"):
        _run(X, y, two_rows, 10, single_row=True)
    bad = X.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        _run(bad, y, [np.array([3])] * 10, 10, single_row=True)
