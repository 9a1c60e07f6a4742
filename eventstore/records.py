"""The values the journal takes and gives back: new events, recorded events, anchors,
verification reports, snapshots.

`RecordedEvent` is the one definition of a stored record's layout: the storage row
(`StoredRow`, the same fields with the payload as canonical text), the database
columns (`COLUMNS`) and the hash's fields are all derived from its field list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from eventstore.errors import shown

PRIVATE_KEY = "$private"
"""Payload key of a record that has a private part: the part's salted hash (its seal)."""

ERASED_KEY = "$erased"
"""Payload key of an erasure record: the ids of the events whose private parts it erased."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: its idempotency key, stream, type, event time and JSON payload.

    `private` (optional): fields kept beside the record instead of in it, so that they can
    be erased later (`erase`) without breaking the chain. The record's payload carries
    their salted hash under `PRIVATE_KEY`, and the chain covers that hash; the fields
    themselves and the salt are stored apart and never hashed into the chain.
    """

    id: str
    stream: str
    type: str
    time: int
    payload: Mapping[str, Any]
    private: Mapping[str, Any] | None = None


class RecordedEvent(NamedTuple):
    """An event as the journal holds it, with its place in the journal and in the chain.

    Immutable like the dataclasses here, but a named tuple: a replay builds one per row,
    and a tuple costs a tenth of a frozen dataclass to build.
    """

    position: int  # gapless global arrival sequence, from 1
    id: str  # idempotency key
    stream: str
    version: int  # per-stream version, from 1
    type: str
    time: int  # event time
    recorded_at: int  # wall clock at append, microseconds since the Unix epoch (UTC)
    payload: Mapping[str, Any]
    hash: str  # hex SHA-256 over the previous hash and this record's canonical bytes


StoredRow = tuple[int, str, str, int, str, int, int, str, str]
"""A record as storage holds it: `RecordedEvent`'s fields in its order, the payload as
its canonical JSON text (what the hash covers)."""

PinnedRow = tuple[int, str, str, int, str, int, int, str, str, str | None]
"""A stored row followed by its predecessor's stored hash (None at position 1, or when
the journal holds no record before it): what a read needs to check the row's own link
of the chain (`hashing.pinned`)."""

LeanRow = tuple[int, str, str, int, str, str]
"""What a fold reads of a record: (position, id, type, event time, payload as stored,
stream)."""

HASH = RecordedEvent._fields.index("hash")

#: Where a field's database column has another name (SQL keywords and clarity).
_COLUMN_NAMES = {"id": "event_id", "time": "event_time"}

COLUMNS: tuple[str, ...] = tuple(_COLUMN_NAMES.get(f, f) for f in RecordedEvent._fields)
"""The `events` table's columns in `RecordedEvent`'s field order."""

COLUMNS_SQL = ", ".join(COLUMNS)


def hashed_fields() -> tuple[str, ...]:
    """The fields the chain hash covers: every field but the hash itself."""
    return RecordedEvent._fields[:HASH]


_HEX64 = re.compile(r"[0-9a-f]{64}")


class Batch(NamedTuple):
    """Positions appended together, in one transaction (or one `append` outside one):
    `first` to `last`, both included, `last > first`. Whoever reads the journal knew them
    together: no reader ever saw some of them without the others."""

    first: int
    last: int


#: The "previous hash" of position 1: the empty journal's chain hash.
GENESIS_HASH = "0" * 64


class Anchor(NamedTuple):
    """A journal position and the chain hash there: what to keep outside the database.

    Written `POSITION:HASH`. A journal that still holds that prefix unchanged
    recomputes exactly this hash at this position; position 0 is the empty journal
    (the genesis hash).
    """

    position: int
    hash: str

    def __str__(self) -> str:
        return f"{self.position}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> Anchor:
        """`POSITION:HASH` -> Anchor; ValueError naming the text and the format otherwise."""
        if not isinstance(text, str):
            raise ValueError(f"an anchor is a str POSITION:HASH, got {type(text).__name__}")
        pos, sep, digest = text.strip().partition(":")
        if not sep or not pos.isascii() or not pos.isdigit():
            raise ValueError(
                f"anchor {text!r} is not POSITION:HASH (a position >= 0, a colon, "
                "64 lowercase hex digits), e.g. as printed by `gpu-credits head`"
            )
        return cls.of(int(pos), digest)

    @classmethod
    def read(cls, value: object) -> Anchor:
        """An anchor as a caller may hold it: an Anchor, a (position, hash) pair, or the
        text POSITION:HASH as written down; ValueError naming anything else."""
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, tuple) and len(value) == 2:
            return cls.of(*value)
        raise ValueError("an anchor is an Anchor, a (position, hash) pair or the text "
                         f"POSITION:HASH, got {shown(value)}")

    @classmethod
    def of(cls, position: object, digest: object) -> Anchor:
        """A checked Anchor: position an int >= 0, hash 64 lowercase hex digits."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"anchor position must be an int >= 0, got {position!r}")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise ValueError(
                f"anchor hash must be 64 lowercase hex digits (a SHA-256), got {digest!r}"
            )
        if position == 0 and digest != GENESIS_HASH:
            # No journal has another hash there: such an anchor can only be mistyped, and
            # taken as a failed check it named position 0, which reads as false.
            raise ValueError(
                f"an anchor at position 0 is the empty journal, whose hash is "
                f"{GENESIS_HASH}; got {digest!r}"
            )
        return cls(position, digest)


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What `verify_chain` found.

    ok: the chain is whole (and holds the anchor, if one was given); events: how
    many events the journal holds; first_bad_position: the first position found
    altered, missing or out of place (None when ok); problem: one line saying what.
    """

    ok: bool
    events: int
    first_bad_position: int | None = None
    problem: str | None = None
    head: Anchor | None = None  # the last position and its recomputed hash, when ok


@dataclass(frozen=True, slots=True)
class Erasure:
    """What `erase` did: the erasure record it appended (None when nothing was left to
    erase) and the ids of the events whose private parts it removed."""

    record: RecordedEvent | None
    erased: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what the database could not do at once (see operations.md)


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A saved projection state: a cache of a fold, never truth."""

    id: int
    name: str
    position: int  # highest journal position the state covers (as known)
    event_time: int  # the state covers every event with (time, position) <= (event_time, position)
    digest: str


@dataclass(frozen=True, slots=True)
class LookUp:
    """What a writer asks before deciding a batch, as of one moment (`look_up`): the
    journal's head, the events recorded under the ids it asked about (by id), and which
    of the request keys it asked about are bound (`bind_request`)."""

    head: int
    recorded: dict[str, RecordedEvent]
    bound: frozenset[str]


@dataclass(frozen=True, slots=True)
class RequestKey:
    """A request's idempotency key bound to what it was answered (`bind_request`): kept
    beside the chain, so that a retry after a restart is told what the request was told,
    and the same key with another request (another `fingerprint`) is refused."""

    key: str
    fingerprint: str  # the request's own digest, as its caller computed it
    answer: str  # the answer given, as the caller encoded it (text: data, never code)
    position: int  # the journal's head when it was bound (its events included)
    recorded_at: int  # µs since the epoch
    # The first and last journal position the request named (None: none). Erasing a
    # record in that span drops the binding: its fingerprint was made from the request,
    # private fields and all.
    first_position: int | None = None
    last_position: int | None = None
