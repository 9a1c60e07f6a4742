"""The journal's interface, and nothing else: what projections may rely on.

Both `Journal` (SQL) and `MemoryJournal` satisfy `JournalLike`; their
transactions satisfy `Transaction`. Code written against these protocols runs
unchanged on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, Unpack, runtime_checkable

from .reading import ReadFilters
from .records import (
    Anchor,
    ChainReport,
    Erasure,
    LookUp,
    NewEvent,
    RecordedEvent,
    RequestKey,
    SnapshotInfo,
)


@runtime_checkable
class Transaction(Protocol):
    """One read-decide-append unit; commits on clean exit, rolls back on exception."""

    def read(self, **filters: Unpack[ReadFilters]) -> Iterator[RecordedEvent]:
        """Events as this transaction sees them (its own appends included); the filters
        are `JournalLike.read`'s."""
        ...

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append inside the transaction; visible to others only at commit."""
        ...

    def head(self) -> int:
        """The last position as this transaction sees it."""
        ...

    def hold_head(self) -> int:
        """Take the journal's head now, as the first append would, and return its
        position: no other transaction appends until this one ends, so every event this
        one appends from here on is new at the positions that follow."""
        ...


@runtime_checkable
class JournalLike(Protocol):
    """An append-only, idempotent, hash-chained event journal."""

    @property
    def url(self) -> str | None:
        """The database URL, or None for an in-memory journal."""
        ...

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append a batch atomically; repeated ids return their original records."""
        ...

    def read(self, **filters: Unpack[ReadFilters]) -> Iterator[RecordedEvent]:
        """Stream events in canonical (event_time, position) or position order.

        The filters, by name, and their defaults are `ReadQuery.make`'s: one definition
        for every journal and transaction."""
        ...

    def head(self) -> int:
        """The last position, 0 when empty."""
        ...

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event recorded under this id, or None."""
        ...

    def get_many(self, event_ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of these ids, by id (one query)."""
        ...

    def head_and_get_many(self, event_ids: Iterable[str]
                          ) -> tuple[int, dict[str, RecordedEvent]]:
        """`head()` and `get_many(event_ids)` as of one moment (one query where the
        database allows)."""
        ...

    def look_up(self, event_ids: Iterable[str], request_keys: Iterable[str] = ()) -> LookUp:
        """`head()`, `get_many(event_ids)` and which of `request_keys` are bound, as of
        one moment (one query where the database allows)."""
        ...

    def stream_version(self, stream: str) -> int:
        """The stream's current version, 0 when it has no event."""
        ...

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        """The latest event time recorded (in those streams), None when none."""
        ...

    def position_at(self, recorded_at: int) -> int:
        """The last position recorded at or before that wall-clock time (µs), 0 if none."""
        ...

    def read_verified(
        self,
        after: Anchor | tuple[int, str] | None = None,
        *,
        to_position: int | None = None,
        batch_size: int = 5000,
    ) -> Iterator[RecordedEvent]:
        """Events after (position, hash) in position order, each checked to chain (ChainBroken)."""
        ...

    def head_anchor(self) -> Anchor:
        """The last position and its chain hash; (0, genesis hash) when empty."""
        ...

    def private(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The private parts still held of these event ids, checked against their seals."""
        ...

    def private_parts(self, *, after_position: int = 0, to_position: int | None = None,
                      batch_size: int = 5000) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Every private part still held, in position order: (position, event id, fields)."""
        ...

    def erase(self, ids: Iterable[str], record: NewEvent) -> Erasure:
        """Delete these events' private parts, appending `record` to say so (one transaction)."""
        ...

    def verify(self, anchor: Anchor | tuple[int, str] | str | None = None) -> int | None:
        """The first position whose hash or place in the 1..N sequence is wrong, else None."""
        ...

    def verify_chain(self, *, anchor: Anchor | tuple[int, str] | str | None = None,
                     progress: Callable[[int, int], None] | None = None) -> ChainReport:
        """Whether the chain is whole (and holds the anchored prefix), and where it breaks;
        `progress(done, total)` now and then on the way."""
        ...

    def transaction(self, locks: Iterable[str] = ()) -> AbstractContextManager[Transaction]:
        """A read-decide-append transaction holding the given lock keys."""
        ...

    def request(self, key: str) -> RequestKey | None:
        """What a request's idempotency key was bound to (`bind_request`), or None."""
        ...

    def bind_request(self, key: str, fingerprint: str, answer: str,
                     positions: Sequence[int] = ()) -> RequestKey:
        """Bind a request's key to its digest and answer, with the transaction's events."""
        ...

    def save_snapshot(
        self, name: str, position: int, event_time: int, digest: str, state: bytes
    ) -> SnapshotInfo:
        """Store a projection state (a cache, never truth)."""
        ...

    def snapshots(self, name: str) -> list[SnapshotInfo]:
        """The snapshots saved under name, ordered by (event_time, position)."""
        ...

    def load_snapshot(self, snapshot_id: int) -> bytes:
        """The state bytes of one snapshot; KeyError if there is none with that id."""
        ...

    def drop_snapshots(self, name: str, *, from_time: int | None = None,
                       before_position: int | None = None,
                       through_id: int | None = None,
                       from_id: int | None = None) -> int:
        """Drop snapshots with event_time >= from_time, position < before_position and
        from_id <= id <= through_id (each bound: none if None); return how many."""
        ...

    def close(self) -> None:
        """Release connections; the journal is unusable afterwards."""
        ...
