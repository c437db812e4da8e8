"""The label set of a classifier is public (classes=) or released privately (issue 26, item 1)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from privopt import DPLinearClassifier
from privopt.accounting import PrivacyLedger, gdp_mu
from privopt.releases.label_set import (
    LABEL_FAILURE_SHARE,
    check_public_labels,
    label_count_sensitivity,
    label_slice_rows,
    release_label_set,
)


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 3))
    return X, (X[:, 0] > 0.5).astype(int)


def test_public_classes_refuse_an_unknown_label_without_naming_it():
    X, y = _data()
    y[-1] = 4111111111111111
    model = DPLinearClassifier(feature_bounds=(0, 1), classes=[0, 1], random_state=0)
    with pytest.raises(ValueError, match="outside the public classes") as info:
        model.fit(X, y)
    assert "4111" not in str(info.value)
    assert not hasattr(model, "classes_")


def test_public_classes_fix_the_model_shape_and_are_stated():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPLinearClassifier(
            feature_bounds=(0, 1), classes=[0, 1, 2], steps=3000, random_state=0
        ).fit(X, y)
    assert list(model.classes_) == [0, 1, 2] and model.coef_.shape == (3, 3)
    assert any("label set is public" in a for a in model.privacy_report_.assumptions)
    assert model.fit_info_["label_set"] == "public"


@pytest.mark.parametrize("classes", [[1], [0, 0], [np.nan, 1.0]], ids=["one", "duplicate", "nan"])
def test_bad_public_classes_are_refused(classes):
    with pytest.raises(ValueError, match="classes"):
        check_public_labels(classes, np.array([0, 1]))


def test_string_labels_round_trip():
    X, y = _data()
    names = np.array(["no", "yes"])[y]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPLinearClassifier(feature_bounds=(0, 1), steps=3000, random_state=0).fit(X, names)
    assert list(model.classes_) == ["no", "yes"]
    assert set(model.predict(X[:20])) <= {"no", "yes"}


def test_continuous_targets_are_refused_with_the_fix():
    X, _ = _data()
    with pytest.raises(ValueError, match="classes="):
        DPLinearClassifier(feature_bounds=(0, 1)).fit(X, X[:, 0])


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"perturbation": "output"},
        {"method": "srgd"},
        {"accounting": "paper"},
        {"feature_bounds": (0, 1)},
    ],
    ids=["default", "output", "srgd", "paper", "public-bounds"],
)
def test_the_private_label_set_keeps_the_fit_within_its_target(params):
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPLinearClassifier(epsilon=1.0, delta=1e-6, random_state=1, **params).fit(X, y)
    report = model.privacy_report_
    assert report.epsilon <= 1.0 and report.delta == 1e-6
    labels = [e for e in report.events if e.label.startswith("label set")]
    assert {e.mechanism for e in labels} == {"gaussian", "sampling-failure"}
    assert all(e.partitions == 1 for e in labels)  # its own disjoint slice
    assert list(model.classes_) == [0, 1]


def test_release_is_calibrated_as_stated():
    ledger = PrivacyLedger("replace-one")
    y = np.repeat([0, 1, 2], 400)
    released = release_label_set(
        y, epsilon=1.0, delta=1e-6, rng=np.random.default_rng(0), ledger=ledger
    )
    assert list(released) == [0, 1, 2]
    gaussian, failure = ledger.events
    failure_p = LABEL_FAILURE_SHARE * 1e-6
    assert failure.probability == pytest.approx(failure_p)
    assert gaussian.sensitivity == pytest.approx(math.sqrt(2.0))
    assert gaussian.mu == pytest.approx(gdp_mu(1.0, 1e-6 - failure_p), rel=1e-6)
    assert ledger.epsilon(1e-6) <= 1.0
    assert label_count_sensitivity("zero-out") == 1.0
    with pytest.raises(ValueError, match="replace-one or zero-out"):
        label_count_sensitivity("add-remove")


def _lone_label_release_rate(failure_share: float, runs: int) -> float:
    """How often a label held by one record is released (the planted bug raises the
    failure probability, i.e. lowers the threshold)."""
    import privopt.releases.label_set as module

    saved = module.LABEL_FAILURE_SHARE
    module.LABEL_FAILURE_SHARE = failure_share
    try:
        y = np.concatenate([np.zeros(500, dtype=int), [7]])
        hits = 0
        for seed in range(runs):
            ledger = PrivacyLedger("replace-one")
            out = release_label_set(
                y, epsilon=1.0, delta=0.1, rng=np.random.default_rng(seed), ledger=ledger
            )
            hits += 7 in out
        return hits / runs
    finally:
        module.LABEL_FAILURE_SHARE = saved


def test_a_lone_label_passes_at_most_at_the_failure_rate():
    """delta = 0.1 makes the failure probability 0.01 measurable: the release rate of a label
    held by one record is P(1 + Z > tau) exactly; with the threshold lowered (failure share
    0.9, p = 0.09: the planted bug) the same test sees it."""
    runs = 2000
    rate = _lone_label_release_rate(LABEL_FAILURE_SHARE, runs)
    p = LABEL_FAILURE_SHARE * 0.1
    assert rate <= p + 4 * math.sqrt(p / runs)
    assert _lone_label_release_rate(0.9, runs) > 0.05


def test_the_noise_follows_its_law():
    """The released set is {k: c_k + N(0, sigma^2) > tau}: a label with exactly tau records
    passes half the time, one with tau + sigma records 84% of the time."""
    ledger = PrivacyLedger("zero-out")
    release_label_set(
        np.zeros(10, int), epsilon=1.0, delta=1e-3, rng=np.random.default_rng(0), ledger=ledger
    )
    std = ledger.events[0].std
    tau = 1.0 + std * norm.isf(LABEL_FAILURE_SHARE * 1e-3)
    counts = {"at": math.ceil(tau), "above": math.ceil(tau + std)}
    for name, count in counts.items():
        expected = norm.sf((tau - count) / std)
        hits = sum(
            1
            in release_label_set(
                np.r_[np.zeros(1000, int), np.ones(count, int)],
                epsilon=1.0,
                delta=1e-3,
                rng=np.random.default_rng(seed),
                ledger=PrivacyLedger("zero-out"),
            )
            for seed in range(1500)
        )
        assert abs(hits / 1500 - expected) < 4 * math.sqrt(expected * (1 - expected) / 1500), name


def test_the_slice_is_a_public_size():
    assert label_slice_rows(3000) == 300
    assert label_slice_rows(10**7) == 20_000
    assert label_slice_rows(1) == 1


def test_the_label_release_does_not_shift_later_noise():
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    release_label_set(
        np.arange(3), epsilon=1, delta=1e-6, rng=rng_a, ledger=PrivacyLedger("replace-one")
    )
    release_label_set(
        np.arange(30), epsilon=1, delta=1e-6, rng=rng_b, ledger=PrivacyLedger("replace-one")
    )
    assert rng_a.random() == rng_b.random()
