"""Noisy Newton: OLS in the noiseless limit, the recorded releases, the residual clip."""

import numpy as np
import pytest

from privopt.accounting import PrivacyLedger
from privopt.releases.newton import dp_newton, newton_shares


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


# -- dp_newton_rows: the blockwise form on raw rows ----------------------------------------------
def _bounds_cases():
    """LinearBounds that exercise every clip: box clips (Student-t features), row clips (a
    radius below most norms), a dropped feature (scale inf), a partial box mask, no intercept,
    no scaling, and offsets large enough that the blocks are centred before reading."""
    import dataclasses
    import math

    from privopt.releases.preprocess import LinearBounds

    d = 6
    scale = np.full(d, 1.5)
    scale[3] = np.inf
    base = LinearBounds(
        np.full(d, 1.0), 0.2, 3.0, 10.0, 3.0 / math.sqrt(d), "private", x_scale=scale, x_box=4.0
    )
    mask = np.ones(d, dtype=bool)
    mask[:2] = False
    offset = np.full(d, 1.0)
    offset[2] = 1e6 + 1.0
    return {
        "private": (base, 0.0),
        "no intercept": (dataclasses.replace(base, intercept_scale=0.0), 0.0),
        "box mask": (dataclasses.replace(base, box_mask=mask), 0.0),
        "public": (dataclasses.replace(base, x_scale=None, x_box=math.inf, x_radius=8.0), 0.0),
        "offset": (dataclasses.replace(base, x_center=offset), 1e6),
    }


@pytest.mark.parametrize("case", list(_bounds_cases()))
@pytest.mark.parametrize("n", [3_000, 9_000])
def test_rows_form_equals_dp_newton_on_the_transform(case, n, monkeypatch):
    """Same releases (events) and, with the same seed, the same model up to the order of the
    floating-point sums: the statistics are sums of about N terms of size R T, so their
    rounding is ~1e-16 sqrt(N) relative, far below 1e-10. n = 9,000 exceeds the (patched)
    quantile subset, so the subset's draw and its rows are checked too."""
    from privopt.releases import newton
    from privopt.releases.newton import dp_newton_rows

    monkeypatch.setattr(newton, "QUANTILE_SUBSET", 5_000)
    monkeypatch.setattr(newton, "BLOCK_ROWS", 1_000)  # several blocks, a partial last one
    bounds, shift = _bounds_cases()[case]
    rng = np.random.default_rng(3)
    X = rng.standard_t(3, size=(n, 6)) * 3.0 + 1.0
    y = X @ rng.normal(size=6) + rng.standard_t(3, size=n)
    X[:, 2] += shift
    results = []
    for form in ("transform", "rows"):
        ledger, gen = PrivacyLedger("zero-out"), np.random.default_rng(7)
        if form == "transform":
            Z, t = bounds.transform(X, y)
            w, info = dp_newton(
                Z, t, row_bound=bounds.row_bound, target_bound=bounds.y_radius, mu=2.0,
                rng=gen, ledger=ledger,
            )  # fmt: skip
        else:
            w, info = dp_newton_rows(X, y, bounds, mu=2.0, rng=gen, ledger=ledger)
        results.append((w, info, ledger))
    (w0, i0, l0), (w1, i1, l1) = results
    np.testing.assert_allclose(w1, w0, rtol=1e-10, atol=1e-10 * np.linalg.norm(w0))
    np.testing.assert_allclose(i1["residual_clips"], i0["residual_clips"], rtol=1e-10)
    # the same releases; a later step's clip (a function of w) moves with w's rounding only
    assert [e.label for e in l1.events] == [e.label for e in l0.events]
    for a, b in zip(l1.events, l0.events, strict=True):
        assert a.sensitivity == pytest.approx(b.sensitivity, rel=1e-10)
        assert a.std / a.sensitivity == pytest.approx(b.std / b.sensitivity, rel=1e-12)


def test_rows_form_statistics_with_rows_clipped_to_R():
    """The Gram matrix, Z^T t and the clipped gradients of the blockwise statistics equal
    those of dp_newton's rows, on data where most rows are clipped to the radius (so rounding
    pushes some over R = hypot(x_radius, s0), which dp_newton clips again)."""
    import math

    from privopt.releases.newton import _BlockStatistics, _InMemoryStatistics
    from privopt.releases.preprocess import LinearBounds

    rng = np.random.default_rng(5)
    n, d = 6_000, 7
    X = rng.normal(size=(n, d)) * 2.0
    y = rng.normal(size=n) * 3.0
    bounds = LinearBounds(np.zeros(d), 0.0, 1.3, 4.0, 1.3 / math.sqrt(d), "private")
    Z, t = bounds.transform(X, y)
    norms = np.linalg.norm(Z, axis=1)
    R = bounds.row_bound
    Z = Z * np.minimum(1.0, R / np.maximum(norms, 1e-300))[:, None]  # reference, as dp_newton
    blocks = _BlockStatistics(X, t, bounds, bounds.y_radius)
    gram = blocks.gram_pass()
    reference = Z.T @ Z
    np.testing.assert_allclose(np.triu(gram), np.triu(reference), rtol=1e-12, atol=1e-9 * n)
    np.testing.assert_allclose(-blocks.moment, Z.T @ -t, rtol=1e-12, atol=1e-9 * n)
    assert blocks.index.size > 0.9 * n  # the row clip acted on most rows: all kept exactly
    memory = _InMemoryStatistics(Z, t)
    w = rng.normal(size=d + 1)
    for rho in (0.5, 4.0):
        np.testing.assert_allclose(
            blocks.clipped_gradient(w, rho), memory.clipped_gradient(w, rho), rtol=1e-11,
            atol=1e-9 * n,
        )  # fmt: skip
    grid = np.linspace(0.01, 10.0, 200)
    got_want = zip(blocks.residual_counts(w, grid), memory.residual_counts(w, grid), strict=True)
    for got, want in got_want:
        np.testing.assert_array_equal(got, want)
