"""Replay and verification: rebuild every projection from the journal, prove it matches.

`replay` ingests the journal in arrival order through a `Projector`, so late events are
re-projected and the same revisions are found every time; `verify` checks the hash
chain and that replay reproduces the digests recorded with the saved checkpoints.
Checkpoints (`projections.checkpoint`) are a cache: a facade opening a large journal
starts from the newest one that is still valid.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore import Batch, ChainBroken, JournalError, JournalLike, SnapshotInfo
from eventstore.hashing import load_json
from projections.bulk import paused_gc

# The checkpoint names callers found here before they moved (`X as X`: re-exported).
from projections.checkpoint import CHECKPOINT as CHECKPOINT
from projections.checkpoint import (
    CheckpointError,
    CheckpointView,
    StaleCheckpoint,
    checkpoint_is_valid_at,
    disagreement,
    ignored_checkpoint,
    load_view,
    log,
    still_saved,
    valid_views,
)
from projections.checkpoint import invalidate_after as invalidate_after
from projections.checkpoint import latest_valid_checkpoint as latest_valid_checkpoint
from projections.checkpoint import save_checkpoint as save_checkpoint
from projections.decoding import decode_event
from projections.events import EventReversed
from projections.invariants import violations
from projections.ledger import Ledger, restore, snapshot
from projections.outcomes import Revision
from projections.projector import REVERSE, Projector, as_lean
from projections.projector import Lean as Lean
from projections.projector import LeanRow as LeanRow
from projections.reversals import reversed_ids
from projections.validation import require_int, require_time

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class ReplayReport:
    """What a replay rebuilt."""

    events: int  # journal events replayed: those up to `to_time`, reversed ones included
    revisions: list[Revision]
    anomalies: list[tuple[int, str, str]]
    ledger: Ledger = field(repr=False)
    position: int = 0
    _digest: str | None = field(default=None, repr=False)
    # Why the checkpoints asked for were not all saved (a full disk, a read-only file):
    # the replay stands, and the checkpoints saved before it are kept.
    checkpoint_problem: str | None = None

    @property
    def digest(self) -> str:
        """The replayed state's digest (`Ledger.digest`), computed when first asked for:
        encoding a large state is a good part of a replay, and most callers want only
        the revisions or the ledger."""
        if self._digest is None:
            self._digest = self.ledger.digest()
        return self._digest


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdict of `verify`: ok, or the first position found wrong and why."""

    ok: bool
    first_bad_position: int | None = None
    problem: str | None = None
    # The events of the journal whose hash chain was checked: every one, reversed events
    # and reversals included (what `verify` prints as "N events"), not the fold's count.
    checked_events: int = 0
    checked_checkpoints: int = 0
    # Checkpoints passed over as out of date (`StaleCheckpoint`): why, one line each. A
    # cache this code cannot read, not a finding: `replay` saves fresh ones.
    stale_checkpoints: tuple[str, ...] = ()




def lean_rows(journal: JournalLike, **query: Any) -> Iterator[LeanRow]:
    """`journal.read(**query)` as (position, id, type, time, payload, stream), the payload
    as stored text where the journal gives it (`read_lean`): what a fold needs, read
    and decoded at the least cost. A journal view without `read_lean` is read whole."""
    read_lean = getattr(journal, "read_lean", None)
    if read_lean is not None:
        rows: Iterator[LeanRow] = read_lean(**query)
        return rows
    return ((r.position, r.id, r.type, r.time, r.payload, r.stream)
            for r in journal.read(**query))


def rows_of_type(journal: JournalLike, kind: str, **query: Any) -> Iterator[LeanRow]:
    """`lean_rows(journal, **query)` of the events of type `kind` only: the journal's
    storage skips the others where it can (a fold's first look at the reversals costs a
    scan in the database, not a row in Python per event), else they are skipped here."""
    read_lean = getattr(journal, "read_lean", None)
    if read_lean is not None:
        rows: Iterator[LeanRow] = read_lean(type=kind, **query)
        return rows
    return ((r.position, r.id, r.type, r.time, r.payload, r.stream)
            for r in journal.read(**query) if r.type == kind)


def lean_records(journal: JournalLike, **query: Any) -> Iterator[Lean]:
    """`lean_rows` as `Lean` records (what a `Projector` takes)."""
    return map(as_lean, lean_rows(journal, **query))


