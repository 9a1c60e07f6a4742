"""`LedgerService`: the live projection of one service process, and its single writer.

The web view and the routes use it through `app.state.ledger`:

    service: LedgerService = request.app.state.ledger
    with service.reading() as ledger:      # caught up, consistent, read-only
        account = ledger.accounts.get("team-a")

`reading()` holds the projection's lock while the block runs: keep the block short (copy
what you need out of it). Decisions go through `await service.decide(command)`, which
queues the command for the group-commit writer and returns its answer after its commit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any, TypeVar

from starlette.requests import Request

from eventstore import CommitOutcomeUnknown, JournalLike, LookUp
from projections.ledger import Ledger
from projections.session import LedgerSession, lock_key, open_journal, with_queue
from tools.service.batching import BatchJournal, Deferred, PositionsMoved
from tools.service.bindings import REQUEST_LOCK, Bound, named_by
from tools.service.groupcommit import (
    Command,
    DecidedThenLost,
    GroupCommit,
    Prepared,
    run_commands,
)
from tools.service.problems import Unavailable, detail_of


def wall_clock() -> int:
    """Now, in whole seconds since the Unix epoch (the time of live decisions)."""
    return int(_time.time())


DEFER_PAUSE = 1.0
"""Seconds without deferred appends after another writer's events were seen."""

log = logging.getLogger("gpu_credits.service")

T = TypeVar("T")


_NEVER = 2**63


class Busy:
    """`read_at_once` could not answer without waiting."""


BUSY = Busy()
STALE = Busy()

CHECKPOINT_EVERY = 100_000
"""Events committed after the newest checkpoint before the service writes another while
it runs (and at least an eighth of the journal, so each costs about the same per event
at any size): a restart after a crash, or the rebuild after a failed commit, folds at
most about that many events after it."""

READ_FRESHNESS = 0.05
"""Seconds a read may answer without looking for other writers' events (see reading())."""



NOT_REMEMBERED = object()
"""What `RememberedAnswers.get` gives for a key it has no answer for."""


