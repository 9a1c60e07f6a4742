"""One facade's connection to a journal: catch up, decide, append, in one transaction.

Both facades decide the same way: under the journal's lock for the accounts involved,
ingest every event other writers recorded since we last looked, let the caller build the
events from that state (raising, and so appending nothing, when the call is invalid),
append them in the same transaction, then ingest them. The fold decides their outcomes.

Why this is linearizable per account, on every backend (docs/operations.md has the
long version): the lock is taken first, inside the transaction, and only then is the
journal read, so the read sees every decision committed before ours on the accounts we
hold; no other decision can append to them until we commit (an import, which holds
the queue and the head but not the accounts' keys, can: a decision whose append lands
after events of its accounts it did not read rolls back and is made again). On
PostgreSQL the locks are `pg_advisory_xact_lock` per account (different accounts never
wait for each other, only for the short append on the journal head row); on SQLite
`BEGIN IMMEDIATE` (one writer).
`decide` also refuses to append to an account it does not hold: if `build` produces an
event for an account outside `locks` (a caller whose lock list came from a stale
projection), that lock is taken and the decision is made again on the fresh state.

`decide` hands `build` a `Draft` (the state to decide on, and how to make events and
read the live time for this one decision) and returns a `Decision`, a frozen value: the
events recorded and the fold's outcome of each. Nothing of a decision stays on the
session once it returns.

Retries: `decision(facade, event_id=...)` gives the next decision a caller-chosen event
id. If that id is already recorded (the first attempt committed, but its answer was lost
with the connection), the command is rebuilt on the state it was first decided on and
the journal's idempotent append returns the original records: the caller gets the
original outcome and nothing is appended twice. A different command under a used id is
an `IdempotencyConflict`. A retry of a decision this session made itself (the usual
case: the same process retries after a lost answer) skips the rebuild: the session
remembers, for its recent decisions, the command and the events it recorded, and an equal
command takes those events; the outcomes come from the projection, which keeps the recent
ones current as late events re-project them.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import os
import threading
from collections.abc import Callable, Container, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn

from eventstore import (
    ChainBroken,
    IdempotencyConflict,
    JournalLike,
    LockOrderConflict,
    MemoryJournal,
    NewEvent,
    NotAJournalURL,
    RecordedEvent,
    Transaction,
)
from eventstore.appending import describe
from eventstore.backend import FIRST, SHARED
from eventstore.errors import rewritten_under, went_back
from eventstore.hashing import GENESIS_HASH, canonical_json
from projections.anchors import hash_at
from projections.bulk import paused_gc
from projections.errors import LedgerError
from projections.events import DomainEvent, require_name, require_non_negative_int
from projections.exactnames import check_event_id, check_event_names
from projections.figures import Figures, HeadFigures
from projections.ledger import AccountState, JobState, Ledger
from projections.outcomes import Outcome, Revision
from projections.personal import journal_event
from projections.projector import Projector, Recorded
from projections.replay import Lean, lean_records
from projections.reversals import reversed_ids

JournalArg = JournalLike | str | None

QUEUE = "*scheduler-queue*"
"""Lock key of the job queue: start_next holds it alone; every other decision, and every
import, holds it shared (with its accounts' keys), so decisions on different accounts run
side by side, and start_next picks on a journal that nobody appends to meanwhile: a
late grant or usage report to any account can re-decide which jobs are pending. Its name
begins with `*`: the journal takes such a key before every other, shared or whole, so a
holder of the whole queue never holds another key a sharer of it waits for."""
QUEUE_SHARED = f"{SHARED}{QUEUE}"
_QUEUE_KEYS = frozenset({QUEUE, QUEUE_SHARED})


def job_key(job_id: str) -> str:
    """Lock key of a job id, held by its submit: ids are unique in the journal, not per
    account, so two submits of one id to two accounts must take turns. A tab keeps it
    apart from every account's key (names are printable)."""
    return f"job\t{job_id}"


def with_queue(locks: Iterable[str]) -> list[str]:
    """`locks` and the queue's key, shared unless they hold it exclusively (start_next),
    sorted: the keys a decision (or a batch of them) writing to the journal holds."""
    keys = set(locks)
    if QUEUE not in keys:
        keys.add(QUEUE_SHARED)
    return sorted(keys)


def lock_key(name: str) -> str:
    """The journal's lock key for what a decision holds: the queue's keys as they are, an
    account's name as it is, unless the journal would read the name as a key in shared
    mode (`shared:NAME` locks NAME, shared) or take it first, as it takes the queue's
    (`*...`): such an account takes its name behind a prefix, so that it holds a lock of
    its own, exclusively, and never another account's, and comes after the queue in
    every transaction's order (start_next takes the picked job's account after the
    queue; a decision on the account that held it while waiting for the queue would
    deadlock with it)."""
    if name in _QUEUE_KEYS or not name.startswith((SHARED, FIRST)):
        return name
    return f"account:{name}"


# `decide` retakes missing locks and rebuilds; a build that keeps naming new accounts
# after this many rounds is a bug in the caller, not a reason to loop forever.
_MAX_LOCK_ROUNDS = 8
# A retry rebuilds the state of the accounts it held from their own events; with more
# accounts than this (start_next on a large ledger), one fold of the journal is cheaper.
_MAX_RETRY_STREAMS = 32
# A retry finds the reversals known before it by looking each one up, up to this many.
_MAX_REVERSAL_LOOKUPS = 256
# Decisions a session remembers for retries (at least this many, at most twice as many).
_REMEMBERED_DECISIONS = 1024


class _Overtaken(Exception):
    """A decision's append found events of its accounts that it had not read (see
    `LedgerSession._not_overtaken`): its transaction rolls back."""


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """One decision as the journal holds it: each event it recorded, with the fold's
    outcome of it, in order. A value computed by the fold, never stored.

    `replayed`: the decision's event id was already recorded (a retry after a lost
    answer): these are the original events, their outcomes on the current timeline,
    and nothing was appended. A decision that had nothing to record (cancelling a
    cancelled job, start_next with no startable job) has no events.
    """

    events: tuple[DomainEvent, ...]
    outcomes: tuple[Outcome, ...]
    replayed: bool = False

    @property
    def outcome(self) -> Outcome:
        """The outcome of the first (usually the only) event."""
        if not self.outcomes:
            raise LookupError("this decision recorded no event")
        return self.outcomes[0]


class Draft:
    """The decision being built: what `decide` hands its `build` function.

    `ledger` is the state to decide on: caught up under the decision's locks, or, when
    the decision is a retry of one already recorded, the state it was first decided on.
    `event()` makes the decision's journal events (their ids: the caller's event id,
    then id/2, id/3..., or fresh ones) and `now()` the time of a live decision. A draft
    lives for one build: nothing of it outlives the decision.
    """

    __slots__ = ("_id_base", "_ids", "_session", "ledger", "live", "now_used", "original")

    def __init__(self, session: LedgerSession, ledger: Ledger, event_id: str | None,
                 original: RecordedEvent | None = None, *, live: bool = False) -> None:
        self.ledger = ledger
        # Decided now (`decision(..., live=True)`): every event the build makes is moved
        # up to the latest event time when it is recorded, so none lands in the past.
        self.live = live
        self._session = session
        self._id_base = event_id
        self._ids = 0
        # For a retry: the event recorded under the decision's id, which the rebuilt
        # events must equal (the append compares them).
        self.original = original
        self.now_used: int | None = None  # the live time this build used, if any

    @property
    def replaying(self) -> bool:
        """Whether this build rebuilds a decision already recorded (a retry)."""
        return self.original is not None

    def new_id(self) -> str:
        """The next event id: the caller's id, then id/2, id/3...; else a fresh one."""
        if self._id_base is None:
            return self._session.new_id()
        if not self._ids and self.original is None:
            check_event_id(self._id_base)
        self._ids += 1
        return self._id_base if self._ids == 1 else f"{self._id_base}/{self._ids}"

    def discard(self) -> None:
        """Forget the events made so far (a candidate tried and dropped): the next one
        takes the decision's first id again."""
        self._ids = 0

    def event(self, time: int, event: DomainEvent,
              stream: str) -> tuple[NewEvent, DomainEvent]:
        """A new journal event for `event` at `time`, paired with the event itself."""
        if self.original is None:  # a retry records nothing new
            check_event_names(self.ledger, event)
        # Personal fields (user, memo) go beside the record, so that they can be erased.
        return journal_event(self.new_id(), stream, time, event), event

    def now(self, clock_time: int) -> int:
        """Event time of a live decision: the later of the clock and the latest event
        time applied (read under the decision's locks, after catching up, so it includes
        every event recorded before this decision on the accounts it holds). When the
        decision is rebuilt for a retry: the time it was first made."""
        if self.original is not None:
            return self.original.time
        when = max(clock_time, self._session.ledger.last[0])
        self.now_used = when
        return when


Built = Sequence[tuple[NewEvent, DomainEvent]]
Build = Callable[[Draft], Built]


@dataclasses.dataclass(frozen=True, slots=True)
class _Pinned:
    """What `decision()` asked of the next decision of one session."""

    session: LedgerSession
    event_id: str | None
    live: bool


# Per thread (and task): a pin never reaches another thread's decision.
_PINNED: ContextVar[_Pinned | None] = ContextVar("gpu_credits_pinned", default=None)


def open_journal(journal: JournalArg) -> JournalLike:
    """None: a plain in-memory journal; a string: a database URL; else the journal itself."""
    if journal is None:
        return MemoryJournal()
    if isinstance(journal, str | os.PathLike):  # a path is refused there, with its URL
        from eventstore import Journal  # type: ignore[attr-defined,unused-ignore]

        opened: JournalLike = Journal(journal)  # type: ignore[arg-type,unused-ignore]
        return opened
    if not all(hasattr(journal, name) for name in ("read", "transaction", "head", "url")):
        raise NotAJournalURL(f"journal must be None (in memory), a database URL such as "
                             f"'sqlite:///ledger.db', or an eventstore journal; "
                             f"got {journal!r}")
    return journal


def _in_order_after(recorded: Sequence[RecordedEvent], last: tuple[int, int]) -> bool:
    """Whether events (in position order) land on the timeline in that order, all after
    `last`, the (time, position) of the last event applied: each event alone then folds
    in where the batch would."""
    previous = last
    for rec in recorded:
        here = (rec.time, rec.position)
        if here <= previous:
            return False
        previous = here
    return True


def _expires_by(new: NewEvent, time: int) -> bool:
    """Whether `new` is a grant whose credits expire at or before `time`."""
    expiry = new.payload.get("expiry") if new.type == "grant" else None
    return isinstance(expiry, int) and expiry <= time


class LedgerSession:
    """A projection kept current with one journal, and the way decisions are appended."""

    def __init__(self, journal: JournalArg) -> None:
        self.journal = open_journal(journal)
        self._head_figures = HeadFigures()
        # Only this process writes an in-memory journal, so its head tells all.
        self._in_memory = self.journal.url is None
        self.projector = Projector(self._read_canonical, older=self._checkpoint_before,
                                   locate=self._locate, account_reader=self._read_account)
        self.lock = threading.RLock()
        # (position, chain hash) of the last event known to chain from the start or from
        # a checkpoint: reads go on from there, checked (a stored journal only).
        self._verified: tuple[int, str] = (0, GENESIS_HASH)
        # `written` moves it from the committer's thread, which must not wait for `lock`
        # (held by a batch decided ahead that waits for this one's commit).
        self._verified_lock = threading.Lock()
        # The recent decisions this session recorded under a caller's id, with the
        # command that made them: a retry of the same command answers from them instead
        # of rebuilding its accounts' state from their whole history.
        self._decided: dict[str, tuple[Hashable, Built]] = {}
        # To keep a reversed submit's job id taken: each reversed event looked up once
        # (the job it submitted, None for another event), the submits by job, and which
        # reversals they were read from (reversals are rare: a rescan when one comes).
        self._reversed_jobs: dict[str, str | None] = {}
        self._reversed_submits: dict[str, str] = {}
        self._reversals_read: tuple[int, str | None] = (0, None)
        # A journal in memory too: one a simulator's processes share holds checkpoints
        # its service saved, and a restart opens from them as it would from a database.
        self._resume_from_checkpoint()
        self._open()

    def _resume_from_checkpoint(self) -> None:
        # A large journal opens from its newest checkpoint instead of a full replay; the
        # catch-up puts the events recorded after it in their places, late ones too.
        from projections.checkpoint import resume_point

        found = resume_point(self.journal)
        if found is not None:
            info, ledger = found
            self.projector.start_from(ledger, info.position)
            self._verified = (info.position, hash_at(self.journal, info.position))

    def _checkpoint_before(self, key: tuple[int, int]) -> tuple[tuple[int, int], Ledger] | None:
        from projections.checkpoint import checkpoint_before

        # Only a state of events this projection has seen: a replay running elsewhere
        # may have saved one further on.
        return checkpoint_before(self.journal, key, self.projector.position,
                                 self.projector.ledger.reversals)

    def _locate(self, event_id: str) -> tuple[int, int] | None:
        rec = self.journal.get(event_id)
        return None if rec is None else (rec.time, rec.position)

    def _read_canonical(self, after: tuple[int, int], to_position: int,
                        to_time: int | None) -> Iterable[Lean]:
        # The payloads as stored text: the fold decodes a text several times faster than
        # a decoded mapping, which the read would have decoded first (refolds read here).
        return lean_records(self.journal, after=after, to_position=to_position,
                            to_time=to_time, order="canonical")

    def _read_account(self, stream: str, after: tuple[int, int],
                      to_position: int) -> Iterable[Lean]:
        # As stored text, as `_read_canonical` reads: a late event's refold decodes each
        # of its account's events, and a decoded mapping takes the slow way there.
        return lean_records(self.journal, stream=stream, after=after,
                            to_position=to_position, order="canonical")

    @property
    def ledger(self) -> Ledger:
        """The projection as it stands, NOT caught up: read through `reading()` instead."""
        return self.projector.ledger

    def figures(self, account: AccountState | None, time: int) -> Figures:
        """`Figures.of(account, time)`, read inside `reading()`. For an account of the
        projection as it stands, what expired since its last event is kept while nothing
        changes: a read at a time after many batches expired walked them all, each time."""
        ledger = self.projector.ledger
        if account is None or ledger.accounts.get(account.name) is not account:
            return Figures.of(account, time)
        return self._head_figures.of(account, time, (id(ledger), self.projector.position))

    @contextmanager
    def reading(self) -> Iterator[Ledger]:
        """The caught-up projection, for the duration of the block: the one way to read.

        Takes the lock (so no decision of this process changes it meanwhile), catches up
        with what every writer recorded, then yields the ledger. Read it inside the block
        only (copy out what you need): a late event arriving later replaces the object::

            with session.reading() as ledger:
                job = ledger.jobs.get("j1")
        """
        with self.lock:
            self.catch_up()
            yield self.projector.ledger

    def job_before(self, event_id: str, job_id: str) -> JobState | None:
        """Job `job_id` as the journal stood just before the event recorded under
        `event_id` (its account's events then): what a decision about it saw, for an
        answer to give again once the job has left the timeline (its submit reversed)."""
        original = self.journal.get(event_id)
        if original is None:
            return None
        return self._state_before(original, {original.stream}).jobs.get(job_id)

    def reversed_submit_of(self, job_id: str, reversals: dict[str, str]) -> str | None:
        """The id of a recorded submit of `job_id` that one of `reversals` (reversal id
        -> the id it names) took out of the timeline, if any: job ids are unique for
        the journal's lifetime, and a reversal of that reversal brings the submit back."""
        # Reversals are added in order: their count and the newest say if any came.
        seen = (len(reversals), next(reversed(reversals), None))
        if seen != self._reversals_read:
            cache = self._reversed_jobs
            # A journal that batches decisions (the service's) reads a committed record
            # outside the batch: this lookup is no retry's.
            lookup = getattr(self.journal, "committed", self.journal.get)
            submits: dict[str, str] = {}
            for target in reversals.values():
                if target not in cache:
                    rec = lookup(target)
                    job = rec.payload.get("job") if rec is not None \
                        and rec.type == "submit" else None
                    cache[target] = job if isinstance(job, str) else None
                if (job := cache[target]) is not None:
                    submits.setdefault(job, target)
            self._reversed_submits, self._reversals_read = submits, seen
        return self._reversed_submits.get(job_id)

    def new_id(self) -> str:
        """A fresh event id that no one can foresee.

        An event id is an idempotency key: a caller who knew the id of a decision not made
        yet (a session prefix and a counter, seen in an earlier answer) could record an
        event under it first, and the decision would then be a conflict its caller never
        caused or, with the same content, a retry that appends nothing. 128 random bits
        per id: 2 us a draw on the development machine (the counter took 0.5), nothing
        beside a decision."""
        return os.urandom(16).hex()

    def catch_up(self, keep: Container[int] = frozenset()) -> dict[int, Outcome]:
        """Ingest everything recorded since the last look (other writers included); the
        outcomes of the positions in `keep`."""
        with self.lock:
            if self._in_memory and self.journal.head() == self.projector.position:
                return {}
            position = self.projector.position
            events = self._read_checked(position)
            if self._in_memory:
                # Only this process appends: events it did not ingest as it appended
                # them came from another facade on the journal, an import among them.
                batches = self._batches_after(position) if (
                    self.journal.head() > position + 1) else None
                return self.projector.catch_up(events, keep, batches)
            first = next(iter(events), None)
            if first is None:
                return {}
            # Events appended together are one step of knowledge, as a replay takes them:
            # a batch of late events (an import) re-projects once (a facade opening a
            # journal of 2,100 late events took 74 s event by event, a replay 0.13 s).
            return self.projector.catch_up(itertools.chain((first,), events), keep,
                                           self._batches_after(position))

    def _open(self) -> None:
        """The first look, from the starting point (a checkpoint, or the journal's start):
        everything recorded after it is taken as one step of knowledge, as one batch.

        Late events among it take their places at once, as in a fold. Taken a recorded
        batch at a time, each batch of late events re-projected its accounts as it did
        when it arrived: 17.8 s to open 60,000 events with one in twenty late, against
        1 s for a fold. What those re-projections revised was reported to whoever read
        the journal then; this session has reported nothing yet, so its `revisions` start
        empty, whatever checkpoint it started from (a replay lists the journal's)."""
        with self.lock:
            position = self.projector.position
            events = iter(self._read_checked(position))
            first = next(events, None)
            if first is None:
                return
            # Events recorded after this head (by another writer, meanwhile) are taken
            # one at a time: what they revise is still cleared below, being part of the
            # same first look.
            self.projector.catch_up(itertools.chain((first,), events), (),
                                    {first.position: self.journal.head()})
            self.projector.revisions.clear()

    def ingest_appended(self, recorded: Sequence[RecordedEvent],
                        events: Sequence[DomainEvent] | None = None) -> bool:
        """Apply events the caller just appended, as the journal returned them, without
        reading them back, when they directly follow the projection (nobody wrote in
        between, none was recorded before). False: nothing applied; catch up instead.

        `events`: the domain event of each record, when the caller has them (as a
        decision has its own), so the fold does not decode the payloads again."""
        with self.lock:
            start = self.projector.position
            if not recorded or [r.position for r in recorded] != list(
                    range(start + 1, start + 1 + len(recorded))):
                return False
            if len(recorded) > 1 and not _in_order_after(recorded,
                                                         self.projector.ledger.last):
                # Appended together, landing before what is applied or out of time
                # order: one step of knowledge, re-projected once for the whole batch
                # (as a replay takes it), not once per event: 3,000 late events cost
                # two minutes event by event.
                with paused_gc():
                    self.projector.ingest_batch(recorded)
            elif events is not None and len(events) == len(recorded):
                with paused_gc():
                    for rec, event in zip(recorded, events, strict=True):
                        self.projector.ingest(rec, event)
            else:
                self.projector.catch_up(recorded)
            if self._verified[0] == start and len(recorded[-1].hash) == 64:
                # The journal hashed these from the verified head: they chain.
                self._verified = (recorded[-1].position, recorded[-1].hash)
            return True

    def written(self, recorded: Sequence[RecordedEvent]) -> None:
        """Records this session decided ahead, as the journal committed them (with their
        hashes, which a group commit learns only then): they chain from the verified
        point when they follow it, which then moves past them. So the next look at the
        journal starts from the hash at what this projection folded, and a journal that
        holds another history there (restored from a copy under the service, then
        written on) is refused there, never folded on top of this one."""
        if not recorded or len(recorded[-1].hash) != 64:
            return
        with self._verified_lock:
            if self._verified[0] == recorded[0].position - 1:
                self._verified = (recorded[-1].position, recorded[-1].hash)

    @property
    def verified(self) -> tuple[int, str]:
        """(position, chain hash) of the last record known to chain from the start or a
        checkpoint: where the next look at a stored journal continues from."""
        return self._verified

    def _read_checked(self, after_position: int) -> Iterable[Recorded]:
        """Events after `after_position` in arrival order; from a stored journal, each
        checked to chain from the last verified one (`ChainBroken` names the first altered
        position), so a facade never answers from an altered journal. From memory, with
        their payloads as stored text (see `_read_canonical`)."""
        if self._in_memory:
            return lean_records(self.journal, after_position=after_position,
                                order="position")
        return self._chained_from_verified(after_position)

    def _chained_from_verified(self, after_position: int) -> Iterator[RecordedEvent]:
        last = self._verified[0]
        try:
            for rec in self.journal.read_verified(after=self._verified):
                self._verified = (rec.position, rec.hash)
                last = rec.position
                if rec.position > after_position:
                    yield rec
        except ChainBroken as exc:
            if not exc.moved_under:
                raise
            # Restored or rewritten under this projection: the journal's words, and
            # what this reader can do about it, as a refused decision says.
            raise ChainBroken(exc.position, f"{exc}; {REOPEN}", moved_under=True) from None
        if last < after_position:
            # The journal ends before what this projection holds (restored from an
            # older copy under it): never go on answering from what it no longer has.
            raise went_back(last, after_position, REOPEN)

    def decide(self, locks: Iterable[str], build: Build, *, event_id: str | None = None,
               live: bool = False, reads_state: bool = True,
               command: Hashable | None = None) -> Decision:
        """Build events from the caught-up state and append them atomically; the decision.

        `build(draft)` returns each new journal event (made with `draft.event`) with its
        domain event, deciding on `draft.ledger`; it raises (and so nothing is appended)
        when the call is not valid on that state. It may be
        called more than once (when the lock of an account it writes to had to be taken
        and events arrived meanwhile): only its last result counts, so it must not keep
        anything from one call to the next.

        `event_id`: the id of the first event (further ones get `id/2`, `id/3`...). When
        it is already recorded, this is a retry: the original outcomes are returned and
        nothing is appended. `live`: every event's time is at least `now()` (see
        docs/semantics.md, "Time of live decisions"). Both default to what `decision()`
        set for this decision, if anything. `reads_state=False`: `build` ignores the
        ledger it is given (a grant, a usage report), so a retry needs no rebuilt state.
        `command`: everything that decides what `build` makes besides the state it reads
        and the clock (the call and its arguments, as a hashable value): a retry whose
        decision this session recorded under an equal command takes the events it
        recorded then, instead of rebuilding the state it was decided on.
        """
        with self.lock:
            pinned = _PINNED.get()
            if pinned is not None and pinned.session is self:
                _PINNED.set(None)  # for this one decision
                event_id = event_id if event_id is not None else pinned.event_id
                live = live or pinned.live
            if event_id is not None:
                require_name("event_id", event_id)
            held = with_queue(locks)
            # Inside another's transaction (a service batch's), a rollback is not ours.
            nested = getattr(self.journal, "in_transaction", lambda: False)()
            for attempt in range(_MAX_LOCK_ROUNDS):
                try:
                    outcome = self._decide_in(held, build, event_id, live, reads_state,
                                              command)
                except _Overtaken as exc:
                    if nested or attempt == _MAX_LOCK_ROUNDS - 1:
                        # Not ours to roll back and run again (a batch of the service's
                        # holds the transaction: it decides the batch again) or again
                        # and again overtaken: nothing of it is written.
                        raise LockOrderConflict(str(exc)) from None
                    continue
                if isinstance(outcome, Decision):
                    return outcome
                draft, built, recorded = outcome
                break
            else:  # pragma: no cover - the loop returns, breaks or raises
                raise AssertionError("unreachable")
            if command is not None and event_id is not None and not draft.replaying:
                self._remember_decision(event_id, command, built)
            fresh = [rec.position for rec in recorded]
            start = self.projector.position
            if fresh == list(range(start + 1, start + 1 + len(recorded))):
                # Nobody wrote in between: apply the events we hold, without re-reading.
                if len(recorded) > 1 and not _in_order_after(recorded,
                                                             self.projector.ledger.last):
                    # Appended together and landing before what is applied (an account
                    # opened in the past with its balance): one step of knowledge, as a
                    # replay and the revision log take the batch, so the revisions it
                    # causes name the batch's earliest event on the timeline, not
                    # whichever one came last.
                    with paused_gc():
                        outcomes = self.projector.ingest_batch(recorded)
                else:
                    outcomes = {
                        rec.position: self.projector.ingest(rec, event)
                        for rec, (_, event) in zip(recorded, built, strict=True)
                    }
                if recorded and self._verified[0] == start and len(recorded[-1].hash) == 64:
                    # The journal hashed these from the verified head: they chain. (A
                    # group commit answers before hashing: then the next read checks.)
                    self._verified = (recorded[-1].position, recorded[-1].hash)
            else:
                outcomes = self.catch_up(keep=set(fresh))
            self._invalidate_stale_checkpoints()
            told = self._as_told(recorded) if draft.replaying and recorded else None
            return Decision(tuple(event for _, event in built),
                            told or tuple(self._outcome(rec, outcomes) for rec in recorded),
                            replayed=draft.replaying)

    def _decide_in(self, held: list[str], build: Build, event_id: str | None, live: bool,
                   reads_state: bool, command: Hashable | None
                   ) -> Decision | tuple[Draft, Built, list[RecordedEvent]]:
        """One attempt of `decide` in a transaction of its own: the decision that recorded
        nothing, or what it built and recorded. `_Overtaken` (the transaction rolled
        back) when a writer that holds none of its keys appended to its accounts between
        its catch-up and its append."""
        with self.journal.transaction([lock_key(k) for k in held]) as tx:
            self._catch_up_in(tx)
            expect = getattr(tx, "expect_head", None)  # a SQL journal's transaction
            if expect is not None and self._verified[0] == self.projector.position > 0:
                # The head the append chains from must still hold what this projection
                # folded: a journal restored from an older copy and written on by another
                # process up to the same position holds another history there. Checked
                # with the head the append reads anyway, inside the transaction.
                expect(*self._verified)
            draft, built = self._build(build, event_id, live, held, reads_state,
                                       command)
            for _ in range(_MAX_LOCK_ROUNDS):
                # Only ever append to accounts we hold: a lock list computed from a
                # stale projection (or one that covers the decision but not the
                # accounts it writes to) is completed here; if anything was recorded
                # meanwhile, the decision is made again on the state as it stands
                # under the full set of locks.
                missing = sorted({new.stream for new, _ in built} - set(held))
                if not missing:
                    break
                # Joins ours: takes the keys.
                with self.journal.transaction([lock_key(k) for k in missing]):
                    held.extend(missing)
                if self._catch_up_in(tx):
                    draft, built = self._build(build, event_id, live, held,
                                               reads_state, command)
            else:
                raise RuntimeError(f"decision kept naming accounts it does not hold "
                                   f"after {_MAX_LOCK_ROUNDS} rounds: {held}")
            if not built:
                if draft.replaying:
                    assert event_id is not None
                    self._recorded_otherwise(event_id, "records nothing")
                return Decision((), (), replayed=draft.replaying)
            built = self._after_latest(built, draft.now_used)
            recorded = tx.append([new for new, _ in built])
            if not draft.replaying:
                if recorded and recorded[0].position <= self.projector.position:
                    # Appended where this projection already holds records: the journal
                    # went back under it (restored from an older copy). Refused, inside
                    # the transaction: a decision on what the journal no longer holds
                    # records nothing.
                    raise went_back(recorded[0].position - 1, self.projector.position,
                                    REOPEN)
                self._not_overtaken(tx, recorded, held)
        return draft, built, recorded

    def _not_overtaken(self, tx: Transaction, recorded: Sequence[RecordedEvent],
                       held: Sequence[str]) -> None:
        """Raise `_Overtaken` if events recorded between the catch-up and this append
        (which holds the journal's head now) belong to an account the decision holds,
        or to a job's own stream. Decisions on those accounts wait for the decision's
        keys, but an import holds none of them (only the queue, shared, and the head):
        its events landed unseen, and what was decided without them may not hold (a
        completion of a job the import completed, told success and recorded as an
        anomaly)."""
        if self._in_memory or not recorded:
            return
        start = self.projector.position
        first = recorded[0].position
        if first <= start + 1:
            return
        streams = set(held)
        for rec in tx.read(after_position=start, to_position=first - 1, order="position"):
            if rec.stream in streams or rec.stream.startswith("job:"):
                raise _Overtaken(
                    f"event {rec.id!r} at position {rec.position} ({rec.type} on "
                    f"{rec.stream!r}) was recorded, by a writer that holds none of this "
                    "decision's keys (an import), after the decision read its accounts: "
                    "nothing of it was written; run it again")

    def _recorded_otherwise(self, event_id: str, outcome: str) -> NoReturn:
        """Raise for a call under an id already recorded that, decided as the recorded
        event was, does not record it (`outcome`: it records nothing, as a start that
        finds no job at another time; or it fails, as a job's completion under the id of
        an event recorded before the job was submitted): the id names that event, so
        this is another request, not its retry."""
        old = self.journal.get(event_id)
        what = ("" if old is None else f" at position {old.position} with "
                + describe(old.stream, old.type, old.time, canonical_json(old.payload)))
        raise IdempotencyConflict(
            f"event id {event_id!r} is already recorded{what}; this call, decided as that "
            f"event was, {outcome}: it is another request, not a retry of that one; "
            "an id names one event forever: use a new id for a different request")

    def _catch_up_in(self, tx: Transaction) -> bool:
        """Ingest what others recorded, as `tx` sees it; whether there was anything."""
        if self._in_memory and tx.head() == self.projector.position:
            return False
        before = self.projector.position
        if self._in_memory:  # the transaction is the journal: see `_read_checked`
            self.projector.catch_up(self._read_checked(before))
        else:
            # From a SQL journal's own transaction, the record at the verified point comes
            # in the same query: a journal restored from an older copy and written on by
            # another process up to there or past it holds another record there, and
            # what follows it is not folded on top of this projection. (A service's
            # batch checks its appends' head instead, see `BatchJournal.chained_from`.)
            start = self._verified
            check = start[0] == before and hasattr(tx, "expect_head")
            events = tx.read(after_position=before - 1 if check and before > 0 else before,
                             order="position")
            folded: list[RecordedEvent] = []
            if check:
                events = _holding(events, start, folded)
            first = next(events, None)
            if first is None:
                # Nothing to catch up on (the usual case): not a look at the batches
                # either, which through the service's `BatchJournal` would write out the
                # batch it is deciding ahead.
                return False
            # Each batch one step of knowledge, as `catch_up` takes it: an import of late
            # events recorded since this projection last looked (another process's) is
            # re-projected once, not once per event. Event by event, a CLI decision
            # catching up on an import of 30,000 late lines held the write lock for
            # 416 s (on SQLite, every other writer's lock then timed out).
            self.projector.catch_up(itertools.chain((first,), events),
                                    batches=self._batches_after(before))
            if folded and folded[0].position == self.projector.position:
                # What it folded was read in position order from the verified point, each
                # record checked against its predecessor's stored hash and its own content
                # (`read` checks every row so), the first against the hash verified there:
                # it chains, and the verified point moves to the head this projection
                # holds. Left behind, the next decision would neither check the head it
                # appends to nor the record it last folded: a journal restored from a
                # copy taken before this catch-up and written on up to (or past) here
                # would be chained onto, and a read would fold the other history's
                # records on top of this one's.
                self._verified = (folded[0].position, folded[0].hash)
        return self.projector.position != before

    def _batches_after(self, position: int) -> dict[int, int]:
        """First position -> last of the batches recorded after `position` (committed
        ones: the caller's own appends, uncommitted, are in none, so each is its own)."""
        recorded = getattr(self.journal, "batches", None)  # (a view may not record them)
        return {} if recorded is None else {
            b.first: b.last for b in recorded(after_position=position)}

    def _build(self, build: Build, event_id: str | None, live: bool,
               held: Sequence[str], reads_state: bool = True, command: Hashable | None = None
               ) -> tuple[Draft, Sequence[tuple[NewEvent, DomainEvent]]]:
        """Run `build` on the caught-up state, or, for a retry, on the state it first saw
        (or take what this session recorded for the same command)."""
        original = self.journal.get(event_id) if event_id is not None else None
        if original is None:
            draft = Draft(self, self.projector.ledger, event_id, live=live)
            built = build(draft)
            return draft, [(self._live(new), e) for new, e in built] if live else built
        remembered = self._decided.get(original.id) if command is not None else None
        if remembered is not None and remembered[0] == command:
            # The same command decided here before: the events it recorded, exactly (the
            # idempotent append still compares them with the journal's).
            return Draft(self, self.projector.ledger, event_id, original), remembered[1]
        # A retry of a decision already recorded: rebuild it on the state it was
        # decided on, at the time it was decided, so the same command yields the
        # same events and the append below returns the original records.
        as_was = (self._state_before(original, {*held, original.stream})
                  if reads_state else Ledger())
        draft = Draft(self, as_was, event_id, original)
        try:
            built = build(draft)
        except LedgerError as exc:
            # The recorded event was decided on this very state, so its retry is decided
            # again without error. This call fails there: it is not that event's retry,
            # and what it would be refused for now (an unknown job, say) is beside the
            # point.
            self._recorded_otherwise(original.id, f"fails ({exc})")
        if not live:
            return draft, built
        return draft, [(self._as_recorded(new), e) for new, e in built]

    def _remember_decision(self, event_id: str, command: Hashable, built: Built) -> None:
        decided = self._decided
        decided[event_id] = (command, tuple(built))
        if len(decided) > 2 * _REMEMBERED_DECISIONS:
            # Remembered in the order decided: keep the newest half.
            self._decided = dict(itertools.islice(decided.items(),
                                                  len(decided) - _REMEMBERED_DECISIONS, None))

    def _state_before(self, original: RecordedEvent, streams: set[str]) -> Ledger:
        """The accounts `streams` as they stood for the decision recorded at `original`:
        every event of theirs recorded before it, folded in canonical order.

        Only those accounts: the decision held their locks and read nothing else, and a
        retry then costs their history, not the journal's.
        """
        before = original.position - 1
        if len(streams) > _MAX_RETRY_STREAMS:
            from projections.replay import fold_canonical

            return fold_canonical(self.journal, to_position=before)
        # As stored text (see `_read_account`): decoded by the fold's fast path.
        reads = [lean_records(self.journal, stream=s, to_position=before, order="canonical")
                 for s in sorted(streams)]
        ledger = Ledger(excluded=self._excluded_as_known(before))
        for rec in heapq.merge(*reads, key=lambda r: (r.time, r.position)):
            ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time, rec.payload)
        return ledger

    def _excluded_as_known(self, position: int) -> frozenset[str]:
        """The ids reversed as known at `position` (at most the projection's position):
        from the reversals the projection folded, those recorded by then. Reversals are
        rare corrections, so looking each one up costs far less than reading the journal
        to find them; with very many, the journal is read after all."""
        reversals = self.projector.ledger.reversals
        if not reversals:
            return frozenset()
        if len(reversals) > _MAX_REVERSAL_LOOKUPS:
            from projections.replay import excluded_as_known

            return excluded_as_known(self.journal, position)
        known = {}
        for reversal, target in reversals.items():
            rec = self.journal.get(reversal)
            if rec is not None and rec.position <= position:
                known[reversal] = target
        return reversed_ids(known)

    def _as_recorded(self, new: NewEvent) -> NewEvent:
        # A live event's time was decided when it was first recorded: take that one.
        rec = self.journal.get(new.id)
        return new if rec is None or rec.time == new.time else dataclasses.replace(
            new, time=rec.time)

    def _live(self, new: NewEvent) -> NewEvent:
        when = self.now(new.time)
        return new if when == new.time else dataclasses.replace(new, time=when)

    def _invalidate_stale_checkpoints(self) -> None:
        late = self.projector.late_times
        if late:
            from projections.checkpoint import invalidate_after

            invalidate_after(self.journal, min(late))
        late.clear()

    def _as_told(self, recorded: Sequence[RecordedEvent]) -> tuple[Outcome, ...] | None:
        """The outcomes of a retried decision's events as its first call was told them:
        as known when the last of them was recorded. None when nothing recorded since
        can have changed them (then they are the outcomes on the timeline now).

        What may have changed them is in their own accounts' streams (a late event, a
        void, a reversal reaching back all go to the account they change): an event
        recorded later that lands before one of them on the timeline, or any reversal.
        Then their accounts are folded again as known then, at the cost of those
        accounts' history, as a retry rebuilding its state pays."""
        last = max(rec.position for rec in recorded)
        latest = max(rec.time for rec in recorded)
        # A decision records its events on the one or two accounts it decided for.
        streams = sorted({rec.stream for rec in recorded})
        if not any(self._lands_before(latest, last, stream) for stream in streams):
            return None
        reads = [lean_records(self.journal, stream=s, to_position=last, to_time=latest,
                              order="canonical") for s in streams]
        ledger = Ledger(excluded=self._excluded_as_known(last))
        wanted = {rec.position for rec in recorded}
        told: dict[int, Outcome] = {}
        for rec in heapq.merge(*reads, key=lambda r: (r.time, r.position)):
            outcome = ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time,
                                            rec.payload)
            if rec.position in wanted:
                told[rec.position] = outcome
        return tuple(told[rec.position] for rec in recorded)

    def _lands_before(self, latest: int, last: int, stream: str) -> bool:
        """Whether an event of `stream` recorded after position `last` lands before event
        time `latest` on the timeline, or is a reversal."""
        since = self.journal.read(after_position=last, order="position", stream=stream)
        try:
            return any(rec.type == "reverse" or rec.time < latest for rec in since)
        finally:
            close = getattr(since, "close", None)  # a reader left early lets go of its rows
            if close is not None:
                close()

    def _outcome(self, rec: RecordedEvent, fresh: dict[int, Outcome]) -> Outcome:
        if rec.position in fresh:
            return fresh[rec.position]
        # An idempotent retry returned an event recorded before: recompute its outcome.
        return self.outcome_of(rec)

    def remembered_outcome(self, rec: RecordedEvent) -> Outcome | None:
        """The outcome of an already-recorded event on the current timeline, if the
        projection remembers it (the recent ones it folded itself); None otherwise."""
        if rec.position <= self.projector.position:
            return self.projector.remembered(rec.position)
        return None

    def outcome_of(self, rec: RecordedEvent) -> Outcome:
        """The outcome of an already-recorded event on the current timeline."""
        remembered = self.remembered_outcome(rec)
        if remembered is not None:
            return remembered
        ledger = self.projector.state_at(rec.time - 1) if rec.time > -(2**62) else Ledger()
        for later in self.journal.read(after=ledger.last, to_position=self.projector.position,
                                       to_time=rec.time, order="canonical"):
            outcome = ledger.apply_recorded(later.position, later.id, later.type, later.time,
                                            later.payload)
            if later.position == rec.position:
                return outcome
        raise LookupError(f"event {rec.id!r} at position {rec.position} is not on the timeline")

    def now(self, clock_time: int) -> int:
        """The time a live decision would take now: the later of the clock and the
        latest event time applied (inside a decision, use `Draft.now`)."""
        return max(clock_time, self.ledger.last[0])

    def _after_latest(self, built: Sequence[tuple[NewEvent, DomainEvent]],
                      when: int | None) -> Sequence[tuple[NewEvent, DomainEvent]]:
        """Live events move up to the journal's latest event time, read just before the
        append: another account's decision may have committed a later time since we
        caught up (workers' clocks disagree), and landing before it would make ours late
        and every process re-project. Safe: what we decided depends only on the accounts
        we hold, and nothing of theirs can have been recorded meanwhile. `when`: the
        live time the build used (None: it used none)."""
        if when is None or self._in_memory:
            return built
        latest = self.journal.max_time()
        if latest is None or latest <= when:
            return built
        if self.projector.excluded:
            # A reversed event (a time in milliseconds, say) does not count as latest.
            latest = max((rec.time for rec in self.journal.read(from_time=when + 1,
                                                                 order="position")
                          if rec.id not in self.projector.excluded
                          and rec.type != "reverse"), default=when)
            if latest <= when:
                return built
        if any(_expires_by(new, latest) for new, _ in built if new.time == when):
            # A grant that expires by then would expire before its own time: an event no
            # file may hold (its export would not import back). It stays where it was
            # decided, before the other account's event, at the cost of a re-projection.
            return built
        return [(dataclasses.replace(new, time=latest) if new.time == when else new, event)
                for new, event in built]

    def account_at(self, name: str, time: int) -> AccountState | None:
        """The account as it stood at `time` (live state when nothing of it came later)."""
        account = self.ledger.accounts.get(name)
        if account is None or account.last_time <= time:
            return account
        return self.projector.state_at(time).accounts.get(name)

    def opened_after(self, name: str, time: int) -> int | None:
        """The earliest event time after `time` at which account `name` stands opened, or
        None: for an error's hint, so read from the journal (the account's own events) and
        judged by the fold, never kept beside it."""
        times = sorted({rec.time for rec in self._read_account(
            name, (time, 2 ** 63 - 1), self.projector.position)})

        def opened(when: int) -> bool:
            account = self.account_at(name, when)
            return account is not None and account.opened

        # Nothing makes an opened account unopened later on the timeline: the first time
        # it stands opened is found by halving (False sorts before True).
        first = bisect.bisect_left(times, True, key=opened)
        return times[first] if first < len(times) else None

    def known_position(self, as_known_at: int) -> int:
        """Validate an as-known-at position: 0..head (past the head is an error, as on
        the command line: whoever asks about position 900 of a 300-event journal has the
        wrong journal or a typo, and an answer as of the head would hide it)."""
        require_non_negative_int("as_known_at", as_known_at)
        head = self.journal.head()
        if as_known_at > head:
            raise ValueError(f"as_known_at {as_known_at} is past the journal's head {head}; "
                             f"known positions are 0 to {head}")
        return as_known_at

    def ledger_as_known(self, as_known_at: int, time: int | None) -> Ledger:
        """The ledger from only the events recorded at positions <= as_known_at (and with
        event time <= `time`, if given): what was known then."""
        from projections.replay import ledger_at

        return ledger_at(self.journal, to_position=self.known_position(as_known_at),
                         to_time=time)

    @property
    def revisions(self) -> list[Revision]:
        return list(self.projector.revisions)

    def digest(self) -> str:
        with self.reading() as ledger:
            return ledger.digest()


