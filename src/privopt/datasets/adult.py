"""The UCI Adult table with a preprocessing that uses public knowledge only.

Private training may not learn its preprocessing from the private rows (category lists, ranges,
means are statistics of the data). This module encodes Adult with what the dataset's public
documentation (UCI ``adult.names``, Kohavi & Becker 1996) states:

* categorical columns: one-hot over the documented category lists; ``?`` (missing) and any value
  outside the list encode as all zeros (``handle_unknown="ignore"``);
* numeric columns: clipped to stated public ranges and scaled to [0, 1]; the two capital columns
  first go through log1p (their documented range spans five orders of magnitude). The ranges are
  public domain bounds (ages of the adult census extract, the top-code 99,999 of capital gains,
  hours in a week), not sample statistics; :data:`ADULT_NUMERIC_RANGES` states them.

Use it as the first step of a scikit-learn pipeline, e.g.::

    from sklearn.pipeline import make_pipeline
    from privopt import DPLinearClassifier
    from privopt.datasets.adult import adult_preprocessor, load_adult

    data = load_adult()  # the bundled copy; or load_adult("path/to/adult.csv")
    model = make_pipeline(adult_preprocessor(), DPLinearClassifier(epsilon=1.0, delta=1e-6,
                                                                   feature_bounds=(0.0, 1.0)))
    model.fit(data.X, data.y)

``feature_bounds=(0, 1)`` is public because the preprocessor maps every column into [0, 1].
"""

from __future__ import annotations

import csv
import gzip
import os

import numpy as np

from privopt.datasets.loaders import Table

__all__ = [
    "ADULT_CATEGORIES",
    "ADULT_COLUMNS",
    "ADULT_NUMERIC_RANGES",
    "ADULT_SOURCE",
    "AdultData",
    "adult_preprocessor",
    "load_adult",
    "load_adult_arrays",
]

#: Column order of the CSV (without the target ``income``).
ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
)

#: Category lists from the dataset's documentation (UCI adult.names).
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
        "State-gov", "Without-pay", "Never-worked",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
        "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate",
        "5th-6th", "Preschool",
    ),
    "marital_status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
        "Married-spouse-absent", "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
        "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
        "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": (
        "Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native_country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
        "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
        "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
        "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
        "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ),
}  # fmt: skip

#: Public (low, high) domain bounds of the numeric columns, and whether log1p is applied first.
ADULT_NUMERIC_RANGES: dict[str, tuple[float, float, bool]] = {
    "age": (17.0, 90.0, False),  # the census extract keeps ages 17..90 (90 is a top-code)
    "fnlwgt": (0.0, 1.5e6, False),  # census sampling weight
    "education_num": (1.0, 16.0, False),  # the 16 documented education levels
    "capital_gain": (0.0, 99_999.0, True),  # top-coded at 99,999
    "capital_loss": (0.0, 5_000.0, True),  # a stated bound; larger values are clipped
    "hours_per_week": (1.0, 99.0, False),  # hours in a working week, top-coded at 99
}


#: Origin and licence of the Adult table.
ADULT_SOURCE = (
    "UCI Machine Learning Repository, 'Adult' (Becker & Kohavi 1996, doi:10.24432/C5XW20), "
    "training split adult.data, licensed CC BY 4.0."
)

_ADULT_DESCRIPTION = (
    "32,561 records of the 1994 US census extract: 6 numeric columns (age, fnlwgt, "
    "education_num, capital_gain, capital_loss, hours_per_week) and 8 categorical ones "
    "('?' marks a missing value); target income, y = +1 for '>50K' (24.1%) and -1 for '<=50K'."
)

#: The rows of :func:`load_adult`: a :class:`~privopt.datasets.loaders.Table` whose ``X`` is an
#: object array (categories as strings, numeric columns as floats).
AdultData = Table


