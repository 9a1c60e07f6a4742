"""SQLite specifics: durability pragmas, one writer at a time, a busy timeout.

- WAL with synchronous=FULL: a ledger must not lose a committed event on power
  loss. (WAL with synchronous=NORMAL is durable against a process crash but can
  lose the last commits on power loss; FULL fsyncs the WAL at every commit.) WAL
  also lets readers go on while one writer appends.
- BEGIN IMMEDIATE for every write transaction: the write lock is taken at BEGIN,
  so a read-decide-append cannot be overtaken between its read and its append, and
  two writers never both hold a read snapshot and then deadlock on upgrade (the
  SQLITE_BUSY that ignores the busy handler). Positions are then gapless simply
  because one writer at a time reads the head and writes head + 1, head + 2, ...
- busy_timeout = lock_timeout: a writer waits that long for another to commit, then
  gets LockTimeout instead of "database is locked".
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from .backend import Backend
from .errors import ConnectionProblem, JournalError, LockTimeout

# Execution option marking a connection whose next BEGIN must be IMMEDIATE.
_WRITE = "eventstore_write"


class SQLiteBackend(Backend):
    """A SQLite file shared by any number of processes, or one in-memory database."""

    name = "SQLite"

    def __init__(self, url: str, lock_timeout: float) -> None:
        super().__init__(url, lock_timeout)
        database = make_url(url).database
        self.in_memory = database in (None, "", ":memory:")
        # An in-memory database lives in one connection (StaticPool) shared by all
        # threads: sqlite3 cannot run two transactions on one connection, so the
        # journal holds this lock around each use (a transaction: for its duration).
        self._shared = threading.RLock() if self.in_memory else None

    def create_engine(self) -> Engine:
        """An engine with the pragmas set on every new connection."""
        busy_ms = int(self.lock_timeout * 1000)
        connect_args: dict[str, Any] = {"timeout": self.lock_timeout, "check_same_thread": False}
        if self.in_memory:
            engine = create_engine("sqlite://", connect_args=connect_args, poolclass=StaticPool)
        else:
            engine = create_engine(self.url, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            # Let SQLAlchemy's "begin" event emit BEGIN itself (the driver's implicit
            # BEGIN would be DEFERRED).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if not self.in_memory:
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = FULL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get(_WRITE, False)
            # Readers BEGIN deferred: in WAL mode they never wait for the writer.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def guard(self) -> AbstractContextManager[object]:
        """The in-memory database's connection lock; nothing for a file."""
        return self._shared if self._shared is not None else nullcontext()

    @contextmanager
    def begin_write(self, conn: Connection, locks: Sequence[str]) -> Iterator[None]:
        """BEGIN IMMEDIATE: the one write lock covers every key, so keys need nothing more."""
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield

    def translate(self, exc: DBAPIError) -> JournalError | None:
        """'database is locked' -> LockTimeout; cannot open -> ConnectionProblem."""
        text = str(exc.orig)
        if "database is locked" in text or "database is busy" in text:
            return LockTimeout(
                f"SQLite database {self.describe()} stayed locked by another writer for "
                f"{self.lock_timeout:g} s (the lock_timeout); retry, or find the process "
                "holding a long write transaction"
            )
        if "unable to open database file" in text:
            return ConnectionProblem(
                f"cannot open SQLite database {self.describe()}: {text}; check that its "
                "folder exists and is writable"
            )
        if "disk is full" in text:
            return JournalError(
                f"SQLite database {self.describe()}: the disk is full ({text}); nothing of "
                "the failed transaction was stored: free space and retry"
            )
        if isinstance(exc.orig, sqlite3.DatabaseError) and "not a database" in text:
            return ConnectionProblem(
                f"{self.describe()} is not a SQLite database ({text}); check the path"
            )
        return None
