"""The journal as the live session sees it while the writer decides a batch.

The session decides each command as the library does (lock, catch up, build, append),
which costs several round trips per decision. Inside a batch most of them are done once
for the whole batch:

- the batch holds every key its commands lock, so a decision's own lock request only
  goes to the database for a key the batch does not hold yet;
- the batch caught up under those keys, and the projection holds each decision of the
  batch as it is made; a decision's catch-up could only find events other writers
  appended since, on keys this batch does not hold, which cannot change a decision on
  the keys it does hold, so it is skipped (unless a key was added during the batch: then
  the next catch-up reads, because that key's events may be new);
- the journal's latest event time is only asked to move a live decision after events
  other writers recorded meanwhile on other keys, a courtesy the batch skips;
- with `defer_appends`, the decisions' events are not written one decision at a time:
  each gets the position it will have (the head, plus the events before it in the
  batch), the projection applies it there, and the batch writes them all in one append
  before anything reads the journal and before the commit. The append must return
  exactly those positions, all new; if not (another writer appended in between, or a
  retried key was already recorded), `PositionsMoved` is raised: the transaction rolls
  back and the caller decides the batch again without deferring.

Everything else (reads, retries rebuilding a decision, late events) goes to the journal
itself, after writing what is deferred.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike, NewEvent, RecordedEvent, Transaction

SHARED = "shared:"


class PositionsMoved(Exception):
    """The deferred events did not land where the projection placed them."""


@dataclass
class _Batch:
    tx: Transaction
    held: set[str]
    thread: int = field(default_factory=threading.get_ident)
    caught_up: int | None = None  # the position the batch caught up to under its keys
    dirty: bool = False  # a key was added: the next catch-up must read
    defer: bool = False
    base: int | None = None  # the head the pending events follow (None: ask the journal)
    pending: list[NewEvent] = field(default_factory=list)
    pending_ids: dict[str, RecordedEvent] = field(default_factory=dict)
    direct: bool = False  # the decision being made is a retry: append it at once
    # The batch's idempotency keys, looked up together once the keys were held: what
    # each was recorded as, if it was (None: look each id up on its own).
    looked_up: frozenset[str] | None = None
    recorded: dict[str, RecordedEvent] = field(default_factory=dict)
    start_head: int = 0  # the journal's head once the keys were held


def _flush(batch: _Batch) -> None:
    if not batch.pending:
        return
    events, first = batch.pending, (batch.base or 0) + 1
    batch.pending, batch.pending_ids = [], {}
    recorded = batch.tx.append(events)
    if [r.position for r in recorded] != list(range(first, first + len(events))):
        raise PositionsMoved(f"deferred events landed at {recorded[0].position}.., "
                             f"expected {first}..")
    batch.base = None


class _BatchTransaction:
    """The batch's transaction, as one decision of it sees it."""

    def __init__(self, batch: _Batch) -> None:
        self._batch = batch

    def read(self, **kwargs: Any) -> Iterator[RecordedEvent]:
        batch = self._batch
        catching_up = (set(kwargs) == {"after_position", "order"}
                       and kwargs["order"] == "position")
        if (catching_up and not batch.dirty and batch.caught_up is not None
                and kwargs["after_position"] >= batch.caught_up):
            return iter(())
        if catching_up:
            batch.dirty = False
        _flush(batch)
        return batch.tx.read(**kwargs)

    def append(self, events: Sequence[NewEvent], *,
               expected_versions: Mapping[str, int] | None = None) -> list[RecordedEvent]:
        batch = self._batch
        if not batch.defer or expected_versions is not None or batch.direct:
            # A retry appends at once: the journal answers it with the original records,
            # or refuses another body (IdempotencyConflict) before writing anything, so
            # the batch goes on.
            batch.direct = False
            batch.looked_up = None  # it may record one of the batch's keys
            _flush(batch)
            return batch.tx.append(events, expected_versions=expected_versions)
        if batch.base is None:
            batch.base = batch.tx.head()
        out = []
        for event in events:
            position = batch.base + len(batch.pending) + 1
            rec = RecordedEvent(position, event.id, event.stream, 0, event.type, event.time,
                                0, event.payload, "")
            batch.pending.append(event)
            batch.pending_ids[event.id] = rec
            out.append(rec)
        return out

    def head(self) -> int:
        batch = self._batch
        if batch.pending and batch.base is not None:
            return batch.base + len(batch.pending)
        return batch.tx.head()