class SessionFacade:
    """What both facades answer the same way from their session."""

    _session: LedgerSession

    @property
    def journal(self) -> JournalLike:
        """The journal the facade records to and answers from (shared with any other
        facade opened on it)."""
        return self._session.journal

    @property
    def revisions(self) -> list[Revision]:
        """What late events changed in outcomes already reported, in the order they came."""
        with self._session.reading():
            return self._session.revisions

    def ledger(self) -> Ledger:
        """The caught-up projected state (read-only by convention); prefer
        `session_of(facade).reading()`, which also holds the lock while you read."""
        with self._session.reading() as ledger:
            return ledger

    def state_digest(self) -> str:
        """SHA-256 of the projected state of the whole journal."""
        return self._session.digest()


def session_of(facade: object) -> LedgerSession:
    """The `LedgerSession` behind a facade (`GPUCreditTracker`, `Scheduler`) or itself."""
    if isinstance(facade, LedgerSession):
        return facade
    session = getattr(facade, "_session", None)
    if not isinstance(session, LedgerSession):
        raise TypeError(f"{type(facade).__name__} is not a gpu-credits facade "
                        "(GPUCreditTracker or Scheduler)")
    return session


@contextmanager
def decision(facade: object, *, event_id: str | None = None,
             live: bool = False) -> Iterator[None]:
    """Options for the next decision the facade makes in this block (one call).

    `event_id`: the id its (first) event is recorded under; a retry of the same call
    with the same id, after a lost connection or a crash, returns the original outcome
    and appends nothing::

        with decision(scheduler, event_id="req-42"):
            accepted = scheduler.submit("job-7", "team-a", cost=10, priority=1)

    `live`: the call is decided now, so its events take the later of their own time and
    the latest event time recorded (for `GPUCreditTracker.consume` / `grant`, whose
    timestamp is otherwise taken as given and may place the event in the past).

    The options belong to the calling thread: another thread's decisions on the same
    facade meanwhile are not affected.
    """
    token = _PINNED.set(_Pinned(session_of(facade), event_id, live))
    try:
        yield
    finally:
        _PINNED.reset(token)


