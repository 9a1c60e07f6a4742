"""Errors the facades raise; each names the offending value and what would be valid."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class of every ledger error. A call that raises one appended nothing."""


class UnknownAccount(LedgerError, KeyError, ValueError):
    """An account that has no `account` event and no grant.

    Both a KeyError (an unknown id) and a ValueError (a bad argument to the call), so
    callers catching either, as the facades' contract allows, see it.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown account"


class UnknownJob(LedgerError, KeyError, ValueError):
    """A job id that was never submitted (a KeyError and a ValueError, like UnknownAccount)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


class DuplicateJob(LedgerError, ValueError):
    """A job id that was submitted before: ids are unique for the journal's lifetime."""


class InvalidTransition(LedgerError, ValueError):
    """A job asked to move to a state its current state does not lead to."""


class AccountExists(LedgerError, ValueError):
    """`open_account` on an account that an `account` event already opened."""
