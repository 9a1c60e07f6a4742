"""The in-memory journal: plain Python, no database, the same interface and hashes.

For tests, demos and the facades' `journal=None`. Thread-safe: one RLock guards
every operation, and a transaction holds it from start to end (one writer).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from . import appending
from .appending import require_int, require_text, validate_snapshot, wall_clock_us
from .errors import JournalError
from .hashing import GENESIS_HASH, load_json, record_hash_text
from .interface import Order
from .reading import ReadQuery
from .records import NewEvent, RecordedEvent, SnapshotInfo


@dataclass(slots=True)
class _Row:
    """A stored event: like RecordedEvent, with the payload kept as canonical text.

    Mutable on purpose, and read back into a fresh RecordedEvent each time, so a
    caller who mutates a returned payload cannot change the journal (and a test can
    tamper with a row to check that verify() notices).
    """

    position: int
    id: str
    stream: str
    version: int
    type: str
    time: int
    recorded_at: int
    payload_text: str
    hash: str

    def event(self) -> RecordedEvent:
        return RecordedEvent(
            position=self.position,
            id=self.id,
            stream=self.stream,
            version=self.version,
            type=self.type,
            time=self.time,
            recorded_at=self.recorded_at,
            payload=load_json(self.payload_text),
            hash=self.hash,
        )


@dataclass(slots=True)
class _Snapshot:
    info: SnapshotInfo
    state: bytes


class MemoryJournal:
    """A journal held in this process's memory; lost when the process ends."""

    url: str | None = None

    def __init__(self, *, clock: Callable[[], int] = wall_clock_us) -> None:
        """Create an empty journal; `clock` gives recorded_at in µs (tests may pin it)."""
        self._lock = threading.RLock()
        self._clock = clock
        self._rows: list[_Row] = []  # index = position - 1
        self._by_id: dict[str, int] = {}  # event id -> position
        self._canonical: list[tuple[int, int]] = []  # sorted (event_time, position)
        self._versions: dict[str, int] = {}
        self._max_time: dict[str, int] = {}
        self._last_recorded_at = 0
        self._snapshots: dict[int, _Snapshot] = {}
        self._next_snapshot_id = 1
        self._closed = False

    # -- writing ---------------------------------------------------------------

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append a batch atomically; see `eventstore.Journal.append`."""
        batch = appending.plan(events)
        appending.validate_expected(expected_versions)
        with self._lock:
            self._check_open()
            existing = {
                i: self._rows[self._by_id[i] - 1].event() for i in batch.ids if i in self._by_id
            }
            fresh = appending.check_existing(batch, existing)
            if not fresh:
                # A pure repeat changes nothing, so there is no version to conflict with.
                return appending.results(batch, existing, [])
            appending.check_expected(expected_versions, self._versions)
            head_hash = self._rows[-1].hash if self._rows else GENESIS_HASH
            recorded_at = max(self._clock(), self._last_recorded_at)
            rows = appending.build(
                fresh,
                head_position=len(self._rows),
                head_hash=head_hash,
                versions=self._versions,
                recorded_at=recorded_at,
            )
            for r in rows:
                e = r.event
                self._rows.append(
                    _Row(
                        e.position,
                        e.id,
                        e.stream,
                        e.version,
                        e.type,
                        e.time,
                        e.recorded_at,
                        r.payload_text,
                        e.hash,
                    )
                )
                self._by_id[e.id] = e.position
                bisect.insort(self._canonical, (e.time, e.position))
                self._versions[e.stream] = e.version
                self._max_time[e.stream] = max(self._max_time.get(e.stream, e.time), e.time)
            self._last_recorded_at = recorded_at
            return appending.results(batch, existing, rows)

    @contextmanager
    def transaction(self, locks: Iterable[str] = ()) -> Iterator[MemoryJournal]:
        """Hold the journal's lock for a read-decide-append; undo appends on exception.

        `locks` are accepted for interface parity and ignored: the one RLock already
        serialises every writer in this process.
        """
        for key in locks:
            require_text("lock key", key)
        with self._lock:
            self._check_open()
            mark = (
                len(self._rows),
                dict(self._versions),
                dict(self._max_time),
                self._last_recorded_at,
            )
            try:
                # The journal itself is the transaction: under the RLock nobody else
                # sees the appends until the block ends.
                yield self
            except BaseException:
                self._rollback(*mark)
                raise

    def _rollback(
        self, length: int, versions: dict[str, int], max_time: dict[str, int], last: int
    ) -> None:
        for row in self._rows[length:]:
            del self._by_id[row.id]
            i = bisect.bisect_left(self._canonical, (row.time, row.position))
            del self._canonical[i]
        del self._rows[length:]
        self._versions = versions
        self._max_time = max_time
        self._last_recorded_at = last

    # -- reading ---------------------------------------------------------------

    def read(
        self,
        *,
        after_position: int = 0,
        to_position: int | None = None,
        from_time: int | None = None,
        to_time: int | None = None,
        stream: str | None = None,
        after: tuple[int, int] | None = None,
        order: Order = "canonical",
        batch_size: int = 5000,
    ) -> Iterator[RecordedEvent]:
        """Stream events; see `eventstore.Journal.read`."""
        q = ReadQuery.make(
            self.head(),
            after_position=after_position,
            to_position=to_position,
            from_time=from_time,
            to_time=to_time,
            stream=stream,
            after=after,
            order=order,
            batch_size=batch_size,
        )
        return self._read(q)

    def _read(self, q: ReadQuery) -> Iterator[RecordedEvent]:
        if q.empty:
            return
        if q.order == "position":
            cursor = q.after_position
            while True:
                with self._lock:
                    batch, cursor, done = self._position_batch(q, cursor)
                yield from batch
                if done:
                    return
        else:
            key = (q.from_time, 0) if q.from_time is not None else None
            if q.after is not None and (key is None or q.after > key):
                key = q.after
            while True:
                with self._lock:
                    batch, key, done = self._canonical_batch(q, key)
                yield from batch
                if done:
                    return

    def _matches(self, q: ReadQuery, row: _Row) -> bool:
        return (
            q.after_position < row.position <= q.to_position
            and (q.from_time is None or row.time >= q.from_time)
            and (q.to_time is None or row.time <= q.to_time)
            and (q.stream is None or row.stream == q.stream)
            and (q.after is None or (row.time, row.position) > q.after)
        )

    def _position_batch(self, q: ReadQuery, cursor: int) -> tuple[list[RecordedEvent], int, bool]:
        out: list[RecordedEvent] = []
        end = min(q.to_position, len(self._rows))
        while cursor < end and len(out) < q.batch_size:
            row = self._rows[cursor]  # position cursor + 1
            cursor += 1
            if self._matches(q, row):
                out.append(row.event())
        return out, cursor, cursor >= end

    def _canonical_batch(
        self, q: ReadQuery, key: tuple[int, int] | None
    ) -> tuple[list[RecordedEvent], tuple[int, int] | None, bool]:
        out: list[RecordedEvent] = []
        i = 0 if key is None else bisect.bisect_right(self._canonical, key)
        n = len(self._canonical)
        while i < n and len(out) < q.batch_size:
            t, p = self._canonical[i]
            if q.to_time is not None and t > q.to_time:
                return out, key, True
            key = (t, p)
            i += 1
            row = self._rows[p - 1]
            if self._matches(q, row):
                out.append(row.event())
        return out, key, i >= n

    def head(self) -> int:
        """The last position, 0 when empty."""
        with self._lock:
            return len(self._rows)

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event recorded under this id, or None."""
        with self._lock:
            p = self._by_id.get(event_id)
            return None if p is None else self._rows[p - 1].event()

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
            lo, hi = 0, len(self._rows)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._rows[mid].recorded_at <= recorded_at:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def verify(self) -> int | None:
        """The first position whose hash or place in the 1..N sequence is wrong, else None."""
        with self._lock:
            prev = GENESIS_HASH
            for expected, row in enumerate(self._rows, start=1):
                if row.position != expected or not appending.payload_is_canonical(row.payload_text):
                    return expected
                digest = record_hash_text(
                    prev,
                    row.position,
                    row.id,
                    row.stream,
                    row.version,
                    row.type,
                    row.time,
                    row.recorded_at,
                    row.payload_text,
                )
                if digest != row.hash:
                    return expected
                prev = row.hash
            return None

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
            return info

    def snapshots(self, name: str) -> list[SnapshotInfo]:
        """The snapshots saved under name, ordered by (event_time, position)."""
        with self._lock:
            found = [s.info for s in self._snapshots.values() if s.info.name == name]
        return sorted(found, key=lambda i: (i.event_time, i.position, i.id))

    def load_snapshot(self, snapshot_id: int) -> bytes:
        """The state bytes of one snapshot; KeyError if there is none with that id."""
        with self._lock:
            snap = self._snapshots.get(snapshot_id)
        if snap is None:
            raise KeyError(f"no snapshot with id {snapshot_id}")
        return snap.state

    def drop_snapshots(self, name: str, *, from_time: int | None = None) -> int:
        """Drop snapshots with event_time >= from_time (all if None); return how many."""
        with self._lock:
            doomed = [
                k
                for k, s in self._snapshots.items()
                if s.info.name == name and (from_time is None or s.info.event_time >= from_time)
            ]
            for k in doomed:
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
