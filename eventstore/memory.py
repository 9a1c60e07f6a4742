"""The in-memory journal: plain Python, no database, the same interface and hashes.

For tests, demos and the facades' `journal=None`. Thread-safe: one RLock guards
every operation, and a transaction holds it from start to end (one writer).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import appending
from .appending import (
    INT64_MAX,
    INT64_MIN,
    encodes,
    require_int,
    require_text,
    storable,
    validate_snapshot,
    wall_clock_us,
)
from .base import JournalBase, to_event
from .errors import JournalError
from .hashing import GENESIS_HASH, canonical_json, pinned, record_hash_text
from .reading import ReadQuery
from .records import (
    PRIVATE_KEY,
    Anchor,
    Batch,
    Erasure,
    LookUp,
    NewEvent,
    PinnedRow,
    RecordedEvent,
    RequestKey,
    SnapshotInfo,
    StoredRow,
)

_PLAIN = frozenset({str, int, float, bool, type(None)})
"""The exact types of the payload values the quick append takes (see `_append_new`)."""


class _Transaction:
    """`MemoryJournal.transaction`: the journal's lock held from `with` to its end, and
    the appends made meanwhile undone if the block raises. A class rather than a
    generator: every decision opens one, and a generator's context manager cost more
    than the rest of it."""

    __slots__ = ("_journal", "_mark")

    def __init__(self, journal: MemoryJournal) -> None:
        self._journal = journal
        self._mark: tuple[int, int, int, int] | None = None

    def __enter__(self) -> MemoryJournal:
        journal = self._journal
        journal._lock.acquire()
        try:
            journal._check_open()
        except BaseException:
            journal._lock.release()
            raise
        # Lengths, not copies: every decision opens a transaction, and a copy of the
        # per-stream versions and times cost each one in proportion to the streams
        # (a start_next among 10,000 accounts spent most of its time copying them). A
        # rollback derives them again from the rows it keeps.
        self._mark = (len(journal._stored), journal._last_recorded_at,
                      len(journal._requests), len(journal._snapshot_undo))
        journal._tx_depth += 1
        # The journal itself is the transaction: under the RLock nobody else sees the
        # appends until the block ends.
        return journal

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        journal = self._journal
        try:
            if kind is not None and self._mark is not None:
                journal._rollback(*self._mark)
        finally:
            journal._tx_depth -= 1
            if not journal._tx_depth:
                journal._tx_first = None
                journal._snapshot_undo.clear()
            journal._lock.release()


@dataclass(slots=True)
class _Snapshot:
    info: SnapshotInfo
    state: bytes


class MemoryJournal(JournalBase):
    """A journal held in this process's memory; lost when the process ends.

    Rows are kept as stored rows (the payload as canonical text) and decoded into a
    fresh RecordedEvent on every read, so a caller who mutates a returned payload
    cannot change the journal.
    """

    url: str | None = None

    def __init__(self, *, clock: Callable[[], int] = wall_clock_us) -> None:
        """Create an empty journal; `clock` gives recorded_at in µs (tests may pin it)."""
        self._lock = threading.RLock()
        self._clock = clock
        self._stored: list[StoredRow] = []  # index = position - 1
        self._private: dict[int, tuple[str, str]] = {}  # position -> (salt, private text)
        self._by_id: dict[str, int] = {}  # event id -> position
        self._canonical: list[tuple[int, int]] = []  # sorted (event_time, position)
        # The same per stream: a read of one account's events (a retry rebuilding its
        # state) walks that account's events, not the whole journal's.
        self._stream_canonical: dict[str, list[tuple[int, int]]] = {}
        self._versions: dict[str, int] = {}
        self._max_time: dict[str, int] = {}
        self._last_recorded_at = 0
        self._snapshots: dict[int, _Snapshot] = {}
        self._next_snapshot_id = 1
        # While a transaction is open, how to undo its snapshot changes: (id, the
        # snapshot it replaced or None), in the order made. A rollback undoes them as
        # SQL's does the rows (a checkpoint saved in a block that failed is not kept).
        self._snapshot_undo: list[tuple[int, _Snapshot | None]] = []
        self._closed = False
        # Batches of two events or more, first position -> last (see `batches`); and,
        # while a transaction is open, how deep and the first position it appended.
        self._batches: dict[int, int] = {}
        self._tx_depth = 0
        self._tx_first: int | None = None
        self._requests: dict[str, RequestKey] = {}  # in the order bound (see `_rollback`)

    # -- writing ---------------------------------------------------------------

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append a batch atomically; see `eventstore.Journal.append`."""
        if expected_versions is None and type(events) is list:
            with self._lock:
                recorded = self._append_new(events)
            if recorded is not None:
                return recorded
        return self._append_planned(events, expected_versions)

    def _append_new(self, events: list[NewEvent]) -> list[RecordedEvent] | None:
        """The usual append at less cost, or None having changed nothing.

        Taken when every event is a `NewEvent` with a new id (none twice), no private
        part, and a flat payload (a dict of str keys to str, int, float, bool or None):
        what a facade writes. For those the rules of `appending.plan` come down to the
        checks below, and no record is repeated, so the candidates, the lookup of what
        is recorded and the matching of repeats are not needed. Anything else (or
        anything these checks refuse) takes `_append_planned`, which says what is wrong.
        A test holds the records and the state of both paths equal.
        """
        if self._closed or not events:
            return None
        by_id = self._by_id
        texts: list[str] = []
        ids: set[str] = set()
        for e in events:
            if type(e) is not NewEvent or e.private is not None:
                return None
            eid, stream, kind, t, payload = e.id, e.stream, e.type, e.time, e.payload
            if not (type(eid) is str and type(stream) is str and type(kind) is str
                    and eid and stream and kind and type(t) is int
                    and INT64_MIN <= t <= INT64_MAX and type(payload) is dict):
                return None
            if eid in by_id or eid in ids or PRIVATE_KEY in payload:
                return None
            for key, value in payload.items():
                if type(key) is not str or type(value) not in _PLAIN:
                    return None
            try:
                text = canonical_json(payload)
            except ValueError:  # NaN or an infinity: the planned path explains
                return None
            if not (storable(eid) and storable(stream) and storable(kind)
                    and "\\u0000" not in text and encodes(text)):
                return None
            ids.add(eid)
            texts.append(text)
        stored, versions = self._stored, self._versions
        first = len(stored) + 1
        prev = stored[-1][8] if stored else GENESIS_HASH
        recorded_at = max(self._clock(), self._last_recorded_at)
        out: list[RecordedEvent] = []
        for position, e, text in zip(range(first, first + len(events)), events, texts,
                                     strict=True):
            stream = e.stream
            version = versions.get(stream, 0) + 1
            prev = record_hash_text(prev, position, e.id, stream, version, e.type, e.time,
                                    recorded_at, text)
            row = (position, e.id, stream, version, e.type, e.time, recorded_at, text, prev)
            self._store(row)
            out.append(to_event(row))
        self._last_recorded_at = recorded_at
        self._record_batch(first, first + len(events) - 1)
        return out

    def _append_planned(self, events: Sequence[NewEvent],
                        expected_versions: Mapping[str, int] | None) -> list[RecordedEvent]:
        """Any append: planned by `appending` (validation, repeats, expected versions)."""
        batch = appending.plan(events)
        appending.validate_expected(expected_versions)
        with self._lock:
            self._check_open()
            existing = {
                i: to_event(self._stored[self._by_id[i] - 1]) for i in batch.ids if i in self._by_id
            }
            held = {i: self._private[r.position][1] for i, r in existing.items()
                    if r.position in self._private}
            fresh = appending.check_existing(batch, existing, held)
            if not fresh:
                # A pure repeat changes nothing, so there is no version to conflict with.
                return appending.results(batch, existing, [])
            appending.check_expected(expected_versions, self._versions)
            head_hash = self._stored[-1][8] if self._stored else GENESIS_HASH
            recorded_at = max(self._clock(), self._last_recorded_at)
            rows = appending.build(
                fresh,
                head_position=len(self._stored),
                head_hash=head_hash,
                versions=self._versions,
                recorded_at=recorded_at,
            )
            for r in rows:
                e = r.event
                if r.private is not None:
                    self._private[e.position] = r.private
                self._store(r.stored())
            self._last_recorded_at = recorded_at
            self._record_batch(rows[0].event.position, rows[-1].event.position)
            return appending.results(batch, existing, rows)

    def _store(self, row: StoredRow) -> None:
        """Keep a new record and every index of it (by id, canonical, per stream)."""
        position, id_, stream, version, _, time, _, _, _ = row
        self._stored.append(row)
        self._by_id[id_] = position
        bisect.insort(self._canonical, (time, position))
        bisect.insort(self._stream_canonical.setdefault(stream, []), (time, position))
        self._versions[stream] = version
        self._max_time[stream] = max(self._max_time.get(stream, time), time)

    def _record_batch(self, first: int, last: int) -> None:
        """Note that `first`..`last` were appended together with whatever the open
        transaction appended before them (under the lock, its positions are contiguous)."""
        if self._tx_depth:
            if self._tx_first is None:
                self._tx_first = first
            first = self._tx_first
        if last > first:
            self._batches[first] = last

    def batches(self, *, after_position: int = 0,
                to_position: int | None = None) -> list[Batch]:
        """The batches of two events or more holding a position in (after_position,
        to_position], in position order; see `eventstore.Journal.batches`."""
        require_int("after_position", after_position)
        if to_position is not None:
            require_int("to_position", to_position)
        found: list[Batch] = []
        with self._lock:
            # Batches are recorded in position order and never overlap (a rollback cuts
            # only the newest), so the dict's order is theirs: walked back from the
            # newest, only the batches asked for are looked at (a catch-up asks after
            # its own position, near the head).
            for first, last in reversed(self._batches.items()):
                if last <= after_position:
                    break
                if to_position is None or first <= to_position:
                    found.append(Batch(first, last))
        found.reverse()
        return found

    def transaction(self, locks: Iterable[str] = ()) -> _Transaction:
        """Hold the journal's lock for a read-decide-append; undo appends on exception.

        `locks` are accepted for interface parity and ignored: the one RLock already
        serialises every writer in this process.
        """
        for key in locks:
            require_text("lock key", key)
        return _Transaction(self)

    def _rollback(self, length: int, last: int, requests: int, snapshot_undo: int) -> None:
        undo = self._snapshot_undo
        for snapshot_id, before in reversed(undo[snapshot_undo:]):
            if before is None:
                self._snapshots.pop(snapshot_id, None)
            else:
                self._snapshots[snapshot_id] = before
        del undo[snapshot_undo:]  # ids stay taken: a snapshot's id is never reused
        for key in list(self._requests)[requests:]:
            del self._requests[key]
        undone: dict[str, int] = {}  # stream -> its version before the undone rows
        for row in self._stored[length:]:
            undone.setdefault(row[2], row[3] - 1)
            del self._by_id[row[1]]
            self._private.pop(row[0], None)
            i = bisect.bisect_left(self._canonical, (row[5], row[0]))
            del self._canonical[i]
            of_stream = self._stream_canonical[row[2]]
            del of_stream[bisect.bisect_left(of_stream, (row[5], row[0]))]
        del self._stored[length:]
        for first in [f for f, last in self._batches.items() if last > length]:
            self._batches.pop(first)
            if first < length:  # a batch begun before the rolled back appends
                self._batches[first] = length
        if self._tx_first is not None and self._tx_first > length:
            self._tx_first = None
        # A stream's versions count its rows up from 1, and its rows in canonical order
        # end with its latest time: what the kept rows give is what stood before.
        for stream, version in undone.items():
            of_stream = self._stream_canonical[stream]
            if version:
                self._versions[stream] = version
                self._max_time[stream] = of_stream[-1][0]
            else:
                del self._versions[stream], self._max_time[stream]
        self._last_recorded_at = last

    # -- reading ---------------------------------------------------------------

    def _rows(self, q: ReadQuery, tx: object = None) -> Iterator[StoredRow]:
        return itertools.chain.from_iterable(self._row_batches(q, tx))

    def _hashes_at(self, positions: Sequence[int], tx: object = None) -> dict[int, str]:
        stored = self._stored  # index = position - 1; earlier rows are never removed
        size = len(stored)
        return {p: stored[p - 1][8] for p in positions if 0 < p <= size}

    def _row_batches(self, q: ReadQuery, tx: object = None) -> Iterator[list[StoredRow]]:
        if q.empty:
            return
        # Each batch is taken under the lock and yielded outside it, so a slow reader
        # never holds up writers; `mark` is where the next batch starts.
        batch_of: Callable[[ReadQuery, Any], tuple[list[StoredRow], Any, bool]]
        mark: Any
        if q.order == "position":
            batch_of, mark = self._position_batch, q.after_position
        else:
            mark = (q.from_time, 0) if q.from_time is not None else None
            if q.after is not None and (mark is None or q.after > mark):
                mark = q.after
            batch_of = self._canonical_batch
        while True:
            with self._lock:
                batch, mark, done = batch_of(q, mark)
            if batch:
                yield batch
            if done:
                return

    def _pinned_rows(self, q: ReadQuery, tx: object = None) -> Iterator[PinnedRow]:
        stored = self._stored  # index = position - 1; earlier rows are never removed
        for row in self._rows(q, tx):
            position = row[0]
            yield (*row, stored[position - 2][8] if position > 1 else None)

    def _matches(self, q: ReadQuery, row: StoredRow) -> bool:
        position, time = row[0], row[5]
        return (
            q.after_position < position <= q.to_position
            and (q.from_time is None or time >= q.from_time)
            and (q.to_time is None or time <= q.to_time)
            and (q.stream is None or row[2] == q.stream)
            and (q.type is None or row[4] == q.type)
            and (q.after is None or (time, position) > q.after)
        )

    def _position_batch(self, q: ReadQuery, cursor: int) -> tuple[list[StoredRow], int, bool]:
        out: list[StoredRow] = []
        end = min(q.to_position, len(self._stored))
        while cursor < end and len(out) < q.batch_size:
            row = self._stored[cursor]  # position cursor + 1
            cursor += 1
            if self._matches(q, row):
                out.append(row)
        return out, cursor, cursor >= end

    def _canonical_batch(
        self, q: ReadQuery, key: tuple[int, int] | None
    ) -> tuple[list[StoredRow], tuple[int, int] | None, bool]:
        out: list[StoredRow] = []
        index = self._canonical if q.stream is None else self._stream_canonical.get(q.stream, [])
        i = 0 if key is None else bisect.bisect_right(index, key)
        n = len(index)
        # Everything after `key` in the index is after `after` and from `from_time` on,
        # and of the stream asked for (`_rows` starts there): only the position window,
        # to_time and the type are left to test, inline (a replay walks here once per late
        # event).
        lo, hi, to_time, kind = q.after_position, q.to_position, q.to_time, q.type
        stored, size = self._stored, q.batch_size
        while i < n and len(out) < size:
            t, p = index[i]
            if to_time is not None and t > to_time:
                return out, key, True
            key = (t, p)
            i += 1
            if lo < p <= hi and (kind is None or stored[p - 1][4] == kind):
                out.append(stored[p - 1])
        return out, key, i >= n

    def head(self) -> int:
        """The last position, 0 when empty."""
        with self._lock:
            return len(self._stored)

    def hold_head(self) -> int:
        """The last position, as a transaction holds it (`Transaction.hold_head`): inside
        `transaction()` the journal's lock already keeps every other writer out."""
        return self.head()

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event recorded under this id, or None; checked as `read` checks each event."""
        with self._lock:
            p = self._by_id.get(event_id)
            if p is None:
                return None
            row = self._stored[p - 1]
            prev = self._stored[p - 2][8] if p > 1 else None
        return to_event(next(pinned([(*row, prev)])))

    def get_many(self, event_ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of these ids, by id."""
        with self._lock:
            return {i: to_event(self._stored[p - 1]) for i in set(event_ids)
                    if isinstance(i, str) and (p := self._by_id.get(i)) is not None}

    def head_and_get_many(self, event_ids: Iterable[str]
                          ) -> tuple[int, dict[str, RecordedEvent]]:
        """`head()` and `get_many(event_ids)` as of one moment."""
        with self._lock:
            return self.head(), self.get_many(event_ids)

    def look_up(self, event_ids: Iterable[str], request_keys: Iterable[str] = ()) -> LookUp:
        """`head()`, `get_many(event_ids)` and which of `request_keys` are bound, as of
        one moment."""
        with self._lock:
            head, recorded = self.head_and_get_many(event_ids)
            bound = frozenset(k for k in request_keys
                              if isinstance(k, str) and k in self._requests)
            return LookUp(head, recorded, bound)

    def stream_version(self, stream: str) -> int:
        """The stream's current version, 0 when it has no event."""
        with self._lock:
            return self._versions.get(stream, 0)

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        """The latest event time recorded (in those streams), None when none."""
        with self._lock:
            if streams is None:
                return self._canonical[-1][0] if self._canonical else None
            times = [self._max_time[s] for s in set(streams) if s in self._max_time]
            return max(times) if times else None

    def position_at(self, recorded_at: int) -> int:
        """The last position recorded at or before that wall-clock time (µs), 0 if none."""
        require_int("recorded_at", recorded_at)
        with self._lock:
            # recorded_at never decreases along positions, so it is sorted: bisect.
            lo, hi = 0, len(self._stored)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._stored[mid][6] <= recorded_at:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def _ends(self) -> tuple[Anchor, Anchor]:
        """The last record, twice: the list's end is this journal's head marker."""
        with self._lock:
            last = Anchor(len(self._stored), self._stored[-1][8]) if self._stored else None
        end = last or Anchor(0, GENESIS_HASH)
        return end, end

    # -- private parts ---------------------------------------------------------

    def _private_rows(self, after_position: int, to_position: int | None,
                      batch_size: int) -> Iterator[tuple[int, str, str, str]]:
        with self._lock:
            found = sorted(
                (p, self._stored[p - 1][1], salt, text)
                for p, (salt, text) in self._private.items()
                if p > after_position and (to_position is None or p <= to_position))
        yield from found

    def _private_of(self, ids: Sequence[str]) -> list[tuple[StoredRow, str, str]]:
        with self._lock:
            out = []
            for i in ids:
                p = self._by_id.get(i)
                if p is not None and p in self._private:
                    salt, text = self._private[p]
                    out.append((self._stored[p - 1], salt, text))
            return out

    def _erase_private(self, ids: Sequence[str], record: NewEvent) -> Erasure:
        with self._lock:
            self._check_open()
            doomed = sorted({self._by_id[i] for i in ids
                             if i in self._by_id and self._by_id[i] in self._private})
            if not doomed:
                return Erasure(None, ())
            erased = tuple(self._stored[p - 1][1] for p in doomed)
            (recorded,) = self.append([appending.erasure_record(record, erased)])
            for p in doomed:
                del self._private[p]
            # As the SQL journal: the bindings of the requests that named them go too.
            for key in [k for k, b in self._requests.items()
                        if appending.spans_position(b, doomed)]:
                del self._requests[key]
            return Erasure(recorded, erased)

    # -- request keys ----------------------------------------------------------

    def request(self, key: str) -> RequestKey | None:
        """What `key` was bound to (`bind_request`), or None."""
        appending.require_text("request key", key)
        with self._lock:
            return self._requests.get(key)

    def bind_request(self, key: str, fingerprint: str, answer: str,
                     positions: Sequence[int] = ()) -> RequestKey:
        """Bind a request's idempotency key to the request's digest and to the answer it
        got, undone with the transaction it is bound in (see `Journal.bind_request`). The
        same key and fingerprint again: the binding already there; another fingerprint:
        IdempotencyConflict."""
        first, last = appending.validate_request(key, fingerprint, answer, positions)
        with self._lock:
            self._check_open()
            found = self._requests.get(key)
            if found is not None:
                return appending.bound_already(found, fingerprint)
            bound = self._requests[key] = RequestKey(key, fingerprint, answer,
                                                     len(self._stored), self._clock(),
                                                     first, last)
            return bound

    # -- snapshots -------------------------------------------------------------

    def save_snapshot(
        self, name: str, position: int, event_time: int, digest: str, state: bytes
    ) -> SnapshotInfo:
        """Store a projection state (a cache, never truth)."""
        validate_snapshot(name, position, event_time, digest, state)
        with self._lock:
            self._check_open()
            info = SnapshotInfo(self._next_snapshot_id, name, position, event_time, digest)
            self._snapshots[info.id] = _Snapshot(info, bytes(state))
            self._next_snapshot_id += 1
            if self._tx_depth:
                self._snapshot_undo.append((info.id, None))
            return info

    def snapshots(self, name: str) -> list[SnapshotInfo]:
        """The snapshots saved under name, ordered by (event_time, position)."""
        with self._lock:
            found = [s.info for s in self._snapshots.values() if s.info.name == name]
        return sorted(found, key=lambda i: (i.event_time, i.position, i.id))

    def load_snapshot(self, snapshot_id: int) -> bytes:
        """The state bytes of one snapshot; KeyError if there is none with that id."""
        found = appending.snapshot_id(snapshot_id)
        with self._lock:
            snap = None if found is None else self._snapshots.get(found)
        if snap is None:
            raise KeyError(f"no snapshot with id {snapshot_id}")
        return snap.state

    def drop_snapshots(self, name: str, *, from_time: int | None = None,
                       before_position: int | None = None,
                       through_id: int | None = None,
                       from_id: int | None = None) -> int:
        """Drop snapshots with event_time >= from_time, position < before_position and
        from_id <= id <= through_id (each bound: none if None); return how many."""
        appending.snapshot_bounds(from_time, before_position, through_id, from_id)
        with self._lock:
            doomed = [
                k
                for k, s in self._snapshots.items()
                if s.info.name == name
                and (from_time is None or s.info.event_time >= from_time)
                and (before_position is None or s.info.position < before_position)
                and (through_id is None or s.info.id <= through_id)
                and (from_id is None or s.info.id >= from_id)
            ]
            for k in doomed:
                if self._tx_depth:
                    self._snapshot_undo.append((k, self._snapshots[k]))
                del self._snapshots[k]
            return len(doomed)

    # -- life ------------------------------------------------------------------

    def close(self) -> None:
        """Mark the journal closed; later appends raise."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError("this MemoryJournal is closed")

    def __enter__(self) -> MemoryJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
