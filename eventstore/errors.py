"""Errors the journal raises; each says what was wrong and what would be valid."""

from __future__ import annotations


class JournalError(Exception):
    """Base class of every journal error."""


class IdempotencyConflict(JournalError, ValueError):
    """An event id was appended before with other content."""


class VersionConflict(JournalError):
    """A stream's version was not the one the caller expected (optimistic concurrency)."""


class SchemaError(JournalError):
    """The database schema is missing, behind, or newer than this code."""


class LockTimeout(JournalError):
    """The journal's write lock could not be had in time."""


class ConnectionProblem(JournalError):
    """The database cannot be reached."""