def payload_summary(outcome: Outcome) -> dict[str, Any]:
    """A JSON-ready summary of an outcome, for facades' callers."""
    return {"position": outcome.position, "event_id": outcome.event_id, **outcome.reported()}


REOPEN = ("this projection holds what the journal no longer does: open a new facade "
          "(GPUCreditTracker, Scheduler) to work on the journal as it stands, after "
          "checking it against the newest anchor kept outside it (gpu-credits verify "
          "--anchor POSITION:HASH)")
"""What a decision refused on a journal restored or rewritten under its session can do."""


def _holding(records: Iterator[RecordedEvent], start: tuple[int, str],
             last: list[RecordedEvent]) -> Iterator[RecordedEvent]:
    """The records after `start`, read from it: the first, when it is the record at
    `start`, must hold the hash verified there (else ChainBroken: the journal was
    rewritten or restored and written on since), and is left out. A journal that ends
    before `start` yields nothing here: the append that follows says so. Once every
    record is taken, `last` holds the last one yielded (nothing if none was)."""
    first = next(records, None)
    if first is None:
        return
    rec: RecordedEvent | None = None
    if first.position == start[0]:
        if first.hash != start[1]:
            raise rewritten_under(start[0], REOPEN)
    else:
        rec = first
        yield first
    for rec in records:  # the last one stays in `rec`
        yield rec
    if rec is not None:
        last.append(rec)
