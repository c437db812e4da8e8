"""Issue 12 item 3 at the algorithm level: every algorithm drops its non-private diagnostics
(clip fractions, largest norms, noise norms, visit counts) unless ``diagnostics=True``, which
warns and lists them in the report as releases outside the guarantee."""

from types import SimpleNamespace

import numpy as np
import pytest

from privopt.accounting import PrivacyLedger
from privopt.algorithms import dp_ftrl, dp_sgd_output, dp_ssgd
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.algorithms.srgd import accelerated_dp_srgd
from privopt.noise import nu_dpftrl


def _data(n=400, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d)) / np.sqrt(d)
    y = np.where(X @ np.ones(d) > 0, 1.0, -1.0)
    return X, y


def _ssgd(diagnostics):
    X, y = _data()
    ledger = PrivacyLedger("replace-one")
    _, trace, info = dp_ssgd(
        X, y, noise_multiplier=2.0, clip=0.1, learning_rate=0.1,
        rng=np.random.default_rng(1), ledger=ledger, diagnostics=diagnostics,
    )  # fmt: skip
    # (the shuffled pass's epsilon needs a larger N; the ledger's disclosures are what the
    # report would list)
    return trace, info, SimpleNamespace(non_private_releases=ledger.disclosures)


def _ftrl(diagnostics):
    X, y = _data()
    fit = dp_ftrl(
        X, (y > 0).astype(float), mechanism=nu_dpftrl(0.1), epsilon=1.0, delta=1e-6,
        clip_norm=0.1, learning_rate=0.1, rng=np.random.default_rng(2), batch_size=20,
        diagnostics=diagnostics,
    )  # fmt: skip
    return fit.trace, fit.info, fit.report


def _output(diagnostics):
    X, y = _data()
    fit = dp_sgd_output(
        X, y, "logistic", epsilon=2.0, delta=1e-5, x_bound=1.0, eta=0.1, steps=400,
        radius=2.0, rng=np.random.default_rng(3), diagnostics=diagnostics,
    )  # fmt: skip
    return fit.trace, fit.info, fit.report


def _srgd(diagnostics):
    X, y = _data(256)
    fit = accelerated_dp_srgd(
        X, y, "logistic", epsilon=1.0, delta=1e-6, radius=1.0, rng=np.random.default_rng(4),
        x_bound=1.0, diagnostics=diagnostics,
    )  # fmt: skip
    return fit.trace, fit.info, fit.report


CASES = {
    "dp_ssgd": (_ssgd, "clip_fraction"),
    "dp_ftrl": (_ftrl, "clip_fraction"),
    "dp_sgd_output": (_output, "max_visits"),
    "accelerated_dp_srgd": (_srgd, "max_norm"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_non_private_diagnostics_only_on_request(name):
    run, released_name = CASES[name]
    trace, info, report = run(False)
    assert trace.clip_fraction is None
    assert not {"max_norm", "noise_norm"} & set(trace.extra)
    assert not {"clipped_fraction", "max_visits"} & set(info)
    assert report.non_private_releases == ()
    with pytest.warns(NonPrivateDiagnosticsWarning, match=released_name):
        trace, info, report = run(True)
    assert released_name in {*info, *trace.extra, "clip_fraction"}
    assert any(released_name in text for text in report.non_private_releases)


def test_diagnostics_flag_must_be_a_bool():
    with pytest.raises(ValueError, match="diagnostics"):
        _ssgd("yes")
