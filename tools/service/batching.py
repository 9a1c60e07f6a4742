"""The journal as the live session sees it while the writer decides a batch.

The session decides each command as the library does (lock, catch up, build, append),
which costs several round trips per decision. Inside a batch most of them are already
done, once, for the whole batch:

- the batch holds every key its commands lock, so a decision's own lock request only
  goes to the database for a key the batch does not hold yet;
- the batch caught up under those keys, and the projection holds each decision of the
  batch as it is appended; a decision's catch-up can only find events other writers
  appended since, on keys this batch does not hold, which cannot change a decision on
  the keys it does hold, so it is skipped (unless a key was added during the batch: then
  the next catch-up reads, because that key's events may be new);
- the journal's latest event time is only asked to move a live decision after events
  other writers recorded meanwhile on other keys, a courtesy the batch skips.

Appending stays per decision, inside the one transaction: the commit is what the batch
shares. Everything else (reads by other threads, retries rebuilding a decision, late
events) goes to the journal itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike, NewEvent, RecordedEvent, Transaction

SHARED = "shared:"


@dataclass
class _Batch:
    tx: Transaction
    held: set[str]
    thread: int = field(default_factory=threading.get_ident)
    caught_up: int | None = None  # the position the batch caught up to under its keys
    dirty: bool = False  # a key was added: the next catch-up must read


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
        return batch.tx.read(**kwargs)

    def append(self, events: Sequence[NewEvent], *,
               expected_versions: Mapping[str, int] | None = None) -> list[RecordedEvent]:
        return self._batch.tx.append(events, expected_versions=expected_versions)

    def head(self) -> int:
        return self._batch.tx.head()


class BatchJournal:
    """A journal that knows when the writer is inside a batch (see the module doc)."""

    def __init__(self, journal: JournalLike) -> None:
        self._journal = journal
        self._batch: _Batch | None = None

    @property
    def url(self) -> str | None:
        return self._journal.url

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    def _current(self) -> _Batch | None:
        batch = self._batch
        if batch is not None and batch.thread == threading.get_ident():
            return batch
        return None

    @contextmanager
    def batch(self, locks: Sequence[str]) -> Iterator[Transaction]:
        """One transaction for a whole batch, holding `locks`."""
        with self._journal.transaction(locks) as tx:
            self._batch = _Batch(tx, set(locks))
            try:
                yield tx
            finally:
                self._batch = None

    def caught_up(self, position: int) -> None:
        """The batch has caught up to `position` under its keys."""
        batch = self._current()
        if batch is not None:
            batch.caught_up = position

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

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        if streams is None and self._current() is not None:
            return None
        return self._journal.max_time(streams)
