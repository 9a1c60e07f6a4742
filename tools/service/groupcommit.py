"""Group commit: one writer thread decides queued commands in arrival order against the
live projection and commits them together in one transaction.

Why: a decision on the live projection takes microseconds; its commit takes a round trip
and a flush. Committing K decisions at once pays the commit once. The batch is whatever
queued while the previous batch was committing (up to `max_batch`), so an idle service
commits each command at once (no timer, no sleep) and a loaded one commits bigger batches.

The protocol, for every batch:

1. Under the session's lock (readers wait: they never see a decision before its commit),
   catch up with what other writers appended, and compute every key the batch's
   commands write (their accounts, the job queue), from the projection.
2. Open one journal transaction holding all those keys (PostgreSQL advisory locks in the
   journal's global order; SQLite BEGIN IMMEDIATE), catch up again under them, and run
   each command in arrival order: each is decided on the state its predecessors left,
   appended inside the transaction and applied to the projection. A command that is
   invalid raises and appends nothing; the others go on.
3. Commit. Only then are the answers released. If anything fails before the commit is
   done, no command of the batch answers success, and the projection is rebuilt from the
   journal (it had applied decisions that never committed). A batch that fails for a
   reason other than the database being unreachable is run again one command at a time,
   so one poisonous command cannot fail its neighbours.

Two commands with the same idempotency key never share a batch: the second waits for the
next one, so it sees the first one's event and answers as a retry.

Pipelined: the commit of one batch and the decisions of the next overlap. Step 3's
write (keys, head, append, commit) can run on a second thread, the committer, while the
writer decides the next batch on the projection, which already holds the batch being
written (`run_batch` returns a `Prepared` for that; `tools/service/batching.py` says how
a batch is decided before its transaction exists). At most one batch is being written
while the next is decided, and the rules stay:

- writes are strictly ordered: a batch is handed to the committer only after the one
  before it committed, and its positions follow that one's last (the head check at its
  append proves it), so positions stay gapless and the hash chain goes on from there;
- each answer is sent only after its own batch committed;
- a batch decided on top of one whose write failed never answers: it is dropped with the
  projection (rebuilt from the journal), the failed batch is handled as in step 3, and
  then the dropped batch is decided again from the journal's state;
- readers still never see a decision before its commit: a read waits (or a read on the
  event loop goes to a worker thread) while the projection holds a batch decided ahead
  that is not committed yet, and the writer, seeing a read wait, lets the batch being
  written finish before it decides the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from eventstore import (
    CommitOutcomeUnknown,
    ConnectionProblem,
    IdempotencyConflict,
    JournalError,
    LockOrderConflict,
    LockTimeout,
)
from projections.errors import LedgerError
from projections.ledger import Ledger
from tools.render import one_line
from tools.service.problems import ServiceProblem, Unavailable

log = logging.getLogger("gpu_credits.service")


class Command(Protocol):
    """One write: the keys it locks, and how it decides (inside the batch transaction)."""

    @property
    def key(self) -> str | None:
        """The idempotency key (the event id), if the client gave one."""
        ...

    def locks(self, ledger: Ledger) -> list[str]:
        """Lock keys of everything the command may write, judged on `ledger`."""
        ...

    def run(self, service: Any) -> Any:
        """Decide and append; return the answer. Raise to refuse (nothing appended)."""
        ...


@dataclass(frozen=True, slots=True)
class Phases:
    """A writer's running totals: batches and decisions committed, and the seconds of
    wall clock spent in each phase of a batch. Each only grows, so the difference of two
    readings describes the batches in between.

    - `linger`: waiting for decisions on their way to join the batch (see `_linger`);
    - `decide`: deciding the batch on the projection (`run_batch`), including any wait
      for the batch ahead it needed, and, for a batch that is not pipelined (on the
      journal in memory; while another writer is active), its write and commit too;
    - `write`: a pipelined batch's write and commit, on the committer's thread (it
      overlaps the writer's next linger and decide).
    """

    batches: int
    decisions: int
    linger: float
    decide: float
    write: float


def _taken() -> Future[Any]:
    """A future for something handed to the writer: it cannot be cancelled. What the
    writer took it answers; a waiter that goes away (a cancelled request awaiting it
    through `asyncio.wrap_future`, which cancels what it wraps) must neither take the
    answer from others sharing it nor make the answering raise on the writer's thread."""
    future: Future[Any] = Future()
    future.set_running_or_notify_cancel()
    return future


@dataclass(slots=True)
class _Item:
    command: Command
    future: Future[Any] | None = field(default_factory=_taken)
    # Or, for a caller on an event loop: the loop and the future it awaits there.
    loop: asyncio.AbstractEventLoop | None = None
    waiter: asyncio.Future[Any] | None = None
    lock_conflicts: int = 0  # how many times its batch was refused a key (see `_failed`)
    seq: int = 0  # its place in the order of submission (see `_linger`)


@dataclass(slots=True)
class Prepared:
    """A batch decided but not written yet: `write()` writes and commits it (on the
    committer's thread); `results` are its answers once it did."""

    results: list[Any]
    write: Callable[[], Any]
    # The ids of the events it writes: a key among them is not free for the next batch,
    # which must not be decided before they are recorded (see `_commit`).
    ids: frozenset[str] = frozenset()


class PipelineBroken(Exception):
    """The batch ahead failed to commit: the one decided on top of it must not stand."""


@dataclass(slots=True)
class _Ahead:
    """The batch being written by the committer."""

    items: list[_Item]
    results: list[Any]
    keys: frozenset[str]  # its commands' keys and its events' ids
    future: Future[Any]
    began: float  # when the writer began deciding it
    # Set once the write's callback has run (answers delivered, or the writer woken):
    # it runs after whoever waits on `future` has been woken.
    delivered: threading.Event = field(default_factory=threading.Event)


class _Committer:
    """The committer: a thread that runs the writes handed to it, one after the other.

    (A ThreadPoolExecutor did the same with more bookkeeping per write: a work item, a
    semaphore taken and given back, a check for more threads.)"""

    def __init__(self, context: Callable[[], AbstractContextManager[object]]) -> None:
        self._context = context
        self.seconds = 0.0  # spent in writes so far (only this thread adds to it)
        self._writes: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._run, name="group-commit-write",
                                        daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[], Any]) -> Future[Any]:
        """Queue `write`; its future holds what it returned or raised."""
        future: Future[Any] = Future()
        self._writes.put((write, future))
        return future

    def shutdown(self) -> None:
        """Run what is queued, then end the thread."""
        self._writes.put(None)
        self._thread.join()

    def _run(self) -> None:
        with self._context():
            while (got := self._writes.get()) is not None:
                write, future = got
                began = time.perf_counter()
                try:
                    result = write()
                except BaseException as exc:
                    self.seconds += time.perf_counter() - began
                    future.set_exception(exc)
                else:
                    self.seconds += time.perf_counter() - began
                    future.set_result(result)


