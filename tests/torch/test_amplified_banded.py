"""mechanism="banded" in privopt.torch: cyclic Poisson sampling, accounted by cyclic_poisson_event
(Choquette-Choo, McKenna, McMahan, Rush & Thakurta 2023, arXiv:2306.08153, Thm 4) (issue 30)."""

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privopt.noise import BandedToeplitz, cyclic_poisson_event  # noqa: E402
from privopt.torch import PrivateTrainer, make_private  # noqa: E402
from privopt.torch.amplified import amplified_banded_plan, plan_error  # noqa: E402
from privopt.torch.mechanisms import build_plan, event_after  # noqa: E402
from privopt.training import CyclicPoissonSampling, FixedBatches  # noqa: E402

N, BATCH, EPOCHS, EPS, DELTA = 40, 15, 2, 2.0, 1e-3  # N // b = 2: bands L = 2 (parts of 20)


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, 5, generator=g), torch.randn(N, 1, generator=g)


def _trainer(seed=3, data=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return PrivateTrainer(
        model, opt, data or _data(), epsilon=EPS, delta=DELTA, epochs=EPOCHS, batch_size=BATCH,
        clip_norm=1.0, mechanism="banded", seed=seed, accountant="rdp",
        loss_fn=lambda out, y: ((out - y) ** 2).sum(1),
    )  # fmt: skip


def test_the_recorded_event_is_cyclic_poisson_events_for_the_plan():
    trainer = _trainer()
    plan = trainer.plan
    assert isinstance(plan.batches, CyclicPoissonSampling)
    assert isinstance(plan.mechanism, BandedToeplitz)
    groups = plan.batches.groups
    assert plan.mechanism.bands == groups == trainer.choices["groups"]
    assert plan.batches.sample_rate == pytest.approx(BATCH / (N // groups))
    expected = cyclic_poisson_event(
        plan.mechanism, plan.steps, groups=groups, sample_rate=plan.batches.sample_rate,
        noise_multiplier=plan.noise_multiplier,
    )  # fmt: skip
    (recorded,) = trainer.ledger.events
    assert dataclasses.replace(recorded, label="") == dataclasses.replace(expected, label="")
    assert recorded.count == math.ceil(plan.steps / groups)
    # the noise is scaled by C's largest column norm (unit columns for the amplification)
    assert plan.noise_std == pytest.approx(
        plan.noise_multiplier * plan.mechanism.sensitivity(plan.steps)
    )
    report = trainer.fit()
    assert trainer.step_count == plan.steps == EPOCHS * (N // BATCH)
    assert 0.99 * EPS < report.epsilon <= EPS
    # the report names the sampling and the event it was accounted with
    assert any(a.startswith("cyclic Poisson sampling") and "cyclic_poisson_event" in a
               for a in report.assumptions)  # fmt: skip
    assert "cyclic Poisson" in recorded.label
    assert trainer.choices["sampling"] == "cyclic-poisson"


@pytest.mark.slow
def test_bands_of_least_expected_error_among_the_candidates():
    # 120 records in batches of 15: L in {2, 4, 8}, each candidate calibrated (RDP)
    plan, info = amplified_banded_plan(120, batch_size=BATCH, epochs=EPOCHS, clip_norm=1.0,
                                       epsilon=EPS, delta=DELTA)  # fmt: skip
    errors = info["expected_error"]
    assert set(errors) == {"banded(L=2)", "banded(L=4)", "banded(L=8)"}
    assert errors[f"banded(L={plan.batches.groups})"] == min(errors.values())
    # the score is the calibrated plan's: recompute it from the plan calibrated with RDP
    calibrated = plan.calibrate(EPS, DELTA, "rdp")
    assert plan_error(calibrated) == pytest.approx(min(errors.values()), rel=1e-12)


def test_plan_error_is_the_float64_prefix_sum_error():
    # reference: (std / D)^2 x mean_t ||row t of A B||^2 from the dense decoder
    plan, _ = build_plan("banded-fixed", 60, batch_size=10, epochs=2, clip_norm=2.0)
    plan = dataclasses.replace(plan, noise_multiplier=1.7)
    b = plan.mechanism.decoder_matrix(plan.steps)
    rows = np.sum(np.cumsum(b, axis=0) ** 2, axis=1)
    reference = (1.7 * 2.0 / (2.0 * 10)) ** 2 * rows.mean()
    assert plan_error(plan) == pytest.approx(reference, rel=1e-10)


def test_partial_runs_are_accounted_by_the_truncated_cyclic_event():
    trainer = _trainer()
    plan = trainer.plan
    groups, q, z = plan.batches.groups, plan.batches.sample_rate, plan.noise_multiplier
    for t in (1, groups, groups + 1, plan.steps - 1):
        event = event_after(plan, t, trainer.steps_per_epoch)
        expected = cyclic_poisson_event(
            plan.mechanism, t, groups=groups, sample_rate=q, noise_multiplier=z
        )
        assert dataclasses.replace(event, label="") == dataclasses.replace(expected, label="")
    assert event_after(plan, plan.steps, 1) == plan.event()
    spent = [trainer.epsilon_after(t) for t in (1, groups + 1)]
    final = trainer.epsilon_after(plan.steps)
    assert 0 < spent[0] < spent[1] <= final == pytest.approx(trainer.report.epsilon)


def test_the_run_is_a_function_of_the_seed_and_make_private_is_the_same_plan():
    one, again, other = _trainer(seed=5), _trainer(seed=5), _trainer(seed=6)
    for trainer in (one, again, other):
        trainer.fit()

    def params(trainer):
        return [p.detach() for p in trainer.model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(params(one), params(again), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(params(one), params(other), strict=True))
    model = torch.nn.Linear(5, 1)
    run = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), _data(), epsilon=EPS,
                       delta=DELTA, epochs=EPOCHS, batch_size=BATCH, clip_norm=1.0,
                       mechanism="banded", accountant="rdp")  # fmt: skip
    assert run.plan.event() == one.plan.event() and run.steps_per_epoch == one.steps_per_epoch


def test_fixed_batch_banded_stays_available():
    plan, info = build_plan("banded-fixed", N, batch_size=BATCH, epochs=EPOCHS, clip_norm=1.0,
                            epsilon=EPS, delta=DELTA)  # fmt: skip
    assert isinstance(plan.batches, FixedBatches) and info["sampling"] == "fixed"
    assert info["mechanism"] == "banded-fixed" and plan.label == "banded steps"
    # without a target (a caller that does not pass it) "banded" is that same fixed plan
    plain, plain_info = build_plan("banded", N, batch_size=BATCH, epochs=EPOCHS, clip_norm=1.0)
    assert plain.batches == plan.batches and plain.label == plan.label
    assert plain.mechanism.coefficients.tolist() == plan.mechanism.coefficients.tolist()
    assert plain_info["sampling"] == "fixed"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mechanism": "banded", "num_records": 29, "batch_size": 15},
         r"needs at least 2 parts of batch_size=15 records .* N // batch_size = 1"),
        ({"mechanism": "banded", "neighbouring": "replace-one"},
         "analysed under zero-out neighbours; use neighbouring='zero-out' or "
         "mechanism='banded-fixed'"),
        ({"mechanism": "auto", "epsilon": None},
         "mechanism='auto' chooses from the run's target epsilon and delta"),
        ({"mechanism": "bandit"}, r"Expected mechanism in \(.*'banded-fixed', 'auto'\)"),
    ],
)  # fmt: skip
def test_refusals_are_one_clear_line(kwargs, message):
    arguments = {"num_records": N, "batch_size": BATCH, "epochs": EPOCHS, "clip_norm": 1.0,
                 "epsilon": EPS, "delta": DELTA, **kwargs}  # fmt: skip
    mechanism = arguments.pop("mechanism")
    num_records = arguments.pop("num_records")
    with pytest.raises(ValueError, match=message) as caught:
        build_plan(mechanism, num_records, **arguments)
    assert "\n" not in str(caught.value)


def test_resume_from_a_checkpoint_replays_the_cyclic_schedule_bit_for_bit(tmp_path):
    whole = _trainer(seed=4)
    whole.fit()
    first = _trainer(seed=4)
    first.step()
    first.save(tmp_path / "ckpt.pt")
    first.step()  # discarded by the resume
    resumed = _trainer(seed=9)  # other keys: the checkpoint's are restored
    resumed.load(tmp_path / "ckpt.pt")
    assert resumed.step_count == 1
    resumed.fit()
    pairs = zip(whole.model.state_dict().values(), resumed.model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert resumed.ledger.events == whole.ledger.events