def journal_reader(journal: JournalLike, to_time: int | None = None, *,
                   reversals_after: bool = False) -> Callable[
        [tuple[int, int], int, int | None], Iterable[Lean]]:
    """A projector reader over `journal`, optionally limited to event times <= to_time;
    `reversals_after`: with the reversals timed after it too (a reversal takes its event
    out at every time, whatever its own: `replay`)."""

    def read(after: tuple[int, int], to_position: int,
             limit: int | None) -> Iterable[Lean]:
        bound = limit if to_time is None else (to_time if limit is None else min(limit, to_time))
        found = lean_records(journal, after=after, to_position=to_position, to_time=bound,
                             order="canonical")
        if to_time is None or not reversals_after or (limit is not None and limit <= to_time):
            return found
        return _with_reversals_after(found, journal, to_time, after=after,
                                     to_position=to_position, to_time=limit)

    return read


def _with_reversals_after(found: Iterable[Lean], journal: JournalLike, after_time: int,
                          **query: Any) -> Iterable[Lean]:
    """`found` (events up to `after_time`, in canonical order), then the reversals the
    query finds timed after it: they lie after every one of those on the timeline."""
    later = rows_of_type(journal, REVERSE, from_time=after_time + 1, order="canonical",
                         **query)
    return itertools.chain(found, map(as_lean, later))


def account_reader(journal: JournalLike, to_time: int | None = None, *,
                   reversals_after: bool = False) -> Callable[
        [str, tuple[int, int], int], Iterable[Lean]]:
    """A projector's per-account reader over `journal`: one stream's events in canonical
    order after a key, up to a position (and event time `to_time`, with the reversals
    timed after it when `reversals_after`, as `journal_reader`), their payloads as stored
    text (as `lean_records` reads them: the fold decodes a text several times faster than
    a decoded mapping)."""

    def read(stream: str, after: tuple[int, int], to_position: int) -> Iterable[Lean]:
        found = lean_records(journal, stream=stream, after=after, to_position=to_position,
                             to_time=to_time, order="canonical")
        if to_time is None or not reversals_after:
            return found
        return _with_reversals_after(found, journal, to_time, stream=stream, after=after,
                                     to_position=to_position)

    return read


class HeldRows:
    """The rows a replay has read, on the timeline and by stream, so that re-reading
    them for a late event (the projector's refolds) costs no query.

    A query per late event was most of a replay of a small journal read out of time order
    (a shuffled import): building and running it costs far more than the refold it
    feeds. Held only for journals of up to `HELD_ROWS` events (see `replay`).
    """

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []
        self._rows: list[Lean] = []
        self._streams: dict[str, tuple[list[tuple[int, int]], list[Lean]]] = {}

    def add(self, rec: Lean) -> None:
        key = (rec.time, rec.position)
        _insert(self._keys, self._rows, key, rec)
        keys, rows = self._streams.setdefault(rec.stream, ([], []))
        _insert(keys, rows, key, rec)

    def add_all(self, recs: Sequence[Lean]) -> None:
        """Hold a batch of rows: one by one when few, else appended then sorted once
        (inserting a shuffled import's rows one at a time is quadratic)."""
        if len(recs) < 64:
            for rec in recs:
                self.add(rec)
            return
        _merge(self._keys, self._rows, recs)
        by_stream: dict[str, list[Lean]] = {}
        for rec in recs:
            by_stream.setdefault(rec.stream, []).append(rec)
        for stream, mine in by_stream.items():
            keys, rows = self._streams.setdefault(stream, ([], []))
            _merge(keys, rows, mine)

    def read(self, after: tuple[int, int], to_position: int,
             limit: int | None) -> Iterator[Lean]:
        """A projector's reader: the held rows in canonical order after `after`, with
        position <= to_position and, if given, time <= limit."""
        return _after(self._keys, self._rows, after, to_position, limit)

    def read_stream(self, stream: str, after: tuple[int, int],
                    to_position: int) -> Iterator[Lean]:
        """A projector's per-account reader over the held rows."""
        keys, rows = self._streams.get(stream, ([], []))
        return _after(keys, rows, after, to_position, None)


