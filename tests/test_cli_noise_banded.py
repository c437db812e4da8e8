"""``privopt noise compare``: the banded rows (issue 14), their losses against the library."""

import json

import pytest

from cli_runner import run
from privopt.noise import (
    Participation,
    banded_toeplitz,
    choose_bands,
    column_normalized_banded,
    optimal_cc,
    optimize_banded_toeplitz,
)


def _banded_rows(rows):
    return {k: v for k, v in rows.items() if k.startswith("banded")}


def test_compare_banded_rows_under_min_separation(capsys):
    n, b, k = 100, 10, 5
    code, out, err = run(capsys, "noise", "compare", "--steps", str(n), "--min-sep", str(b),
                         "--participations", str(k), "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert set(result) >= {"steps", "mechanisms", "min_sep", "participations"}
    rows = result["mechanisms"]
    banded = _banded_rows(rows)
    assert len(banded) == 3
    for row in banded.values():
        assert set(row) == {"max_loss", "mean_loss", "state_vectors"}
    pattern = Participation.multiple(b, k)
    bsr = choose_bands(n, b, k, max_bands=b).bands
    want = banded_toeplitz(optimal_cc(), bsr).prefix_losses(n, pattern)
    got = rows[f"banded sqrt(A) (L={bsr})"]
    assert got["state_vectors"] == bsr - 1  # L - 1 model-sized buffers
    assert (got["max_loss"], got["mean_loss"]) == pytest.approx(want, rel=1e-12)
    opt = optimize_banded_toeplitz(n, b, min_sep=b, participations=k)
    got = rows[f"banded optimised (L={b})"]
    assert got["state_vectors"] == b - 1
    assert (got["max_loss"], got["mean_loss"]) == pytest.approx(
        opt.prefix_losses(n, pattern), rel=1e-12
    )
    mf = column_normalized_banded(opt.coefficients, b, n).prefix_losses(n, pattern)
    got = rows[f"banded MF, column-normalised (L={b})"]
    assert (got["max_loss"], got["mean_loss"]) == pytest.approx(mf, rel=1e-12)
    # optimised for max loss: no worse than the truncated square root, far below independent
    assert got["max_loss"] <= rows[f"banded sqrt(A) (L={bsr})"]["max_loss"]
    assert (
        rows[f"banded optimised (L={b})"]["max_loss"] < 0.2 * rows["independent"]["max_loss"]
    )  # 72.5 vs 500


def test_compare_bands_option_and_its_validation(capsys):
    code, out, err = run(capsys, "noise", "compare", "--steps", "32", "--bands", "8", "--json")
    assert code == 0, err
    rows = json.loads(out)["mechanisms"]
    assert rows["banded optimised (L=8)"]["state_vectors"] == 7
    # single participation: the optimised 8-band C is at least as good as the truncated sqrt(A)
    bsr = next(v for k, v in rows.items() if k.startswith("banded sqrt"))
    assert rows["banded optimised (L=8)"]["max_loss"] <= bsr["max_loss"] * (1 + 1e-9)
    for argv in (["--bands", "0"], ["--bands", "65"],
                 ["--min-sep", "8", "--participations", "3", "--bands", "9"]):  # fmt: skip
        code, _, err = run(capsys, "noise", "compare", "--steps", "64", *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1
