"""Noisy Newton: OLS in the noiseless limit, the recorded releases, the residual clip."""

import numpy as np
import pytest

from privopt.accounting import PrivacyLedger
from privopt.algorithms.newton import dp_newton, newton_shares


def _data(n=20_000, p=4, seed=0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, p)) / 2.0
    w = rng.normal(size=p)
    t = Z @ w + 0.3 * rng.normal(size=n)
    return Z, np.clip(t, -6, 6), w


def test_large_budget_gives_ols():
    Z, t, _ = _data()
    ledger = PrivacyLedger("zero-out")
    w, info = dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=1e6, rng=np.random.default_rng(0), ledger=ledger
    )
    ols = np.linalg.lstsq(Z, t, rcond=None)[0]
    np.testing.assert_allclose(w, ols, atol=1e-4)
    assert info["residual_clips"][0] == 6.0 and info["residual_clips"][-1] < 6.0


@pytest.mark.parametrize(("relation", "factor"), [("zero-out", 1.0), ("replace-one", 2.0)])
def test_releases_compose_to_mu_with_computed_sensitivities(relation, factor):
    Z, t, w_star = _data(seed=1)
    ledger = PrivacyLedger(relation)
    w, info = dp_newton(
        Z, t, row_bound=4.0, target_bound=6.0, mu=0.5, rng=np.random.default_rng(1), ledger=ledger
    )
    assert ledger.mu == pytest.approx(0.5, rel=1e-9)
    events = {e.label: e for e in ledger.events}
    gram = events["noisy-Newton upper triangle of Z^T Z"]
    assert gram.sensitivity == pytest.approx((np.sqrt(2.0) if factor == 2 else 1.0) * 16.0)
    first = events["noisy-Newton clipped gradient 0"]
    assert first.sensitivity == pytest.approx(factor * 4.0 * 6.0)
    last = events["noisy-Newton clipped gradient 2"]
    assert last.sensitivity == pytest.approx(factor * 4.0 * info["residual_clips"][-1])
    # the residual clip follows the residuals (std 0.3), far below the target bound
    assert info["residual_clips"][-1] < 2.0
    assert np.linalg.norm(w - w_star) < 0.05


def test_shares_sum_to_one_and_rows_are_clipped_here():
    shares = newton_shares(3)
    assert shares.sum() == pytest.approx(1.0) and shares.size == 2 + 2 * 2
    assert shares[-1] > shares[-3]  # the last step gets the most
    Z, t, _ = _data(n=2000)
    big = Z * 100.0  # rows far beyond the bound are clipped, so the recorded bound holds
    ledger = PrivacyLedger("zero-out")
    w, _ = dp_newton(
        big, t, row_bound=1.0, target_bound=6.0, mu=1e6, rng=np.random.default_rng(0), ledger=ledger
    )
    assert np.all(np.isfinite(w))
    with pytest.raises(ValueError, match="row_bound"):
        dp_newton(
            Z,
            t,
            row_bound=-1.0,
            target_bound=6.0,
            mu=1.0,
            rng=np.random.default_rng(0),
            ledger=ledger,
        )