class RememberedAnswers:
    """The answers of recent keyed decisions, by key, with the command that got each.

    Only answers of committed decisions are kept, and a start that found nothing to
    start (`None`, a 204) though it recorded nothing; a refusal appended nothing, so its
    retry is decided again. An answer is given only for the very command that got it:
    the same key with another command goes to the writer, which refuses it (409) when
    the key is recorded. A remembered answer stands even once a late event or a
    reversal revised its outcome: a retry is answered what the request was answered
    (the revision is listed in /v1/revisions). A retry this process no longer remembers
    is rebuilt from the journal, as known when its event was recorded: the same answer."""

    def __init__(self, size: int = 10_000) -> None:
        self._items: OrderedDict[str, tuple[Command, dict[str, Any] | None]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str, command: Command) -> Any:
        """The answer `command` got under `key` (a dict, or None for a 204), if this
        process remembers it; else `NOT_REMEMBERED`."""
        with self._lock:
            found = self._items.get(key)
        if found is None or found[0] != command:
            return NOT_REMEMBERED
        return found[1]

    def put(self, key: str, command: Command, answer: dict[str, Any] | None) -> None:
        """Remember `answer`, the committed decision of `command` under `key`. Nothing
        takes the place of an answer kept (the first answer given stands: a copy of the
        request queued behind it was answered as a retry; a start's 204 is bound to its
        key in the journal, so a copy queued after it is 204 too)."""
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (command, answer)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Answer every key from the journal from now on."""
        with self._lock:
            self._items.clear()

    def forget(self, key: str) -> None:
        """Answer `key` from the journal from now on."""
        with self._lock:
            self._items.pop(key, None)


class LedgerService:
    """One journal, its live projection, and the group-commit writer deciding on it."""

    def __init__(self, journal: JournalLike | str | None, *,
                 clock: Callable[[], int] | None = None, allow_far_times: bool = False,
                 max_batch: int = 512, defer_appends: bool = True,
                 checkpoint_every: int | None = CHECKPOINT_EVERY,
                 owns_process: bool = False) -> None:
        """`owns_process`: the service is what its process is for (`gpu-credits serve`),
        so what its start leaves alive lives as long as the process (see `start`)."""
        if checkpoint_every is not None and (type(checkpoint_every) is not int
                                             or checkpoint_every < 1):
            raise ValueError(f"checkpoint_every must be a positive integer or None (never), "
                             f"got {checkpoint_every!r}")
        self.journal = open_journal(journal)
        self.checkpoint_every = checkpoint_every
        self.owns_process = owns_process
        # The position from which the next checkpoint is due (see `_checkpoint_if_due`).
        self._checkpoint_due = _NEVER
        # Write a batch's decisions in one append when no other writer is active (see
        # tools/service/batching.py); False: one append per decision, always.
        self.defer_appends = defer_appends
        self._defer_after = 0.0
        # The journal as the session and the commands see it inside a batch.
        self.batching = BatchJournal(self.journal)
        self.batching.chained_from = self._verified_point
        self.clock = clock or wall_clock
        self.allow_far_times = allow_far_times
        self._session: LedgerSession | None = None
        self._stale = False
        self._froze = False  # `start` froze the projection out of the collector's passes
        self._caught_up_at = -1.0
        self._load_lock = threading.Lock()
        # Why the last load failed, while it is retried (a broken chain names its
        # position): what a request answered 503 meanwhile is told, with the Retry-After
        # of that cause (`problems.retry_after` reads it).
        self.load_error: BaseException | None = None
        self.ready = threading.Event()
        self.stopping = False
        self._refreshing: Future[None] | None = None
        self._refresh_lock = threading.Lock()
        # Batches decided ahead whose decisions the projection holds but the journal
        # does not yet (no read answers while there are any), and reads waiting for that.
        self._uncommitted = 0
        self._readers = 0
        self._committed = threading.Condition()
        self._ahead_base = -1  # the head the batch being written starts from
        self.writer = GroupCommit(self._run_batch, self.reset, max_batch=max_batch,
                                  pause=self._reads_wait, context=self._keeping_connection)
        self.answers = RememberedAnswers()

    def _verified_point(self) -> tuple[int, str] | None:
        """Where the live projection's last look at the journal verified it: what the
        writer's appends must chain from (see `BatchJournal.chained_from`)."""
        session = self._session
        return None if session is None or self._stale else session.verified

    def _keeping_connection(self) -> AbstractContextManager[object]:
        """Held by the writer's threads: each runs one short transaction after another,
        on a connection of its own rather than one checked out of the pool each time."""
        keep = getattr(self.journal, "keeping_connection", None)  # a SQL journal's
        return keep() if keep is not None else nullcontext()

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Build the projection (from the newest valid checkpoint, then the journal's
        tail), start the writer, and be ready. A journal that no longer holds its last
        verified point (its tail cut, or its chain rewritten since) raises ChainBroken:
        the service does not answer from it, as no command does."""
        from projections.anchors import check_chain

        check_chain(self.journal)
        self._load()
        self.load_error = None
        if self.owns_process:
            # The projection, the imports and the app live as long as the process: leave
            # them out of the cyclic collector's passes, which otherwise walk every one of
            # them during whichever request triggers a full pass. (What they free by
            # reference counting is still freed.) What the load left behind goes first.
            # A service sharing its process (a test's, an embedding application's) does
            # not: it would freeze others' garbage for good, and its full pass here
            # walks everything they hold.
            gc.collect()
            gc.freeze()
            self._froze = True
        self.writer.start()
        self.ready.set()

    def stop(self) -> None:
        """Finish the batch in flight and what is queued; then accept no more decisions,
        and leave a checkpoint so the next start-up folds only what comes after."""
        self.stopping = True
        self.writer.stop()
        self._checkpoint("at shutdown")

    def _checkpoint(self, when: str) -> None:
        """Save the projection as a checkpoint unless the newest one is as recent; only
        between batches (nothing decided that is not committed)."""
        session = self._session
        if session is None or self._stale or self.writer.failure is not None:
            return  # (a stopped writer may have left decisions it never committed)
        from projections.checkpoint import CHECKPOINT, save_checkpoint, thin_checkpoints

        try:
            with session.lock:
                session.catch_up()
                position = session.projector.position
                newest = max((i.position for i in self.journal.snapshots(CHECKPOINT)),
                             default=0)
                if position > newest:
                    started = _time.perf_counter()
                    if save_checkpoint(self.journal, session.ledger, position) is not None:
                        newest = position
                        # Each stop saves one: a service restarted often piled them up.
                        thin_checkpoints(self.journal, self.checkpoint_every or CHECKPOINT_EVERY)
                        log.info("checkpoint %s at position %d in %.2f s", when, position,
                                 _time.perf_counter() - started)
                self._schedule_checkpoint(newest)
        except Exception as exc:  # a cache: a failure to write one is only a slower start
            log.warning("no checkpoint %s: %s: %s", when, type(exc).__name__, exc)
            self._schedule_checkpoint(session.projector.position)  # try again later

    def _schedule_checkpoint(self, newest: int) -> None:
        """The next checkpoint is due once this many events lie beyond `newest`."""
        every = self.checkpoint_every
        if every is None:
            self._checkpoint_due = _NEVER
        else:
            self._checkpoint_due = newest + max(every, newest // 8)

    def _checkpoint_due_now(self) -> bool:
        session = self._session
        return session is not None and session.projector.position >= self._checkpoint_due

    def checkpoint_if_due(self) -> None:
        """Save a checkpoint now if one is due, on the caller's thread: for a caller that
        runs the writer's turns itself (`GroupCommit.commit_in_turn`), between batches."""
        if self._checkpoint_due_now():
            self._checkpoint("while running")

    def _checkpoint_if_due(self) -> None:
        """Called by the writer before each batch: queue a checkpoint to be written
        between two batches once enough events were committed since the newest."""
        if self._checkpoint_due_now():
            self._checkpoint_due = _NEVER  # one at a time
            self.writer.call(partial(self._checkpoint, "while running"))

    def close(self) -> None:
        """Release the database connections."""
        self.journal.close()

    def _load(self, *, only_if_stale: bool = False) -> None:
        with self._load_lock:
            if only_if_stale and not self._stale:
                # Rebuilt by another thread while this one waited: a second rebuild would
                # fold the journal's tail again for nothing (and replace the projection
                # the writer is deciding on).
                return
            replaced = self._session is not None
            # (Its position only: a reference would keep the replaced projection alive.)
            held = -1 if self._session is None else self._session.projector.position
            # Opening a session resumes from the newest valid checkpoint and catches up.
            self._session = LedgerSession(self.batching)  # type: ignore[arg-type,unused-ignore]
            if self._session.projector.position < held:
                # The journal holds less than the projection replaced (restored from an
                # older copy under the service, or a batch that did not commit): a
                # remembered answer may name a record it no longer has. A retry is
                # decided from the journal instead, as by a restarted process.
                self.answers.clear()
            self._stale = False
            if replaced and self._froze:
                # The projection replaced was frozen out of the collector's passes (see
                # `start`), and a session holds reference cycles: frozen, it would never
                # be freed, and each rebuild would keep a whole projection alive. Only a
                # service that froze its own does this: a full pass over everything in
                # the process (and `gc.get_freeze_count`, a walk of what is frozen) is
                # seconds for a large one, and a projection another froze is not ours
                # to thaw (the simulator's services, and tests, share a process).
                gc.unfreeze()
                gc.collect()
                gc.freeze()
            if self.checkpoint_every is not None:
                from projections.checkpoint import CHECKPOINT

                self._schedule_checkpoint(max(
                    (i.position for i in self.journal.snapshots(CHECKPOINT)), default=0))

    def reset(self) -> None:
        """Rebuild the projection from the journal: after a batch that did not commit, it
        holds decisions the journal does not. Until this succeeds, nothing is served."""
        # Stale first: a read woken below must find this projection stale, not read the
        # decisions it holds that never committed.
        self._stale = True
        with self._committed:
            self._uncommitted = 0  # what was decided ahead is gone with the projection
            self._committed.notify_all()
        self._ahead_base = -1
        self._load(only_if_stale=True)

    def _starting(self) -> Unavailable:
        """Why nothing is served yet: the projection is loading, and why the last load
        failed if it did, as the 503's cause: its Retry-After is the cause's (none for a
        broken chain, which no wait mends; 5 s for a server out of reach), not 1 s."""
        why = "the service is starting: the projection is not caught up yet"
        failed = self.load_error
        if failed is None:
            return Unavailable(why)
        unavailable = Unavailable(f"{why} (the last load failed: "
                                  f"{type(failed).__name__}: {failed})")
        unavailable.__cause__ = failed
        return unavailable

    @property
    def session(self) -> LedgerSession:
        """The live session, whose `ledger` is the projection (raises 503 while it is not
        usable)."""
        session = self._session
        if session is None or not self.ready.is_set():
            raise self._starting()
        if self._stale:
            try:
                self._load(only_if_stale=True)
            except Exception as exc:
                # The cause's own words (a server out of reach, a schema to upgrade), and
                # its Retry-After: `problems.retry_after` reads the cause.
                raise Unavailable(f"the journal cannot be read: {detail_of(exc)}") from exc
            session = self._session
            assert session is not None
        return session

    # -- reading --------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Ledger]:
        """The projection, for the duration of the block (read-only: the writer waits
        until the block ends, and no uncommitted decision is ever visible).

        It holds every decision this process committed, and what other writers (other
        replicas, the command line) committed up to `READ_FRESHNESS` seconds ago: a
        read looks at the journal only when the last look is older than that, so reads
        answer from memory under load. Every decision batch catches up first, whatever
        its age, so decisions never work from a stale view."""
        with self.reading_session() as held:
            yield held.ledger

    @contextmanager
    def reading_session(self) -> Iterator[LedgerSession]:
        """As `reading()`, giving the session whose projection the block holds: a read
        that needs the session too (its position, its journal) takes it from here, not
        from `session`, which a failed commit's rebuild may replace meanwhile with one
        this block does not lock."""
        session = self.session
        now = _time.monotonic()
        if now - self._caught_up_at > READ_FRESHNESS:
            # The head is asked without the lock, so reads answering at once from the
            # event loop (read_at_once) do not find it taken for a round trip.
            if self._journal_moved(session):
                with self._waiting_read(session) as session:
                    session.catch_up()
            self._caught_up_at = now
        with self._waiting_read(session) as held:
            yield held

    @contextmanager
    def _waiting_read(self, session: LedgerSession) -> Iterator[LedgerSession]:
        """The projection's lock, once it holds no decision before its commit; while a
        read waits for that, the writer lets the batch being written finish first. If
        that batch failed to commit, the projection holding it was replaced: the lock
        held, and the session given, are then the rebuilt projection's."""
        with self._committed:
            self._readers += 1
        try:
            while True:
                session.lock.acquire()
                if not self._uncommitted and self._current(session):
                    break
                session.lock.release()
                with self._committed:
                    while self._uncommitted:
                        if self.writer.failure is not None:
                            # Decided, never to be committed or undone by this writer.
                            raise self.writer.unavailable()
                        self._committed.wait(1.0)
                if not self._current(session):
                    session = self.session  # rebuilt (by this thread, if not yet)
        finally:
            with self._committed:
                self._readers -= 1
        try:
            yield session
        finally:
            session.lock.release()

    def _current(self, session: LedgerSession) -> bool:
        """Whether `session` is the live projection (not one a failed commit left stale
        or that a rebuild replaced)."""
        return session is self._session and not self._stale

    def _reads_wait(self) -> bool:
        return self._readers > 0

    def read_at_once(self, read: Callable[[LedgerSession, Ledger], T],
                     asked_at: float | None = None) -> T | Busy:
        """`read(session, ledger)` right now, on the calling thread, when that costs no
        wait; else `STALE` (await `refreshed()`, then try again) or `BUSY` (call
        `reading()` from a worker thread instead). `asked_at`: when the read came in
        (`time.monotonic()`; default now), what its freshness is counted from.

        For the event loop's own thread: it must never block on the database or on a
        batch being committed. So this answers only when the projection is usable, was
        caught up within `READ_FRESHNESS` (the freshness `reading()` promises), and its
        lock is free (no batch between its decisions and its commit). Under load
        almost every read answers here, without a hop to a worker thread."""
        session = self._session
        if session is None or self._stale or not self.ready.is_set():
            return BUSY
        asked = _time.monotonic() if asked_at is None else asked_at
        if asked - self._caught_up_at > READ_FRESHNESS:
            return STALE
        if not session.lock.acquire(blocking=False):
            return BUSY
        try:
            if self._uncommitted or not self._current(session):
                return BUSY  # decided ahead, not committed yet (or never to be)
            return read(session, session.ledger)
        finally:
            session.lock.release()

    def refreshed(self) -> Future[None]:
        """Look for other writers' events now, on the writer's thread between two
        batches (so no read waits on the projection's lock for a round trip); done once
        the projection holds them. Reads that ask while a look is under way share it."""
        with self._refresh_lock:
            pending = self._refreshing
            if pending is None or pending.done():
                pending = self._refreshing = self.writer.call(self._refresh)
            return pending

    def _refresh(self) -> None:
        session = self._session
        now = _time.monotonic()
        if session is None or self._stale or now - self._caught_up_at <= READ_FRESHNESS:
            return  # a batch (or another look) has just looked
        if self._journal_moved(session):
            with session.lock:
                session.catch_up()
        self._caught_up_at = now

    def _journal_moved(self, session: LedgerSession) -> bool:
        """Whether the journal holds anything the projection does not: a head elsewhere,
        or, at the same head, another chain hash where the projection last verified it
        (restored from an older copy, then written on by another process up to there).
        One statement, as the head alone was; the catch-up then says what changed (and
        refuses a history that is not the one folded)."""
        holding = getattr(self.journal, "head_holding", None)
        if holding is None:
            return bool(self.journal.head() != session.projector.position)
        position, hash_ = session.verified
        head, stored = holding(position)
        return bool(head != session.projector.position
                    or (head >= position and stored != hash_))

    def head(self) -> int:
        """The projection's journal position."""
        return self.session.projector.position

    # -- deciding -------------------------------------------------------------------------

    async def decide(self, command: Command) -> Any:
        """Queue `command` for the writer; its answer once committed (or its error).

        A retry of a command this process answered (the same key and the same command)
        gets the remembered answer without a trip to the writer: rebuilding the decision
        from the journal would refold its accounts' history to say the same thing."""
        key = command.key
        if key is not None:
            remembered = self.answers.get(key, command)
            if remembered is not NOT_REMEMBERED:
                if _time.monotonic() - self._caught_up_at > READ_FRESHNESS:
                    # As fresh as a read: a journal restored behind this answer (or cut)
                    # is found here, and refused, rather than told it holds the event.
                    await asyncio.wrap_future(self.refreshed())
                return remembered
        if self.stopping:
            raise Unavailable("the service is stopping; retry with the same key")
        if not self.ready.is_set():
            raise self._starting()
        answer = await self.writer.submit_async(command)
        if key is not None and (answer is None or isinstance(answer, dict)):
            # Remembered even if a late event (this decision, or one after it in its
            # batch) revised the outcome since: the answer is what the client was told.
            # A start that found nothing recorded nothing: its 204 is remembered all the
            # same, so that a retry here answers 204 again rather than start a job.
            self.answers.put(key, command, answer)
        return answer

    def decide_now(self, command: Command) -> Any:
        """The same, from a thread that is not the event loop's (benchmarks, tests)."""
        return self.writer.submit(command).result()

    def _run_batch(self, commands: Sequence[Command], wait: Callable[[], None]
                   ) -> list[Any] | Prepared:
        self._checkpoint_if_due()
        defer = self.defer_appends and _time.monotonic() >= self._defer_after
        try:
            if defer and self.journal.url is not None:
                return self._decide_ahead(commands, wait)
            # Under the keys, on the journal: everything decided before must be in it.
            wait()
            return self._decide_batch(commands, defer)
        except PositionsMoved as exc:
            # Nothing of the attempt committed, but the projection applied it: rebuild
            # it (once the batch ahead, if any, committed), then decide the batch again
            # under its keys with one append per decision.
            log.info("batch decided ahead not written (%s): the projection is rebuilt "
                     "from the newest checkpoint", exc)
            wait()
            self._defer_after = _time.monotonic() + DEFER_PAUSE
            self.reset()
            return self._decide_batch(commands, False)

    def _decide_ahead(self, commands: Sequence[Command], wait: Callable[[], None]
                      ) -> list[Any] | Prepared:
        """Decide the batch on the projection, before its transaction (see
        `BatchJournal.ahead`); a `Prepared` to write it, or its answers when a decision
        needed the journal and the batch was committed here."""
        session = self.session
        with session.lock:
            locks, keys, single = _locks_and_keys(commands, session.ledger)
            found = self.journal.look_up(keys, single)
            head, recorded = found.head, found.recorded
            position = session.projector.position
            if head not in (position, self._ahead_base):
                # Another writer is active: decide under the keys, one append per
                # decision, for a while (deferred appends would likely find their
                # positions taken).
                wait()
                self._defer_after = _time.monotonic() + DEFER_PAUSE
                return self._decide_batch(commands, False)
            commands = _answering_bound(commands, found, self.journal)
            with self._committed:
                self._uncommitted += 1
            with self.batching.ahead(locks, keys, recorded, position, wait,
                                     single) as deferred:
                self._caught_up_at = _time.monotonic()
                results = run_commands(commands, self)
            if deferred.opened:
                self._settled()  # committed here
                return results
        # Even a batch that appends nothing answers only once the batch ahead committed:
        # its refusals were decided on it.
        self._ahead_base = position
        return Prepared(results, partial(self._write_ahead, deferred),
                        frozenset(e.id for e in deferred.events))

    def _settled(self) -> None:
        """A batch decided ahead committed: its decisions are the journal's now."""
        with self._committed:
            self._uncommitted -= 1
            self._committed.notify_all()

    def _write_ahead(self, deferred: Deferred) -> None:
        """The committer's part: write a batch decided ahead."""
        try:
            recorded = self.batching.written(deferred)
        except PositionsMoved:
            self._defer_after = _time.monotonic() + DEFER_PAUSE
            raise
        session = self._session
        if session is not None:
            session.written(recorded)
        self._settled()  # before the answers go out: a read after one sees it

    def _decide_batch(self, commands: Sequence[Command], defer: bool) -> list[Any]:
        session = self.session
        answers: list[Any] | None = None
        with session.lock:
            # Keys from the projection as it stands: a key missed because the projection
            # was behind is taken during the batch by the session, which then decides on
            # fresh state.
            locks, keys, single = _locks_and_keys(commands, session.ledger)
            try:
                with self.batching.batch(locks, keys, single) as found:
                    commands = _answering_bound(commands, found, self.journal)
                    # Under the keys: nothing of theirs can be missed now. (The head,
                    # asked with the keys' records, spares the read when nobody else
                    # wrote, the usual case.)
                    if self.batching.start_head() != session.projector.position:
                        session.catch_up()
                        # Another writer is active: deferred appends would likely find
                        # their positions taken; write one decision at a time for a while.
                        self._defer_after = _time.monotonic() + DEFER_PAUSE
                        defer = False
                    self.batching.caught_up(session.projector.position, defer_appends=defer)
                    self._caught_up_at = _time.monotonic()
                    answers = run_commands(commands, self)
            except CommitOutcomeUnknown as exc:
                if answers is None:
                    raise
                # Decided, and the COMMIT's answer lost: the answers name what each write
                # was to record, for its caller to retry under (`groupcommit._told_when_lost`).
                raise DecidedThenLost(exc, answers) from exc
            return answers


