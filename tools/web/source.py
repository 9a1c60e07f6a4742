"""Where the pages read from: a journal, seen whole or as it stood at a position.

`AuditSource` wraps the journal the service serves. Answers are folds of the journal
(projections' query functions), remembered until the journal's head moves, so a page
asked twice, or the chart's JSON asked right after its page, folds once. When the
service hands over its live projection (an object with `reading()`, the service's
`LedgerService`), the summary page reads the live ledger instead of folding.
"""

from __future__ import annotations

import bisect
import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, Unpack

from eventstore import JournalLike, RecordedEvent, SnapshotInfo
from eventstore.reading import ReadFilters
from projections.bulk import paused_gc
from projections.ledger import Ledger
from projections.outcomes import Revision
from projections.queries.history import HistoryFold
from projections.revisionlog import RevisionLog

T = TypeVar("T")

SYNC_REPLAY_LIMIT = 50_000
"""Up to this many events, revisions are found while the page waits (well under a second)."""

_CACHED = 64
"""Answers remembered per head: a few pages' worth for a handful of auditors."""

STREAM_EVENTS_KEPT = 250_000
"""Events of recently viewed accounts' streams kept in memory (a few hundred MB at most)."""

FOLDED_EVENTS_KEPT = 50_000
"""Events folded into the accounts' histories kept across head moves (an account's fold
holds its lines, lineage and points: some kilobytes per event)."""