def _unanswered(items: Sequence[_Item]) -> list[_Item]:
    """Those of `items` whose caller has no answer yet (and still waits for one)."""
    return [i for i in items if not (i.future.done() if i.future is not None
                                     else i.waiter is None or i.waiter.done())]


def _answering_failed(items: Sequence[_Item], exc: BaseException) -> None:
    """A committed batch whose answering raised (a bug, on the committer's thread, where
    nothing else would catch it): each decision not answered yet is answered 500 saying
    it committed, rather than left waiting for ever. The writer goes on."""
    log.critical("a committed batch's answers failed; its callers are answered 500",
                 exc_info=exc)
    waiting = _unanswered(items)
    problem = ServiceProblem(500, f"the decision was committed, but answering it failed "
                                  f"({type(exc).__name__}): a retry with the same "
                                  "Idempotency-Key answers it; do not retry it without one")
    with contextlib.suppress(BaseException):  # the answering itself may be what broke
        _deliver(waiting, [problem] * len(waiting))


class DecidedThenLost(Exception):
    """A batch decided in its transaction (`answers`, one per command) whose COMMIT was
    then lost (`failure`): the answers say what each write was to record."""

    def __init__(self, failure: CommitOutcomeUnknown, answers: Sequence[Any]) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.answers = list(answers)