class HeldWhileSmall:
    """A projector's readers over a journal folded a batch at a time for as long as the
    process lives (the revision log's): the rows read so far held (`HeldRows`) while
    there are up to `HELD_ROWS` of them, the journal queried once there are more.

    A late batch read each late account's stretch back from the journal, a query of a
    few milliseconds per account: half of a first pass over a journal where many events
    arrive slightly late (the first `GET /v1/revisions` after a restart). Held, it costs
    no query, as in `replay`; past the bound, memory stays bounded as it was.
    """

    def __init__(self, journal: JournalLike) -> None:
        self._limit = HELD_ROWS  # as it was when the fold began
        self._held: HeldRows | None = HeldRows() if journal.head() <= self._limit else None
        self._count = 0
        self._through = 0  # the last position held
        self._read = journal_reader(journal)
        self._read_stream = account_reader(journal)

    def add_all(self, recs: Sequence[Lean]) -> None:
        """Hold `recs`, read after every row held so far, before the projector reads
        them back; past `HELD_ROWS` rows in all, drop every row held."""
        if self._held is None or not recs:
            return
        if recs[0].position <= self._through:
            # Held already: a catch-up cut short by an error reads them again.
            recs = [rec for rec in recs if rec.position > self._through]
            if not recs:
                return
        self._count += len(recs)
        if self._count > self._limit:
            self._held = None
            return
        self._through = recs[-1].position
        self._held.add_all(recs)

    def read(self, after: tuple[int, int], to_position: int,
             limit: int | None) -> Iterable[Lean]:
        held = self._held
        if held is None:
            return self._read(after, to_position, limit)
        return held.read(after, to_position, limit)

    def read_stream(self, stream: str, after: tuple[int, int],
                    to_position: int) -> Iterable[Lean]:
        held = self._held
        if held is None:
            return self._read_stream(stream, after, to_position)
        return held.read_stream(stream, after, to_position)


def _insert(keys: list[tuple[int, int]], rows: list[Lean], key: tuple[int, int],
            rec: Lean) -> None:
    if not keys or key > keys[-1]:
        keys.append(key)
        rows.append(rec)
        return
    i = bisect.bisect_left(keys, key)
    keys.insert(i, key)
    rows.insert(i, rec)


# A held row's place on the timeline, (time, position), taken in C: held rows are keyed,
# sorted and merged by it, several times per row.
_key: Callable[[Lean], tuple[int, int]] = operator.itemgetter(3, 0)
_position: Callable[[Lean | LeanRow], int] = operator.itemgetter(0)


def _merge(keys: list[tuple[int, int]], rows: list[Lean], recs: Sequence[Lean]) -> None:
    """Insert `recs` in canonical order, at a cost in the held rows after the earliest
    of them (what a refold for them walks anyway), not in all of them."""
    mine = sorted(recs, key=_key)
    i = bisect.bisect_left(keys, _key(mine[0])) if keys else 0
    if i == len(rows):
        rows.extend(mine)
        keys.extend(map(_key, mine))
        return
    merged = list(heapq.merge(rows[i:], mine, key=_key))
    del rows[i:]
    rows.extend(merged)
    keys[i:] = map(_key, merged)


def _after(keys: list[tuple[int, int]], rows: list[Lean], after: tuple[int, int],
           to_position: int, limit: int | None) -> Iterator[Lean]:
    for i in range(bisect.bisect_right(keys, after), len(rows)):
        rec = rows[i]
        if limit is not None and rec.time > limit:
            return
        if rec.position <= to_position:
            yield rec


BATCH_HELD = 100_000
"""The most events of one batch a replay holds at once (some tens of MB)."""

STREAMED = 128
"""The events of a batch a replay hands over at a time while they fold straight."""

HELD_ROWS = 100_000
"""The largest journal whose rows a replay holds in memory for its late events (some
tens of MB at most); a larger one re-reads them from the journal."""


