"""The gpu-credits domain: event vocabulary, pure folds, replay, and the two facades."""

from projections.errors import (
    AccountExists,
    DuplicateJob,
    InvalidTransition,
    LedgerError,
    UnknownAccount,
    UnknownJob,
)
from projections.ledger import Ledger
from projections.outcomes import Outcome, Revision
from projections.scheduler import AccountView, Job, Scheduler
from projections.tracker import GPUCreditTracker

__all__ = [
    "AccountExists",
    "AccountView",
    "DuplicateJob",
    "GPUCreditTracker",
    "InvalidTransition",
    "Job",
    "Ledger",
    "LedgerError",
    "Outcome",
    "Revision",
    "Scheduler",
    "UnknownAccount",
    "UnknownJob",
]
