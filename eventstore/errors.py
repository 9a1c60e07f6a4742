"""Errors the journal raises; each says what was wrong and what would be valid."""

from __future__ import annotations


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, so that an error naming it stays one
    readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


class JournalError(Exception):
    """Base class of every journal error."""


class NotAJournalURL(TypeError, ValueError):
    """What was given for a journal is not a URL (a number, bytes, a path).

    A TypeError, as Python calls an argument of the wrong kind, and a ValueError, as
    `Journal` raised it first and code written against that catches it."""


class IdempotencyConflict(JournalError, ValueError):
    """An event id was appended before with other content."""


class VersionConflict(JournalError):
    """A stream's version was not the one the caller expected (optimistic concurrency)."""


class SchemaError(JournalError):
    """The database schema is missing, behind, or newer than this code."""


class LockTimeout(JournalError):
    """The journal's write lock could not be had in time."""


class LockOrderConflict(LockTimeout):
    """A lock key was asked for in a transaction that already holds the journal's head,
    while another transaction held the key: waiting could deadlock (that one may be
    queued for the head), so the transaction is refused instead. Nothing of it is
    written; run it again, asking for every key before its first append."""


class ConnectionProblem(JournalError):
    """The database cannot be reached."""


class CommitOutcomeUnknown(ConnectionProblem):
    """The connection was lost during a transaction, its COMMIT perhaps in flight: it may
    or may not have committed. Retry under the same event ids, which appends nothing if
    it did."""


class JournalNotFound(JournalError):
    """A journal opened with create=False (or read_only=True) does not exist.

    Raised before anything is written: no file is created and no schema is laid down.
    """


class ReadOnlyJournal(JournalError):
    """A write was asked of a journal opened with read_only=True."""


class ChainBroken(JournalError):
    """Events read with their chain checked do not chain: the journal was altered.

    `position` is the first position whose record does not follow from the one before.
    `moved_under`: not a record altered but the journal moved under its reader (restored
    from an older copy, or rewritten, since the reader read it): the reader may start
    again on the journal as it stands.
    """

    def __init__(self, position: int, message: str, *, moved_under: bool = False) -> None:
        super().__init__(message)
        self.position = position
        self.moved_under = moved_under


def went_back(head: int, trusted: int, remedy: str = "") -> ChainBroken:
    """The error for a journal that ends at `head`, before position `trusted` that its
    reader already read (and may have answered from): at the first missing position.
    `remedy`: what its reader can do, said after what happened."""
    return ChainBroken(
        head + 1,
        f"the journal ends at position {head}, but it was read up to position {trusted}: "
        f"records {head + 1}..{trusted} are gone (the database was restored from an older "
        "copy, or its newest records removed); nothing is answered from what it no longer "
        "holds" + (f"; {remedy}" if remedy else ""),
        moved_under=True,
    )


def rewritten_under(position: int, remedy: str = "") -> ChainBroken:
    """The error for a journal whose record at `position`, the last its reader read (and
    the one a write was to chain from), now holds another chain hash: the journal was
    rewritten, or restored from an older copy and written on up to there, since.
    `remedy`: what its reader can do, said after what happened."""
    return ChainBroken(
        position + 1,
        f"the journal's chain hash at position {position} is not the one read there "
        "before: the journal was rewritten, or restored from an older copy and written "
        "on, since it was read; nothing was appended, and nothing is answered from what "
        "it no longer holds" + (f"; {remedy}" if remedy else ""),
        moved_under=True,
    )