def replay(journal: JournalLike, *, to_time: int | None = None,
           to_position: int | None = None, progress: Progress | None = None,
           checkpoint: bool = False, checkpoint_every: int | None = None) -> ReplayReport:
    """Rebuild the ledger from the journal (events with time <= to_time, position <=
    to_position), in arrival order, re-projecting late events as they came.

    `checkpoint`: replace the saved checkpoints with fresh ones of the whole journal: the
    end, and up to `CHECKPOINTS - 1` more every `checkpoint_every` events before it
    (default: the larger of 10,000 and a sixteenth of the journal), so facades start from
    the end and a late event in a fresh process refolds from a recent one, not from the
    start.
    """
    if to_time is not None:
        require_time("to_time", to_time)
    if to_position is not None:
        require_int("to_position", to_position, 0)
    head = journal.head() if to_position is None else min(to_position, journal.head())
    saving = checkpoint and to_time is None and to_position is None
    at = checkpoint_positions(head, checkpoint_every) if saving else frozenset()
    # The checkpoints saved before go once the fresh ones are: a replay cut short (Ctrl-C)
    # or unable to save one (another writer holding the lock past its timeout, a full
    # disk) leaves them, not none.
    replaced = max((info.id for info in journal.snapshots(CHECKPOINT)), default=None) \
        if saving else None
    unsaved: str | None = None
    # A replay needs snapshots only for late events: none is taken before the first one
    # (copying the whole state every few tens of thousands of events was a sixth of a
    # replay of an in-order journal), sparse ones after it (denser as late events show
    # up). The first late event refolds from the start: for its own account alone, that
    # account's events; only one that reaches across accounts (a reversal, a void) folds
    # the whole timeline up to it, once, laying down the snapshots the next ones use.
    # Each holds a copy of every account's state: spaced 32 times the state's size, a
    # replay of 10^6 events of the mix peaked near 210 MB, against 330 MB at 8 times.
    # One restart point is kept all the same, three quarters through the journal
    # (`RESTART_POINTS`): a first late event that reaches across accounts in the last
    # quarter (a correction of recent events, the usual late one) then refolds at most
    # that quarter, for about three quarters of a copy of the final state. A second one
    # halfway cost as much again (0.25 s of a 10 s replay of 10^6 events) for the rarer
    # first late event that lands in the third quarter.
    # Once a late event has been seen, a short memory of outcomes lets the next ones
    # compare against what was reported instead of folding the old timeline beside the new.
    held = HeldRows() if head <= HELD_ROWS else None
    # A reversal recorded with a time after `to_time` still takes its event out (at every
    # time, as `balance --at` and `fold_canonical` take it): such reversals are replayed
    # at their own times, after every event up to `to_time`, and read back with them.
    far = to_time is not None and next(rows_of_type(
        journal, REVERSE, from_time=to_time + 1, to_position=head), None) is not None
    # Holding the rows, remember every outcome too: a late event then never folds the
    # old timeline a second time to learn what was reported.
    projector = replay_projector(
        journal, to_time=to_time, reversals_after=far, held=held,
        recent_outcomes=REPLAY_REMEMBERS if held is None else max(REPLAY_REMEMBERS, head))
    done = 0
    taken = 0  # events up to `to_time`, as `done` counts every event read
    if progress is not None:
        progress(0, head)  # the total is known from the start: no bar waits at "0/?"
    # Events appended together are one step of knowledge: the projector takes each
    # batch whole (a batch reaching past `head` is known up to `head`).
    ends = {first: min(last, head) for first, last in batches_of(journal, head)}
    shown = 0
    restarts = sorted({head - (head >> k) for k in RESTART_POINTS} if head >= RESTART_AFTER
                      else set())
    # Plain rows, not `Lean` records: the projector folds an in-order batch of them as
    # they are (`Projector.ingest_rows`).
    rows = lean_rows(journal, to_position=head, order="position")

    def hand_over(part: list[LeanRow], begin: int, more: bool) -> bool:
        nonlocal taken
        mine = part if to_time is None else [
            r for r in part if r[3] <= to_time or (far and r[2] == REVERSE)]
        if more:
            # A part of a batch with more to come goes over only if it folds straight
            # (which reads nothing back: the held rows follow it).
            if not projector.ingest_rows(mine, known_before=begin, only_straight=True):
                return False
            if held is not None:
                held.add_all(list(map(as_lean, mine)))
        else:
            # Held first: re-projecting the batch reads its own rows back.
            if held is not None:
                held.add_all(list(map(as_lean, mine)))
            if mine:
                projector.ingest_rows(mine, known_before=begin)
        # A reversal timed after `to_time` is replayed, not counted among its events.
        taken += len(mine) if to_time is None or not far else sum(
            1 for r in mine if r[3] <= to_time)
        return True

    with paused_gc():
        # Cut into parts as every fold of the journal cuts it; with a time bound, each
        # batch whole (its rows are filtered, so parts could not be checked as straight).
        for begin, last, count in batch_parts(
                rows, ends, hand_over, size=STREAMED if to_time is None else BATCH_HELD):
            done += count
            if restarts and last >= restarts[0]:
                del restarts[:bisect.bisect_right(restarts, last)]
                if not projector.late_times:  # else it takes snapshots of its own
                    projector.keep_restart_point()
            # A checkpoint due inside a batch is saved at its end: the projected state
            # holds a whole batch or none of it.
            if unsaved is None and any(begin <= p <= last for p in at) and (
                    last == head or checkpoint_is_valid_at(
                        journal, last, projector.ledger.last[0])):
                try:
                    save_checkpoint(journal, projector.ledger, last)
                except JournalError as exc:
                    # A cache: the digest and the revisions are the replay's answer.
                    unsaved = str(exc)
            if progress is not None and done - shown >= 5000:
                progress(done, head)
                shown = done
    if progress is not None:
        progress(done, head)
    if replaced is not None and unsaved is None:
        journal.drop_snapshots(CHECKPOINT, through_id=replaced)
    ledger = projector.ledger
    # The ledger lists anomalies in the order its folds met them: a refold after a late
    # event meets an earlier one after later ones. Reported in canonical order, the list
    # is the same however the replay got there (in parts, from a checkpoint).
    anomalies = list(ledger.anomalies)
    if len(anomalies) > 1:  # most journals hold none: no read for them
        positions = {event_id: rec.position for event_id, rec in journal.get_many(
            {event_id for _, event_id, _ in anomalies}).items()}
        anomalies.sort(key=lambda a: (a[0], positions.get(a[1], 0)))
    # Every event read, reversed ones and reversals too (`ledger.applied` counts what the
    # fold applied: "replayed 1 event" of a journal of three was a puzzle to an auditor).
    return ReplayReport(taken, list(projector.revisions), anomalies,
                        ledger, head, checkpoint_problem=unsaved)


