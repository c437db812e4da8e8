"""privopt fit DIR --backend dask equals --backend numpy on the same files (issue 19), and bad
directories fail with one line before any release (no model file written)."""

import json

import numpy as np
import pandas as pd
import pytest
from dask_helpers import TOLERANCE

from cli_runner import run


def write_parts(folder, data, kind="parquet", files=3):
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    folder.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(frame)), files)):
        part = frame.iloc[rows]
        if kind == "parquet":
            part.to_parquet(folder / f"part-{i:02d}.parquet", index=False)
        else:
            part.to_csv(folder / f"part-{i:02d}.csv", index=False)
    return folder


def fit(capsys, data_path, out, *extra):
    return run(
        capsys, "fit", data_path, "--target", "y", "--out", out, "--seed", "3", "--json", *extra
    )


def assert_same_payload(a, b):
    assert a["features"] == b["features"] and a["n_rows"] == b["n_rows"]
    np.testing.assert_allclose(a["coef"], b["coef"], rtol=0, atol=TOLERANCE)
    assert abs(a["intercept"] - b["intercept"]) <= TOLERANCE
    assert a["epsilon"] == pytest.approx(b["epsilon"], rel=1e-12)
    assert a["privacy_report"]["events"] == b["privacy_report"]["events"] or len(
        a["privacy_report"]["events"]
    ) == len(b["privacy_report"]["events"])


@pytest.mark.parametrize(
    ("kind", "method", "scheduler"),
    [("parquet", "adassp", False), ("csv", "newton", False), ("parquet", "dpsgd", True)],
)
def test_dask_backend_equals_numpy_backend(capsys, tmp_path, data, client, kind, method, scheduler):
    folder = write_parts(tmp_path / "table", data, kind)
    code, out, err = fit(capsys, folder, tmp_path / "numpy.json", "--method", method)
    assert code == 0, err
    numpy_payload = json.loads(out)
    extra = ("--scheduler", client.scheduler.address) if scheduler else ()
    code, out, err = fit(
        capsys, folder, tmp_path / "dask.json", "--method", method, "--backend", "dask", *extra
    )
    assert code == 0, err
    assert_same_payload(numpy_payload, json.loads(out))


def test_a_glob_selects_the_same_rows(capsys, tmp_path, data):
    folder = write_parts(tmp_path / "table", data)
    code, out_dir, _ = fit(capsys, folder, tmp_path / "a.json", "--method", "adassp")
    code2, out_glob, _ = fit(
        capsys,
        folder / "part-*.parquet",
        tmp_path / "b.json",
        "--method",
        "adassp",
        "--backend",
        "dask",
    )
    assert code == code2 == 0
    assert_same_payload(json.loads(out_dir), json.loads(out_glob))


def _corrupt(folder):
    (folder / "part-01.parquet").write_bytes(b"not a parquet file at all")


def _mixed(folder):
    pd.DataFrame({"a": [1.0], "b": [2.0], "d": [3.0], "y": [1.0]}).to_parquet(
        folder / "part-01.parquet", index=False
    )


def _nan(folder):
    frame = pd.read_parquet(folder / "part-02.parquet")
    frame.loc[frame.index[5], "b"] = np.nan
    frame.to_parquet(folder / "part-02.parquet", index=False)


@pytest.mark.parametrize(
    ("spoil", "target", "needle"),
    [
        (_corrupt, "y", "as Parquet"),
        (_mixed, "y", "Mixed schemas"),
        (lambda folder: None, "price", "'price' (the target) is not in"),
        (_nan, "y", "part-02.parquet': Column 'b' has 1 missing or NaN"),
    ],
)
@pytest.mark.parametrize("backend", ["dask", "numpy"])
def test_bad_directories_fail_in_one_line_before_any_release(
    capsys, tmp_path, data, spoil, target, needle, backend
):
    folder = write_parts(tmp_path / "table", data)
    spoil(folder)
    out = tmp_path / "model.json"
    code, _, err = run(
        capsys,
        "fit",
        folder,
        "--target",
        target,
        "--out",
        out,
        "--seed",
        "3",
        "--method",
        "adassp",
        "--backend",
        backend,
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert needle.lower() in lines[0].lower()
    assert not out.exists()


def test_csv_with_a_bad_value_fails_the_counting_pass(capsys, tmp_path, data):
    folder = write_parts(tmp_path / "table", data, "csv")
    with open(folder / "part-01.csv", "a") as handle:
        handle.write("1.0,oops,2.0,3.0\n")
    out = tmp_path / "model.json"
    code, _, err = fit(capsys, folder, out, "--method", "adassp", "--backend", "dask")
    assert code == 2 and "not numeric" in err and not out.exists()


def test_backend_options_are_checked(capsys, tmp_path, data):
    folder = write_parts(tmp_path / "table", data)
    out = tmp_path / "m.json"
    code, _, err = fit(capsys, folder, out, "--backend", "spark")
    assert code == 2 and "--backend numpy or dask" in err
    code, _, err = fit(capsys, folder, out, "--workers", "2")
    assert code == 2 and "need --backend dask" in err
    code, _, err = fit(capsys, folder, out, "--backend", "dask", "--method", "ssgd")
    assert code == 2 and "adassp, ambssgd, dpsgd, ftrl-sigma, newton" in err and not out.exists()
