"""Where the pages read from: a journal, seen whole or as it stood at a position.

`AuditSource` wraps the journal the service serves. Answers are folds of the journal
(projections' query functions), remembered until the journal's head moves, so a page
asked twice, or the chart's JSON asked right after its page, folds once. When the
service hands over its live projection (an object with `reading()`, the service's
`LedgerService`), the summary page reads the live ledger instead of folding.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from eventstore import JournalLike, RecordedEvent
from projections.ledger import Ledger
from projections.outcomes import Revision

T = TypeVar("T")

_CACHED = 64
"""Answers remembered per head: a few pages' worth for a handful of auditors."""


class KnownAt:
    """A read-only view of a journal holding only the events recorded at positions <= `position`.

    Event times are the journal's own: `max_time` is the whole journal's latest, so an
    answer "as known at" a position is about the same moment as the current one.
    """

    def __init__(self, journal: JournalLike, position: int) -> None:
        self._journal = journal
        self.position = position

    @property
    def url(self) -> str | None:
        """The underlying journal's URL."""
        return self._journal.url

    def read(self, *, after_position: int = 0, to_position: int | None = None,
             from_time: int | None = None, to_time: int | None = None,
             stream: str | None = None, after: tuple[int, int] | None = None,
             order: Any = "canonical", batch_size: int = 5000) -> Iterator[RecordedEvent]:
        """The journal's events, none recorded after the view's position."""
        bound = self.position if to_position is None else min(to_position, self.position)
        return self._journal.read(after_position=after_position, to_position=bound,
                                  from_time=from_time, to_time=to_time, stream=stream,
                                  after=after, order=order, batch_size=batch_size)

    def head(self) -> int:
        """The view's position (never past the journal's head)."""
        return min(self.position, self._journal.head())

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event under `event_id`, if it was recorded by the view's position."""
        rec = self._journal.get(event_id)
        return rec if rec is not None and rec.position <= self.position else None

    def stream_version(self, stream: str) -> int:
        """The stream's version in the whole journal: an account recorded later exists."""
        return self._journal.stream_version(stream)

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        """The whole journal's latest event time (see the class docstring)."""
        return self._journal.max_time(streams)

    def position_at(self, recorded_at: int) -> int:
        """The last position recorded by `recorded_at`, within the view."""
        return min(self._journal.position_at(recorded_at), self.position)


class AuditSource:
    """The journal the pages read, with answers remembered until its head moves."""

    def __init__(self, journal: JournalLike, *, live: Any = None) -> None:
        self.journal = journal
        self.live = live  # the service's live projection (has `reading()`), if any
        self._lock = threading.Lock()
        self._head = -1
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.verifier: Any = None  # the page's background verify (tools.web.verifying)

    def head(self) -> int:
        """The journal's head position."""
        return self.journal.head()

    def cached(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """`compute()` remembered under `key` until the journal's head moves."""
        head = self.journal.head()
        with self._lock:
            if head != self._head:
                self._cache.clear()
                self._head = head
            if key in self._cache:
                self._cache.move_to_end(key)
                found: T = self._cache[key]
                return found
        value = compute()
        with self._lock:
            if self._head == head:
                self._cache[key] = value
                while len(self._cache) > _CACHED:
                    self._cache.popitem(last=False)
        return value

    def view(self, position: int | None) -> JournalLike:
        """The journal as known at `position` (None or the head: the journal itself)."""
        if position is None or position >= self.journal.head():
            return self.journal
        return KnownAt(self.journal, position)  # type: ignore[return-value]

    @contextmanager
    def reading(self) -> Iterator[Ledger]:
        """The whole journal folded, for the duration of the block (read-only): the live
        projection, under its lock, when the service has one; else a remembered fold."""
        if self.live is not None:
            with self.live.reading() as ledger:
                yield ledger
            return

        def fold() -> Ledger:
            from projections.replay import fold_canonical

            return fold_canonical(self.journal)

        yield self.cached(("ledger",), fold)

    def revisions(self) -> list[Revision]:
        """What late events changed, in the order they came: a replay of the whole journal,
        remembered until the head moves. (A live projection that started from a checkpoint
        knows only the revisions since; an audit page needs all of them.)"""

        def find() -> list[Revision]:
            from projections.replay import replay

            return replay(self.journal).revisions

        return self.cached(("revisions",), find)