class BatchJournal:
    """A journal that knows when the writer is inside a batch (see the module doc)."""

    def __init__(self, journal: JournalLike) -> None:
        self._journal = journal
        self._batch: _Batch | None = None

    @property
    def url(self) -> str | None:
        return self._journal.url

    def __getattr__(self, name: str) -> Any:
        # Anything not listed here reads or writes the journal: write what is deferred.
        batch = self._current()
        if batch is not None:
            _flush(batch)
            batch.looked_up = None  # it may record one of the batch's keys
        return getattr(self._journal, name)

    def _current(self) -> _Batch | None:
        batch = self._batch
        if batch is not None and batch.thread == threading.get_ident():
            return batch
        return None

    @contextmanager
    def batch(self, locks: Sequence[str], ids: Iterable[str] = ()) -> Iterator[Transaction]:
        """One transaction for a whole batch, holding `locks`; deferred events are
        written before it commits. `ids`: the event ids the batch's decisions will ask
        about (their idempotency keys), looked up in one query under the locks."""
        with self._journal.transaction(locks) as tx:
            batch = self._batch = _Batch(tx, set(locks))
            wanted = frozenset(ids)
            # The head comes with the keys' records, in one query.
            batch.start_head, batch.recorded = self._journal.head_and_get_many(wanted)
            batch.looked_up = wanted
            try:
                yield tx
                _flush(batch)
            finally:
                self._batch = None

    def start_head(self) -> int:
        """The journal's head as the batch found it once its keys were held (asked with
        the keys' records); outside a batch, the head now."""
        batch = self._current()
        if batch is None:
            return self._journal.head()
        return batch.start_head

    def caught_up(self, position: int, *, defer_appends: bool = False) -> None:
        """The batch has caught up to `position` (the head) under its keys; with
        `defer_appends`, decisions' events are written together (see the module doc)."""
        batch = self._current()
        if batch is not None:
            batch.caught_up = position
            batch.defer = defer_appends
            batch.base = position

    def flush(self) -> None:
        """Write the deferred events now (before an append that is not deferred)."""
        batch = self._current()
        if batch is not None:
            _flush(batch)
            batch.looked_up = None  # that append may record one of the batch's keys

    @contextmanager
    def transaction(self, locks: Iterable[str] = ()) -> Iterator[Any]:
        batch = self._current()
        if batch is None:
            with self._journal.transaction(locks) as tx:
                yield tx
            return
        missing = [k for k in locks if k not in batch.held
                   and not (k.startswith(SHARED) and k[len(SHARED):] in batch.held)]
        if missing:
            with self._journal.transaction(missing):  # joins the batch's: takes the keys
                batch.held.update(missing)
                batch.dirty = True
        yield _BatchTransaction(batch)

    def get(self, event_id: str) -> RecordedEvent | None:
        batch = self._current()
        if batch is not None:
            # A key is in at most one decision of a batch (the writer sees to it): a
            # deferred id is this batch's own event.
            deferred = batch.pending_ids.get(event_id)
            if deferred is not None:
                return deferred
        if batch is not None and batch.looked_up is not None and event_id in batch.looked_up:
            found = batch.recorded.get(event_id)
        else:
            found = self._journal.get(event_id)
        if found is not None and batch is not None:
            batch.direct = True
        return found

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        if streams is None and self._current() is not None:
            return None
        batch = self._current()
        if batch is not None:
            _flush(batch)
        return self._journal.max_time(streams)

    def read(self, **kwargs: Any) -> Iterator[RecordedEvent]:
        batch = self._current()
        if batch is not None:
            _flush(batch)
        return self._journal.read(**kwargs)

    def head(self) -> int:
        batch = self._current()
        if batch is not None:
            _flush(batch)
        return self._journal.head()
