"""privopt: differentially private optimisation with exact, stated privacy accounting.

Subpackages follow the pipeline of every private training algorithm (see ARCHITECTURE.md):
``accounting`` (events, ledger, report) is the foundation every algorithm records into;
``noise`` holds the correlated-noise mechanisms; ``clipping``, ``algorithms`` and
``estimators`` build private models on top.
"""

import privopt.distributed  # noqa: F401 (registers the Dask row source; no dask import)
from privopt._leak import PrivacyLeakWarning
from privopt.accounting import BudgetExceededError, PrivacyBudget, PrivacyLedger, PrivacyReport
from privopt.estimators import DPLinearClassifier, DPLinearRegression, DPSGDRegressor
from privopt.estimators._utility import UtilityWarning

__version__ = "0.2.0"

__all__ = [
    "BudgetExceededError",
    "DPLinearClassifier",
    "DPLinearRegression",
    "DPSGDRegressor",
    "PrivacyBudget",
    "PrivacyLeakWarning",
    "PrivacyLedger",
    "PrivacyReport",
    "UtilityWarning",
    "__version__",
]
