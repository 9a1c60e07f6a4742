"""The journal: an append-only, idempotent, hash-chained event store.

Generic: it knows streams, event types, times and JSON payloads, nothing about
credits or jobs. `Journal` stores on SQLite or PostgreSQL, `MemoryJournal` in
memory; both satisfy `JournalLike`.
"""

from .errors import (
    ChainBroken,
    CommitOutcomeUnknown,
    ConnectionProblem,
    IdempotencyConflict,
    JournalError,
    JournalNotFound,
    LockOrderConflict,
    LockTimeout,
    NotAJournalURL,
    ReadOnlyJournal,
    SchemaError,
    VersionConflict,
)
from .hashing import GENESIS_HASH, canonical_json
from .interface import JournalLike, Transaction
from .journal import Journal, upgrade
from .memory import MemoryJournal
from .records import (
    ERASED_KEY,
    PRIVATE_KEY,
    Anchor,
    Batch,
    ChainReport,
    Erasure,
    LookUp,
    NewEvent,
    RecordedEvent,
    RequestKey,
    SnapshotInfo,
)

__all__ = [
    "ERASED_KEY",
    "GENESIS_HASH",
    "PRIVATE_KEY",
    "Anchor",
    "Batch",
    "ChainBroken",
    "ChainReport",
    "CommitOutcomeUnknown",
    "ConnectionProblem",
    "Erasure",
    "IdempotencyConflict",
    "Journal",
    "JournalError",
    "JournalLike",
    "JournalNotFound",
    "LockOrderConflict",
    "LockTimeout",
    "LookUp",
    "MemoryJournal",
    "NewEvent",
    "NotAJournalURL",
    "ReadOnlyJournal",
    "RecordedEvent",
    "RequestKey",
    "SchemaError",
    "SnapshotInfo",
    "Transaction",
    "VersionConflict",
    "canonical_json",
    "upgrade",
]
