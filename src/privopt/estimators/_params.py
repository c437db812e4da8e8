"""scikit-learn's parameter contract, once for every private estimator and search.

scikit-learn reads an estimator's parameters from the signature of its ``__init__`` and expects
``__init__`` to store each argument, unchanged and unvalidated, under its own name (validation
happens in ``fit``; :meth:`sklearn.base.BaseEstimator.get_params` and ``clone`` depend on it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["store_params"]


def store_params(estimator: Any, arguments: dict[str, Any]) -> None:
    """Store ``__init__``'s arguments on ``estimator`` as given.

    Call it first thing in ``__init__`` as ``store_params(self, locals())``: the local names
    are then exactly the parameters (``self`` and the compiler's ``__class__`` cell excluded).
    """
    for name, value in arguments.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)
