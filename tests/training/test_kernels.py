"""The single-row kernel computes what the generic loop computes (it changes speed only)."""

import numpy as np
import pytest

from privopt.noise import independent, nu_dpftrl
from privopt.training import (
    SGD,
    LinearRegressionModel,
    LogisticRegressionModel,
    LossModel,
    Projected,
    SampledWithoutReplacement,
)
from privopt.training.averaging import Averager
from privopt.training.kernels import single_row_rule
from privopt.training.loop import iterate, open_stream


def _data(seed=0, n=300, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.1, 3.0, size=(n, 1))  # some rows get clipped
    return X, rng


def _both(model, y, X, update, mechanism, clip=0.7, averaging="inputs", steps=400):
    n, d = X.shape
    indices = np.random.default_rng(5).integers(0, n, size=steps).reshape(-1, 1)
    out = []
    for single_row in (False, True):
        stream = open_stream(mechanism, d, 0.3, np.random.default_rng(0), noise_seed=1234)
        averager = Averager(averaging, steps, d)
        w, flags = iterate(
            model, X, y, iter(indices), steps, stream, clip, 1.0, update, averager,
            np.full(d, 0.1), single_row=single_row,
        )  # fmt: skip
        out.append((w, flags, averager.last))
    return out


@pytest.mark.parametrize(
    ("model", "labels"),
    [
        (LinearRegressionModel(), "real"),
        (LogisticRegressionModel(), "01"),
        (LossModel("hinge"), "pm1"),
        (LossModel("huber"), "real"),
    ],
)
@pytest.mark.parametrize("projected", [False, True])
def test_kernel_equals_generic_loop(model, labels, projected):
    X, rng = _data()
    y = {
        "real": rng.normal(size=X.shape[0]),
        "01": rng.integers(0, 2, size=X.shape[0]).astype(float),
        "pm1": rng.choice([-1.0, 1.0], size=X.shape[0]),
    }[labels]
    update = Projected(SGD(0.05), 0.8) if projected else SGD(0.05)
    (w0, f0, last0), (w1, f1, last1) = _both(model, y, X, update, independent())
    assert 0 < f0.mean() < 1  # clipping is exercised both ways
    np.testing.assert_array_equal(f0, f1)
    np.testing.assert_allclose(w1, w0, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(last1, last0, rtol=1e-12, atol=1e-13)
    if projected:
        assert np.linalg.norm(last1) <= 0.8 + 1e-12


def test_kernel_with_correlated_noise_and_every_averaging():
    X, rng = _data(1)
    y = rng.normal(size=X.shape[0])
    for averaging in ("last", "mean", "tail", "inputs"):
        (w0, _, _), (w1, _, _) = _both(
            LinearRegressionModel(), y, X, SGD(0.02), nu_dpftrl(0.2), averaging=averaging
        )
        np.testing.assert_allclose(w1, w0, rtol=1e-12, atol=1e-13)


def test_the_loop_takes_the_kernel_for_one_row_batches(monkeypatch):
    import privopt.training.loop as loop

    calls = []
    real = loop.single_row_iterate
    monkeypatch.setattr(loop, "single_row_iterate", lambda *a: calls.append(1) or real(*a))
    X, rng = _data(2)
    _both(LinearRegressionModel(), rng.normal(size=X.shape[0]), X, SGD(0.05), independent())
    assert calls == [1]  # once: single_row=True only


def test_kernel_applies_only_where_it_is_exact():
    model = LinearRegressionModel()
    assert single_row_rule(model, SGD(0.1)) == (0.1, None)
    assert single_row_rule(model, Projected(SGD(0.1), 2.0)) == (0.1, 2.0)
    assert single_row_rule(model, SGD(0.1, momentum=0.5)) is None
    assert single_row_rule(model, SGD(lambda t: 0.1)) is None
    assert single_row_rule(model, SGD(0.1, regularizer_grad=lambda w: w)) is None


def test_inputs_averaging_is_seed_002_definition():
    # w_0 = 0 included, the final iterate excluded: (1/T) sum_{t=0}^{T-1} w_t
    averager = Averager("inputs", 3, 1)
    averager.begin(np.array([0.0]))
    for step, value in enumerate([1.0, 2.0, 4.0]):
        averager.add(np.array([value]), step)
    assert averager.result(np.array([4.0]))[0] == pytest.approx((0.0 + 1.0 + 2.0) / 3)
    assert averager.last[0] == 4.0


def test_one_row_sampling_draws_uniform_indices_in_blocks():
    strategy = SampledWithoutReplacement(1, 10_000)
    batches = list(strategy.schedule(7, np.random.default_rng(3)))
    assert len(batches) == 10_000 and all(b.shape == (1,) for b in batches)
    counts = np.bincount(np.concatenate(batches), minlength=7)
    # chi-square goodness of fit to uniform (6 dof): 99.9% quantile is 22.46
    expected = 10_000 / 7
    assert np.sum((counts - expected) ** 2 / expected) < 22.46
    assert strategy.rows_per_step == 1
