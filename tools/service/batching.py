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

`ahead` decides a batch before its transaction exists, while the previous batch is still
being written (see `tools/service/groupcommit.py`): its decisions are made on the
projection, which already holds the previous batch's; their events are deferred and
placed after its last position; and `written` then writes them in one transaction of
their own (keys, head, append, commit). The append landing exactly at the deferred
positions proves nobody else appended in between, so the decisions stand as if they had
been made under the keys. Anything a decision needs from the journal itself (a retry's
original record, a read, an append that cannot wait) first waits for the batch ahead,
then opens the transaction on the spot and checks the head: from there on the batch goes
on as a plain one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from eventstore import (
    IdempotencyConflict,
    JournalLike,
    LookUp,
    NewEvent,
    RecordedEvent,
    RequestKey,
    Transaction,
    VersionConflict,
)
from eventstore.backend import SHARED
from eventstore.journal import Journal


class PositionsMoved(Exception):
    """The deferred events did not land where the projection placed them."""


@dataclass
class _Batch:
    tx: Transaction | None  # None: decided ahead, no transaction yet (see `_tx`)
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
    # Decided ahead: how to open the transaction when a decision needs the journal.
    opening: Callable[[_Batch], Transaction] | None = None
    # Request keys to bind with the pending events (key, fingerprint, answer, positions),
    # and the journal to bind them in once the transaction is open.
    pending_requests: list[PendingRequest] = field(default_factory=list)
    journal: JournalLike | None = None


def _tx(batch: _Batch) -> Transaction:
    """The batch's transaction, opened now if the batch was decided ahead."""
    if batch.tx is None:
        assert batch.opening is not None
        batch.tx = batch.opening(batch)
    return batch.tx


PendingRequest = tuple[str, str, str, Sequence[int]]
"""A request key to bind with the deferred events: key, fingerprint, answer, positions."""


def _flush(batch: _Batch) -> None:
    if batch.pending:
        events, first = batch.pending, (batch.base or 0) + 1
        batch.pending, batch.pending_ids = [], {}
        try:
            recorded = _tx(batch).append(events)
        except (IdempotencyConflict, ValueError) as exc:
            # The deferred events of several decisions refused together (two of them
            # under one id, say): no refusal of the decision that happens to write them
            # (a later one's read or retry), which would commit the batch without them
            # while their own decisions answered success. Decided again, one append per
            # decision, each decision meets its own refusal.
            raise PositionsMoved(f"the deferred events were refused: {exc}") from exc
        if [r.position for r in recorded] != list(range(first, first + len(events))):
            raise PositionsMoved(f"deferred events landed at {recorded[0].position}.., "
                                 f"expected {first}..")
    elif batch.tx is None:
        return  # decided ahead, no transaction yet: its keys go with its write
    # The transaction is open: a flush comes before an append that is not deferred (a
    # batch of events with a reversal, say), so the next deferred events follow the
    # transaction's head, not the head the batch was decided from. (Kept, that one put
    # them where the direct append had landed: the write failed and the projection
    # was rebuilt from the newest checkpoint.)
    batch.base = None
    # In the batch's transaction, with its events (or alone: a start that found nothing).
    requests, batch.pending_requests = batch.pending_requests, []
    for request in requests:
        assert batch.journal is not None
        batch.journal.bind_request(*request)


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
        return _tx(batch).read(**kwargs)

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
            return _tx(batch).append(events, expected_versions=expected_versions)
        if batch.base is None:
            batch.base = _tx(batch).head()
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
        if batch.base is not None and (batch.pending or batch.tx is None):
            return batch.base + len(batch.pending)
        return _tx(batch).head()


@dataclass
class Deferred:
    """What a batch decided ahead leaves to write (`BatchJournal.ahead`)."""

    locks: set[str]
    events: list[NewEvent]
    first: int  # the position its first event must get
    opened: bool = False  # a decision needed the journal: written and committed already
    requests: list[PendingRequest] = field(default_factory=list)  # bound with the events
    # The single writes' keys, looked up before the batch held its locks: bound since by
    # another writer, they fail the write (`Journal.append_at`'s `unbound`).
    unbound: list[str] = field(default_factory=list)


