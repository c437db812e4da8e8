"""The checks the finite-horizon mechanisms and checkpointed streams share (noise/_checks.py),
and the restart choice shared by the training plans and the CIFAR-style reproduction."""

import warnings

import numpy as np
import pytest

from privopt.noise import (
    DenseMechanism,
    Participation,
    Restarted,
    SensitivityUpperBoundWarning,
    banded_toeplitz,
    optimal_cc,
)
from privopt.noise.blt import BLTMechanism
from privopt.noise.toeplitz import custom
from privopt.noise.tuning import participation_pattern, tree_restart_candidates


def test_checkpoint_of_the_wrong_shape_is_refused_by_blt_and_banded_streams():
    blt = BLTMechanism(np.array([0.9, 0.5]), np.array([0.3, 0.2]))
    banded = banded_toeplitz(optimal_cc(), 3)
    for mechanism, key in ((blt, "buffers"), (banded, "ring")):
        stream = mechanism.noise_stream(4, 1.0, seed=1)
        stream.next()
        state = stream.state()
        state[key] = np.zeros((state[key].shape[0], 5))  # a checkpoint of another model size
        with pytest.raises(ValueError, match=f"Checkpoint '{key}' has shape"):
            mechanism.noise_stream(4, 1.0, seed=1).restore(state)


def test_a_restored_checkpoint_is_a_copy():
    blt = BLTMechanism(np.array([0.9, 0.5]), np.array([0.3, 0.2]))
    stream = blt.noise_stream(3, 1.0, seed=2)
    stream.next()
    twin = blt.noise_stream(3, 1.0, seed=2)
    twin.restore(stream.state())
    state = stream.state()
    resumed = blt.noise_stream(3, 1.0, seed=2)
    resumed.restore(state)
    state["buffers"][:] = 1e6  # mutating the checkpoint afterwards must not reach the stream
    np.testing.assert_array_equal(resumed.next(), twin.next())


def test_finite_horizon_mechanisms_refuse_longer_runs():
    dense = DenseMechanism(np.eye(4))
    assert dense.decoder_matrix(3).shape == (3, 3)
    with pytest.raises(ValueError, match="This B has horizon 4; got steps=5"):
        dense.decoder_matrix(5)


@pytest.mark.parametrize(
    ("beta", "match"),
    [([], "non-empty 1-D vector of beta coefficients"), ([[1.0]], "non-empty 1-D"),
     ([1.0, np.nan], "finite beta coefficients"), ([0.0, 1.0], "beta_0 must be non-zero")],
)  # fmt: skip
def test_custom_toeplitz_coefficients_are_checked(beta, match):
    with pytest.raises(ValueError, match=match):
        custom(beta)


def test_custom_toeplitz_keeps_its_coefficients():
    mech = custom([2.0, -1.0, 0.0])  # trailing zeros dropped, beta_0 kept (no normalisation)
    np.testing.assert_array_equal(mech.beta(4), [2.0, -1.0, 0.0, 0.0])


def test_participation_pattern_and_restart_candidates():
    assert participation_pattern(Participation.single()) == {}
    multiple = Participation.multiple(4, 6)
    assert participation_pattern(multiple) == {"min_sep": 4, "participations": 6}
    candidates = tree_restart_candidates(24, multiple)
    # no restart, then every whole number of epochs m < 6 dividing 6: 1, 2, 3
    assert [m for _, m, _ in candidates] == [None, 1, 2, 3]
    assert [getattr(mech, "block", None) for _, _, mech in candidates] == [None, 4, 8, 12]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SensitivityUpperBoundWarning)  # restarts: a bound
        for error, _, mech in candidates:
            assert error > 0.0
            assert error == mech.prefix_sum_error(24, multiple)  # the objective, as evaluated
    assert isinstance(candidates[1][2], Restarted)
    single = tree_restart_candidates(24, Participation.single())
    assert [m for _, m, _ in single] == [None]
