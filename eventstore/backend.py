"""What the journal needs from a database, and nothing else: one small interface.

`journal.py` speaks SQLAlchemy Core against the tables in `schema.py` and asks a
`Backend` only for what really differs between databases: how to open an engine,
how to start a write transaction, how to lock the head and keys, and how to turn a
driver error into a clear journal error. `sqlite.py` and `postgres.py` implement it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Select

from .errors import JournalError
from .schema import journal_head


@dataclass(frozen=True, slots=True)
class Head:
    """The journal's head as an append locked it: the last position and its hash."""

    position: int
    hash: str


def lock_key(key: str) -> int:
    """A stable signed 64-bit number for a lock key (the same in every process)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big", signed=True)


def head_query() -> Select[tuple[int, str]]:
    """The head row, alone in its statement.

    Alone on purpose: on PostgreSQL a SELECT ... FOR UPDATE that waited re-reads
    the locked row, but anything else in the same statement (a join, a subquery)
    still comes from the snapshot taken before the wait. Whatever an append needs
    besides the head is read by the next statement, after the lock is held.
    """
    return select(journal_head.c.position, journal_head.c.hash).where(journal_head.c.id == 1)


#: The events columns in the order `Backend.insert_events` receives them.
EVENT_COLUMNS = (
    "position",
    "event_id",
    "stream",
    "version",
    "type",
    "event_time",
    "recorded_at",
    "payload",
    "hash",
)

EventRow = tuple[int, str, str, int, str, int, int, str, str]


class Backend:
    """The database-specific part of a SQL journal; one instance per Journal."""

    #: Shown in messages: "SQLite" or "PostgreSQL".
    name = "SQL"
    #: The driver's positional parameter marker.
    placeholder = "?"

    def __init__(self, url: str, lock_timeout: float) -> None:
        self.url = url
        self.lock_timeout = lock_timeout

    def create_engine(self) -> Engine:
        """Open the SQLAlchemy engine, with this database's settings."""
        raise NotImplementedError

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

    def lock_head(self, conn: Connection) -> Head:
        """Read the head for an append, so that no other append can interleave."""
        row = conn.execute(head_query()).one()
        return Head(row[0], row[1])

    def insert_events(self, conn: Connection, rows: Sequence[EventRow]) -> None:
        """Insert a batch of event rows in one driver call (executemany).

        Straight to the driver with positional parameters: SQLAlchemy's per-row
        parameter processing would cost more than the database's own work.
        """
        marks = ", ".join([self.placeholder] * len(EVENT_COLUMNS))
        sql = f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES ({marks})"
        conn.exec_driver_sql(sql, list(rows))

    def translate(self, exc: DBAPIError) -> JournalError | None:
        """A clear journal error for a driver error, or None to let it through."""
        return None

    def describe(self) -> str:
        """Where the database is, for messages (no password)."""
        return make_url(self.url).render_as_string(hide_password=True)


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


def backend_for(url: str | None, lock_timeout: float) -> Backend:
    """The backend for a URL: None or sqlite:... -> SQLite, postgresql... -> PostgreSQL."""
    from .postgres import PostgresBackend
    from .sqlite import SQLiteBackend

    if url is None:
        return SQLiteBackend("sqlite://", lock_timeout)
    if not isinstance(url, str):
        raise ValueError(f"a journal URL must be a str or None, got {type(url).__name__}")
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite" or scheme.startswith("sqlite+"):
        return SQLiteBackend(url, lock_timeout)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        # Only psycopg 3 is installed: accept the bare scheme and mean it.
        rest = url.split(":", 1)[1]
        return PostgresBackend("postgresql+psycopg:" + rest, lock_timeout)
    raise ValueError(
        f"unsupported journal URL {url!r}: use sqlite:///path.db or "
        "postgresql+psycopg://user@host:port/database (or None for in-memory)"
    )
