"""Adaptive clipping in PrivateTrainer (issue 20): the same event, a moving public clip, the
count release's noise, exact resume, and the quantile-1 hook equal to fixed clipping."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from privopt.experiments.cifar_torch import digits_cnn, load_digit_images  # noqa: E402
from privopt.noise import nu_dpftrl  # noqa: E402
from privopt.torch import PrivateTrainer  # noqa: E402
from privopt.training import QuantileClipping  # noqa: E402

DIGITS = load_digit_images()
SMALL = (DIGITS[0][:320], DIGITS[1][:320])  # 5 batches of 64 per epoch


def _trainer(rule, mechanism="dpsgd", clip=100.0, seed=3, model_seed=0):
    model = digits_cnn(model_seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return PrivateTrainer(
        model, opt, SMALL, epsilon=4.0, delta=1e-5, epochs=4, batch_size=64, clip_norm=clip,
        mechanism=mechanism, seed=seed, adaptive_clipping=rule,
    )  # fmt: skip


@pytest.mark.parametrize("mechanism", ["dpsgd", nu_dpftrl(0.2)])
def test_adaptive_run_records_the_fixed_clip_event_and_moves_the_clip(mechanism):
    rule = QuantileClipping(count_noise_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = _trainer(rule, mechanism)
        report = trainer.fit()
    assert trainer.ledger.events == (trainer.plan.event(),)
    assert report.epsilon <= 4.0
    clips, released = trainer.clip_history
    assert clips.shape == released.shape == (trainer.steps,)
    # 100 is far above every gradient norm, so every noiseless count says 'all unclipped' and the
    # rule shrinks kappa by e^(-eta/2) = 0.905 a step: 100 * 0.905^19 = 15 at best, noise aside
    assert clips[0] == 100.0 and clips[-1] < 40.0
    assert any("adaptive clipping" in text for text in report.assumptions)


def test_resume_with_adaptive_clipping_is_bit_exact(tmp_path):
    rule = QuantileClipping(count_noise_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        straight = _trainer(rule)
        straight.fit()
        first = _trainer(rule)
        for _ in range(7):
            first.step()
        first.save(tmp_path / "ckpt.pt")
        second = _trainer(rule, model_seed=5)  # a different init: the checkpoint overwrites it
        second.load(tmp_path / "ckpt.pt")
        second.fit()
    for a, b in zip(straight.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(straight.clip_history[0], second.clip_history[0])
    np.testing.assert_array_equal(straight.clip_history[1], second.clip_history[1])


def test_quantile_one_with_noiseless_counts_keeps_the_clip_fixed():
    # the internal hook: counts without noise, target quantile 1, fixed batches of 64 and a clip
    # above every norm: each released count is exactly 64 - 32, b~ = 1 and kappa never moves,
    # so the run clips exactly as fixed clipping at 1e4 (the core's test compares the models)
    rule = QuantileClipping(target_quantile=1.0, count_noise_fraction=0.5, _count_noise=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adaptive = _trainer(rule, mechanism=nu_dpftrl(0.2), clip=1e4)
        adaptive.fit()
    clips, released = adaptive.clip_history
    np.testing.assert_array_equal(clips, np.full(adaptive.steps, 1e4))
    np.testing.assert_array_equal(released, np.full(adaptive.steps, 32.0))


def test_count_noise_has_its_std():
    rule = QuantileClipping(count_noise_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = _trainer(rule, clip=1e4)  # every example unclipped: count = |batch| / 2
        trainer.fit()
    _, released = trainer.clip_history
    # Poisson batches: the exact centred count is |B_t| / 2, unknown here; its mean is m / 2
    # and the release adds N(0, sigma_b^2) with sigma_b = 0.2 m = 12.8: the spread of the
    # releases is at least sigma_b (Bin variance adds to it), and at most a few times it
    sigma_b = trainer.plan.count_noise_std
    assert sigma_b == pytest.approx(0.2 * 64)
    assert 0.6 * sigma_b < np.std(released) < 2.0 * sigma_b