class BatchJournal:
    """A journal that knows when the writer is inside a batch (see the module doc)."""

    def __init__(self, journal: JournalLike) -> None:
        self._journal = journal
        self._batch: _Batch | None = None
        # (position, chain hash) the projection deciding the batches last verified, or
        # None: an append that finds the journal's head there with another hash (the
        # journal restored from an older copy, then written on up to there) writes
        # nothing (`Journal.append_at`'s `after_hash`, a transaction's `expect_head`).
        self.chained_from: Callable[[], tuple[int, str] | None] = lambda: None

    @property
    def url(self) -> str | None:
        return self._journal.url

    def __getattr__(self, name: str) -> Any:
        # Anything not listed here reads or writes the journal: write what is deferred.
        batch = self._current()
        if batch is not None:
            _tx(batch)  # the journal's own calls join this thread's transaction
            _flush(batch)
            batch.looked_up = None  # it may record one of the batch's keys
        return getattr(self._journal, name)

    def _current(self) -> _Batch | None:
        batch = self._batch
        if batch is not None and batch.thread == threading.get_ident():
            return batch
        return None

    def in_transaction(self) -> bool:
        """Whether this thread is deciding a batch (whose transaction may not be open
        yet, decided ahead): a decision inside it is the batch's to roll back."""
        return self._current() is not None

    @contextmanager
    def batch(self, locks: Sequence[str], ids: Iterable[str] = (),
              request_keys: Iterable[str] = ()) -> Iterator[LookUp]:
        """One transaction for a whole batch, holding `locks`; deferred events are
        written before it commits. `ids`: the event ids the batch's decisions will ask
        about (their idempotency keys), looked up in one query under the locks, with
        which of `request_keys` are bound to a request (`bind_request`): the block gets
        that look-up."""
        with self._journal.transaction(locks) as tx:
            batch = self._batch = _Batch(tx, set(locks), journal=self._journal)
            wanted = frozenset(ids)
            # The head comes with the keys' records and bindings, in one query.
            found = self._journal.look_up(wanted, request_keys)
            self._expect(tx, found.head)
            batch.start_head, batch.recorded = found.head, found.recorded
            batch.looked_up = wanted
            try:
                yield found
                _flush(batch)
            finally:
                self._batch = None

    @contextmanager
    def ahead(self, locks: Sequence[str], keys: Iterable[str],
              recorded: dict[str, RecordedEvent], base: int,
              wait: Callable[[], None], single: Sequence[str] = ()) -> Iterator[Deferred]:
        """A batch decided before its transaction exists (see the module doc), on a
        projection at `base`; `recorded`: what those of its idempotency keys (`keys`)
        that are recorded were recorded as.
        `wait()`: returns once the batch ahead is committed (raises if it failed).

        What the block leaves is in the `Deferred` it got: events to write with
        `written`, or nothing when a decision needed the journal (the transaction was
        opened then, and commits as the block ends)."""
        deferred = Deferred(set(locks), [], base + 1, unbound=list(single))
        with ExitStack() as stack:
            def opening(batch: _Batch) -> Transaction:
                wait()
                tx = stack.enter_context(self._journal.transaction(sorted(batch.held)))
                # Nobody appended since the projection's head: the decisions made so far
                # stand (else decide again, under the keys).
                if tx.head() != base:
                    raise PositionsMoved(f"the journal moved past {base} before the batch "
                                         "decided ahead of it was written")
                self._expect(tx, base)
                if deferred.unbound and self._journal.look_up((), deferred.unbound).bound:
                    # A key taken meanwhile by a request that appended nothing (as
                    # `written` checks with `append_at`'s `unbound`).
                    raise PositionsMoved("a request key of the batch decided ahead was bound "
                                         "by another writer before it was written")
                deferred.opened = True
                return tx

            batch = self._batch = _Batch(None, deferred.locks, caught_up=base, defer=True,
                                         base=base, opening=opening, journal=self._journal)
            batch.looked_up = frozenset(keys)
            batch.recorded = recorded
            batch.start_head = base
            try:
                yield deferred
                if batch.tx is not None:
                    _flush(batch)
                else:
                    deferred.events = batch.pending
                    deferred.requests = batch.pending_requests
            finally:
                self._batch = None

    def written(self, deferred: Deferred) -> list[RecordedEvent]:
        """Write a batch decided ahead: its keys, its events at the positions its
        decisions gave them (`PositionsMoved` if not), and the commit; on any thread."""
        if not deferred.events:
            if deferred.requests:
                self._bind_alone(deferred)
            return []
        first = deferred.first
        if isinstance(self._journal, Journal):
            # A SQL journal checks where the events land before it writes, and takes the
            # keys, writes and commits in two round trips (request keys bound in them).
            # The hash they chain from is checked against the head it reads anyway. (The
            # point as it stands now: the batch ahead has committed, and moved it.)
            point = self.chained_from()
            try:
                return self._journal.append_at(
                    deferred.events, at=first, locks=sorted(deferred.locks),
                    requests=deferred.requests, unbound=deferred.unbound,
                    after_hash=point[1] if point is not None and point[0] == first - 1
                    else None)
            except VersionConflict as exc:
                raise PositionsMoved(str(exc)) from exc
        with self._journal.transaction(sorted(deferred.locks)) as tx:
            recorded = tx.append(deferred.events)
            if [r.position for r in recorded] != list(range(first, first + len(recorded))):
                raise PositionsMoved(f"deferred events landed at {recorded[0].position}.., "
                                     f"expected {first}..")
            for request in deferred.requests:
                self._journal.bind_request(*request)
            return recorded

    def _expect(self, tx: Transaction, head: int) -> None:
        """Have `tx`'s appends chain from the verified point when the head is there."""
        point = self.chained_from()
        expect = getattr(tx, "expect_head", None)  # a SQL journal's transaction
        if point is not None and point[0] == head and expect is not None:
            expect(*point)

    def _bind_alone(self, deferred: Deferred) -> None:
        """Write the request keys of a batch decided ahead that appends nothing: under
        its keys, once nobody appended since it was decided (`PositionsMoved` if someone
        did: what it decided may not hold)."""
        with self._journal.transaction(sorted(deferred.locks)) as tx:
            if tx.head() != deferred.first - 1:
                raise PositionsMoved(f"the journal moved past {deferred.first - 1} before "
                                     "the batch decided ahead of it was written")
            for request in deferred.requests:
                self._journal.bind_request(*request)

    def bind_request_later(self, key: str, fingerprint: str, answer: str,
                           positions: Sequence[int]) -> None:
        """Bind a request key with the events this thread's batch deferred (the same
        write, so both or neither are kept); in a batch decided ahead, with its write
        (also when it defers no event); else now, in this thread's transaction if any."""
        batch = self._current()
        if batch is None or not (batch.pending or batch.tx is None):
            self._journal.bind_request(key, fingerprint, answer, positions)
            return
        batch.pending_requests.append((key, fingerprint, answer, positions))

    def request_ahead(self, key: str) -> RequestKey | None:
        """What `key` is bound to, asked outside the batch (as `recorded_ahead` asks for
        ids): a binding made after the look makes the batch's write fail, and its
        commands are decided again."""
        return self._journal.request(key)

    def deciding_ahead(self) -> bool:
        """Whether this thread decides a batch ahead of its transaction right now."""
        batch = self._current()
        return batch is not None and batch.tx is None

    def recorded_ahead(self, ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """Which of these ids are recorded (committed), asked outside the batch: an id
        recorded after the look (by the batch being written, or another writer) makes
        the deferred append land elsewhere, and the batch is decided again. Ids the
        batch looked up with the head are answered from that look (one query less)."""
        wanted = list(ids)
        batch = self._current()
        if batch is not None and batch.looked_up is not None and batch.looked_up.issuperset(
                wanted):
            return {i: batch.recorded[i] for i in wanted if i in batch.recorded}
        return self._journal.get_many(wanted)

    def join(self) -> None:
        """Open the batch's transaction now (waiting for the batch ahead) and write what
        is deferred: the journal's own calls on this thread then join the batch."""
        batch = self._current()
        if batch is not None:
            _tx(batch)
            _flush(batch)
            batch.looked_up = None  # what follows may record one of the batch's keys

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
        if missing and batch.tx is None:
            # Decided ahead: the keys are taken with the others when it is written, and
            # the head checked then covers what was appended under them meanwhile.
            batch.held.update(missing)
        elif missing:
            with self._journal.transaction(missing):  # joins the batch's: takes the keys
                batch.held.update(missing)
                batch.dirty = True
        yield _BatchTransaction(batch)

    def committed(self, event_id: str) -> RecordedEvent | None:
        """An event committed before the batch, read outside it: a lookup that is no
        retry's (`get` takes a found record for the decision's own, to be answered by the
        journal) and must not open a batch decided ahead."""
        return self._journal.get(event_id)

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
            if batch is not None:
                _tx(batch)
            found = self._journal.get(event_id)
        if found is not None and batch is not None:
            batch.direct = True
        return found

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        if streams is None and self._current() is not None:
            return None
        batch = self._current()
        if batch is not None:
            _tx(batch)
            _flush(batch)
        return self._journal.max_time(streams)

    def read(self, **kwargs: Any) -> Iterator[RecordedEvent]:
        batch = self._current()
        if batch is not None:
            _tx(batch)
            _flush(batch)
        return self._journal.read(**kwargs)

    def head(self) -> int:
        batch = self._current()
        if batch is not None:
            _tx(batch)
            _flush(batch)
        return self._journal.head()
