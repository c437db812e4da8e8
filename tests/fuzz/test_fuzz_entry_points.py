"""Fuzzing the public entry points (issue 17): every input either works or fails with the
documented ``ValueError`` (``TypeError`` for a wrong kind of object); inputs are never modified
in place; a seed reproduces a fit bit for bit; the CLI ends in exit 0 or a one-line error.

Kept fast for ``make test``: few examples per property, no deadline.
"""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privopt import DPLinearRegression, noise
from privopt import accounting as acc
from privopt.cli import main

FAST = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NASTY = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, 1e-308, 5e-324])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), NASTY)


def _estimator(seed=0, **kw):
    kw.setdefault("method", "adassp")
    return DPLinearRegression(
        epsilon=1.0,
        delta=1e-6,
        feature_bounds=(-1.0, 1.0),
        target_bounds=(-1.0, 1.0),
        random_state=seed,
        **kw,
    )


@st.composite
def designs(draw):
    n = draw(st.integers(0, 12))
    d = draw(st.integers(0, 3))
    X = draw(arrays(np.float64, (n, d), elements=FLOATS))
    y = draw(
        arrays(np.float64, (draw(st.sampled_from([n, max(n - 1, 0), n + 1])),), elements=FLOATS)
    )
    return X, y


@FAST
@given(designs())
def test_estimator_fit_accepts_or_refuses_with_value_error_and_never_mutates(data):
    X, y = data
    X0, y0 = X.copy(), y.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = _estimator(allow_large_delta=True).fit(X, y)
        except ValueError:
            pass
        else:
            assert np.all(np.isfinite(model.coef_)) and math.isfinite(model.intercept_)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


@pytest.mark.parametrize(
    ("X", "y"),
    [
        (np.array([["a", "b"], ["c", "d"]], dtype=object), np.zeros(2)),
        (pd.DataFrame({"a": pd.Categorical(["x", "y", "x"])}), np.zeros(3)),
        (np.zeros((3, 2, 1)), np.zeros(3)),
        (np.zeros((3, 2)), np.zeros((3, 2))),
        ([[1, 2], [3]], [1, 2]),
        ("not data", [1]),
    ],
)
def test_estimator_refuses_wrong_shapes_and_dtypes_with_value_error(X, y):
    with pytest.raises(ValueError):
        _estimator(allow_large_delta=True).fit(X, y)


@pytest.mark.slow
@FAST
@given(st.sampled_from(["adassp", "dpsgd", "ftrl-sigma"]), st.integers(0, 2**31 - 1))
def test_a_seed_reproduces_a_fit_bit_for_bit(method, seed):
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(300, 2))
    y = np.clip(X @ [0.5, -0.5], -1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _estimator(seed, method=method).fit(X, y)
        b = _estimator(seed, method=method).fit(X, y)
    assert a.coef_.tobytes() == b.coef_.tobytes() and a.intercept_ == b.intercept_


@FAST
@given(designs())
def test_predict_refuses_bad_rows_with_value_error(data):
    X, _ = data
    rng = np.random.default_rng(2)
    Xt = rng.uniform(-1, 1, size=(50, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _estimator().fit(Xt, Xt @ [0.5, -0.5])
    X0 = X.copy()
    try:
        out = model.predict(X)
    except ValueError:
        pass
    else:
        assert out.shape == (X.shape[0],)
    np.testing.assert_array_equal(X, X0)


@FAST
@given(FLOATS, FLOATS, FLOATS)
def test_accounting_functions_return_finite_values_or_value_error(a, b, c):
    calls = [
        lambda: acc.gaussian_epsilon(a, b, c),
        lambda: acc.calibrate_gaussian_sigma(a, b, c),
        lambda: acc.gdp_epsilon(a, b),
        lambda: acc.gdp_mu(a, b),
        lambda: acc.zcdp_epsilon(a, b),
        lambda: acc.gaussian_delta(a, b, c),
    ]
    for call in calls:
        try:
            out = call()
        except ValueError:
            continue
        assert math.isfinite(out) or out == math.inf, out


@FAST
@given(FLOATS, st.integers(-3, 40))
def test_noise_mechanisms_validate_their_arguments(nu, steps):
    for make in (noise.nu_dpftrl, noise.damped_anti_pgd):
        try:
            mech = make(nu)
            b = mech.decoder_matrix(steps)
        except ValueError:
            continue
        assert np.all(np.isfinite(b))
    try:
        out = noise.gaussian_noise(np.random.default_rng(0), nu, 3)
    except ValueError:
        return
    assert np.all(np.isfinite(out))


WORDS = [
    "account", "gaussian", "gdp", "zcdp", "dpsgd", "noise", "sensitivity",
    "--sigma", "--delta", "--mu", "--rho", "--epsilon", "--steps", "--sample-rate", "--json",
    "1", "0", "-1", "nan", "inf", "1e308", "abc", "1e-5", "",
]  # fmt: skip


@FAST
@given(st.lists(st.sampled_from(WORDS), max_size=7))
def test_cli_never_shows_a_traceback(capsys, argv):
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code in (0, 2, None), err
    assert "Traceback" not in err
    if code == 2 and err.strip():
        assert len(err.strip().splitlines()) == 1 and err.startswith("error:")