def batch_parts(rows: Iterable[LeanRow], ends: dict[int, int],
                hand_over: Callable[[list[LeanRow], int, bool], bool], *,
                size: int = STREAMED) -> Iterator[tuple[int, int, int]]:
    """Hand `rows` (in position order) over batch by batch, cut into parts where every
    fold of a journal cuts them, and yield (first position, last position, rows) of each
    batch once it is handed over; `ends` maps a batch's first position to its last.

    `hand_over(part, first, more)` takes a part of the batch starting at `first`. While
    `more` rows of the batch follow, it may refuse the part (False: it would not fold
    straight), which then goes over again with the rest of the batch, `BATCH_HELD` rows
    at a time. A late event's revisions name its part's earliest event: folds that cut
    elsewhere would name other causes, so `replay` and the revision log share this.
    """
    rows = iter(rows)
    while (rec := next(rows, None)) is not None:
        begin = rec[0]
        end = ends.get(begin, begin)  # the batch's last position
        part = [rec]
        # `size` rows at a time while each part folds straight (STREAMED: each row is
        # folded soon after it is read, while it is still in the processor's cache; a
        # whole batch of 1,000 read first cost about 0.5 us more per event). The first
        # part that does not goes over with the rest of the batch, so a batch out of time
        # order is still re-projected once, not once per part.
        cap = size
        count = 0
        while True:
            if part[-1][0] < end and len(part) < cap:
                # The batch's other rows taken at once, not a Python step per row. A
                # batch larger than BATCH_HELD (a whole import of millions of lines) is
                # taken a part at a time, each part known with the ones before it.
                part += itertools.islice(rows, min(end - part[-1][0], cap - len(part)))
                if part[-1][0] > end:
                    # Positions with a gap: the rows past the batch's end come next.
                    cut = bisect.bisect_right(part, end, key=_position)
                    rows = itertools.chain(part[cut:], rows)
                    del part[cut:]
            more = cap < BATCH_HELD and part[-1][0] < end
            if not hand_over(part, begin, more) and more:
                cap = BATCH_HELD
                continue
            count += len(part)
            last = part[-1][0]
            if last >= end or (rec := next(rows, None)) is None:
                break
            if rec[0] > end:
                # A gap at the batch's end: this row begins the next batch.
                rows = itertools.chain((rec,), rows)
                break
            part = [rec]
        yield begin, last, count


def batches_of(journal: JournalLike, to_position: int) -> list[Batch]:
    """The journal's batches of several events up to `to_position` (none from a journal,
    or a view of one, that does not record them: then every event is its own batch)."""
    found = getattr(journal, "batches", None)
    if found is None or to_position <= 0:
        return []
    batches: list[Batch] = found(to_position=to_position)
    return batches


RESTART_POINTS = (2,)
"""Where a replay keeps a snapshot before any late event: at head - head / 2**k for each
k here (three quarters through)."""

RESTART_AFTER = 40_000
"""The smallest journal a replay keeps those restart points for: in a smaller one, a
refold from the start is short."""

REPLAY_REMEMBERS = 1000
"""Outcomes a replay remembers: enough for events arriving up to that many events late."""

CHECKPOINTS = 4
"""How many checkpoints `replay(checkpoint=True)` leaves: the end and up to 3 before it."""


