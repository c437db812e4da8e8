"""No private value in any message (issue 33, item 1).

Recognisable strings are planted in every column type and malformed form (non-numeric cells,
ragged and badly quoted CSV rows, NaN, inf, empty cells, 1-D and complex inputs, nullable and
string dtypes) and must appear in no exception text, warning, or CLI stdout/stderr of fit,
predict, the loaders, the Dask path and the Python API. The refusals name the file, column, row
position and type instead.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from cli_runner import run
from privopt.datasets import load_features, load_table
from privopt.estimators import DPLinearClassifier, DPLinearRegression, DPSGDRegressor
from privopt.model_selection import PrivateGridSearchCV

SSN = "SECRET-SSN-123-45-6789"
CARD = "4111111111111111x"
NUMBER = "987654.321"  # a private number in a ragged row
PLANTED = (SSN, "123-45-6789", CARD, "4111111111111111", NUMBER, "987654")
N, D = 300, 3


def assert_clean(text: str) -> None:
    for secret in PLANTED:
        assert secret not in text, f"{secret!r} leaked in: {text[:400]}"


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    return X, X @ [1.0, -1.0, 0.5] + rng.uniform(-0.5, 0.5, size=N)


def _planted_inputs():
    """(label, X, y) with a secret somewhere; each must be refused without quoting it."""
    X, y = _data()
    obj = X.astype(object)
    obj[17, 1] = SSN
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame["b"] = frame["b"].astype(object)
    frame.loc[5, "b"] = CARD
    strings = pd.DataFrame(X, columns=["a", "b", "c"])
    strings["c"] = strings["c"].astype(str).astype("string")
    strings.loc[9, "c"] = SSN
    lists = X.tolist()
    lists[3][0] = CARD
    y_obj = y.astype(object)
    y_obj[11] = SSN
    return [
        ("object array", obj, y),
        ("object frame column", frame, y),
        ("StringDtype column", strings, y),
        ("list of lists", lists, y),
        ("string in y", X, y_obj),
        ("all strings", np.full((N, D), SSN), y),
        ("bytes", np.full((N, D), CARD.encode(), dtype=object), y),
    ]


def _shape_inputs():
    """Inputs whose refusal used to print the whole array (values planted as numbers)."""
    X, y = _data()
    X = X.copy()
    X[0, 0] = float(NUMBER)
    return [
        ("1-D X", X[:, 0], y),
        ("complex X", X + 1j, y),
        ("3-D X", X.reshape(N, D, 1), y),
        ("NaN", np.where(np.arange(N)[:, None] == 4, np.nan, X), y),
        ("inf", np.where(np.arange(N)[:, None] == 4, np.inf, X), y),
    ]


def _estimators():
    bounds = {"feature_bounds": [(-2, 2)] * D}
    return [
        DPLinearRegression(epsilon=1.0, delta=1e-6, target_bounds=(-5, 5), **bounds),
        DPSGDRegressor(epsilon=1.0, delta=1e-6, target_bounds=(-5, 5), **bounds),
        DPLinearClassifier(epsilon=1.0, delta=1e-6, classes=[0, 1], **bounds),
        PrivateGridSearchCV(
            DPLinearRegression(target_bounds=(-5, 5), **bounds),
            {"method": ["adassp", "newton"]},
            epsilon=1.0,
            delta=1e-6,
        ),
    ]


def _labels(est, y):
    if isinstance(est, DPLinearClassifier) and not (
        isinstance(y, np.ndarray) and y.dtype == object
    ):
        return (np.asarray(y, dtype=float) > 0).astype(int)
    return y


def _caught(call) -> str:
    """The exception text and every warning of ``call``, which must raise."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises((ValueError, TypeError)) as error:
            call()
    return str(error.value) + "\n".join(str(w.message) for w in seen)


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(("label", "X", "y"), _planted_inputs() + _shape_inputs())
def test_fit_refusals_quote_no_value(est, label, X, y):
    if isinstance(est, DPLinearClassifier) and label == "string in y":
        pytest.skip("string labels are legitimate for a classifier (checked below)")
    text = _caught(lambda: est.fit(X, _labels(est, y)))
    assert_clean(text)
    if label in ("object array", "object frame column", "StringDtype column", "list of lists"):
        assert "row" in text and "column" in text and "privopt never quotes" in text


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(("label", "X", "y"), _planted_inputs() + _shape_inputs())
def test_predict_refusals_quote_no_value(est, label, X, y):
    if label == "string in y":
        return
    Xf, yf = _data(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(Xf, _labels(est, yf))
    assert_clean(_caught(lambda: est.predict(X)))


def test_the_refusal_names_column_row_and_type():
    X, y = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).astype(object)
    frame.loc[5, "b"] = CARD
    with pytest.raises(ValueError, match=r"column 'b' \(position 1\), row 5 holds a str"):
        DPLinearRegression(feature_bounds=[(-2, 2)] * D, target_bounds=(-5, 5)).fit(frame, y)


def test_a_classifier_label_outside_the_public_set_is_not_quoted():
    X, _ = _data()
    labels = np.array(["no"] * (N - 1) + [SSN], dtype=object)
    est = DPLinearClassifier(classes=["no", "yes"], feature_bounds=[(-2, 2)] * D)
    assert_clean(_caught(lambda: est.fit(X, labels)))


# -- files ------------------------------------------------------------------------------------
def _csv(X, y) -> str:
    rows = (",".join(map(str, [*r, t])) for r, t in zip(X, y, strict=True))
    return "a,b,c,y\n" + "\n".join(rows) + "\n"