def _locks_and_keys(commands: Sequence[Command], ledger: Ledger
                    ) -> tuple[list[str], list[str], list[str]]:
    """The lock keys of everything the commands may write (sorted); the event ids they
    will ask the journal about: their idempotency keys, and the records' own ids of a
    batch of events (looked up with the head, in the same query); and the single
    writes' keys, to ask which the journal binds to a request (same query)."""
    locks: set[str] = set()
    for command in commands:
        # As the session names them: an account called `shared:...` has a key of its own.
        locks.update(map(lock_key, command.locks(ledger)))
        if command.key is not None:
            # Two replicas given one key at once take turns: the second finds what the
            # first recorded or bound under it, even when their other locks are shared
            # (a cancel that changed nothing and a grant, say).
            locks.add(REQUEST_LOCK + command.key)
    ids = [c.key for c in commands if c.key is not None]
    single: list[str] = []
    for command in commands:
        records = getattr(command, "event_ids", None)
        if records is None:
            if command.key is not None:
                single.append(command.key)
        else:
            ids.extend(records)
    # Every write holds the queue (`with_queue`): a start_next elsewhere decides on a
    # journal nobody appends to meanwhile.
    return with_queue(locks), ids, single


def _answering_bound(commands: Sequence[Command], found: LookUp,
                     journal: JournalLike) -> Sequence[Command]:
    """The commands, each single write under a key the journal binds to a request (a
    batch of events, a start that found nothing) in its place answered from the binding
    (`bindings.Bound`). Not where an event another request recorded is under the key
    too: that event is what happened under it (two replicas given the key at once take
    turns on its lock, and a batch decided ahead is not written over a binding made
    since, so a journal holds both only from before they did), and the command's own
    retry rules answer. (An event the bound batch itself recorded, a record that took the key
    as its id, leaves the binding to answer.)"""
    if not found.bound:
        return commands
    out: list[Command] = []
    for command in commands:
        # (Only single writes' keys were asked about, and no batch shares a key.)
        key = command.key
        binding = journal.request(key) if key in found.bound else None
        event = found.recorded.get(key) if key is not None else None
        if binding is not None and (event is None or named_by(binding, event.position)):
            command = Bound(command, binding)
        out.append(command)
    return out


def service_of(request: Request) -> LedgerService:
    """The `LedgerService` of the app that received `request` (`app.state.ledger`)."""
    service: LedgerService = request.app.state.ledger
    return service