def _told_when_lost(item: _Item, exc: BaseException, answer: Any) -> BaseException:
    """What the caller of a write sent without a key is told when its COMMIT may have
    been lost. The journal's words advise a retry under the same event ids, which that
    caller never saw: sent again as it was, a grant or a usage report would be recorded
    twice, a start would start another job. No Retry-After: waiting does not make that
    resend safe."""
    command = item.command
    if not isinstance(exc, CommitOutcomeUnknown) or command.key is not None or (
            getattr(command, "event_ids", None) is not None):
        return exc  # a key, or records carrying their own ids: the retry advised is safe
    lost = ("the connection to the database was lost with this write's COMMIT in flight: "
            "it may or may not be recorded")
    if isinstance(answer, dict) and isinstance(answer.get("id"), str):
        key = answer["id"]
        how = (f"it was to be recorded as event {key!r}: send it again with "
               f"Idempotency-Key: {key} (that answers what was recorded, or records it "
               "now), not without a key, which may record it twice")
    elif isinstance(answer, dict) and "job" in answer and "state" not in answer:
        how = (f"it was to start job {answer['job']!r}: look at that job before starting "
               "another (a start sent again without a key starts the next job)")
    elif isinstance(answer, dict) and "job" in answer:
        how = (f"the state of job {answer['job']!r} says whether it was recorded (sent "
               "again, it is refused if it was)")
    else:
        how = ("it was sent without an Idempotency-Key: look for it in the journal before "
               "sending it again, which may record it twice")
    return ServiceProblem(503, f"{lost}; {how}", slug="unavailable")


def _settle(waiter: asyncio.Future[Any], outcome: Any) -> None:
    if waiter.done():  # the caller went away (cancelled)
        return
    if isinstance(outcome, BaseException):
        waiter.set_exception(outcome)
    else:
        waiter.set_result(outcome)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for waiter, outcome in settled:
        _settle(waiter, outcome)


def _deliver(items: Sequence[_Item], outcomes: Sequence[Any]) -> None:
    """Each item's answer (or exception) to its caller. Callers on an event loop get
    theirs in one call per loop and batch: one wake-up of the loop, not one per item."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    for item, outcome in zip(items, outcomes, strict=True):
        if item.future is not None:
            if isinstance(outcome, BaseException):
                item.future.set_exception(outcome)
            else:
                item.future.set_result(outcome)
        elif item.loop is not None and item.waiter is not None:
            by_loop.setdefault(item.loop, []).append((item.waiter, outcome))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_settle_all, settled)


@dataclass
class _Call:
    """Something to run on the writer thread between two batches."""

    fn: Callable[[], Any]
    future: Future[Any] = field(default_factory=_taken)

    def run(self) -> None:
        try:
            self.future.set_result(self.fn())
        except BaseException as exc:
            self.future.set_exception(exc)

    def fail(self, problem: BaseException) -> None:
        """Answer `problem` instead of running (unless answered already)."""
        if not self.future.done():
            self.future.set_exception(problem)


_STOP = object()
_WOKEN = object()  # the batch being written failed: the writer must handle it
MAX_LINGER = 0.004
"""Seconds a batch waits at most for decisions on their way (see `_linger`)."""
LINGER_STEP = 0.0003
"""How often that wait looks at the queue."""
MAX_LOCK_CONFLICTS = 5
"""How many times a command's batch is run again after a `LockOrderConflict`."""