def _files(tmp_path):
    X, y = _data()
    lines = _csv(X, y).splitlines()
    cases = {
        "ragged": [*lines[:5], f"21.46,{NUMBER},1007.45,{SSN},9", *lines[5:]],
        "short row": [*lines[:5], f"{NUMBER},{SSN}", *lines[5:]],
        "open quote": [*lines[:5], f'1,"{SSN},3,4', *lines[5:]],
        "non-numeric": [*lines[:5], f"1,{CARD},3,4", *lines[5:]],
        "non-numeric target": [*lines[:5], f"1,2,3,{SSN}", *lines[5:]],
        "late non-numeric": [*lines, *[f"{i},{i},{i},{i}" for i in range(70_000)], f"1,{CARD},3,4"],
        "empty cell": [*lines[:5], "1,,3,4", *lines[5:]],
        "nan and inf": [*lines[:5], "1,nan,inf,4", *lines[5:]],
    }
    paths = {}
    for name, rows in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.csv"
        path.write_text("\n".join(rows) + "\n")
        paths[name] = path
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    frame["b"] = frame["b"].astype(str)
    frame.loc[3, "b"] = SSN
    paths["parquet string"] = tmp_path / "s.parquet"
    frame.to_parquet(paths["parquet string"])
    return paths


def test_loaders_quote_no_value(tmp_path):
    paths = _files(tmp_path)
    for name, path in paths.items():
        with pytest.raises(ValueError) as error:
            load_table(path, "y")
        assert_clean(str(error.value))
        assert str(path) in str(error.value), name
        if name == "non-numeric target":
            continue
        with pytest.raises(ValueError) as error:
            load_features(path, ["a", "b", "c"])
        assert_clean(str(error.value))
    with pytest.raises(ValueError, match=r"line 6 has 5 fields but the header has 4"):
        load_table(paths["ragged"], "y")


@pytest.mark.parametrize("backend", ["numpy", "dask"])
def test_cli_fit_and_predict_quote_no_value(tmp_path, capsys, backend):
    if backend == "dask":
        pytest.importorskip("dask")
    paths = _files(tmp_path)
    X, y = _data()
    model = tmp_path / "model.json"
    good = tmp_path / "good.csv"
    good.write_text(_csv(X, y))
    bounds = tmp_path / "bounds.json"
    bounds.write_text('{"features": {"a": [-2, 2], "b": [-2, 2], "c": [-2, 2]}, "target": [-5, 5]}')
    code, _, err = run(
        capsys, "fit", good, "--target", "y", "--out", model, "--seed", "1", "--bounds", bounds
    )
    assert code == 0, err
    for name, path in paths.items():
        code, out, err = run(
            capsys, "fit", path, "--target", "y", "--out", tmp_path / "m.json", "--overwrite",
            "--backend", backend, "--bounds", bounds,
        )  # fmt: skip
        assert code == 2, (name, err)
        assert len(err.strip().splitlines()) == 1, err
        assert_clean(out + err)
        if backend == "numpy" and name != "non-numeric target":
            code, out, err = run(capsys, "predict", model, path)
            assert code == 2 and len(err.strip().splitlines()) == 1, (name, err)
            assert_clean(out + err)


def test_dask_inputs_quote_no_value():
    dd = pytest.importorskip("dask.dataframe")
    da = pytest.importorskip("dask.array")
    X, y = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    est = DPLinearRegression(
        method="newton", feature_bounds=[(-2, 2)] * D, target_bounds=(-5, 5), random_state=0
    )
    strings = frame.copy()
    strings["b"] = strings["b"].astype(str).astype("string")
    strings.loc[7, "b"] = SSN
    objects = frame.copy()
    objects["c"] = objects["c"].astype(object)
    objects.loc[8, "c"] = CARD
    nullable = frame.copy()
    nullable["a"] = nullable["a"].round().astype("Int64")
    nullable.loc[9, "a"] = pd.NA
    cases = []
    for f in (strings, objects, nullable):
        ddf = dd.from_pandas(f, npartitions=4)
        cases.append((ddf[["a", "b", "c"]], ddf["y"]))
    arr = X.astype(object)
    arr[9, 2] = SSN
    cases.append((da.from_array(arr, chunks=(100, 3)), da.from_array(y, chunks=100)))
    ddf = dd.from_pandas(frame, npartitions=4)
    short = dd.from_pandas(frame.iloc[:200], npartitions=4)
    cases.append((ddf[["a", "b", "c"]], short["y"]))
    for Xd, yd in cases:
        text = _caught(lambda Xd=Xd, yd=yd: est.fit(Xd, yd))
        assert_clean(text)
        assert "Cannot interpret" not in text and "partition 7" not in text, text


def test_a_search_checks_every_target_before_its_secret_split():
    # a non-number held only by validation rows once reached the scoring's float conversion,
    # whose message quoted the cell; over 12 seeds at validation_fraction 0.5 the planted row
    # lands in validation in some (the chance it never does is 2^-12)
    from privopt.model_selection import PrivateGridSearchCV

    X, y = _data()
    y_obj = y.astype(object)
    y_obj[11] = SSN
    for seed in range(12):
        search = PrivateGridSearchCV(
            DPLinearRegression(feature_bounds=(-5, 5), target_bounds=(-20, 20)),
            {"method": ["adassp", "newton"]},
            epsilon=1.0,
            delta=1e-6,
            validation_fraction=0.5,
            random_state=seed,
        )
        text = _caught(lambda s=search: s.fit(X, y_obj))
        assert_clean(text)
        assert "y: row 11 holds a str" in text
