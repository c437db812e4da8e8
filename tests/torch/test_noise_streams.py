"""Torch noise streams have the law of the numpy mechanisms (privopt.noise.torch_streams)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privopt.noise import (  # noqa: E402
    BLTMechanism,
    DenseMechanism,
    Restarted,
    TreeAggregation,
    TreeIncrements,
    custom,
    independent,
    nu_dpftrl,
    optimal_cc,
)
from privopt.noise.torch_streams import (  # noqa: E402
    TorchImpulseSource,
    TorchSeededSource,
    torch_noise_stream,
)

STEPS = 9


def _dense():
    rng = np.random.default_rng(3)
    return DenseMechanism(np.tril(rng.uniform(-1, 1, (STEPS, STEPS))) + 2 * np.eye(STEPS))


MECHANISMS = {
    "independent": independent,
    "nu-dpftrl": lambda: nu_dpftrl(0.1),
    "optimal-cc": optimal_cc,
    "custom-banded": lambda: custom([1.0, -0.5, 0.25]),
    "blt": lambda: BLTMechanism([0.9, 0.4], [0.3, 0.2]),
    "tree-increments": lambda: TreeIncrements(TreeAggregation(variance_reduction=True)),
    "tree-prefix": lambda: TreeAggregation(),
    "restarted": lambda: Restarted(nu_dpftrl(0.2), 4),
    "restarted-tree": lambda: Restarted(TreeIncrements(TreeAggregation()), 4),
    "dense": _dense,
}
try:  # banded mechanisms (privopt.noise.banded)
    from privopt.noise import banded as _banded

    MECHANISMS["banded"] = lambda: _banded.banded_toeplitz([1.0, 0.3, -0.1], 3)
    MECHANISMS["banded-mf"] = lambda: _banded.column_normalized_banded(optimal_cc(), 3, STEPS)
except ImportError:  # pragma: no cover - depends on the checkout
    pass


def _run(stream, steps):
    return torch.stack([stream.next() for _ in range(steps)])


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_impulse_responses_are_the_columns_of_b(name):
    mech = MECHANISMS[name]()
    b = mech.decoder_matrix(STEPS)
    for j, index in enumerate(mech.source_indices(STEPS)):
        stream = torch_noise_stream(
            mech, 2, 1.0, source=TorchImpulseSource(index), dtype=torch.float64, steps=STEPS
        )
        column = _run(stream, STEPS).numpy()
        np.testing.assert_allclose(column[:, 0], b[:, j], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(column[:, 0], column[:, 1])


@pytest.mark.parametrize("name", ["nu-dpftrl", "blt", "tree-increments", "restarted", "banded"])
def test_covariance_is_std2_b_bt(name):
    # coordinates are independent replicates: the (T, T) covariance over 40000 coordinates
    mech = MECHANISMS[name]()
    steps, dim, std = 6, 40_000, 1.5
    noise = _run(torch_noise_stream(mech, dim, std, key=12345), steps).double().numpy()
    b = mech.decoder_matrix(steps)
    expected = std**2 * b @ b.T
    empirical = noise @ noise.T / dim
    # entry (s, t) of a sample covariance has variance (S_ss S_tt + S_st^2) / dim
    sd = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / dim)
    assert np.max(np.abs(empirical - expected) / sd) < 5.0
    assert abs(noise.mean()) < 5 * std * np.sqrt(np.max(np.diag(b @ b.T)) / dim)


def test_seeded_source_is_a_pure_function_of_key_and_index():
    a, b = TorchSeededSource(7), TorchSeededSource(7)
    x = a.draw((0, 5), 100, "cpu", torch.float32)
    a.draw((1, 2), 100, "cpu", torch.float32)
    assert torch.equal(x, b.draw((0, 5), 100, "cpu", torch.float32))
    assert not torch.equal(x, TorchSeededSource(8).draw((0, 5), 100, "cpu", torch.float32))
    assert not torch.equal(x, a.draw((0, 6), 100, "cpu", torch.float32))


@pytest.mark.parametrize(
    "name", ["nu-dpftrl", "blt", "tree-increments", "restarted", "dense", "banded-mf"]
)
def test_checkpoint_restore_continues_bit_for_bit(name):
    mech = MECHANISMS[name]()
    whole = _run(torch_noise_stream(mech, 50, 2.0, key=99, steps=STEPS), STEPS)
    first = torch_noise_stream(mech, 50, 2.0, key=99, steps=STEPS)
    head = _run(first, 5)
    resumed = torch_noise_stream(mech, 50, 2.0, key=99, steps=STEPS)
    resumed.restore(first.state())
    assert torch.equal(torch.cat([head, _run(resumed, STEPS - 5)]), whole)
    wrong = torch_noise_stream(mech, 50, 2.0, key=98, steps=STEPS)
    with pytest.raises(ValueError, match="different noise key"):
        wrong.restore(first.state())


def test_refuses_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        torch_noise_stream(independent(), 3, 1.0)
    with pytest.raises(ValueError, match="std"):
        torch_noise_stream(independent(), 3, -1.0, key=1)
    with pytest.raises(ValueError, match="steps"):
        torch_noise_stream(_dense(), 3, 1.0, key=1)
