"""Cyclic Poisson sampling's law (issue 30): each record is read only in its part's steps, each
time with probability q; per-step batch sizes are Binomial(N // groups, q); the schedule is a
function of the generator's seed; an epoch is round(groups / q) steps."""

import numpy as np
import pytest
from scipy.stats import binom, chisquare

from privopt.training import CyclicPoissonSampling

N, GROUPS, RATE, STEPS = 43, 4, 0.3, 12  # 43 = 4 x 10 + 3 records never read


def _schedules(count: int, seed0: int = 0):
    strategy = CyclicPoissonSampling(GROUPS, RATE, STEPS)
    return [list(strategy.schedule(N, np.random.default_rng(seed0 + s))) for s in range(count)]


def test_each_record_is_read_only_in_its_parts_steps_each_with_probability_q():
    runs = 3000
    hits = np.zeros(N)  # inclusions summed over runs and steps
    for batches in _schedules(runs):
        seen: dict[int, set[int]] = {}
        for t, batch in enumerate(batches):
            assert np.array_equal(batch, np.unique(batch))  # sorted, no repeats
            for i in batch:
                seen.setdefault(int(i), set()).add(t % GROUPS)
            hits[batch] += 1
        # a record's steps share one residue mod groups: it belongs to one part
        assert all(len(residues) == 1 for residues in seen.values())
    # each record is in a part with probability 40 / 43 and then sampled in STEPS / GROUPS steps
    expected = runs * (GROUPS * (N // GROUPS) / N) * (STEPS // GROUPS) * RATE
    per_record = hits / expected
    assert np.all(np.abs(per_record - 1.0) < 0.08)  # 9,000 x q trials a record: 5 sigma ~ 0.06


def test_per_step_batch_sizes_are_binomial():
    sizes = np.array([len(b) for batches in _schedules(2000, 10_000) for b in batches])
    m = N // GROUPS
    observed = np.bincount(sizes, minlength=m + 1)
    expected = binom.pmf(np.arange(m + 1), m, RATE) * sizes.size
    keep = expected >= 5  # pool the sparse tails for the chi-square
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    assert chisquare(obs, exp).pvalue > 1e-4
    assert sizes.mean() == pytest.approx(m * RATE, rel=0.02)


def test_the_schedule_is_a_function_of_the_seed():
    one, again, other = _schedules(1, 7)[0], _schedules(1, 7)[0], _schedules(1, 8)[0]
    assert all(np.array_equal(a, b) for a, b in zip(one, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(one, other, strict=True))


def test_an_epoch_is_an_expected_pass_over_the_records():
    # q = b / (N // L): round(L / q) = L (N // L) / b steps is about N / b
    assert CyclicPoissonSampling(4, 64 / 359, 330).per_epoch(1437) == 22 == 1437 // 64
    assert CyclicPoissonSampling(2, 1.0, 5).per_epoch(10) == 2
    assert CyclicPoissonSampling(2, 0.01, 5).per_epoch(1000) == 5  # at most the run's steps
