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
import threading
import time as _time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventstore import JournalLike
from projections.ledger import Ledger
from projections.outcomes import Outcome
from projections.scheduler import Scheduler
from projections.session import LedgerSession, open_journal, session_of
from tools.service.groupcommit import Command, GroupCommit, run_commands
from tools.service.problems import Unavailable


def wall_clock() -> int:
    """Now, in whole seconds since the Unix epoch (the time of live decisions)."""
    return int(_time.time())


class _Scheduler(Scheduler):
    """The scheduler facade, keeping the outcomes of its last decision for the answer
    (whether a submit was accepted and why not, what a completion charged)."""

    last_outcomes: list[Outcome]

    def _decide(self, locks: Sequence[str], build: Any,
                event_id: str | None = None) -> list[Outcome]:
        self.last_outcomes = []
        outcomes = super()._decide(locks, build, event_id)
        self.last_outcomes = outcomes
        return outcomes


class LedgerService:
    """One journal, its live projection, and the group-commit writer deciding on it."""

    def __init__(self, journal: JournalLike | str | None, *,
                 clock: Callable[[], int] | None = None, allow_far_times: bool = False,
                 max_batch: int = 512) -> None:
        self.journal = open_journal(journal)
        self.clock = clock or wall_clock
        self.allow_far_times = allow_far_times
        self._scheduler: _Scheduler | None = None
        self._stale = False
        self._load_lock = threading.Lock()
        self.ready = threading.Event()
        self.stopping = False
        self.writer = GroupCommit(self._run_batch, self.reset, max_batch=max_batch)

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Build the projection (from the newest valid checkpoint, then the journal's
        tail), start the writer, and be ready."""
        self._load()
        self.writer.start()
        self.ready.set()

    def stop(self) -> None:
        """Finish the batch in flight and what is queued; then accept no more decisions."""
        self.stopping = True
        self.writer.stop()

    def close(self) -> None:
        """Release the database connections."""
        self.journal.close()

    def _load(self) -> None:
        with self._load_lock:
            # Opening a session resumes from the newest valid checkpoint and catches up.
            self._scheduler = _Scheduler(self.journal, clock=self.clock)
            self._stale = False

    def reset(self) -> None:
        """Rebuild the projection from the journal: after a batch that did not commit, it
        holds decisions the journal does not. Until this succeeds, nothing is served."""
        self._stale = True
        self._load()

    @property
    def scheduler(self) -> _Scheduler:
        """The scheduler facade on the live session (raises 503 while not usable)."""
        scheduler = self._scheduler
        if scheduler is None or not self.ready.is_set():
            raise Unavailable("the service is starting: the projection is not caught up yet")
        if self._stale:
            try:
                self._load()
            except Exception as exc:
                raise Unavailable(f"the journal cannot be read: {type(exc).__name__}") from exc
            scheduler = self._scheduler
            assert scheduler is not None
        return scheduler

    @property
    def session(self) -> LedgerSession:
        """The live session: its `ledger` is the projection."""
        return session_of(self.scheduler)

    # -- reading --------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Ledger]:
        """The caught-up projection, for the duration of the block (read-only: the writer
        waits until the block ends, and no uncommitted decision is ever visible)."""
        session = self.session
        with session.lock:
            session.catch_up()
            yield session.ledger

    def head(self) -> int:
        """The projection's journal position."""
        return self.session.projector.position

    # -- deciding -------------------------------------------------------------------------

    async def decide(self, command: Command) -> Any:
        """Queue `command` for the writer; its answer once committed (or its error)."""
        if self.stopping:
            raise Unavailable("the service is stopping; retry with the same key")
        return await asyncio.wrap_future(self.writer.submit(command))

    def decide_now(self, command: Command) -> Any:
        """The same, from a thread that is not the event loop's (benchmarks, tests)."""
        return self.writer.submit(command).result()

    def _run_batch(self, commands: Sequence[Command]) -> list[Any]:
        session = self.session
        with session.lock:
            session.catch_up()
            locks: set[str] = set()
            for command in commands:
                locks.update(command.locks(session.ledger))
            with self.journal.transaction(sorted(locks)):
                return run_commands(commands, self)