def replay_projector(journal: JournalLike, *, to_time: int | None = None,
                     reversals_after: bool = False,
                     held: HeldRows | HeldWhileSmall | None = None,
                     recent_outcomes: int = REPLAY_REMEMBERS) -> Projector:
    """The projector `replay` folds `journal` with (`held`: reading the rows it holds
    instead of the journal); fed the journal in arrival order, a batch at a time, it finds
    the revisions `replay` finds.

    A late event is re-projected for its own account alone when nothing reaches across
    accounts, so a batch with late events of two accounts names, for each revision, the
    batch's earliest event of the revised event's account: a projector without the
    per-account reader would refold the whole timeline and name the batch's earliest
    event of any account. Whoever lists revisions beside `replay` (the web view keeps one
    of these and catches it up as the journal grows) builds it here, so the two agree.
    """
    return Projector(
        journal_reader(journal, to_time, reversals_after=reversals_after)
        if held is None else held.read,
        min_snapshot_every=20_000, snapshot_factor=32,
        recent_outcomes=recent_outcomes,
        remember_once_late=True, snapshot_once_late=True, locate=locator(journal),
        account_reader=account_reader(journal, to_time, reversals_after=reversals_after)
        if held is None else held.read_stream)


def checkpoint_positions(head: int, every: int | None = None) -> frozenset[int]:
    """Where a replay of a journal of `head` events saves its checkpoints."""
    if every is None:
        every = max(10_000, head // 16)
    if every <= 0:
        raise ValueError(f"checkpoint_every must be a positive number of events, got {every}")
    return frozenset(head - k * every for k in range(CHECKPOINTS) if head - k * every > 0)


def locator(journal: JournalLike) -> Callable[[str], tuple[int, int] | None]:
    """Where a recorded event lies on the timeline: (event time, position), by its id."""

    def locate(event_id: str) -> tuple[int, int] | None:
        rec = journal.get(event_id)
        return None if rec is None else (rec.time, rec.position)

    return locate


def ledger_at(journal: JournalLike, *, to_position: int | None = None,
              to_time: int | None = None) -> Ledger:
    """The state at event time `to_time` as known at position `to_position` (defaults: the
    latest), the same as `fold_canonical` gives, from the nearest valid checkpoint at or
    before them plus the events between: the way a query reads a journal.

    A checkpoint serves when it covers no position after `to_position` and no event time
    after `to_time`, and no event recorded after it lands before its end on the timeline
    (then every event it lacks comes after it, in canonical order). Without one, this is
    `fold_canonical`.
    """
    head = journal.head() if to_position is None else min(to_position, journal.head())
    found = view_at(journal, to_position=head, to_time=to_time)
    if found is None:
        return fold_canonical(journal, to_position=head, to_time=to_time)
    info, view = found
    if _reversals(journal, head, after_position=info.position):
        # A reversal recorded since may take out an event the checkpoint holds (rare).
        return fold_canonical(journal, to_position=head, to_time=to_time)
    try:
        ledger = view.ledger()
    except CheckpointError as exc:
        log.warning("checkpoint at position %s ignored (%s): folding from the journal "
                    "instead", info.position, exc)
        return fold_canonical(journal, to_position=head, to_time=to_time)
    with paused_gc():
        ledger.apply_rows(lean_rows(journal, after_position=info.position, to_position=head,
                                    from_time=info.event_time, to_time=to_time,
                                    order="canonical"))
    return ledger


def view_at(journal: JournalLike, *, to_position: int,
            to_time: int | None = None) -> tuple[SnapshotInfo, CheckpointView] | None:
    """The newest valid checkpoint that `ledger_at(to_position, to_time)` can start from,
    opened but not decoded; None if there is none."""
    candidates = [info for info in journal.snapshots(CHECKPOINT) if info.position <= to_position
                  and (to_time is None or info.event_time <= to_time)]
    return next(valid_views(journal, candidates, key=lambda s: (s.position, s.id)), None)


def exact_view(journal: JournalLike, *, to_position: int | None = None,
               to_time: int | None = None) -> CheckpointView | None:
    """A valid checkpoint that holds exactly `ledger_at(to_position, to_time)`: nothing
    recorded after it up to `to_position`. None if there is none (then ask `ledger_at`).

    What a report over every account reads: it decodes only the sections it needs."""
    head = journal.head() if to_position is None else min(to_position, journal.head())
    found = view_at(journal, to_position=head, to_time=to_time)
    if found is None or found[0].position != head:
        return None
    return found[1]


def fold_canonical(journal: JournalLike, *, to_position: int | None = None,
                   to_time: int | None = None) -> Ledger:
    """Fold the journal straight in canonical order (no revisions): the state at to_time as
    known at to_position, without the events reversed as known at to_position."""
    # Which events are reversed is known before folding, from the reversals alone: one
    # fold, where finding them in a first fold meant a second one whenever there was any.
    return _fold(journal, to_position, to_time,
                 reversed_ids(_known_reversals(journal, to_position, to_time)))


def canonical_folds(journal: JournalLike, positions: Sequence[int]) -> Iterator[Ledger]:
    """`fold_canonical(journal, to_position=p)` for each of `positions` (ascending), in
    turn, sharing the fold of what they have in common (`verify`'s checkpoints: a few
    positions near the head, each once a whole fold).

    The events after the first position up to the last reach back on the timeline no
    further than the earliest time among them, T: every state's events before T are the
    first state's, in the same order. So the first state is folded up to T and kept
    there (a snapshot), then folded on; each later one is that snapshot folded on with
    its own events from T. A reversal among those events changes which events every
    state leaves out from the start: then each state is folded whole, as before. A
    state yielded is the caller's until the next is asked for."""
    ordered = list(positions)
    if any(a > b for a, b in itertools.pairwise(ordered)):
        raise ValueError(f"positions must be ascending, got {ordered}")
    if not ordered:
        return
    first, last = ordered[0], ordered[-1]
    between = [(row[2], row[3]) for row in lean_rows(
        journal, after_position=first, to_position=last, order="position")]
    if not between or any(kind == "reverse" for kind, _ in between):
        for position in ordered:
            yield fold_canonical(journal, to_position=position)
        return
    since = min(time for _, time in between)
    excluded = reversed_ids(_known_reversals(journal, first, None))
    ledger = Ledger(excluded=excluded)
    with paused_gc():
        ledger.apply_rows(lean_rows(journal, to_position=first, to_time=since - 1,
                                    order="canonical"))
    kept = snapshot(ledger)
    for position in ordered:
        if position != first:
            ledger = restore(kept)
        with paused_gc():
            ledger.apply_rows(lean_rows(journal, to_position=position, from_time=since,
                                        order="canonical"))
        yield ledger


def _known_reversals(journal: JournalLike, to_position: int | None,
                     to_time: int | None) -> dict[str, str]:
    """{reversal id: target id} of the reversals recorded up to `to_position`: those up to
    `to_time` as the fold reads them (one that is not a valid event is an anomaly there,
    not a reversal), and later ones too, as `_reversals` reads them: a reversal takes its
    event out at every event time, as known. Only the reversals' payloads are decoded."""
    found: dict[str, str] = {}
    for _, event_id, kind, time, payload, _ in rows_of_type(
            journal, "reverse", to_position=to_position, order="position"):
        if to_time is None or time <= to_time:
            try:
                event = decode_event(kind, payload)
            except json.JSONDecodeError:
                raise
            except (ValueError, TypeError):
                continue
            if isinstance(event, EventReversed):
                found[event_id] = event.event
            continue
        decoded = load_json(payload) if isinstance(payload, str) else payload
        target = decoded.get("event") if isinstance(decoded, dict) else None
        if isinstance(target, str):
            found[event_id] = target
    return found


def _fold(journal: JournalLike, to_position: int | None, to_time: int | None,
          excluded: frozenset[str]) -> Ledger:
    ledger = Ledger(excluded=excluded)
    with paused_gc():
        ledger.apply_rows(lean_rows(journal, to_position=to_position, to_time=to_time,
                                    order="canonical"))
    return ledger


def _reversals(journal: JournalLike, to_position: int | None,
               from_time: int | None = None, after_position: int = 0) -> dict[str, str]:
    """{reversal id: target id} of the reversals recorded after `after_position` up to
    `to_position` (with event time >= from_time, if given). The journal has no index by
    type: its storage scans those events, and only the reversals come back."""
    found: dict[str, str] = {}
    for _, event_id, _, _, payload, _ in rows_of_type(
            journal, "reverse", after_position=after_position, to_position=to_position,
            from_time=from_time, order="position"):
        decoded = load_json(payload) if isinstance(payload, str) else payload
        target = decoded.get("event") if isinstance(decoded, dict) else None
        if isinstance(target, str):
            found[event_id] = target
    return found


def excluded_as_known(journal: JournalLike, to_position: int | None) -> frozenset[str]:
    """The ids of the events reversed as known at `to_position` (a whole read)."""
    return reversed_ids(_reversals(journal, to_position))


VERIFY_STAGES = ("checking the hash chain", "re-deriving the checkpoints", "replaying")
"""The stages of `verify`, in order, as its `stage` callback names them."""


def verify(journal: JournalLike, *, progress: Progress | None = None,
           stage: Callable[[str], None] | None = None) -> VerifyReport:
    """Check the hash chain, that replay reproduces every checkpoint's digest, and that
    the replayed state keeps every invariant (`projections.invariants`).

    `stage(name)` announces each of `VERIFY_STAGES` as it starts; `progress(done, total)`
    then reports within it (events of the chain and of the replay, checkpoints), with the
    total known from the start.
    """
    if stage is not None:
        stage(VERIFY_STAGES[0])
    chain = journal.verify_chain(progress=progress)
    events = chain.events  # the journal's events, not the ones the fold applies
    bad = chain.first_bad_position
    if bad is not None:
        # Where, and what the journal found there (an altered record, a private part
        # unsealed, a head marker astray).
        where = f"hash chain broken at position {bad}"
        detail = (chain.problem or "").removeprefix(f"journal chain broken at position {bad}: ")
        return VerifyReport(False, bad, f"{where}: {detail}" if detail else where, events)
    # A chain intact from the start may still have lost its tail, or been rewritten
    # whole: the verified marks and checkpoints say what it held when they were made.
    from projections.anchors import verified_checkpoint

    try:
        verified_checkpoint(journal)
    except ChainBroken as exc:
        return VerifyReport(False, exc.position, str(exc), events)
    checkpoints = sorted(journal.snapshots(CHECKPOINT), key=lambda s: (s.position, s.id))
    # One fold for all of them, as far as they share it; a state only when asked for.
    positions = sorted({info.position for info in checkpoints})
    states = zip(positions, canonical_folds(journal, positions), strict=True)
    folded: tuple[int, Ledger, str] | None = None  # the last state asked for, its digest
    checked = 0
    stale: list[str] = []
    if checkpoints and stage is not None:
        stage(VERIFY_STAGES[1])
    for info in checkpoints:
        if progress is not None:
            progress(checked, len(checkpoints))
        try:
            view = load_view(journal, info)
            stored = view.ledger()
            stored_digest = stored.digest()
        except StaleCheckpoint as exc:  # intact, of this chain, only in another format
            ignored_checkpoint(info, exc)
            stale.append(f"checkpoint {info.id} at position {info.position}: {exc}")
            continue
        except (CheckpointError, KeyError) as exc:  # a damaged cache entry is a finding
            if isinstance(exc, KeyError) and not still_saved(journal, info):
                # Dropped since it was listed, by another process (a replay that saved
                # fresh ones, a writer tidying after a late event): a cache gone, which
                # says nothing about the journal. It was told as an altered journal.
                continue
            return VerifyReport(False, info.position,
                                f"checkpoint {info.id} at position {info.position} is "
                                f"unreadable: {exc}", events, checked)
        if stored_digest != info.digest:
            return VerifyReport(False, info.position,
                                f"checkpoint {info.id} state does not match its recorded "
                                "digest", events, checked)
        while folded is None or folded[0] < info.position:
            # In order: a position only a stale checkpoint had is passed.
            position, state = next(states)
            folded = (position, state, state.digest())
        rebuilt = folded[2]
        if rebuilt != info.digest:
            return VerifyReport(False, info.position,
                                f"replay to position {info.position} gives digest "
                                f"{rebuilt[:16]}…, checkpoint {info.id} recorded "
                                f"{info.digest[:16]}…", events, checked)
        try:
            # The digest leaves out some of what answers read (`disagreement`).
            differs = disagreement(view, stored, folded[1])
        except CheckpointError as exc:
            differs = str(exc)
        if differs is not None:
            return VerifyReport(False, info.position,
                                f"checkpoint {info.id} at position {info.position} does "
                                f"not hold what replay to it gives: {differs}", events,
                                checked)
        checked += 1
    if stage is not None:
        stage(VERIFY_STAGES[2])
    report = replay(journal, progress=progress)
    # The replayed state must also be sound: a fold bug that the chain and the digests
    # cannot see (they agree with themselves) still breaks an invariant.
    broken = violations(report.ledger)
    if broken:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        return VerifyReport(False, report.position,
                            f"replay to position {report.position} breaks an invariant: "
                            f"{broken[0]}{more}", events, checked, tuple(stale))
    return VerifyReport(True, None, None, events, checked, tuple(stale))
