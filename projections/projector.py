"""Replay with checkpoints: events in arrival order, projected on the canonical timeline.

The projector ingests recorded events in position (arrival) order. An event that lands
after everything applied so far is simply folded. An event whose event time is earlier
than the last applied one is *late*: the ledger is restored from the nearest snapshot
before it and the canonical timeline from there is folded again, twice, once with the
late event and once without, so every outcome the late event changed is found and
recorded as a `Revision`. The cost grows with the events after the late one, not with the
journal; memory holds the state and a bounded set of snapshots, never the journal.

Snapshots are a cache, never truth: a late event refolded on the whole timeline drops
every snapshot after its time. One re-projected for its account alone leaves them, marked
stale for that account (they hold it as it was, and every other account as it is): a later
refold of another account may start there, a whole-ledger use never does.

Given an `account_reader`, a late event is re-projected for its own account only: that
account's state at the snapshot before it, and that account's events after it
(`projections.accountfold`). Whatever could reach across accounts (a job id used by two
accounts, a void, a reversal, an event whose stream is not the account it affects) is
tracked as events are ingested, and sends the event down the whole-timeline path.

A reversal (`reverse` event) is re-projected the same way, from the place on the timeline
of the event it takes out (or puts back): the projector keeps the set of reversed ids,
as known from everything ingested, and every ledger it folds skips them.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import json
import math
import operator
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

import msgspec

from projections.accountfold import account_ledger, splice
from projections.bulk import paused_gc
from projections.decoding import decode_event
from projections.events import DomainEvent, EventReversed
from projections.ledger import Ledger, Saved, restore, snapshot
from projections.ledger import _has_batch as has_batch  # the test a void runs itself
from projections.outcomes import Outcome, Revision
from projections.reversals import reversed_ids

MIN_KEY = (-(2**63), 0)
MIN_SPACING = 16
"""Fewest events between two snapshots however frequent late events are (unless the
projector was asked for snapshots more often than that)."""


_T = TypeVar("_T")
"""What a refold reports of its late events (one outcome, or a batch's by position)."""


class Recorded(Protocol):
    """What the projector needs of a recorded event."""

    @property
    def position(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def time(self) -> int: ...
    @property
    def payload(self) -> Any: ...


class Lean(NamedTuple):
    """What a fold reads of a recorded event: the payload as the journal stores it (its
    JSON text; decoded, from a journal that cannot give the text), decoded by the fold.

    A tuple in the order of the journal's lean rows, so a compiled loop reads a batch of
    them by index (`Ledger.apply_own_rows`), not by a lookup per field."""

    position: int
    id: str
    type: str
    time: int
    payload: Any
    stream: str


@dataclass(frozen=True, slots=True)
class Conflict:
    """A recorded event that a decision placed in the past would turn into an anomaly."""

    position: int
    event_id: str
    type: str
    time: int
    reason: str


Reader = Callable[[tuple[int, int], int, int | None], Iterable[Recorded]]
"""reader(after_key, to_position, to_time): events in canonical order with
(time, position) > after_key, position <= to_position and, if given, time <= to_time."""


Older = Callable[[tuple[int, int]], tuple[tuple[int, int], Ledger] | None]
"""older(key): a saved state wholly before `key` on the timeline, as (its last key, ledger)."""

Locate = Callable[[str], tuple[int, int] | None]
"""locate(event_id): the (event time, position) of a recorded event, None if unknown."""

AccountReader = Callable[[str, tuple[int, int], int], Iterable[Recorded]]
"""account_reader(stream, after_key, to_position): the events of one stream (an account)
in canonical order with (time, position) > after_key and position <= to_position."""

REVERSE = "reverse"

LeanRow = tuple[int, str, str, int, Any, str]
"""A `Lean` as a plain tuple: what a journal's lean read gives."""

as_lean: Callable[[LeanRow], Lean] = functools.partial(tuple.__new__, Lean)
"""A `Lean` of a row; over a map, no Python frame per row."""

# The same fields of plain rows, for `ingest_rows`.
_ROW_POSITION: Callable[[LeanRow], int] = operator.itemgetter(0)
_ROW_TYPE: Callable[[LeanRow], str] = operator.itemgetter(2)
_ROW_TIME: Callable[[LeanRow], int] = operator.itemgetter(3)
_ROW_TIMELINE_KEY: Callable[[LeanRow], tuple[int, int]] = operator.itemgetter(3, 0)

# A batch's keys and fields read in C (a map or a sort key), not by a Python frame per event.
_TIMELINE_KEY: Callable[[Recorded], tuple[int, int]] = operator.attrgetter("time", "position")
_POSITION: Callable[[Recorded], int] = operator.attrgetter("position")
_TYPE: Callable[[Recorded], str] = operator.attrgetter("type")
_TIME: Callable[[Recorded], int] = operator.attrgetter("time")
_load_json: Callable[[str | bytes], Any] = msgspec.json.Decoder().decode
_JOB_EVENTS = frozenset({"submit", "start", "complete", "cancel"})
VOID = "void"
_CROSSING = frozenset({REVERSE, VOID})
"""Event types whose effect is not confined to their own stream's state."""
_UNDONE_ALONE = frozenset({"consume", "grant", "adjust", REVERSE})
"""The events a reversal may take out (or put back) with only their stream's account
re-projected: each changes its own account alone, and no index (a submit adds a job to the
job index, which another account's job events may read)."""


def _named(payload: Any, field: str) -> str | None:
    """The name a payload gives under `field`, whether the payload is decoded or its
    stored JSON text (what a replay reads); None if it gives none.

    Text must be read too: taking a text payload for one without a job marked the whole
    journal unpartitioned, so every late event of a replay refolded the whole timeline.
    """
    if isinstance(payload, str | bytes):
        try:
            # In C, a fraction of json.loads's cost: late events ask this of every event
            # of their batch. What it refuses (NaN, say) is asked of json.loads as before.
            payload = _load_json(payload)
        except ValueError:
            try:
                payload = json.loads(payload)
            except ValueError:
                return None
    name = payload.get(field) if isinstance(payload, dict) else None
    return name if isinstance(name, str) else None


def _job_named(payload: Any) -> str | None:
    """The job a job event's payload names, if any."""
    return _named(payload, "job")


def _revision(late: Recorded, rec: Recorded, before: Outcome, after: Outcome
              ) -> Revision | None:
    """What `late` changed of what `rec` was reported to do, if anything."""
    was, now = before.reported(), after.reported()
    if was == now:
        return None
    return Revision(late.position, late.id, rec.position, rec.id, rec.type, was, now)


@dataclass(slots=True)
class _AccountRefold:
    """One account's stretch folded again for a batch, ready to splice in."""

    account: str
    ledger: Ledger
    stretch: list[Recorded]
    candidates: set[str]  # jobs that may be live for the account (see `splice`)
    folded: set[str] = field(default_factory=set)
    outcomes: list[Outcome] = field(default_factory=list)
    revisions: list[Revision] = field(default_factory=list)
    had_anomalies: bool = False
    applied: int = 0  # how much the refold changes `Ledger.applied` and `.rejected`
    rejected: int = 0


def _jobs_named(events: Iterable[Recorded]) -> set[str]:
    """The jobs that the job events among `events` name."""
    return {job for rec in events if rec.type in _JOB_EVENTS
            and (job := _job_named(rec.payload)) is not None}


def _account_named(payload: Any) -> str | None:
    """The account a payload names, if any."""
    return _named(payload, "account")


def _reversals_in(batch: Sequence[Recorded]) -> dict[str, str]:
    """{reversal id: target id} of the valid reversals among `batch` (what folding them
    adds to `Ledger.reversals`)."""
    found: dict[str, str] = {}
    if REVERSE not in map(_TYPE, batch):
        return found  # almost every batch: no Python step per event to learn it
    for rec in batch:
        if rec.type != REVERSE:
            continue
        try:
            event = decode_event(rec.type, rec.payload)
        except (ValueError, TypeError):
            continue  # an anomaly: it reverses nothing
        if isinstance(event, EventReversed):
            found[rec.id] = event.event
    return found


_CATCH_UP_PART = 50_000
"""Events of one batch a catch-up holds at a time."""


def _on_the_timeline(batch: Sequence[Recorded]) -> Sequence[Recorded]:
    """`batch` (in increasing position order) sorted by (time, position): itself when its
    times never go back, as in any journal written in time order; else sorted. Checked
    in C, where a sort made a (time, position) key per event."""
    times = list(map(_TIME, batch))
    if all(map(operator.le, times, itertools.islice(times, 1, None))):
        return batch
    return sorted(batch, key=_TIMELINE_KEY)


def apply_recorded(ledger: Ledger, rec: Recorded) -> Outcome:
    return ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time, rec.payload)


class Projector:
    """Keeps a `Ledger` current with a journal read in arrival order."""

    def __init__(self, reader: Reader, *, min_snapshot_every: int = 1000,
                 max_snapshots: int = 32, recent_outcomes: int = 50_000,
                 snapshot_factor: int = 1, older: Older | None = None,
                 remember_once_late: bool = False, locate: Locate | None = None,
                 account_reader: AccountReader | None = None,
                 snapshot_once_late: bool = False) -> None:
        self.ledger = Ledger()
        # Per-account re-projection (None: every late event refolds the whole timeline),
        # and what rules it out: accounts touched by events of another stream, job ids
        # named by an event that found no job, a recorded event without a stream.
        self._account_reader = account_reader
        self._mixed: set[str] = set()
        # Job ids named by an event that found no job, to the stream of those events (None:
        # more than one stream, or none): a late submit of one in another stream reaches
        # across accounts; in the same stream, its account's refold holds them all.
        self._floating: dict[str, str | None] = {}
        # Grant ids to the stream their voids are recorded on (None: more than one): a
        # refold of one account holds every void of a grant only when all are on its
        # stream (the facades and import record them on the grant's). A void that voided
        # credits of its own stream's account is not noted when folded in order (nothing
        # else is): a grant missing here has its voids on its own stream, unless this
        # projector started from a saved state, whose voids it never saw.
        self._voided_from: dict[str, str | None] = {}
        self._saw_every_void = True
        self._unpartitioned = False
        # After `start_from`: the saved state's position, and the earliest timeline place
        # from which the events up to it (never ingested here) have been looked at for
        # what `_track` notes; None when every event was ingested here.
        self._started_at = 0
        self._unseen_from: tuple[int, int] | None = None
        self.refolded_by_account = 0  # late events (or batches) re-projected by account
        self._account_refolds = 0  # accounts re-projected alone, over all of those
        # Reversals: the ids reversed as known, and where to find a reversed event on the
        # timeline (without it, a reversal refolds from the start: correct, only slower).
        self.excluded: frozenset[str] = frozenset()
        self._locate = locate
        # Where to find a state older than every snapshot held (the journal's saved
        # checkpoints), so a late event before them does not refold from the start.
        self._older = older
        self.position = 0  # the highest position ingested
        self.revisions: list[Revision] = []
        self.late_times: list[int] = []  # event times of late events, for cache invalidation
        # At least the last `recent_outcomes` outcomes (at most twice as many), pruned in
        # bulk: deleting the oldest one at a time from a dict made a long catch-up
        # quadratic, and an OrderedDict costs more on every event.
        self._recent: dict[int, Outcome] = {}
        self._recent_limit = recent_outcomes
        # Remember outcomes only from the first late event on: a journal read in order
        # (most replays) then pays nothing for them.
        self._remember_once_late = remember_once_late
        # Snapshots only from the first late event on, likewise: before it, a late event
        # refolds from the start (or from `older`), which the first one alone pays, while
        # a journal read in order (most replays) never copies its state at all. The refold
        # lays down snapshots as it goes, so the late events after it find them.
        self._snapshot_once_late = snapshot_once_late
        self._factor = snapshot_factor
        self._reader = reader
        self._min_every = min_snapshot_every
        self._max_snapshots = max_snapshots
        self._snap_keys: list[tuple[int, int]] = []
        self._snap_states: list[Saved] = []
        # Per snapshot, the accounts it holds as they were before a late event of theirs
        # re-projected alone (the rest of it is right): kept, a snapshot taken at the head
        # serves the other accounts' late events, where dropping it (as a whole-timeline
        # refold does) left nearly every late refold to start from the empty ledger.
        self._snap_stale: list[frozenset[str]] = []
        self._since_snapshot = 0
        self._batches = 0  # credit batches the state held at the last snapshot
        # Snapshots once late: the first one as soon as a late event has been seen. Late
        # events come in runs, and the ones after the first then refold from there, not
        # each from the start (a journal with 2% of its events late refolded three times
        # as many events when its first snapshot waited a whole spacing more).
        self._next_snapshot = 1 if snapshot_once_late else min_snapshot_every
        self._ingested = 0  # events ingested, and how many of them were late
        self._late = 0

    # -- snapshots ---------------------------------------------------------------------

    def _interval(self, ledger: Ledger, *, recount: bool = False) -> int:
        # A snapshot costs in proportion to what can still change (finished jobs are
        # shared, not copied); spacing snapshots in proportion to it keeps their amortised
        # cost per event constant, and dense enough that a late event refolds little.
        # The credit batches count too: grants nothing uses pile up (each a batch every
        # copy holds), and spaced by jobs and accounts alone the copies grew quadratic.
        # They are counted as a snapshot is taken (which walks them all anyway), not at
        # each late event, which would walk every account's pools for one account's event.
        if recount:
            self._batches = sum(len(heap) for account in ledger.accounts.values()
                                for heap in account.book.heaps.values())
        size = len(ledger.live) + len(ledger.accounts) + self._batches + 1
        spacing = max(self._min_every, self._factor * size)
        # An account re-projected alone restores and refolds about its share of what a
        # whole-timeline refold would: it weighs as that share of one.
        late = (self._late - self.refolded_by_account
                + self._account_refolds / max(1, len(ledger.accounts)))
        if not late:
            return spacing
        # With late events at a rate f, each refolds half a spacing I on average and
        # restores a state of `size`: per event, size / I + f * (size + I / 2), least at
        # I = sqrt(2 * size / f). Without this, frequent late events made a catch-up
        # quadratic (each refolding up to a whole sparse spacing).
        best = math.isqrt(int(2 * size * self._ingested / late))
        return max(min(MIN_SPACING, self._min_every), min(spacing, best))

    def _maybe_snapshot(self, ledger: Ledger) -> None:
        if self._snapshot_once_late and not self._late:
            return
        self._since_snapshot += 1
        if self._since_snapshot < self._next_snapshot:
            return
        self._since_snapshot = 0
        self._next_snapshot = self._interval(ledger, recount=True)
        self._snap_keys.append(ledger.last)
        self._snap_states.append(snapshot(ledger))
        self._snap_stale.append(frozenset())
        if len(self._snap_keys) > self._max_snapshots:
            self._thin_snapshots()

    def _thin_snapshots(self) -> None:
        """Drop snapshots down to `max_snapshots`, keeping the oldest (a late event far
        back still finds one) and the newest, and the rest spread so that each gap is
        about the same fraction of its distance from the newest (counted in events
        applied): a late event d events back refolds about a constant times d events,
        and one near the head little. Each time, the snapshot whose two gaps together
        are the smallest such fraction goes. (Halving the older half at each overflow
        kept only the oldest and a run near the head: a late event a few dozen spacings
        back refolded from the oldest, the whole history.)"""
        states = self._snap_states
        while len(states) > max(self._max_snapshots, 2):
            applied = [saved[0].applied for saved in states]
            newest = applied[-1]
            drop = min(range(1, len(applied) - 1),
                       key=lambda i: (applied[i + 1] - applied[i - 1])
                       / max(1, newest - applied[i - 1]))
            self._keep_snapshots([j for j in range(len(states)) if j != drop])
            states = self._snap_states

    def _keep_snapshots(self, keep: Sequence[int]) -> None:
        """Keep only the snapshots at the indexes `keep` (in increasing order)."""
        self._snap_keys = [self._snap_keys[i] for i in keep]
        self._snap_states = [self._snap_states[i] for i in keep]
        self._snap_stale = [self._snap_stale[i] for i in keep]

    def _drop_snapshots_from(self, key: tuple[int, int]) -> None:
        """Drop the snapshots at or after `key`."""
        i = bisect.bisect_left(self._snap_keys, key)
        del self._snap_keys[i:]
        del self._snap_states[i:]
        del self._snap_stale[i:]

    def _snapshot_before(self, key: tuple[int, int], account: str | None = None
                         ) -> tuple[tuple[int, int], Saved | None]:
        """The newest snapshot strictly before `key` that holds `account` as it stands
        (None: one that holds every account so, for a whole-ledger use); (MIN_KEY, None):
        start from an empty ledger."""
        keys, stale = self._snap_keys, self._snap_stale
        i = bisect.bisect_left(keys, key)
        for j in range(i - 1, -1, -1):
            held = stale[j]
            if not held or (account is not None and account not in held):
                return keys[j], self._snap_states[j]
        found = self._older(key) if self._older is not None else None
        if found is None:
            return MIN_KEY, None
        # Older than every usable snapshot held (a saved checkpoint, checked as it loads):
        # it takes its place among them, and stays for the next time.
        start, ledger = found
        saved = snapshot(ledger)
        at = bisect.bisect_left(keys, start)
        keys.insert(at, start)
        self._snap_states.insert(at, saved)
        stale.insert(at, frozenset())
        return start, saved

    def _restore_before(self, key: tuple[int, int]) -> tuple[tuple[int, int], Ledger]:
        """The newest snapshot strictly before `key`, restored, or an empty ledger."""
        start, saved = self._snapshot_before(key)
        return start, self._fresh(saved)

    def _fresh(self, saved: Saved | None) -> Ledger:
        """A restored copy of `saved` (or an empty ledger) skipping the reversed events.

        A snapshot may predate a reversal; it is still right up to its own key, since a
        reversal drops every snapshot from the reversed event's place on (or, re-projected
        for its account alone, marks them stale for that account).
        """
        ledger = restore(saved) if saved is not None else Ledger()
        ledger.excluded = self.excluded
        return ledger

    def start_from(self, ledger: Ledger, position: int) -> None:
        """Begin from a saved state that holds every event up to `position`."""
        if self.position:
            raise ValueError("start_from is only for a projector that has ingested nothing")
        self.ledger = ledger
        self.position = position
        self.excluded = ledger.excluded
        self._saw_every_void = False
        self._started_at = position
        self._unseen_from = ledger.last
        if self._older is not None:
            # The saved state can be loaded again by `older` the day a late event needs
            # it: copying it now would double the cost of every start-up for a rare case.
            self._snap_keys, self._snap_states, self._snap_stale = [], [], []
            return
        self._snap_keys = [ledger.last]
        self._snap_states = [snapshot(ledger)]
        self._snap_stale = [frozenset()]

    def keep_restart_point(self) -> None:
        """Snapshot the ledger as it stands, whatever the policy: a place for a late event
        still to come to refold from (with `snapshot_once_late`, the caller's choice of
        where the first one may refold from, before any late event was seen)."""
        if (self._snap_keys and self._snap_keys[-1] >= self.ledger.last
                and not self._snap_stale[-1]):
            return
        # One there but stale for an account serves no whole-ledger refold: replaced.
        self._drop_snapshots_from(self.ledger.last)
        self._snap_keys.append(self.ledger.last)
        self._snap_states.append(snapshot(self.ledger))
        self._snap_stale.append(frozenset())

    def snapshot_count(self) -> int:
        return len(self._snap_keys)

    # -- ingesting ---------------------------------------------------------------------

    def ingest(self, rec: Recorded, event: DomainEvent | None = None) -> Outcome:
        """Apply the next recorded event (positions must arrive in increasing order).

        `event`: the already-decoded domain event of `rec`, when the caller has it.
        """
        if rec.position <= self.position:
            raise ValueError(f"position {rec.position} ingested after {self.position}")
        self.position = rec.position
        self._ingested += 1
        if rec.type == REVERSE:
            return self._ingest_reversal(rec)
        return self._ingest(rec, event)

    def ingest_batch(self, batch: Sequence[Recorded], *,
                     known_before: int | None = None) -> dict[int, Outcome]:
        """Apply the next batch: events appended together (in one transaction), given in
        position order, all after everything ingested. Returns their outcomes by position.

        `known_before`: the batch began at this earlier position and its events before
        `batch` were ingested already (a batch too large to hold is taken a part at a
        time): only events before that position can be revised.

        A batch is one step of knowledge: its events take their canonical places among
        themselves, and a revision is reported only for an event known before the batch.
        Events that all land after everything applied are simply folded in canonical
        order; otherwise the timeline is re-projected once for the whole batch, from the
        earliest place it changes, not once per event.
        """
        if not batch:
            return {}
        known = batch[0].position if known_before is None else known_before
        if len(batch) == 1 and known == batch[0].position:
            return {batch[0].position: self.ingest(batch[0])}
        positions = list(map(_POSITION, batch))
        if positions[0] <= self.position or not all(
                map(operator.lt, positions, itertools.islice(positions, 1, None))):
            raise ValueError(f"batch at positions {positions[0]}..{positions[-1]} ingested "
                             f"after {self.position}, or not in increasing position order")
        ordered = _on_the_timeline(batch)
        reversals = _reversals_in(batch)
        if not reversals and (ordered[0].time, ordered[0].position) > self.ledger.last:
            # Nothing lands before what is applied: the usual case, and a journal's first
            # batch (an import into a fresh journal, however shuffled its file).
            self.position = positions[-1]
            self._ingested += len(batch)
            return self._ingest_in_order(ordered)
        if not reversals:
            alone = self._reproject_batch_by_account(batch, ordered, known)
            if alone is not None:
                return alone
        return self._reproject_batch(batch, ordered, reversals, known)

    def ingest_rows(self, rows: Sequence[LeanRow], *, known_before: int | None = None,
                    only_straight: bool = False) -> bool:
        """`ingest_batch` of rows shaped like `Lean` (position, id, type, time, payload,
        stream), plain tuples, their outcomes not kept: a replay's batches. True if
        they were ingested.

        The usual batch, in position order after everything ingested, landing after
        everything applied, with no reversal, while no late event has been seen (so no
        snapshot or outcome is due), is folded straight from the rows by a compiled loop;
        any other is made `Lean` records and taken by `ingest_batch`, unless
        `only_straight`: then nothing is ingested, and False says so (a replay handing a
        batch over a part at a time then sends the rest of the batch with this part).
        Making a `Lean` of each row and reading its fields by name were a tenth of a
        replay."""
        if not rows:
            return True
        positions = list(map(_ROW_POSITION, rows))
        known = positions[0] if known_before is None else known_before
        straight = not (len(rows) == 1 and known == positions[0]) and not self._late and (
            self._snapshot_once_late and (self._remember_once_late or not self._recent_limit))
        if straight:
            times = list(map(_ROW_TIME, rows))
            in_order = all(map(operator.le, times, itertools.islice(times, 1, None)))
            ordered = rows if in_order else sorted(rows, key=_ROW_TIMELINE_KEY)
            straight = (positions[0] > self.position
                        and all(map(operator.lt, positions, itertools.islice(positions, 1, None)))
                        and REVERSE not in map(_ROW_TYPE, rows)
                        and (ordered[0][3], ordered[0][0]) > self.ledger.last
                        and (in_order or not only_straight))
        if not straight:
            if only_straight:
                return False
            self.ingest_batch(list(map(as_lean, rows)), known_before=known_before)
            return True
        self.position = positions[-1]
        self._ingested += len(rows)
        ledger = self.ledger
        i, end = 0, len(ordered)
        while i < end:
            # Stops after each event that is not about its own stream's account alone.
            i, outcome = ledger.apply_own_rows(ordered, i)
            row = ordered[i - 1]
            if outcome.account is None or outcome.account != row[5]:
                self._track(as_lean(row), outcome, ledger)
        return True

    def _reproject_batch_by_account(self, batch: Sequence[Recorded],
                                    ordered: Sequence[Recorded], known: int
                                    ) -> dict[int, Outcome] | None:
        """Re-project a batch account by account: the accounts with an event before the
        applied timeline once each, from the snapshot before their earliest one; the
        batch's other events folded on. None (having changed nothing) when something
        reaches across accounts."""
        if (self._account_reader is None or self._unpartitioned
                or self.ledger.policy is not None):
            return None
        frontier = self.ledger.last
        late: dict[str, Recorded] = {}  # account -> its earliest event of the batch
        for rec in ordered:
            stream = getattr(rec, "stream", None)
            if stream is None or rec.type in _CROSSING or stream in self._mixed:
                return None
            if (rec.time, rec.position) < frontier:
                late.setdefault(stream, rec)
        first, last = batch[0].position, batch[-1].position
        streams = {getattr(rec, "stream", None) for rec in ordered}
        # Check and refold every late account before changing anything: one that reaches
        # across accounts sends the whole batch down the whole-timeline path.
        refolds: list[_AccountRefold] = []
        named: set[str] = set()  # jobs the late accounts' stretches name
        for account in sorted(late):
            cause = late[account]
            start, saved = self._snapshot_before((cause.time, cause.position), account)
            if not self._apart_after(start, streams):
                return None
            stretch = list(self._account_reader(account, start, last))
            if not self._confined(account, stretch, saved):
                return None
            jobs = _jobs_named(stretch)
            if not named.isdisjoint(jobs):
                return None  # two accounts name one job: who holds it crosses them
            named |= jobs
            done = self._account_refold(account, saved, stretch, first, known, cause)
            if done is None:
                return None
            refolds.append(done)
        # The batch's events of accounts it does not send back: after everything applied,
        # unless one of them reaches a late account (names its job, or is about it).
        on_time = [rec for rec in ordered if getattr(rec, "stream", None) not in late]
        index = self.ledger.jobs
        for rec in on_time:
            if rec.type in _JOB_EVENTS:
                job = _job_named(rec.payload)
                owner = index.get(job) if job is not None else None
                if job in named or (owner is not None and owner.account in late):
                    return None
            elif _account_named(rec.payload) in late:
                return None
        self.position = last
        self._ingested += len(batch)
        outcomes: dict[int, Outcome] = {}
        for rec in on_time:
            outcomes[rec.position] = self._ingest(rec, None)
        # Nothing was changed for the late accounts until here: splice them in.
        earliest = min(late.values(), key=lambda r: (r.time, r.position))
        self._refolded_alone((earliest.time, earliest.position),
                             {account: (rec.time, rec.position) for account, rec in late.items()})
        recent = self._recent
        newest = self.ledger.last
        for done in refolds:
            splice(self.ledger, done.ledger, done.account, done.candidates, done.folded,
                   done.had_anomalies, done.applied, done.rejected)
            self.revisions.extend(done.revisions)
            for rec, outcome in zip(done.stretch, done.outcomes, strict=True):
                self._track(rec, outcome, done.ledger)
                if rec.position >= first:
                    outcomes[rec.position] = outcome
                    if rec.id not in self.excluded:
                        newest = max(newest, (rec.time, rec.position))
                elif rec.position in recent:
                    recent[rec.position] = outcome
        # The late accounts' batch events may lie past everything else applied.
        self.ledger.last = newest
        for position in sorted(outcomes):
            if position not in recent:
                self._remember(outcomes[position])
        self._next_snapshot = min(self._next_snapshot, self._interval(self.ledger))
        return {position: outcomes[position] for position in sorted(outcomes)}

    def _account_refold(self, account: str, saved: Saved | None,
                        stretch: Sequence[Recorded], first: int, known: int,
                        cause: Recorded) -> _AccountRefold | None:
        """Fold `stretch` (an account's events after the snapshot `saved`, up to the end of
        a batch starting at position `first`) for that account alone, changing nothing
        else; None if an event of it affects another account."""
        new = account_ledger(saved, account, self.excluded)
        recent = self._recent
        remembered = all(rec.position in recent for rec in stretch if rec.position < first)
        old = None if remembered else account_ledger(saved, account, self.excluded)
        done = _AccountRefold(account, new, list(stretch), set(new.live))
        old_rejected = 0
        with paused_gc():
            for rec in stretch:
                done.folded.add(rec.id)
                applied = new.applied
                after = apply_recorded(new, rec)
                if after.account not in (None, account):
                    return None
                done.outcomes.append(after)
                job = _job_named(rec.payload) if rec.type == "submit" else None
                if job is not None:
                    done.candidates.add(job)
                if rec.position >= first:
                    done.applied += new.applied - applied
                    continue
                before = recent[rec.position] if old is None else apply_recorded(old, rec)
                done.had_anomalies = done.had_anomalies or before.anomaly
                if before.type == "submit" and not before.ok and not before.anomaly:
                    old_rejected += 1  # what `Ledger.rejected` counts
                if rec.position >= known:
                    continue  # an earlier part of the same batch: known with it
                revision = _revision(cause, rec, before, after)
                if revision is not None:
                    done.revisions.append(revision)
        done.rejected = new.rejected - old_rejected
        return done

    def _reproject_batch(self, batch: Sequence[Recorded], ordered: Sequence[Recorded],
                         reversals: dict[str, str], known: int) -> dict[int, Outcome]:
        """Fold again once for a batch with events before the applied timeline (or with
        reversals): from the earliest of them, or of the events its reversals take out or
        put back; every outcome of an event known before the batch that changed is a
        revision, caused by the batch's earliest event on the timeline (its reversal, when
        one moved the start further back)."""
        first, last = batch[0].position, batch[-1].position
        self.position = last
        self._ingested += len(batch)
        cause = ordered[0]
        pivot = (cause.time, cause.position)
        old_excluded: frozenset[str] | None = None
        if reversals:
            excluded = reversed_ids({**self.ledger.reversals, **reversals})
            if excluded != self.excluded:
                places = [self._locate(event_id) if self._locate is not None else None
                          for event_id in sorted(excluded ^ self.excluded)]
                earliest = min((p for p in places if p is not None), default=MIN_KEY)
                if any(p is None for p in places):
                    earliest = MIN_KEY
                if earliest < pivot:
                    pivot = earliest
                    cause = self._reaching_furthest(batch, reversals)
                old_excluded, self.excluded = self.excluded, excluded
        return self._refold_from(pivot, lambda start, new, fold_old: self._refold_batch(
            cause, first, known, last, start, new, fold_old, pivot, old_excluded))

    def _reaching_furthest(self, batch: Sequence[Recorded],
                           reversals: dict[str, str]) -> Recorded:
        """The reversal of `batch` whose events (what it names, and what that names in
        turn when it reverses a reversal) lie earliest on the timeline: the cause of the
        revisions its re-projection finds, not merely the batch's first reversal."""
        named = {**self.ledger.reversals, **reversals}
        best: tuple[tuple[int, int], Recorded] | None = None
        for rec in batch:
            target = reversals.get(rec.id) if rec.type == REVERSE else None
            chain: list[str] = []
            while target is not None and target not in chain:
                chain.append(target)
                target = named.get(target)
            places = [self._locate(i) if self._locate is not None else None for i in chain]
            if not places:
                continue
            reach = MIN_KEY if None in places else min(p for p in places if p is not None)
            if best is None or reach < best[0]:
                best = (reach, rec)
        return best[1] if best is not None else next(r for r in batch if r.type == REVERSE)

    def _refold_batch(self, cause: Recorded, first: int, known: int, last: int,
                      start: tuple[int, int], new: Ledger, fold_old: bool,
                      pivot: tuple[int, int],
                      old_excluded: frozenset[str] | None
                      ) -> tuple[Ledger, dict[int, Outcome], list[Revision],
                                 list[Outcome]] | None:
        """Fold the timeline after `start` with the batch (positions `first` to `last`,
        caused by `cause`); None if a later outcome is not remembered (and `fold_old`,
        fold the timeline without the batch too, is False). Returns the new ledger, the
        batch's outcomes by position, the revisions and every outcome folded.

        Events before `pivot` (the batch's earliest place, or the earliest event a
        reversal changed) cannot change: they are folded once, and the old timeline
        (without any event of the batch, or with the reversed ids as they were) forks
        from the state there. Only events before `known` are revised: the rest were
        known with the batch.
        """
        self._since_snapshot = 0
        mine: dict[int, Outcome] = {}
        old: Ledger | None = None
        revisions: list[Revision] = []
        outcomes: list[Outcome] = []
        snap_keys, snap_states = list(self._snap_keys), list(self._snap_states)
        snap_stale = list(self._snap_stale)
        apply, track = new.apply_recorded, self._track
        for rec in self._reader(start, last, None):
            place = (rec.time, rec.position)
            if fold_old and old is None and place >= pivot:
                old = restore(snapshot(new))
                if old_excluded is not None:
                    old.excluded = old_excluded
            after = apply(rec.position, rec.id, rec.type, rec.time, rec.payload)
            account = after.account
            # `_track` notes nothing of an event about its own stream's account but a void.
            if account is None or account != getattr(rec, "stream", None) or rec.type == VOID:
                track(rec, after, new)
            self._maybe_snapshot(new)
            outcomes.append(after)
            if rec.position >= first:
                mine[rec.position] = after
                continue
            if place < pivot:
                continue
            if old is not None:
                before: Outcome | None = apply_recorded(old, rec)
            elif rec.position >= known:
                continue  # an earlier part of the same batch: known with it
            else:
                before = self._recent.get(rec.position)
                if before is None:
                    self._snap_keys, self._snap_states = snap_keys, snap_states
                    self._snap_stale = snap_stale
                    return None
            assert before is not None
            if rec.position >= known:
                continue
            revision = _revision(cause, rec, before, after)
            if revision is not None:
                revisions.append(revision)
        return new, mine, revisions, outcomes

    def _ingest_in_order(self, ordered: Sequence[Recorded]) -> dict[int, Outcome]:
        """`_ingest` of events in canonical order, all after everything applied (a replay
        of an in-order journal: every event), without its per-event Python calls: what
        they decide once for the whole batch is decided once."""
        ledger = self.ledger
        apply = ledger.apply_recorded
        remember = bool(self._recent_limit) and not (self._remember_once_late and not self._late)
        snapshots = bool(self._late) or not self._snapshot_once_late
        outcomes: dict[int, Outcome] = {}
        if not snapshots and not remember:
            # The events about their own stream's account alone (nearly all) are folded
            # by a compiled loop, which stops after each of the others to note it here.
            i, end = 0, len(ordered)
            while i < end:
                i = ledger.apply_own(ordered, i, outcomes)
                rec = ordered[i - 1]
                outcome = outcomes[rec.position]
                account = outcome.account
                if account is None or account != getattr(rec, "stream", None):
                    self._track(rec, outcome, ledger)
            return outcomes
        for rec in ordered:
            outcome = apply(rec.position, rec.id, rec.type, rec.time, rec.payload)
            account = outcome.account
            if account is None or account != getattr(rec, "stream", None):
                self._track(rec, outcome, ledger)  # nothing to note when it is its stream's
            if snapshots:
                self._maybe_snapshot(ledger)
            if remember:
                self._remember(outcome)
            outcomes[rec.position] = outcome
        return outcomes

    def _ingest(self, rec: Recorded, event: DomainEvent | None) -> Outcome:
        if (rec.time, rec.position) > self.ledger.last:
            if event is None:
                outcome = apply_recorded(self.ledger, rec)
            else:
                outcome = self.ledger.apply(rec.position, rec.id, rec.time, event)
            self._track(rec, outcome, self.ledger)
            self._maybe_snapshot(self.ledger)
            self._remember(outcome)
            return outcome
        return self._reproject(rec)

    def _track(self, rec: Recorded, outcome: Outcome, ledger: Ledger) -> None:
        """Note what would make a later per-account re-projection incomplete: an event
        that affected (or, had its job's account existed, would have affected) an
        account other than its stream's, or a job event that found no job at all."""
        account = outcome.account
        if rec.type == VOID:
            grant = _named(rec.payload, "grant")
            stream = getattr(rec, "stream", None)
            if grant is not None and self._voided_from.setdefault(grant, stream) != stream:
                self._voided_from[grant] = None
            if account is None and grant is not None and (
                    stream is None or not self._granted_on(stream, grant, self.position)):
                # A void recorded apart from its grant's stream that found nothing to void
                # (the facades and import record it on the grant's): should the grant's
                # account get credits of it back before the void's time, a refold of that
                # account alone would not see the void. A grant recorded only after what
                # is ingested is not recorded yet here: a replay's locator reads the whole
                # journal while its reader holds only the rows read so far, so a void
                # recorded before its grant (an import appending an export's void first)
                # made a replay give this path up where a live facade that read the
                # journal at another moment did not, and the two named different causes
                # for the same revisions. Such a grant arriving later on another stream
                # than the void's is caught then (`_confined`, `_voided_from`).
                self._unpartitioned = True
                return
        if account is None and rec.type in _JOB_EVENTS:
            job = _job_named(rec.payload)
            if job is None:
                self._unpartitioned = True
                return
            known = ledger.jobs.get(job)
            if known is None:
                # A submit arriving late may give it a job.
                stream = getattr(rec, "stream", None)
                if self._floating.setdefault(job, stream) != stream:
                    self._floating[job] = None
                return
            account = known.account
        if account is not None and account != getattr(rec, "stream", None):
            self._mix(rec, account)

    def _mix(self, rec: Recorded, account: str) -> None:
        stream = getattr(rec, "stream", None)
        if stream is None:
            self._unpartitioned = True
            return
        self._mixed.add(account)
        self._mixed.add(stream)

    def _apart_after(self, start: tuple[int, int], streams: Iterable[str | None]) -> bool:
        """Whether, as far as is known once the events before the saved state are looked
        at too (`_learn_unseen`), nothing after `start` ties `streams` to another account."""
        self._learn_unseen(start)
        return not self._unpartitioned and self._mixed.isdisjoint(streams)

    def _learn_unseen(self, start: tuple[int, int]) -> None:
        """Before refolding one account's events after `start`: note, as `_track` would
        have, what the events before the saved state this projector started from (never
        ingested here) and after `start` on the timeline tell of streams reaching across
        accounts. Without it, a late submit of a job whose start was recorded in the job's
        own stream before the saved state refolded its account alone and missed the start.

        Judged without their outcomes, so on the safe side: a job event is taken to reach
        beyond its stream unless the job is known in the stream's account, and a void
        recorded apart from its grant's stream rules the per-account path out."""
        seen = self._unseen_from
        if seen is None or start >= seen:
            return
        jobs = self.ledger.jobs
        for rec in self._reader(start, self._started_at, None):
            if (rec.time, rec.position) > seen:
                continue  # looked at before
            stream = getattr(rec, "stream", None)
            kind = rec.type
            if stream is None:
                self._unpartitioned = True
            elif kind == VOID:
                grant = _named(rec.payload, "grant")
                if grant is not None and not self._granted_on(stream, grant):
                    self._unpartitioned = True
            elif kind in _JOB_EVENTS:
                job = _job_named(rec.payload)
                known = jobs.get(job) if job is not None else None
                if job is None:
                    self._unpartitioned = True
                elif known is None:
                    self._floating[job] = None  # any late submit of it reaches across
                elif known.account != stream:
                    self._floating[job] = None
                    self._mix(rec, known.account)
            else:
                account = _account_named(rec.payload)
                if account is not None and account != stream:
                    self._mix(rec, account)
        self._unseen_from = start

    def _remember(self, outcome: Outcome) -> None:
        # The outcomes of recent events, as last reported: a late event compares against
        # them instead of folding the old timeline a second time.
        if not self._recent_limit or (self._remember_once_late and not self._late):
            return
        recent = self._recent
        recent[outcome.position] = outcome
        if len(recent) > 2 * self._recent_limit:
            # Positions were remembered in increasing order: keep the newest half.
            self._recent = dict(itertools.islice(recent.items(), len(recent) - self._recent_limit,
                                                 None))

    def _remember_all(self, outcomes: Iterable[Outcome]) -> None:
        """`_remember` each of `outcomes` in turn, without a call per outcome."""
        if not self._recent_limit or (self._remember_once_late and not self._late):
            return
        recent, bound = self._recent, 2 * self._recent_limit
        for outcome in outcomes:
            recent[outcome.position] = outcome
            if len(recent) > bound:
                self._recent = recent = dict(itertools.islice(
                    recent.items(), len(recent) - self._recent_limit, None))

    def _ingest_reversal(self, rec: Recorded) -> Outcome:
        """Fold a reversal (by itself it changes nothing), then, if it changes which events
        are reversed, re-project from the earliest of them, like a late event there: for
        its stream's account alone when it can (`_reproject_reversal_by_account`), else the
        whole timeline."""
        alone = self._reproject_reversal_by_account(rec)
        if alone is not None:
            return alone
        outcome = self._ingest(rec, None)
        excluded = reversed_ids(self.ledger.reversals)
        if excluded == self.excluded:
            return outcome
        changed = excluded ^ self.excluded
        places = [self._locate(event_id) if self._locate is not None else None
                  for event_id in sorted(changed)]
        pivot = min((p for p in places if p is not None), default=MIN_KEY)
        if any(p is None for p in places):
            pivot = MIN_KEY
        previous, self.excluded = self.excluded, excluded
        return self._reproject(rec, pivot=min(pivot, (rec.time, rec.position)),
                               old_excluded=previous)

    def _reproject_reversal_by_account(self, rec: Recorded) -> Outcome | None:
        """Take in a reversal that changes which events are reversed by re-projecting its
        stream's account alone, from the snapshot before the earliest event it takes out
        or puts back (or before itself), with the reversed ids as they were and as they
        are now, side by side; None, having changed nothing, when it changes nothing
        reversed or when what it changes may reach across accounts.

        Every event it changes, among those recorded before it, must be on its stream (a
        reversal is recorded on the stream of the event it takes out), of a kind confined
        to its account (`_UNDONE_ALONE`), and not the last applied event when it takes it
        out (the timeline's `last` would fall back to one of another account)."""
        account = getattr(rec, "stream", None)
        if (self._account_reader is None or self._locate is None or self._unpartitioned
                or account is None or account in self._mixed
                or self.ledger.policy is not None):
            return None
        named = _reversals_in([rec])
        if not named:
            return None  # not a valid reversal: the whole path reports its anomaly
        excluded = reversed_ids({**self.ledger.reversals, **named})
        changed = excluded ^ self.excluded
        if not changed:
            return None  # a plain event, or a late one: `_ingest` takes it
        # An id not recorded before the reversal is in no fold yet (it arrives reversed,
        # or put back): only the others change the timeline.
        places: dict[str, tuple[int, int]] = {}
        for event_id in changed:
            place = self._locate(event_id)
            if place is not None and place[1] < rec.position:
                places[event_id] = place
        pivot = min([*places.values(), (rec.time, rec.position)])
        last = self.ledger.last
        if any(places[event_id] == last for event_id in places.keys() & excluded):
            return None
        start, saved = self._snapshot_before(pivot, account)
        if not self._apart_after(start, (account,)):
            return None
        stretch = list(self._account_reader(account, start, rec.position))
        kinds = {r.id: r.type for r in stretch}
        if (any(kinds.get(event_id) not in _UNDONE_ALONE for event_id in places)
                or rec.id not in kinds or not self._confined(account, stretch, saved)):
            return None
        new = account_ledger(saved, account, excluded)
        old = account_ledger(saved, account, self.excluded)
        candidates = set(new.live)
        folded: set[str] = set()
        revisions: list[Revision] = []
        outcomes: list[Outcome] = []
        mine: Outcome | None = None
        with paused_gc():
            for event in stretch:
                folded.add(event.id)
                after = apply_recorded(new, event)
                if event.position == rec.position:
                    mine = after
                else:
                    before = apply_recorded(old, event)
                    if before.account not in (None, account):
                        return None
                    revision = _revision(rec, event, before, after)
                    if revision is not None:
                        revisions.append(revision)
                if after.account not in (None, account):
                    return None
                outcomes.append(after)
                job = _job_named(event.payload) if event.type == "submit" else None
                if job is not None:
                    candidates.add(job)
        assert mine is not None
        if account in old.accounts and account not in new.accounts:
            return None  # the account itself goes: rare, and the whole path drops it
        # Nothing was changed until here: from now on the re-projection is committed.
        self._refolded_alone(pivot, {account: pivot})
        ledger = self.ledger
        ledger.reversals.update(named)
        # An event put back may lie past everything applied; none taken out was last.
        newest = max(ledger.last, new.last)
        splice(ledger, new, account, candidates, folded, bool(old.anomalies),
               new.applied - old.applied, new.rejected - old.rejected)
        ledger.last = newest
        self.excluded = ledger.excluded = excluded
        self.revisions.extend(revisions)
        recent = self._recent
        for event, outcome in zip(stretch, outcomes, strict=True):
            self._track(event, outcome, new)
            if event.position in recent:
                recent[event.position] = outcome
        self._remember(mine)
        self._next_snapshot = min(self._next_snapshot, self._interval(ledger))
        return mine

    def _reproject(self, late: Recorded, *, pivot: tuple[int, int] | None = None,
                   old_excluded: frozenset[str] | None = None) -> Outcome:
        """Fold again from `pivot` (default: the late event's place); outcomes after it
        that differ from what was reported become revisions."""
        if pivot is None:
            alone = self._reproject_account(late)
            if alone is not None:
                return alone
        key = (late.time, late.position) if pivot is None else pivot
        at = late.position  # a batch of one: the late event alone
        mine = self._refold_from(key, lambda start, new, fold_old: self._refold_batch(
            late, at, at, at, start, new, fold_old, key, old_excluded))
        if at not in mine:
            raise RuntimeError(f"late event at position {at} not found on re-read")
        return mine[at]

    def _refold_from(self, key: tuple[int, int],
                     refold: Callable[[tuple[int, int], Ledger, bool],
                                      tuple[Ledger, _T, list[Revision], list[Outcome]] | None]
                     ) -> _T:
        """Fold again from `key` with `refold(start, ledger at start, fold_old)`: drop the
        snapshots from `key` on, and those stale for an account, start from the one
        before, and take the result (its ledger, revisions and outcomes); return what
        `refold` says of the late events."""
        self.late_times.append(key[0])
        self._late += 1
        self._drop_snapshots_from(key)
        # Those stale for an account too: sound to keep for the other accounts, but this
        # rare path then meets only snapshots right for every account, as it always did.
        self._keep_snapshots([i for i, held in enumerate(self._snap_stale) if not held])
        start, saved = self._snapshot_before(key)
        with paused_gc():
            found = None
            if self._recent_limit:
                found = refold(start, self._fresh(saved), False)
            if found is None:
                # An event too old to be remembered: fold the old timeline beside the new.
                found = refold(start, self._fresh(saved), True)
                assert found is not None
        ledger, late, revisions, outcomes = found
        # Late events are more frequent than assumed so far: snapshot sooner.
        self._next_snapshot = min(self._next_snapshot, self._interval(ledger))
        self.revisions.extend(revisions)
        self._remember_all(outcomes)
        self.ledger = ledger
        return late

    def _reproject_account(self, late: Recorded) -> Outcome | None:
        """Re-project a late event for its own account only; None (having changed
        nothing) when something in the way reaches across accounts."""
        account = getattr(late, "stream", None)
        if (self._account_reader is None or self._unpartitioned or account is None
                or account in self._mixed or self.ledger.policy is not None
                or self.ledger.accounts.keys() <= {account}):
            # Alone on the ledger, its stretch is the whole timeline: the whole-timeline
            # refold folds no more, and lays down snapshots as it goes, where this path
            # leaves every later one stale for the only account they hold (dropped), so
            # each next late event refolded from further back, at last from the start.
            return None
        key = (late.time, late.position)
        start, saved = self._snapshot_before(key, account)
        if not self._apart_after(start, (account,)):
            return None
        stretch = list(self._account_reader(account, start, late.position))
        if not self._confined(account, stretch, saved):
            return None
        new = account_ledger(saved, account, self.excluded)
        # The old timeline's outcomes: as last reported when all are remembered (the
        # usual case), else folded again beside the new one.
        recent = self._recent
        remembered = all(rec.position in recent for rec in stretch
                         if rec.position != late.position)
        old = None if remembered else account_ledger(saved, account, self.excluded)
        candidates = set(new.live)
        folded: set[str] = set()
        revisions: list[Revision] = []
        outcomes: list[Outcome] = []
        late_outcome: Outcome | None = None
        late_applied = 0  # what the late event adds to `Ledger.applied`
        had_anomalies = False
        old_rejected = 0
        with paused_gc():
            for rec in stretch:
                folded.add(rec.id)
                applied = new.applied
                after = apply_recorded(new, rec)
                if after.account not in (None, account):
                    return None
                outcomes.append(after)
                job = _job_named(rec.payload) if rec.type == "submit" else None
                if job is not None:
                    candidates.add(job)
                if rec.position == late.position:
                    late_outcome = after
                    # Nothing when reversed, a reversal itself, or not a valid event.
                    late_applied = new.applied - applied
                    continue
                before = recent[rec.position] if old is None else apply_recorded(old, rec)
                had_anomalies = had_anomalies or before.anomaly
                if before.type == "submit" and not before.ok and not before.anomaly:
                    old_rejected += 1  # what `Ledger.rejected` counts
                revision = _revision(late, rec, before, after)
                if revision is not None:
                    revisions.append(revision)
        if late_outcome is None:
            raise RuntimeError(f"late event at position {late.position} not found on re-read")
        # Nothing was changed until here: from now on the refold is committed.
        self._refolded_alone(key, {account: key})
        # The stretch is the same events plus the late one.
        splice(self.ledger, new, account, candidates, folded, had_anomalies,
               late_applied, new.rejected - old_rejected)
        # A late reversal that changes nothing reversed (else `_ingest_reversal` sends
        # it on), or a late void: what folding it adds to the ledger's own indexes.
        self.ledger.reversals.update(_reversals_in([late]))
        grant = _named(late.payload, "grant") if late.type == VOID and late_applied else None
        if grant is not None:
            voids = self.ledger.voids
            voids[grant] = min(late.time, voids.get(grant, late.time))
        self.revisions.extend(revisions)
        for rec, outcome in zip(stretch, outcomes, strict=True):
            self._track(rec, outcome, new)
            if rec.position in recent:
                recent[rec.position] = outcome
        self._remember(late_outcome)
        self._next_snapshot = min(self._next_snapshot, self._interval(self.ledger))
        return late_outcome

    def _refolded_alone(self, key: tuple[int, int],
                        accounts: Mapping[str, tuple[int, int]]) -> None:
        """Count a re-projection of `accounts` alone from `key` (the earliest of their
        places) on, and mark the snapshots from each account's place on stale for it
        (they hold it as it was); drop those stale for every account they hold."""
        self.refolded_by_account += 1
        self._account_refolds += len(accounts)
        self.late_times.append(key[0])
        self._late += 1
        keys, stale = self._snap_keys, self._snap_stale
        for account, place in accounts.items():
            for i in range(bisect.bisect_left(keys, place), len(keys)):
                stale[i] = stale[i] | {account}
        # One stale for every account it holds serves only accounts opened after it,
        # which an older snapshot (or the empty ledger) serves as well.
        useless = [i for i, held in enumerate(stale)
                   if held and held.issuperset(self._snap_states[i][0].accounts)]
        if useless:
            gone = set(useless)
            self._keep_snapshots([i for i in range(len(keys)) if i not in gone])

    def _confined(self, account: str, stretch: Sequence[Recorded],
                  saved: Saved | None) -> bool:
        """Whether refolding `stretch` (the events of `account`'s stream after the snapshot
        `saved`) for that account alone gives what a refold of the whole timeline would.

        A reversal in it is no obstacle: folded, it changes no account (which events are
        reversed is the projector's `excluded`, the same for every account); one that
        changes `excluded` is re-projected by `_reproject_reversal_by_account`. Nor is a
        void of a grant the account held at the snapshot, or recorded on its stream (an
        account whose stream holds another's grant is mixed, see `_track`): only the
        account a grant names ever holds its credits, so the void reaches no other."""
        jobs, voids = self.ledger.jobs, self.ledger.voids
        held = saved[0].accounts.get(account) if saved is not None else None
        for rec in stretch:
            kind = rec.type
            if kind == VOID:
                grant = _named(rec.payload, "grant")
                if grant is None or not ((held is not None and has_batch(held, grant))
                                         or self._granted_on(account, grant)):
                    return False
                continue
            if kind in _JOB_EVENTS:
                job = _job_named(rec.payload)
                if (kind == "submit" and job in self._floating
                        and self._floating[job] != account):
                    return False
                # A job another account holds (submitted first there, or the stream is
                # not the job's account): its events reach beyond this account.
                known = jobs.get(job) if isinstance(job, str) else None
                if known is not None and known.account != account:
                    return False
            elif kind == "grant" and rec.id in voids and self._voided_from.get(
                    rec.id, account if self._saw_every_void else None) != account:
                return False
        return True

    def _granted_on(self, account: str, grant: str, known_to: int | None = None) -> bool:
        """Whether `grant` is recorded on `account`'s stream, or not recorded at all (then
        no account holds its credits), or not up to position `known_to` (if given);
        False when it cannot be told."""
        if self._locate is None or self._account_reader is None:
            return False
        place = self._locate(grant)
        if place is None or (known_to is not None and place[1] > known_to):
            return True
        time, position = place
        return any(rec.id == grant for rec in
                   self._account_reader(account, (time, position - 1), position))

    def catch_up(self, events: Iterable[Recorded], keep: Container[int] = frozenset(),
                 batches: Mapping[int, int] | None = None) -> dict[int, Outcome]:
        """Ingest events in position order; return the outcomes of the positions in `keep`.

        Only those: a facade opening a journal of 10^6 events has no use for 10^6
        outcomes, which would take more memory than the whole projection.

        `batches`: first position -> last of the events appended together (the journal's
        `batches`; the positions are gapless), each taken as `ingest_batch` takes it, as a
        replay does: a batch of late events is re-projected once, not once per event.
        """
        kept: dict[int, Outcome] = {}
        with paused_gc():
            if not batches:
                for rec in events:
                    outcome = self.ingest(rec)
                    if rec.position in keep:
                        kept[rec.position] = outcome
                return kept
            rows = iter(events)
            for rec in rows:
                first = rec.position
                last = batches.get(first, first)
                if last == first:
                    outcome = self.ingest(rec)
                    if first in keep:
                        kept[first] = outcome
                    continue
                # A batch too large to hold goes a part at a time, each known with the
                # parts before it (as a replay takes an import of millions of lines).
                part = [rec, *itertools.islice(rows, min(last - first, _CATCH_UP_PART - 1))]
                while True:
                    outcomes = self.ingest_batch(part, known_before=first)
                    kept.update((p, o) for p, o in outcomes.items() if p in keep)
                    if part[-1].position >= last:
                        break
                    part = list(itertools.islice(rows, min(last - part[-1].position,
                                                           _CATCH_UP_PART)))
                    if not part:
                        break
        return kept

    def remembered(self, position: int) -> Outcome | None:
        """The outcome of the ingested event at `position` on the timeline as it stands
        (late events re-projected), if it is among the recent outcomes remembered."""
        return self._recent.get(position)

    # -- trying an event in the past ----------------------------------------------------

    def trial(self, new: Sequence[Recorded]) -> tuple[list[Outcome], list[Conflict]]:
        """Fold the timeline as if `new` (not yet recorded; positions after everything
        ingested) were in it, without changing anything.

        Returns the outcomes of `new`, and every recorded event that would become an
        anomaly (an event that was valid where it stood and no longer would be): a
        decision placed in the past must not invalidate what is already recorded.
        """
        first = min((rec.time, rec.position) for rec in new)
        start, saved = self._snapshot_before(first)
        with_new = self._fresh(saved)
        without = self._fresh(saved)
        mine = {rec.position for rec in new}
        timeline = heapq.merge(self._reader(start, self.position, None),
                               sorted(new, key=lambda r: (r.time, r.position)),
                               key=lambda r: (r.time, r.position))
        outcomes: list[Outcome] = []
        conflicts: list[Conflict] = []
        for rec in timeline:
            after = apply_recorded(with_new, rec)
            if rec.position in mine:
                outcomes.append(after)
                continue
            before = apply_recorded(without, rec)
            if after.anomaly and not before.anomaly:
                conflicts.append(Conflict(rec.position, rec.id, rec.type, rec.time,
                                          after.reason or "anomaly"))
        return outcomes, conflicts

    # -- the past ----------------------------------------------------------------------

    def state_at(self, time: int) -> Ledger:
        """A ledger of every ingested event with event time <= `time` (a throwaway copy)."""
        if time >= self.ledger.last[0]:
            return restore(snapshot(self.ledger))
        start, ledger = self._restore_before((time + 1, 0))
        folded = 0
        for rec in self._reader(start, self.position, time):
            apply_recorded(ledger, rec)
            folded += 1
        if folded >= self._min_every:
            self._keep_state_at(ledger)
        return ledger

    def _keep_state_at(self, ledger: Ledger) -> None:
        """Keep a state `state_at` folded far to make, as a snapshot at its last event:
        the snapshots are dense only near the head (they thin out into the past), so an
        auditor's questions about the past each refolded tens of thousands of events,
        and the next question near this time now starts here. Like every snapshot it is
        dropped, or marked stale for an account, when a late event lands before it."""
        key = ledger.last
        keys = self._snap_keys
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            return
        keys.insert(at, key)
        self._snap_states.insert(at, snapshot(ledger))
        self._snap_stale.insert(at, frozenset())
        if len(keys) > self._max_snapshots:
            self._thin_snapshots()


def fold(events: Iterable[Recorded]) -> Iterator[tuple[Recorded, Outcome, Ledger]]:
    """Fold events given in canonical order into a fresh ledger, yielding each outcome."""
    ledger = Ledger()
    for rec in events:
        yield rec, apply_recorded(ledger, rec), ledger
