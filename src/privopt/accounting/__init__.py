"""Privacy accounting: exact mechanisms, conversions, the ledger and the privacy report.

``accounting`` knows nothing of models. Algorithms describe each private release as an event
(:mod:`.events`), record it in a :class:`PrivacyLedger`, and read the resulting
:class:`PrivacyReport`. A :class:`PrivacyBudget` composes the charges of several fits.
"""

from privopt.accounting.accountants import (
    ACCOUNTANTS,
    Accountant,
    DpAccountingAccountant,
    GDPAccountant,
    UnsupportedEventError,
    ZCDPAccountant,
    get_accountant,
)
from privopt.accounting.budget import BudgetExceededError, PrivacyBudget, Spend
from privopt.accounting.events import (
    ApproxDPEvent,
    GaussianEvent,
    Neighbouring,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    PrivacyUnit,
    RenyiGuaranteeEvent,
    SampledGaussianEvent,
    SamplingFailureEvent,
    ShuffledGaussianEvent,
)
from privopt.accounting.gaussian import (
    calibrate_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    gaussian_epsilon,
)
from privopt.accounting.gdp import compose_gdp, gdp_delta, gdp_epsilon, gdp_mu
from privopt.accounting.ledger import LedgerEntry, PrivacyLedger
from privopt.accounting.report import EventSummary, PrivacyReport
from privopt.accounting.shuffling import (
    ShuffleGuarantee,
    calibrate_shuffled_gaussian,
    max_shuffled_gaussian_epsilon,
    shuffle_amplified_epsilon,
    shuffle_max_local_epsilon,
    shuffled_gaussian_guarantee,
)
from privopt.accounting.subsampled import calibrate_dpsgd_noise, dpsgd_epsilon, dpsgd_event
from privopt.accounting.zcdp import compose_rho, gaussian_rho, zcdp_epsilon, zcdp_rho

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "ApproxDPEvent",
    "BudgetExceededError",
    "DpAccountingAccountant",
    "EventSummary",
    "GDPAccountant",
    "GaussianEvent",
    "LedgerEntry",
    "Neighbouring",
    "PoissonSampledGaussianEvent",
    "PrivacyBudget",
    "PrivacyEvent",
    "PrivacyLedger",
    "PrivacyReport",
    "PrivacyUnit",
    "RenyiGuaranteeEvent",
    "SampledGaussianEvent",
    "SamplingFailureEvent",
    "ShuffleGuarantee",
    "ShuffledGaussianEvent",
    "Spend",
    "UnsupportedEventError",
    "ZCDPAccountant",
    "calibrate_dpsgd_noise",
    "calibrate_gaussian_sigma",
    "calibrate_shuffled_gaussian",
    "classical_gaussian_sigma",
    "compose_gdp",
    "compose_rho",
    "dpsgd_epsilon",
    "dpsgd_event",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_rho",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "get_accountant",
    "max_shuffled_gaussian_epsilon",
    "shuffle_amplified_epsilon",
    "shuffle_max_local_epsilon",
    "shuffled_gaussian_guarantee",
    "zcdp_epsilon",
    "zcdp_rho",
]
