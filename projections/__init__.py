"""The gpu-credits domain: event vocabulary, pure folds, replay, and the two facades."""

# First of all, before any module of the fold is imported: whether it runs compiled or
# from its source (projections.native). Hence the imports below it.
# ruff: noqa: E402
from projections import native as _native

_native.choose()

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
