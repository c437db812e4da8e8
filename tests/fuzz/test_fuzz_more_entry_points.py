"""More fuzzed entry points (issue 17, item 5): every estimator and method, the algorithms'
functional API, privacy events and ledgers, every noise-mechanism constructor and stream, and
``privopt fit`` / ``privopt predict`` on malformed files.

The contract is the same as in ``test_fuzz_entry_points.py``: a result that is finite, or a
documented error (``ValueError``; ``TypeError`` for a wrong kind of object); inputs are never
modified in place; the CLI ends in exit 0 or one line on stderr with exit 2. Few examples per
property, derandomized in ``make test`` (tests/conftest.py).
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privopt import DPLinearClassifier, DPLinearRegression, DPSGDRegressor, noise
from privopt import accounting as acc
from privopt import algorithms as alg
from privopt.cli import main

FAST = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NASTY = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, 1e-308, 5e-324])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), NASTY)
SMALL_FLOATS = st.one_of(st.floats(-3, 3), NASTY)
DOCUMENTED = (ValueError, TypeError)


@st.composite
def designs(draw, max_rows=40):
    """Mostly well-formed small tables with nasty entries, sometimes the wrong length."""
    n = draw(st.integers(0, max_rows))
    d = draw(st.integers(1, 3))
    X = draw(arrays(np.float64, (n, d), elements=SMALL_FLOATS))
    m = draw(st.sampled_from([n, n, n, max(n - 1, 0), n + 1]))
    y = draw(arrays(np.float64, (m,), elements=SMALL_FLOATS))
    return X, y


def _fit_or_refuse(estimator, X, y):
    """Fit; a refusal must be a documented error; a fit must give a finite model."""
    X0, y0 = X.copy(), y.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = estimator.fit(X, y)
        except DOCUMENTED:
            model = None
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    if model is not None:
        assert np.all(np.isfinite(model.coef_)), model.coef_
        assert np.all(np.isfinite(np.atleast_1d(model.intercept_)))
    return model


REGRESSION_METHODS = ["auto", "adassp", "newton", "dpsgd", "ftrl-sigma", "ssgd", "ambssgd"]


@FAST
@given(st.sampled_from(REGRESSION_METHODS), designs())
def test_every_regression_method_fits_or_refuses_and_never_mutates(method, data):
    X, y = data
    estimator = DPLinearRegression(
        epsilon=1.0,
        delta=1e-6,
        method=method,
        feature_bounds=(-1.0, 1.0),
        target_bounds=(-1.0, 1.0),
        random_state=0,
        allow_large_delta=True,
    )
    _fit_or_refuse(estimator, X, y)


@FAST
@given(st.sampled_from(["huber", "absolute", "squared"]), designs())
def test_sgd_regressor_fits_or_refuses_and_never_mutates(loss, data):
    X, y = data
    estimator = DPSGDRegressor(
        loss=loss,
        epsilon=1.0,
        feature_bounds=(-1.0, 1.0),
        target_bounds=(-1.0, 1.0),
        steps=20,
        random_state=0,
    )
    _fit_or_refuse(estimator, X, y)


LABELS = st.sampled_from(
    [
        np.array([0.0, 1.0]),
        np.array([-1.0, 1.0]),
        np.array([0.0, 1.0, 2.0]),
        np.array([1.0]),
        np.array([np.nan, 1.0]),
        np.array([0.5, 1.0]),
    ]
)


@FAST
@given(designs(), LABELS, st.sampled_from(["logistic", "hinge", "squared_hinge"]))
def test_classifier_fits_or_refuses_on_any_label_set(data, classes, loss):
    X, y = data
    y = classes[np.arange(len(y)) % len(classes)]
    estimator = DPLinearClassifier(
        loss=loss, epsilon=1.0, feature_bounds=(-1.0, 1.0), steps=20, random_state=0
    )
    model = _fit_or_refuse(estimator, X, y)
    if model is not None:
        assert set(np.unique(model.predict(np.zeros((2, X.shape[1]))))) <= set(model.classes_)


@FAST
@given(FLOATS, FLOATS, st.integers(-2, 50))
def test_algorithms_validate_their_public_knobs(epsilon, learning_rate, steps):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (40, 2))
    y = X @ [0.3, -0.3]
    X0 = X.copy()
    calls = [
        lambda: alg.dp_ftrl(
            X,
            y,
            mechanism=noise.independent(),
            epsilon=epsilon,
            delta=1e-6,
            clip_norm=1.0,
            learning_rate=learning_rate,
            rng=np.random.default_rng(0),
        ),
        lambda: alg.dp_sgd_gradient(
            X,
            y,
            "squared",
            epsilon=epsilon,
            delta=1e-6,
            x_bound=math.sqrt(2),
            y_bound=1.0,
            radius=2.0,
            eta=learning_rate,
            steps=steps,
            rng=np.random.default_rng(0),
        ),
        lambda: alg.accelerated_dp_srgd(
            X,
            y,
            "squared",
            epsilon=epsilon,
            delta=1e-6,
            radius=2.0,
            x_bound=math.sqrt(2),
            y_bound=1.0,
            steps=steps if steps > 0 else None,
            rng=np.random.default_rng(0),
        ),
    ]
    for call in calls:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                result = call()
            except DOCUMENTED:
                continue
        assert np.all(np.isfinite(result.coef)), result.coef
        assert result.report.epsilon <= epsilon * (1 + 1e-9)
    np.testing.assert_array_equal(X, X0)


@FAST
@given(FLOATS, FLOATS, st.integers(-2, 10**7))
def test_privacy_events_and_ledgers_validate_or_report_finite(a, b, count):
    makers = [
        lambda: acc.GaussianEvent(a, b),
        lambda: acc.GaussianEvent(1.0, a, count=count),
        lambda: acc.PoissonSampledGaussianEvent(a, b, count=count),
    ]
    for make in makers:
        try:
            event = make()
            ledger = acc.PrivacyLedger("zero-out")
            ledger.record(event)
            report = ledger.report(1e-6)
        except DOCUMENTED:
            continue
        assert report.epsilon >= 0.0 and not math.isnan(report.epsilon)


MECHANISMS = [
    lambda v: noise.nu_dpftrl(v),
    lambda v: noise.damped_anti_pgd(v),
    lambda v: noise.banded_toeplitz([1.0, v]),
    lambda v: noise.optimal_cc(),
    lambda v: noise.independent(),
    lambda v: noise.TreeAggregation(),
]


@FAST
@given(st.integers(0, len(MECHANISMS) - 1), FLOATS, st.integers(-2, 6), FLOATS)
def test_noise_streams_validate_dim_and_std_and_draw_finite_noise(which, value, dim, std):
    try:
        mechanism = MECHANISMS[which](value)
        stream = mechanism.noise_stream(dim, std, rng=np.random.default_rng(0))
        draws = [stream.next() for _ in range(4)]
    except DOCUMENTED:
        return
    assert all(d.shape == (dim,) and not np.any(np.isnan(d)) for d in draws)
    if std < 1e300:  # beyond, a draw of 40 std can overflow to inf: the only non-finite case
        assert all(np.all(np.isfinite(d)) for d in draws)
    assert std > 0 and math.isfinite(std)  # a zero, negative or NaN std must be refused


CELLS = st.sampled_from(["1", "-0.5", "2e3", "", "nan", "inf", "abc", "1,2", '"x"', "0x1"])


@FAST
@given(st.lists(st.lists(CELLS, min_size=3, max_size=3), max_size=6), st.booleans())
def test_cli_fit_and_predict_on_malformed_csv_end_in_one_line(tmp_path_factory, rows, header):
    folder = tmp_path_factory.mktemp("fuzz")
    lines = (["a,b,y"] if header else []) + [",".join(row) for row in rows]
    data = folder / "data.csv"
    data.write_text("\n".join(lines) + "\n")
    model = folder / "model.json"
    for argv in (
        ["fit", str(data), "--target", "y", "--epsilon", "1", "--out", str(model)],
        ["predict", str(model), str(data)],
    ):
        code, err = _run(argv)
        assert code in (0, 2, None), err
        assert "Traceback" not in err
        if code == 2:
            assert len(err.strip().splitlines()) == 1, err


def _run(argv):
    import contextlib
    import io

    stderr = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, stderr.getvalue()


@pytest.mark.parametrize("method", ["adassp", "newton", "auto"])
def test_a_seed_reproduces_every_fast_method_bit_for_bit(method):
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(3000, 3))
    y = np.clip(X @ [0.5, -0.5, 0.2] + 0.1 * rng.standard_normal(3000), -1, 1)
    fits = [
        DPLinearRegression(epsilon=1.0, method=method, random_state=7).fit(X, y) for _ in range(2)
    ]
    assert fits[0].coef_.tobytes() == fits[1].coef_.tobytes()
    assert fits[0].intercept_ == fits[1].intercept_


@pytest.mark.parametrize(
    ("sigma", "expected"),
    [(1e-60, "refused"), (1e-3, "large"), (1e154, "zero"), (1e300, "zero")],
)
def test_dpsgd_accounting_is_bounded_for_extreme_noise(sigma, expected):
    """Regression (fuzzing): sigma = 1e-3 asked the PLD for 38 GiB, sigma = 1e-154 made
    dp_accounting's RDP report epsilon 0 for a noiseless release, 1e154 overflowed."""
    if expected == "refused":
        with pytest.raises(ValueError, match="noiseless"):
            acc.dpsgd_epsilon(sigma, 0.5, 3, 1e-6)
        return
    epsilon = acc.dpsgd_epsilon(sigma, 0.5, 3, 1e-6)
    if expected == "large":  # the RDP bound, returned instead of an intractable PLD
        rdp = acc.dpsgd_epsilon(sigma, 0.5, 3, 1e-6, accountant="rdp")
        assert epsilon == rdp and epsilon > 1e6
    else:
        assert 0.0 <= epsilon < 1e-6