def _refusal(exc: BaseException) -> bool:
    """Whether `exc` is a command refusing (the transaction is intact) rather than a
    failure of the transaction itself."""
    if isinstance(exc, IdempotencyConflict):
        return True  # found before writing: the transaction goes on
    if isinstance(exc, ServiceProblem):
        # A 4xx (a batch of events with bad ones) is decided before its command writes
        # anything; a 5xx (the database unavailable) is the transaction's failure.
        return exc.status < 500
    if isinstance(exc, JournalError | SQLAlchemyError):
        return False
    return isinstance(exc, LedgerError | ValueError | KeyError)


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionProblem | LockTimeout) or (
        isinstance(exc, SQLAlchemyError) and "connection" in str(exc).lower())


class GroupCommit:
    """The single writer of one service process."""

    def __init__(self, run_batch: Callable[[Sequence[Command], Callable[[], None]],
                                           list[Any] | Prepared],
                 reset: Callable[[], None], *, max_batch: int = 512,
                 pause: Callable[[], bool] = lambda: False,
                 context: Callable[[], AbstractContextManager[object]] = nullcontext
                 ) -> None:
        """`run_batch(commands, wait)`: decide them, returning each command's answer or
        the exception it refused with, once committed in one transaction; or a
        `Prepared` to write them later. Raises if the transaction fails. `wait()`
        returns once the batch being written committed (`PipelineBroken` if it did
        not): before anything that must see it in the journal. `reset()`: rebuild the
        projection from the journal. `pause()`: whether to let the batch being written
        finish before deciding the next one (a read waits). `context()`: held by the
        writer's and the committer's threads while they run (see
        `Journal.keeping_connection`)."""
        self._run_batch = run_batch
        self._reset = reset
        self._pause = pause
        self._context = context
        self._ahead: _Ahead | None = None
        self._committer: _Committer | None = None
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._deferred: list[_Item] = []
        self._calls: list[_Call] = []
        self._batch: list[_Item] = []  # the batch being decided (see `_fail_waiting`)
        #: What stopped the writer's thread, if an error did (a bug): every decision
        #: waiting then, and every one submitted after, is answered `Unavailable`.
        self.failure: BaseException | None = None
        self._last_size = 0
        self._last_seconds = 0.0
        self.batches = 0
        self.committed = 0
        self.largest_batch = 0
        self.decided_ahead = 0  # batches decided while the one before was being written
        # Where the writer's time goes, in seconds since it started (see `phases`).
        self.linger_seconds = 0.0
        self.decide_seconds = 0.0
        # Numbers items in the order they are submitted; `_answered` is the number taken
        # when the last batch's answers went out: an item numbered below it was queued
        # by a caller who was not waiting for that batch.
        self._numbers = itertools.count(1)
        self._answered = 0
        self._began = 0.0  # when the batch being decided was begun

    def start(self) -> None:
        """Start the writer thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="group-commit",
                                            daemon=True)
            self._thread.start()

    def submit(self, command: Command) -> Future[Any]:
        """Queue a command; its future holds the answer once its batch committed."""
        future = _taken()
        if self._thread is None or not self._thread.is_alive():
            future.set_exception(self._refusal())
            return future
        self._queue.put(_Item(command, future, seq=next(self._numbers)))
        if self.failure is not None:
            self._fail_queued()  # the writer may have stopped before it took it
        return future

    def submit_async(self, command: Command) -> asyncio.Future[Any]:
        """The same, for a caller on the running event loop: an asyncio future."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        if self._thread is None or not self._thread.is_alive():
            waiter.set_exception(self._refusal())
            return waiter
        self._queue.put(_Item(command, None, loop, waiter, seq=next(self._numbers)))
        if self.failure is not None:
            self._fail_queued()
        return waiter

    def call(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn()` on the writer thread, between two batches (never during one);
        its future holds what it returned."""
        call = _Call(fn)
        if self._thread is None or not self._thread.is_alive():
            call.future.set_exception(self._refusal())
            return call.future
        self._queue.put(call)
        if self.failure is not None:
            self._fail_queued()
        return call.future

    def stop(self, timeout: float = 30.0) -> None:
        """Decide what is queued, commit the batch in flight, then end the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout)
        # (Also after `commit_in_turn`, which starts no writer but may start a committer.)
        committer, self._committer = self._committer, None
        if committer is not None:
            committer.shutdown()

    def phases(self) -> Phases:
        """Where the writer's time went since it started (see `Phases`)."""
        committer = self._committer
        return Phases(self.batches, self.committed, self.linger_seconds,
                      self.decide_seconds, committer.seconds if committer else 0.0)

    # -- the loop -------------------------------------------------------------------------

    def _linger(self, first: _Item) -> None:
        """Under load, wait a moment for the decisions that are on their way (`first`:
        the one that opens the batch, taken off the queue).

        Clients whose answers were just released send their next request within a
        fraction of a millisecond of each other; a writer that starts at the first one
        commits batches of one while the others queue, and every batch pays the
        transaction's fixed cost again. Under steady load the clients also split into
        two groups that take turns (one queues while the other's batch commits). So when
        the last batch had company, wait until the clients of the last batch are back
        (as many as it held), and with them those that queued before its answers went
        out (another group's), at most `MAX_LINGER` and half of what the last batch
        took: the groups merge and the fixed cost is paid once for both. What queued
        after the answers went out is the last batch's clients coming back, counted
        once (counted as another group's, they made a number that never came, and
        every batch waited until the deadline). An idle service (last batch alone)
        never waits."""
        if self._last_size <= 1:
            return
        now = time.perf_counter()
        deadline = now + min(MAX_LINGER, self._last_seconds / 2)
        queued = self._queue.qsize()
        # Those queued before the answers are `first` and the ones after it up to the
        # number taken then (at most all that are queued; each batch answered meanwhile
        # took a number too, so that may count one or two more: the deadline bounds it).
        behind = min(queued + 1, max(0, self._answered - first.seq))
        wanted = self._last_size + behind
        while queued + 1 < wanted and now < deadline:
            time.sleep(LINGER_STEP)
            queued, now = self._queue.qsize(), time.perf_counter()

    def _linger_ahead(self, ahead: _Ahead) -> None:
        """While a batch is being written, wait for it before deciding the next (at most
        `MAX_LINGER`), unless as many decisions as it held queued already.

        Deciding early gains nothing (the next batch is not written before this one
        committed) and splits the clients into more, smaller batches, each paying the
        transaction's fixed cost. One wait on the write, not a poll of the queue: every
        wake-up of this thread takes the interpreter's lock from the two others."""
        if self._queue.qsize() + 1 >= self._last_size:
            return
        futures.wait([ahead.future], timeout=MAX_LINGER)

    def _next_batch(self, first: _Item) -> tuple[list[_Item], bool]:
        items: list[_Item] = []
        keys: set[str] = set()
        stop = False
        later: list[_Item] = []
        # `_batch` holds all this takes (the deferred, `first`, what it pulls) until the
        # batch is committed: none is only in a local should the writer fail meanwhile
        # (see `_fail_waiting`).
        candidates = [*self._deferred, first]
        self._batch = list(candidates)
        while True:
            for item in candidates:
                # A key, or a record's id, that an earlier command of the batch also
                # names waits for the next batch: its look-up must find that command's
                # events recorded, as it would one command at a time.
                ids = ids_named(item.command)
                if any(i in keys for i in ids) or len(items) >= self.max_batch:
                    later.append(item)
                    continue
                keys.update(ids)
                items.append(item)
            if stop or len(items) + len(later) >= self.max_batch:
                break
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _WOKEN:
                candidates = []
                continue
            if nxt is _STOP:
                stop = True
                candidates = []
                continue
            if isinstance(nxt, _Call):
                self._calls.append(nxt)  # after this batch
                candidates = []
                continue
            candidates = [nxt]
            self._batch.append(nxt)
        self._deferred = later
        return items, stop

    def commit_in_turn(self, commands: Sequence[Command],
                       before_batch: Callable[[], None] | None = None
                       ) -> tuple[list[Future[Any]], list[list[int]]]:
        """Batch and commit `commands` on the caller's thread as the loop would, batch
        after batch until each is answered, but without its waits for more callers (on
        the wall clock), so what is batched depends on the journal alone: a simulator's
        deterministic turn. The writer's thread must not be running. `before_batch` runs
        before each batch is formed. Returns each command's future and the batches, as
        indexes into `commands`."""
        items = [_Item(command) for command in commands]
        # The first queued command opens a batch, the rest join it as they fit.
        for item in items[1:]:
            self._queue.put(item)
        index = {id(item): i for i, item in enumerate(items)}
        groups: list[list[int]] = []
        first: _Item | None = items[0] if items else None
        while first is not None:
            if before_batch is not None:
                before_batch()
            group, _ = self._next_batch(first)
            groups.append([index[id(item)] for item in group])
            self._commit(group)
            # On a SQL journal a batch may be decided ahead and written by the
            # committer's thread: wait for that write (and handle its failure) as the
            # loop would before the next batch, so every answer is in when the turn ends.
            while self._ahead is not None:  # a failed write's retries may leave another
                self._settle_ahead()
            first = self._deferred.pop(0) if self._deferred else None
            while first is None and not self._queue.empty():
                got = self._queue.get_nowait()
                if isinstance(got, _Item):  # not the committer's wake-up
                    first = got
        futures = [item.future for item in items]
        assert all(f is not None for f in futures)  # a thread's caller, not a loop's
        return [f for f in futures if f is not None], groups

    def _run(self) -> None:
        try:
            with self._context():
                self._loop()
        except BaseException as exc:
            # A bug, not a refused decision or a failed commit (those are answered and the
            # loop goes on). Its callers must not wait for ever: each waiting decision is
            # answered 503 (a retry under the same key is safe: it answers the decision
            # if it was committed, and decides it again if not), and so is every later
            # one; /healthz says so, for the process to be restarted.
            self.failure = exc
            log.critical("the writer stopped on an error; decisions are refused until "
                         "the service is restarted", exc_info=exc)
            self._fail_waiting()

    def _refusal(self) -> Unavailable:
        """What a decision submitted to a writer that is not running is answered."""
        if self.failure is not None:
            return self.unavailable()
        return Unavailable("the service is stopping")

    def unavailable(self) -> Unavailable:
        """The answer to a decision (or a read) once the writer stopped on an error."""
        failure = self.failure
        return Unavailable(f"the service's writer stopped on an error "
                           f"({type(failure).__name__}); restart the service, then retry "
                           "with the same Idempotency-Key")

    def _fail_waiting(self) -> None:
        """Answer `Unavailable` to every decision the stopped writer holds or has queued."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            # Being written by the committer: answered by its callback if it commits;
            # what that did not answer (it failed, or the bug was in the answering) is
            # answered here. (An answer already on its way to an event loop is settled
            # there first: the later one finds the caller's future done.)
            futures.wait([ahead.future], timeout=60)
            if ahead.future.done():
                ahead.delivered.wait(60)
            self._fail(ahead.items)
        batch, self._batch = self._batch, []
        deferred, self._deferred = self._deferred, []
        self._fail(list({id(i): i for i in [*batch, *deferred]}.values()))  # each once
        for call in self._calls:
            call.fail(self.unavailable())
        self._calls = []
        self._fail_queued()

    def _fail_queued(self) -> None:
        """Answer `Unavailable` to everything queued (the writer is gone)."""
        for got in self._drained():
            if isinstance(got, _Item):
                self._fail([got])
            elif isinstance(got, _Call):
                got.fail(self.unavailable())

    def _drained(self) -> Iterator[Any]:
        """What is queued now, each taken off the queue as it is given."""
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def _fail(self, items: Sequence[_Item]) -> None:
        waiting = _unanswered(items)
        _deliver(waiting, [self.unavailable()] * len(waiting))

    def _loop(self) -> None:
        stopping = False
        while True:
            if self._deferred:
                first = self._deferred.pop(0)
            elif stopping:
                self._settle_ahead()
                return
            else:
                got = self._queue.get()
                if got is _WOKEN:
                    ahead = self._ahead
                    if ahead is not None and ahead.future.done():
                        self._settle_ahead()
                    continue
                if isinstance(got, _Call):
                    self._settle_ahead()
                    got.run()
                    continue
                if got is _STOP:
                    stopping = True
                    self._settle_ahead()
                    # Finish whatever was queued before the stop.
                    for more in self._drained():
                        if isinstance(more, _Call):
                            more.run()
                        elif more is not _STOP and more is not _WOKEN:
                            self._deferred.append(more)
                    continue
                first = got
            self._batch = [first]  # taken: answered by `_fail_waiting` should this fail
            ahead = self._ahead
            if ahead is not None and ahead.future.done():
                self._settle_ahead()  # written while the writer waited (see `_write`)
            if not stopping:
                waited = time.perf_counter()
                ahead = self._ahead
                if ahead is not None:
                    self._linger_ahead(ahead)
                if ahead is None or ahead.future.done():
                    self._linger(first)
                self.linger_seconds += time.perf_counter() - waited
            items, stop = self._next_batch(first)
            stopping = stopping or stop
            began = self._began = time.perf_counter()
            self._commit(items)  # (`_batch` holds them, from `_next_batch`)
            self._batch = []
            self._last_size = len(items)
            if self._ahead is None:  # else the committer says how long it took
                self._last_seconds = time.perf_counter() - began
            calls, self._calls = self._calls, []
            if calls:
                self._settle_ahead()
            for call in calls:
                call.run()

    def _commit(self, items: list[_Item]) -> None:
        ahead = self._ahead
        if ahead is not None and any(
                key in ahead.keys for i in items for key in ids_named(i.command)):
            # A retry must find its first attempt recorded; a key (or a record's id) that
            # an event of the batch being written takes must be found taken. Decided
            # ahead, the journal's look-up would miss them: a request that records
            # nothing would bind a key an event holds, and answer 204 for a 409.
            self._settle_ahead()
        if self._pause():
            # A read waits until nothing decided is uncommitted: let it in first.
            self._settle_ahead()
            deadline = time.perf_counter() + MAX_LINGER
            while self._pause() and time.perf_counter() < deadline:
                time.sleep(LINGER_STEP)
        if self._ahead is not None:
            self.decided_ahead += 1
        deciding = time.perf_counter()
        try:
            outcome = self._run_batch([i.command for i in items], self._wait_ahead)
        except BaseException as raised:
            self.decide_seconds += time.perf_counter() - deciding
            exc, answers = ((raised.failure, raised.answers)
                            if isinstance(raised, DecidedThenLost) else (raised, None))
            if self._ahead is not None and not self._settle_ahead():
                # Decided on top of a batch that did not commit: decide it again, from
                # the journal's state (the projection was rebuilt).
                self._commit(items)
                return
            self._failed(items, exc, answers)
            return
        self.decide_seconds += time.perf_counter() - deciding
        if isinstance(outcome, Prepared):
            if not self._settle_ahead():
                self._commit(items)  # as above: the batch it was decided on failed
                return
            self._write(items, outcome)
            return
        self._committed(items, outcome)

    def _committed(self, items: list[_Item], results: list[Any]) -> None:
        self.batches += 1
        self.committed += len(items)
        self.largest_batch = max(self.largest_batch, len(items))
        self._answered = next(self._numbers)
        _deliver(items, results)

    def _failed(self, items: list[_Item], exc: BaseException,
                answers: Sequence[Any] | None = None) -> None:
        """The batch's transaction failed: nothing of it committed, unless the connection
        was lost with its COMMIT in flight (then it may have: the projection is rebuilt
        from the journal either way, and a retry under the same key answers from there).
        `answers`: what the batch had decided, where known."""
        from tools.service.batching import PositionsMoved

        self._recover(exc)
        if isinstance(exc, PositionsMoved):
            # Another writer appended meanwhile (run_batch now decides under the keys).
            self._commit(items)
        elif isinstance(exc, LockOrderConflict) and all(
                i.lock_conflicts < MAX_LOCK_CONFLICTS for i in items):
            # Another writer held a key the batch found it needed only after appending
            # (its projection was behind that writer's events), or the database broke a
            # deadlock: nothing was written. Caught up now, the batch asks for its keys
            # first; a few more rounds at most, then the error is the answer.
            for item in items:
                item.lock_conflicts += 1
            self._commit(items)
        elif len(items) > 1 and not _unreachable(exc):
            for item in items:
                self._commit([item])
        else:
            decided = list(answers) if answers is not None else [None] * len(items)
            _deliver(items, [_told_when_lost(item, exc, answer)
                             for item, answer in zip(items, decided, strict=True)])

    def _write(self, items: list[_Item], prepared: Prepared) -> None:
        """Hand a prepared batch to the committer; its answers go out once it committed."""
        if self._committer is None:
            self._committer = _Committer(self._context)
        keys = frozenset(i.command.key for i in items if i.command.key is not None
                         ) | prepared.ids
        future = self._committer.submit(prepared.write)
        ahead = self._ahead = _Ahead(items, prepared.results, keys, future, self._began)

        def written(done: Future[Any]) -> None:
            try:
                failed = done.exception() is not None
                if not failed:
                    try:
                        self._committed(ahead.items, ahead.results)
                    except BaseException as exc:
                        _answering_failed(ahead.items, exc)
                self._last_seconds = time.perf_counter() - ahead.began
                if failed:
                    # Only a failure needs the writer now (to rebuild and retry); a
                    # success is settled when the writer next looks at it. Waking an idle
                    # writer for nothing cost a thread switch and the interpreter's lock
                    # per batch.
                    self._queue.put(_WOKEN)
            finally:
                ahead.delivered.set()

        future.add_done_callback(written)

    def _wait_ahead(self) -> None:
        """Return once the batch being written committed; `PipelineBroken` if it did
        not (it stays ahead, for `_settle_ahead` to handle)."""
        ahead = self._ahead
        if ahead is None:
            return
        failure = ahead.future.exception()
        if failure is not None:
            raise PipelineBroken(f"the batch ahead did not commit: {type(failure).__name__}")
        self._ahead = None

    def _settle_ahead(self) -> bool:
        """Wait for the batch being written; True if it committed (or there was none),
        False if it failed (then it was handled as any failed batch)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return True
        failure = ahead.future.exception()
        if failure is None:
            # Settled is answered: the answers go out from the write's callback, which
            # may not have run yet when the wait above returns (`commit_in_turn` hands
            # back the futures once the last batch is settled).
            ahead.delivered.wait()
            return True
        self._failed(ahead.items, failure, ahead.results)
        return False

    def _recover(self, exc: BaseException) -> None:
        # A lost connection's own words say whether the batch may have committed (its
        # COMMIT was in flight): the log must not tell the operator it did not.
        log.warning("batch failed%s: %s: %s",
                    "" if isinstance(exc, ConnectionProblem) else ", nothing of it committed",
                    type(exc).__name__, one_line(str(exc))[:300])
        try:
            self._reset()
        except BaseException as again:  # the database may still be away: retry later
            log.warning("projection reset failed: %s", type(again).__name__)


def ids_named(command: Command) -> list[str]:
    """The event ids `command` looks up: its key, and a batch of events' own ids."""
    ids = [] if command.key is None else [command.key]
    ids.extend(getattr(command, "event_ids", ()))
    return ids


def run_commands(commands: Sequence[Command], service: Any) -> list[Any]:
    """Run each command, keeping a refusal as its answer; raise on a transaction failure."""
    results: list[Any] = []
    for command in commands:
        try:
            results.append(command.run(service))
        except BaseException as exc:
            if not _refusal(exc):
                raise
            results.append(exc)
    return results
