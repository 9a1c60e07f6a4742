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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from eventstore import ConnectionProblem, IdempotencyConflict, JournalError, LockTimeout
from projections.errors import LedgerError
from projections.ledger import Ledger
from tools.service.problems import Unavailable

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


@dataclass(slots=True)
class _Item:
    command: Command
    future: Future[Any] | None = field(default_factory=Future)
    # Or, for a caller on an event loop: the loop and the future it awaits there.
    loop: asyncio.AbstractEventLoop | None = None
    waiter: asyncio.Future[Any] | None = None


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
    future: Future[Any] = field(default_factory=Future)

    def run(self) -> None:
        try:
            self.future.set_result(self.fn())
        except BaseException as exc:
            self.future.set_exception(exc)


_STOP = object()
MAX_LINGER = 0.004
"""Seconds a batch waits at most for decisions on their way (see `_linger`)."""
LINGER_STEP = 0.0003
"""How often that wait looks at the queue."""


def _refusal(exc: BaseException) -> bool:
    """Whether `exc` is a command refusing (the transaction is intact) rather than a
    failure of the transaction itself."""
    if isinstance(exc, IdempotencyConflict):
        return True  # found before writing: the transaction goes on
    if isinstance(exc, JournalError | SQLAlchemyError):
        return False
    return isinstance(exc, LedgerError | ValueError | KeyError)


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionProblem | LockTimeout) or (
        isinstance(exc, SQLAlchemyError) and "connection" in str(exc).lower())


class GroupCommit:
    """The single writer of one service process."""

    def __init__(self, run_batch: Callable[[Sequence[Command]], list[Any]],
                 reset: Callable[[], None], *, max_batch: int = 512) -> None:
        """`run_batch(commands)`: decide them in one transaction and commit, returning
        each command's answer or the exception it refused with; raises if the
        transaction fails. `reset()`: rebuild the projection from the journal."""
        self._run_batch = run_batch
        self._reset = reset
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._deferred: list[_Item] = []
        self._calls: list[_Call] = []
        self._last_size = 0
        self._last_seconds = 0.0
        self.batches = 0
        self.committed = 0
        self.largest_batch = 0

    def start(self) -> None:
        """Start the writer thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="group-commit",
                                            daemon=True)
            self._thread.start()

    def submit(self, command: Command) -> Future[Any]:
        """Queue a command; its future holds the answer once its batch committed."""
        future: Future[Any] = Future()
        if self._thread is None or not self._thread.is_alive():
            future.set_exception(Unavailable("the service is stopping"))
            return future
        self._queue.put(_Item(command, future))
        return future

    def submit_async(self, command: Command) -> asyncio.Future[Any]:
        """The same, for a caller on the running event loop: an asyncio future."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        if self._thread is None or not self._thread.is_alive():
            waiter.set_exception(Unavailable("the service is stopping"))
            return waiter
        self._queue.put(_Item(command, None, loop, waiter))
        return waiter

    def call(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn()` on the writer thread, between two batches (never during one);
        its future holds what it returned."""
        call = _Call(fn)
        if self._thread is None or not self._thread.is_alive():
            call.future.set_exception(Unavailable("the service is stopping"))
            return call.future
        self._queue.put(call)
        return call.future

    def stop(self, timeout: float = 30.0) -> None:
        """Decide what is queued, commit the batch in flight, then end the thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------

    def _linger(self) -> None:
        """Under load, wait a moment for the decisions that are on their way.

        Clients whose answers were just released send their next request within a
        fraction of a millisecond of each other; a writer that starts at the first one
        commits batches of one while the others queue, and every batch pays the
        transaction's fixed cost again. Under steady load the clients also split into
        two groups that take turns (one queues while the other's batch commits). So when
        the last batch had company, wait until the clients of the last batch are back as
        well (as many more queued as it held), at most `MAX_LINGER` and half of what the
        last batch took: the groups merge and the fixed cost is paid once for both. An
        idle service (last batch alone) never waits."""
        if self._last_size <= 1:
            return
        now = time.perf_counter()
        deadline = now + min(MAX_LINGER, self._last_seconds / 2)
        queued = self._queue.qsize()
        wanted = self._last_size + queued
        while queued + 1 < wanted and now < deadline:
            time.sleep(LINGER_STEP)
            queued, now = self._queue.qsize(), time.perf_counter()

    def _next_batch(self, first: _Item) -> tuple[list[_Item], bool]:
        items: list[_Item] = []
        keys: set[str] = set()
        stop = False
        later: list[_Item] = []
        candidates = [*self._deferred, first]
        self._deferred = []
        while True:
            for item in candidates:
                key = item.command.key
                if (key is not None and key in keys) or len(items) >= self.max_batch:
                    later.append(item)
                    continue
                if key is not None:
                    keys.add(key)
                items.append(item)
            if stop or len(items) + len(later) >= self.max_batch:
                break
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                stop = True
                candidates = []
                continue
            if isinstance(nxt, _Call):
                self._calls.append(nxt)  # after this batch
                candidates = []
                continue
            candidates = [nxt]
        self._deferred = later
        return items, stop

    def _loop(self) -> None:
        stopping = False
        while True:
            if self._deferred:
                first = self._deferred.pop(0)
            elif stopping:
                return
            else:
                got = self._queue.get()
                if isinstance(got, _Call):
                    got.run()
                    continue
                if got is _STOP:
                    stopping = True
                    # Finish whatever was queued before the stop.
                    while True:
                        try:
                            more = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if isinstance(more, _Call):
                            more.run()
                        elif more is not _STOP:
                            self._deferred.append(more)
                    continue
                first = got
            if not stopping:
                self._linger()
            items, stop = self._next_batch(first)
            stopping = stopping or stop
            began = time.perf_counter()
            self._commit(items)
            self._last_size = len(items)
            self._last_seconds = time.perf_counter() - began
            calls, self._calls = self._calls, []
            for call in calls:
                call.run()

    def _commit(self, items: list[_Item]) -> None:
        try:
            results = self._run_batch([i.command for i in items])
        except BaseException as exc:  # the transaction failed: nothing of it committed
            self._recover(exc)
            if len(items) > 1 and not _unreachable(exc):
                for item in items:
                    self._commit([item])
                return
            _deliver(items, [exc] * len(items))
            return
        self.batches += 1
        self.committed += len(items)
        self.largest_batch = max(self.largest_batch, len(items))
        _deliver(items, results)

    def _recover(self, exc: BaseException) -> None:
        log.warning("batch failed, nothing of it committed: %s: %s", type(exc).__name__,
                    " ".join(str(exc).split())[:300])
        try:
            self._reset()
        except BaseException as again:  # the database may still be away: retry later
            log.warning("projection reset failed: %s", type(again).__name__)


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
