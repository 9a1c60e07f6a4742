"""What the journal needs from a database, and nothing else: one small interface.

`journal.py` speaks SQLAlchemy Core against the tables in `schema.py` for reads
and housekeeping, and asks a `Backend` for what really differs between databases:
opening an engine, starting a write transaction, taking lock keys, the append's
own round trips (lock the head, probe, write), and turning a driver error into a
clear journal error. `backends/sqlite.py` and `backends/postgres.py` implement it;
`backends/__init__.py` chooses one by URL scheme.

The append path goes to the driver directly with fixed SQL texts: SQLAlchemy's
per-statement work (compiling, cache keys, per-row parameter processing) would
cost more than the database's own work for small events.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from .errors import JournalError
from .records import StoredRow
from .schema import request_keys


@dataclass(frozen=True, slots=True)
class Probe:
    """What an append found once it held the head: enough to decide and chain."""

    position: int  # the last position (0 when empty)
    hash: str  # its hash (the genesis hash when empty)
    recorded_at: int  # its recorded_at (0 when empty)
    versions: dict[str, int]  # current version of each stream asked about (absent: 0)
    any_existing: bool  # whether any of the ids asked about is already recorded
    # The last stored record's position and hash (0 and "" when none), read with the
    # head: an append chains from the head row, so the two must agree.
    last_position: int = 0
    last_hash: str = ""
    any_bound: bool = False  # whether a request key that must still be free is bound


BOUND_CHUNK = 900
"""Request keys `Backend.bound` asks about in one statement (SQLite's old builds allow
999 bound parameters)."""


@dataclass(frozen=True, slots=True)
class BatchRow:
    """The `batches` row an append writes with its events: positions `first`..`last`
    were appended together. `extend`: the transaction's row exists already (an earlier
    append of it); move its end to `last` instead of inserting one."""

    first: int
    last: int
    extend: bool


# A row reaching these positions can only be left from rows deleted behind the journal's
# back (a truncated copy appended to again): it describes nothing now, so it goes first.
BATCH_CLEAR = "DELETE FROM batches WHERE last_position >= {p}"
BATCH_INSERT = "INSERT INTO batches (first_position, last_position) VALUES ({p}, {p})"
BATCH_EXTEND = "UPDATE batches SET last_position = {p} WHERE first_position = {p}"


def batch_statements(row: BatchRow | None, placeholder: str) -> list[tuple[str, tuple[int, ...]]]:
    """The driver statements (with `placeholder` for the driver's parameters) that write
    `row`."""
    if row is None:
        return []
    p = placeholder
    if row.extend:
        return [(BATCH_EXTEND.format(p=p), (row.last, row.first))]
    return [(BATCH_CLEAR.format(p=p), (row.first,)),
            (BATCH_INSERT.format(p=p), (row.first, row.last))]


RequestRow = tuple[str, str, str, int, int, int | None, int | None]
"""A `request_keys` row as `RequestKey` holds it (key, fingerprint, answer, position,
recorded_at, first_position, last_position)."""

REQUEST_INSERT = ("INSERT INTO request_keys (key, fingerprint, answer, position, "
                  "recorded_at, first_position, last_position) VALUES ({p}, {p}, {p}, {p}, "
                  "{p}, {p}, {p})")


def request_statements(rows: Sequence[RequestRow], placeholder: str
                       ) -> list[tuple[str, tuple[object, ...]]]:
    """The driver statements that write `rows` (a key bound already makes the insert,
    and so the transaction, fail)."""
    sql = REQUEST_INSERT.format(p=placeholder)
    return [(sql, row) for row in rows]


_HEAD = "SELECT coalesce(max(position), 0) FROM events"
_HEAD_HOLDING = ("SELECT coalesce(max(position), 0), (SELECT hash FROM events WHERE "
                 "position = {p}) FROM events")

SHARED = "shared:"
"""Prefix of a lock key taken in shared mode (see PostgresBackend.lock_more)."""

FIRST = "*"
"""A lock key whose name begins with this comes first in the lock order, with the keys
taken shared, whether a transaction takes it shared or whole: a key that some
transactions share and others take whole (the scheduler's queue) must be so named, so
that it stands at one place in every transaction's order."""


@lru_cache(maxsize=65_536)
def lock_key(key: str) -> int:
    """A stable signed 64-bit number for a lock key (the same in every process).

    Cached: a service takes the same accounts' keys batch after batch (a batch of 100
    events to 100 accounts hashed 100 keys)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big", signed=True)


def dbapi(conn: Connection) -> Any:
    """The driver's own connection under a SQLAlchemy connection."""
    return conn.connection.dbapi_connection


class Backend:
    """The database-specific part of a SQL journal; one instance per Journal."""

    #: Shown in messages: "SQLite" or "PostgreSQL".
    name = "SQL"
    #: The driver's base exception, wrapped like SQLAlchemy would on the direct path.
    driver_error: type[Exception] = Exception
    #: Whether a journal has its database to itself (a SQLite file), so that tables of
    #: other names there, without a journal, are another application's: refused rather
    #: than given the journal's. A PostgreSQL schema may be shared (docs/operations.md).
    own_database = False

    def __init__(self, url: str, lock_timeout: float, *, read_only: bool = False) -> None:
        self.url = url
        self.lock_timeout = lock_timeout
        #: Connections refuse every write (SQLite: mode=ro; PostgreSQL: read-only
        #: transactions), so a reader cannot change the database even by mistake.
        self.read_only = read_only

    def require_existing(self) -> None:
        """Raise JournalNotFound if the database is not already there (nothing is created).

        Only a file database can be missing; a server database that does not exist
        fails to connect.
        """

    def prepare(self) -> None:
        """Before the first connection of a journal that may create its database."""

    def unwritable(self) -> str | None:
        """Why the database cannot be written where it is, seen without writing (None:
        nothing says so; a write may still be refused)."""
        return None

    def upgrade_advice(self) -> str:
        """What to do about a journal schema older than the code's."""
        return "run `gpu-credits db upgrade`"

    def create_engine(self) -> Engine:
        """Open the SQLAlchemy engine, with this database's settings."""
        raise NotImplementedError

    #: Whether a thread may keep a pooled connection between transactions
    #: (`Journal.keeping_connection`).
    keeps_connections = False

    def reusable(self, conn: Connection) -> bool:
        """Whether a kept connection may serve the next transaction, as the pool would
        judge it before handing it out."""
        return not (conn.closed or conn.invalidated or conn.in_transaction())

    def idle(self, conn: Connection) -> None:
        """A kept connection's transaction has ended (as the pool notes a check-in)."""

    def guard(self) -> AbstractContextManager[object]:
        """Held around every use of a connection; only a shared in-memory database needs it."""
        return nullcontext()

    @contextmanager
    def begin_write(self, conn: Connection, locks: Sequence[str]) -> Iterator[None]:
        """A write transaction on conn, holding the given lock keys until it ends."""
        with conn.begin():
            yield

    def lock_more(self, conn: Connection, locks: Sequence[str]) -> None:
        """Take more lock keys inside an open write transaction."""

    def try_lock_more(self, conn: Connection, locks: Sequence[str]) -> bool:
        """Take more lock keys inside an open write transaction without waiting for any:
        whether every one was taken (a prefix of them may be held either way, until the
        transaction ends). By default as `lock_more`: one write lock covers every key."""
        self.lock_more(conn, locks)
        return True

    def own_transaction(self, conn: Connection) -> AbstractContextManager[object]:
        """Around a write transaction that `begin_lock_and_probe` opens and `write(...,
        commit=True)` ends (`Journal.append_at`); by default `begin_write` without keys,
        which commits as it ends."""
        return self.begin_write(conn, ())

    def begin_lock_and_probe(self, conn: Connection, locks: Sequence[str], ids: Sequence[str],
                             streams: Sequence[str], unbound: Sequence[str] = ()) -> Probe:
        """In `own_transaction`: take the keys, then lock the head and probe (one round
        trip where the database allows); `unbound`: request keys to report as bound
        (`Probe.any_bound`) if one is."""
        self.lock_more(conn, locks)
        probe = self.lock_and_probe(conn, ids, streams)
        if unbound and self.bound(conn, unbound):
            return dataclasses.replace(probe, any_bound=True)
        return probe

    def one_statement(self, conn: Connection) -> AbstractContextManager[object]:
        """Around one read statement on conn, outside a transaction; by default in one
        (a database whose transactions cost no round trip)."""
        return conn.begin()

    def head(self, conn: Connection) -> int:
        """The last position (0 when empty), asked of the driver directly: a writer asks
        it before every batch, and SQLAlchemy's statement machinery cost four times the
        query (about 260 us against 70 on PostgreSQL)."""
        with self.direct(conn):
            return int(dbapi(conn).execute(_HEAD).fetchone()[0])

    #: The driver's parameter placeholder.
    placeholder = "?"

    def head_holding(self, conn: Connection, position: int) -> tuple[int, str | None]:
        """The last position and the chain hash stored at `position` (None when no
        record is there), in one statement, asked of the driver as `head` is."""
        with self.direct(conn):
            row = dbapi(conn).execute(_HEAD_HOLDING.format(p=self.placeholder),
                                      (position,)).fetchone()
        return int(row[0]), row[1]

    def head_and_existing(self, conn: Connection, ids: Sequence[str]
                          ) -> tuple[int, list[StoredRow]]:
        """The last position and the recorded rows among these ids, as of one moment."""
        return self.head(conn), self.existing(conn, ids)

    def head_existing_and_bound(self, conn: Connection, ids: Sequence[str],
                                keys: Sequence[str]) -> tuple[int, list[StoredRow], list[str]]:
        """`head_and_existing`, and which of these request keys are bound, as of one
        moment."""
        head, rows = self.head_and_existing(conn, ids)
        return head, rows, self.bound(conn, keys)

    def bound(self, conn: Connection, keys: Sequence[str]) -> list[str]:
        """Which of these request keys are bound (asked `BOUND_CHUNK` at a time: a
        statement's parameters are bounded)."""
        found: list[str] = []
        for start in range(0, len(keys), BOUND_CHUNK):
            chunk = keys[start:start + BOUND_CHUNK]
            found += conn.execute(select(request_keys.c.key)
                                  .where(request_keys.c.key.in_(chunk))).scalars()
        return found

    def lock_and_probe(self, conn: Connection, ids: Sequence[str], streams: Sequence[str]) -> Probe:
        """Lock the head so no other append can interleave, then read what the append needs."""
        raise NotImplementedError

    def existing(self, conn: Connection, ids: Sequence[str]) -> list[StoredRow]:
        """The recorded rows among these ids (columns in `COLUMNS` order)."""
        raise NotImplementedError

    def write(self, conn: Connection, rows: Sequence[StoredRow],
              private: Sequence[tuple[int, str, str]] = (),
              batch: BatchRow | None = None, *, commit: bool = False,
              requests: Sequence[RequestRow] = ()) -> None:
        """Insert the rows in one bulk call and move the head to the last of them; store
        the private parts (position, salt, text) of those that have one, the batch's
        row and the request keys bound with them. `commit`: nothing follows in the
        transaction, so it may be committed with the write where that saves a round trip
        (else it commits as it ends, as usual)."""
        raise NotImplementedError

    def before_erase(self, conn: Connection) -> None:
        """Inside the erasing transaction, before private parts are deleted."""

    def after_erase(self, engine: Engine) -> tuple[str, ...]:
        """After an erasure committed: make the deleted parts unreadable in the database's
        files where the database allows; notes on what it could not do."""
        return ()

    @contextmanager
    def direct(self, conn: Connection) -> Iterator[None]:
        """Around direct driver calls: handle driver errors as SQLAlchemy would.

        The error is wrapped in SQLAlchemy's DBAPIError (so `translate` sees one
        kind of error), and a connection the error shows dead is invalidated, so
        the pool never hands it out again.
        """
        try:
            yield
        except self.driver_error as exc:
            gone = conn.dialect.is_disconnect(exc, dbapi(conn), None)  # type: ignore[arg-type]
            if gone:
                conn.invalidate(exc)
            raise DBAPIError.instance(
                None, None, exc, self.driver_error, connection_invalidated=gone
            ) from exc

    def translate(self, exc: DBAPIError) -> JournalError | None:
        """A clear journal error for a driver error, or None to let it through."""
        return None

    def translate_read(self, exc: DBAPIError) -> JournalError | None:
        """As `translate`, for an error of a connection that only read (in a read
        transaction of its own): nothing of it can have been written."""
        return self.translate(exc)

    #: Whether `append_at` may leave the check of recorded ids to the insert: the
    #: database refuses a recorded id with an error `recorded_id` recognises, and the
    #: refusal ends the transaction with nothing written.
    refuses_recorded_ids = False

    def recorded_id(self, exc: DBAPIError) -> bool:
        """Whether `exc` is the insert refusing an event id recorded already."""
        return False

    def describe(self) -> str:
        """Where the database is, for messages (no password)."""
        return make_url(self.url).render_as_string(hide_password=True)


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages."""
    return _PASSWORD.sub(r"\1***@", url)


@contextmanager
def translating(backend: Backend) -> Iterator[None]:
    """Turn a driver error into a clear JournalError where the backend knows one."""
    try:
        yield
    except DBAPIError as exc:
        err = backend.translate(exc)
        if err is None:
            raise
        raise err from exc