class JournalView:
    """A read-only view of a journal: only the events recorded at positions <= `position`
    (None: all), and, with `stream`, only that stream's events.

    An account's stream holds the events that decide its figures (its grants, usage,
    submits, and its jobs' starts, completions and cancellations: see
    `projections/importing.py` and the facades), so an account's statement or lineage
    read through its stream is the same as through the whole journal, at the cost of its
    own events instead of everyone's; unless an import filed a step of one of its jobs
    in another stream (`projections.owners`), which the pages read beside it. Event times
    are the journal's own: `max_time` is the whole journal's latest, so an answer "as
    known at" a position is about the same moment as the current one.
    """

    def __init__(self, journal: JournalLike, position: int | None = None,
                 stream: str | None = None) -> None:
        self._journal = journal
        self.position = position
        self.stream = stream

    @property
    def url(self) -> str | None:
        """The underlying journal's URL."""
        return self._journal.url

    def read(self, **filters: Unpack[ReadFilters]) -> Iterator[RecordedEvent]:
        """The journal's events within the view (every filter the journal takes: one
        the view spelt out itself went stale when the journal learnt another)."""
        if self.position is not None:
            to_position = filters.get("to_position")
            filters["to_position"] = (self.position if to_position is None
                                      else min(to_position, self.position))
        if self.stream is not None:
            stream = filters.get("stream")
            if stream is not None and stream != self.stream:
                return iter(())
            filters["stream"] = self.stream
        return self._journal.read(**filters)

    def head(self) -> int:
        """The view's position (never past the journal's head)."""
        head = self._journal.head()
        return head if self.position is None else min(self.position, head)

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event under `event_id`, if it was recorded by the view's position."""
        rec = self._journal.get(event_id)
        if rec is None or (self.position is not None and rec.position > self.position):
            return None
        return rec

    def get_many(self, event_ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of these ids by the view's position."""
        return {i: rec for i, rec in self._journal.get_many(event_ids).items()
                if self.position is None or rec.position <= self.position}

    def stream_version(self, stream: str) -> int:
        """The stream's version in the whole journal: an account recorded later exists."""
        return self._journal.stream_version(stream)

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        """The whole journal's latest event time (see the class docstring)."""
        return self._journal.max_time(streams)

    def private(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The personal fields still held of these events (those within the view)."""
        return {i: part for i, part in self._journal.private(ids).items()
                if self.get(i) is not None}

    def position_at(self, recorded_at: int) -> int:
        """The last position recorded by `recorded_at`, within the view."""
        found = self._journal.position_at(recorded_at)
        return found if self.position is None else min(found, self.position)

    def snapshots(self, name: str) -> list[SnapshotInfo]:
        """The journal's checkpoints that the view can start from: those at or before its
        position (a checkpoint holds every event up to its own); none for one stream's
        view, whose fold a checkpoint of every stream is not."""
        if self.stream is not None:
            return []
        return [info for info in self._journal.snapshots(name)
                if self.position is None or info.position <= self.position]

    def load_snapshot(self, snapshot_id: int) -> bytes:
        """The state bytes of one of the journal's snapshots."""
        return self._journal.load_snapshot(snapshot_id)


class AuditSource:
    """The journal the pages read, with answers remembered until its head moves."""

    def __init__(self, journal: JournalLike, *, live: Any = None,
                 revision_log: RevisionLog | None = None) -> None:
        self.journal = journal
        self.live = live  # the service's live projection (has `reading()`), if any
        self._lock = threading.Lock()
        self._head = -1
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.verifier: Any = None  # the page's background verify (tools.web.verifying)
        self._revisions_lock = threading.Lock()
        # Shared with the service's `GET /v1/revisions` when both run in one process: one
        # projector caught up for both.
        self.revision_log = revision_log or RevisionLog(journal)
        self._warming: threading.Thread | None = None
        self._streams_lock = threading.Lock()
        # stream -> (position read up to, its events in position order), least recent first
        self._streams: OrderedDict[str, tuple[int, list[RecordedEvent]]] = OrderedDict()
        self._folds_lock = threading.Lock()
        # account -> its history's fold, kept open across head moves; least recent first
        self._folds: OrderedDict[str, HistoryFold] = OrderedDict()

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
        # What is computed here is a fold whose objects all live on (lines, lineage,
        # points): the cyclic collector would walk them again and again for nothing.
        with paused_gc():
            value = compute()
        with self._lock:
            if self._head == head:
                self._cache[key] = value
                while len(self._cache) > _CACHED:
                    self._cache.popitem(last=False)
        return value

    def forget(self, *, answers_only: bool = False) -> None:
        """Let go of every remembered answer, stream and fold (the next page is a first
        visit): for measurements; the revisions found are kept. `answers_only`: only the
        answers, as when the head moves (the next page folds only what is new)."""
        with self._lock:
            self._cache.clear()
        if answers_only:
            return
        with self._streams_lock:
            self._streams.clear()
        with self._folds_lock:
            self._folds.clear()

    def take_fold(self, account: str) -> HistoryFold | None:
        """The fold of `account`'s history kept from an earlier page, taken out: whoever
        takes it extends it alone (a page asked meanwhile folds anew), then `keep_fold`."""
        with self._folds_lock:
            return self._folds.pop(account, None)

    def has_fold(self, account: str) -> bool:
        """Whether a fold of `account`'s history is kept (and not taken just now)."""
        with self._folds_lock:
            return account in self._folds

    def keep_fold(self, account: str, fold: HistoryFold) -> None:
        """Keep `fold` for the next page of `account` (unless one that went further was
        kept meanwhile); the least recently kept are let go beyond `FOLDED_EVENTS_KEPT`
        events in all."""
        with self._folds_lock:
            kept = self._folds.get(account)
            if kept is not None and kept.position > fold.position:
                return
            self._folds[account] = fold
            self._folds.move_to_end(account)
            total = sum(f.events for f in self._folds.values())
            while total > FOLDED_EVENTS_KEPT and len(self._folds) > 1:
                _, dropped = self._folds.popitem(last=False)
                total -= dropped.events

    def peek(self, key: tuple[Any, ...]) -> Any:
        """What is remembered under `key` for the current head, None if nothing."""
        head = self.journal.head()
        with self._lock:
            return self._cache.get(key) if head == self._head else None

    def view(self, position: int | None, stream: str | None = None) -> JournalLike:
        """The journal as known at `position` (None or the head: all of it), only
        `stream`'s events if given."""
        if position is not None and position >= self.journal.head():
            position = None
        if position is None and stream is None:
            return self.journal
        return JournalView(self.journal, position, stream)  # type: ignore[return-value]

    def stream_events(self, stream: str, position: int | None = None) -> list[RecordedEvent]:
        """The events of `stream` recorded up to `position` (None: the head), in position
        order.

        Kept across head moves: a recorded event never changes, so a later call reads only
        what the stream gained since (an account page seen again after other accounts'
        writes costs no read of its history). The streams least recently asked for are let
        go beyond `STREAM_EVENTS_KEPT` events in all.
        """
        head = self.journal.head()
        with self._streams_lock:
            read_to, events = self._streams.pop(stream, (0, []))
            if head > read_to:
                events = events + list(self.journal.read(
                    after_position=read_to, to_position=head, stream=stream, order="position"))
                read_to = head
            self._streams[stream] = (read_to, events)
            kept = sum(len(e) for _, e in self._streams.values())
            while kept > STREAM_EVENTS_KEPT and len(self._streams) > 1:
                _, (_, dropped) = self._streams.popitem(last=False)
                kept -= len(dropped)
        if position is None or position >= read_to:
            return events
        cut = bisect.bisect_right(events, position, key=lambda rec: rec.position)
        return events[:cut]

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

    def revisions(self) -> list[Revision] | None:
        """What late events changed, in the order they came; None while they are still
        being found.

        A `RevisionLog` (the service's, when the view runs in it) is fed the journal in
        arrival order and caught up on each call, so only what was recorded since the
        last call is folded. (The live projection may have started from a checkpoint and
        then knows only the revisions since; an audit page needs all of them.) The first
        pass over a large journal runs in a background thread (started by `warm_up`, or
        here), so no page waits for a full replay; until it is done this returns None.
        """
        with self._revisions_lock:
            if self._warming is not None and self._warming.is_alive():
                return None
            if not self.revision_log.started and self.journal.head() > SYNC_REPLAY_LIMIT:
                self._start_warm_up()
                return None
            return self.revision_log.revisions()

    def warm_up(self) -> None:
        """Start finding the revisions of a large journal in the background now."""
        with self._revisions_lock:
            if not self.revision_log.started and self.journal.head() > SYNC_REPLAY_LIMIT:
                self._start_warm_up()

    def wait_for_revisions(self, timeout: float | None = None) -> list[Revision] | None:
        """Wait for a background search of revisions (scripts and tests); `revisions()`."""
        warming = self._warming
        if warming is not None:
            warming.join(timeout)
        return self.revisions()

    def _start_warm_up(self) -> None:
        if self._warming is None or not self._warming.is_alive():
            self._warming = threading.Thread(target=self._warm, name="web-revisions",
                                             daemon=True)
            self._warming.start()

    def _warm(self) -> None:
        with self._revisions_lock:
            pass  # the caller holds the lock while starting us; wait for it to let go
        self.revision_log.revisions()
        # The process now holds two folds of a large journal (the live projection and the
        # revisions' own), millions of objects that live as long as it does. A full pass of
        # the cyclic collector walks every one of them, seconds at a time, during whatever
        # page happens to trigger it: leave them out of its passes from now on. (Memory
        # they free by reference counting is still freed.)
        gc.freeze()