def load_adult(path: str | os.PathLike[str] | None = None) -> Table:
    """The Adult table: ``X`` (n, 14) object array in :data:`ADULT_COLUMNS` order, ``y`` in
    {-1, +1} (+1 for income ``>50K``).

    Parameters
    ----------
    path : str or path-like, optional
        A CSV with a header row holding the columns of :data:`ADULT_COLUMNS` plus ``income``
        (``.csv`` or ``.csv.gz``). ``None`` (default) reads the copy bundled with privopt
        (32,561 rows, the UCI training split).

    Returns
    -------
    Table
        With ``feature_names`` :data:`ADULT_COLUMNS`, ``target`` ``"income"`` and, for the
        bundled copy, ``description`` and ``source``. Encode ``X`` with
        :func:`adult_preprocessor` (public categories and ranges) before a private fit.
    """
    bundled = path is None
    if bundled:
        from privopt.datasets.bundled import bundled_path

        path = bundled_path("adult.csv.gz")
    name = os.fspath(path)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(name, "rt", newline="") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        expected = [*ADULT_COLUMNS, "income"]
        if header != expected:
            raise ValueError(f"{name} is not the Adult table: expected columns {expected}.")
        rows = [[v.strip() for v in row] for row in reader if row]
    if not rows:
        raise ValueError(f"{name} has no rows.")
    if any(len(row) != len(expected) for row in rows):
        raise ValueError(
            f"{name} is not the Adult table: a row does not have {len(expected)} cells."
        )
    table = np.array(rows, dtype=object)
    X = table[:, :-1]
    for column in ADULT_NUMERIC_RANGES:
        j = ADULT_COLUMNS.index(column)
        try:
            X[:, j] = X[:, j].astype(float)
        except ValueError:
            raise ValueError(f"{name}: column {column!r} is not numeric.") from None
    labels = table[:, -1]
    if not set(labels) <= {"<=50K", ">50K"}:
        raise ValueError("The income column must hold '<=50K' or '>50K'.")
    return Table(
        X=X,
        y=np.where(labels == ">50K", 1.0, -1.0),
        feature_names=ADULT_COLUMNS,
        target="income",
        description=_ADULT_DESCRIPTION if bundled else "",
        source=ADULT_SOURCE if bundled else "",
    )


def _scale_numeric(columns: np.ndarray) -> np.ndarray:
    columns = np.asarray(columns, dtype=float)
    out = np.empty_like(columns)
    for k, (low, high, log) in enumerate(ADULT_NUMERIC_RANGES.values()):
        values = np.clip(columns[:, k], low, high)
        if log:
            values, low, high = np.log1p(values), np.log1p(low), np.log1p(high)
        out[:, k] = (values - low) / (high - low)
    return out


def adult_preprocessor():
    """A scikit-learn transformer mapping Adult rows into [0, 1]^p with public knowledge only.

    It learns nothing from the data it is fitted on (categories and ranges are fixed), so it is
    safe in front of a private estimator. Output: 6 scaled numeric columns, then the one-hot
    blocks of the 8 categorical columns (105 columns in all).
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder

    numeric = [ADULT_COLUMNS.index(name) for name in ADULT_NUMERIC_RANGES]
    categorical = [ADULT_COLUMNS.index(name) for name in ADULT_CATEGORIES]
    return ColumnTransformer(
        [
            ("numeric", FunctionTransformer(_scale_numeric), numeric),
            (
                "categorical",
                OneHotEncoder(
                    categories=[list(c) for c in ADULT_CATEGORIES.values()],
                    handle_unknown="ignore",
                    sparse_output=False,
                ),
                categorical,
            ),
        ]
    )


def load_adult_arrays(
    path: str | os.PathLike[str] | None = None, split_seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test): 80/20 split, public encoding plus a constant 1.

    ``path=None`` reads the bundled copy (see :func:`load_adult`).
    """
    from sklearn.model_selection import train_test_split

    data = load_adult(path)
    x_train, x_test, y_train, y_test = train_test_split(
        data.X, data.y, test_size=0.2, random_state=split_seed
    )
    encoder = adult_preprocessor().fit(x_train)  # learns nothing: categories and ranges are fixed

    def encode(rows):
        features = np.asarray(encoder.transform(rows), dtype=float)
        return np.hstack([features, np.ones((features.shape[0], 1))])

    return encode(x_train), np.asarray(y_train, float), encode(x_test), np.asarray(y_test, float)
