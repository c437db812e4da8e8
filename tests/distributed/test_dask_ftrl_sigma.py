"""DP-FTRL-Σ on Dask (issue 19, items 2 and 4) beyond the shared equality tests
(test_dask_equality.py runs it for 1, 3 and 17 partitions, both bounds, both schedulers): the
pass's rows gathered a few at a time, public_X's Σ, and the CLI. Tolerance TOLERANCE = 1e-8 (the
fits read the same rows in the same order; 0.0 measured)."""

import json

import numpy as np
import pytest
from dask_helpers import TOLERANCE, _close, as_dask, assert_same_fit, estimator, reference
from test_dask_cli import fit, write_parts

from privopt.distributed import rounds as dask_rounds


def test_a_few_rows_per_gather(synchronous, data, monkeypatch):
    # room for 300 rows of (p + 1) = 5 floats per pass: ceil(N_main / 300) passes, same model
    monkeypatch.setattr(dask_rounds, "GATHER_BYTES", 8 * 5 * 300)
    X, y = data
    fitted = estimator("ftrl-sigma", False).fit(*as_dask(X, y, 3))
    assert_same_fit(reference("ftrl-sigma", False, X, y), fitted)
    n_main = fitted.fit_info_["training_rows"]
    assert fitted.fit_info_["gather_passes"] == -(-n_main // 300) > 1


def test_public_rows_shape_sigma(synchronous, data):
    X, y = data
    public = np.random.default_rng(5).normal(size=(200, 3)) * [1.0, 2.0, 0.5]
    expected = estimator("ftrl-sigma", False, public_X=public).fit(X, y)
    fitted = estimator("ftrl-sigma", False, public_X=public).fit(*as_dask(X, y, 17))
    assert_same_fit(expected, fitted)
    assert fitted.fit_info_["covariance"] == "LowRankPlusRidgeCovariance"
    # Σ from public rows changes the model: the equality above is not the identity case's
    plain = reference("ftrl-sigma", False, X, y)
    assert np.max(np.abs(plain.coef_ - fitted.coef_)) > 1e-3


@pytest.mark.parametrize("method", ["ftrl-sigma"])
def test_cli_dask_backend_equals_numpy_backend(capsys, tmp_path, data, synchronous, method):
    folder = write_parts(tmp_path / "table", data, "parquet", files=4)
    payloads = []
    for backend in ("numpy", "dask"):
        code, out, err = fit(
            capsys, folder, tmp_path / f"{backend}.json", "--method", method, "--backend", backend
        )
        assert code == 0, err
        payloads.append(json.loads(out))
    a, b = payloads
    np.testing.assert_allclose(a["coef"], b["coef"], rtol=0, atol=TOLERANCE)
    assert abs(a["intercept"] - b["intercept"]) <= TOLERANCE
    _close(a["privacy_report"], b["privacy_report"])
