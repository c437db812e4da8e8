"""privopt: differentially private optimisation with exact, stated privacy accounting.

Subpackages follow the pipeline of every private training algorithm (see ARCHITECTURE.md):
``accounting`` (events, ledger, report) is the foundation every algorithm records into.
"""

from privopt.accounting import PrivacyLedger, PrivacyReport

__version__ = "0.1.0"

__all__ = ["PrivacyLedger", "PrivacyReport", "__version__"]
