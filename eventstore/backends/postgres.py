"""PostgreSQL specifics: how positions stay gapless and commit-ordered.

The technique: one counter row, `journal_head` (last position, last hash). Every
append transaction locks it with SELECT ... FOR UPDATE, takes positions head+1..
head+n, inserts the events, updates the row, and commits. The row lock is held
until commit, so:

- gapless: a transaction that rolls back (an error, a killed client) never
  published its numbers, and the next writer gets the same ones again;
- commit-ordered: position p+1 cannot commit before p, because its writer waited
  for p's writer to commit. A reader that has seen everything up to p can resume
  with after_position=p and never miss a position that commits later;
- chained: the row also carries the previous hash, so hashes are computed in
  Python with no extra query.

Why not a SEQUENCE (or IDENTITY/BIGSERIAL)? nextval() is non-transactional: a
rolled-back insert burns its number (a hole), and two writers can take n and n+1
and commit in the order n+1, n, so a reader at n+1 silently misses n. Why not
LOCK TABLE events IN EXCLUSIVE MODE? It serialises appends as well, but it also
conflicts with the SHARE UPDATE EXCLUSIVE lock that (auto)VACUUM and CREATE INDEX
CONCURRENTLY need, so a busy journal would starve its own maintenance; and it still
needs a max(position) query and the last hash, which the head row carries for
free. The cost is the same either way: appends are serialised for the few
milliseconds between lock and commit. Batches amortise that; reads never take it.

Read-decide-append transactions use pg_advisory_xact_lock on their own keys
first, so two decisions about different keys run their reads in parallel and
only queue on the head row for their short append.

Connections: the pool checks a connection before handing it out, so one that died
while idle (server restart, pg_terminate_backend, a firewall that drops idle sockets)
is replaced before anything is sent on it: the call goes on as if nothing happened,
instead of failing with "may or may not have committed". The check costs no round
trip: a server that ends a session says so on its socket (see `_alive`); only a
connection idle for more than `PING_AFTER_IDLE` seconds is pinged. Any
other connection failure becomes one ConnectionProblem line; the pool's own log
records of failed resets are kept off stderr (the error the caller gets says it).
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError

from ..backend import (
    FIRST,
    SHARED,
    Backend,
    BatchRow,
    Probe,
    RequestRow,
    batch_statements,
    dbapi,
    lock_key,
    request_statements,
)
from ..errors import (
    CommitOutcomeUnknown,
    ConnectionProblem,
    JournalError,
    LockOrderConflict,
    LockTimeout,
    ReadOnlyJournal,
)
from ..records import COLUMNS, COLUMNS_SQL, StoredRow

NUL = "\x00"
_LOCK_NOT_AVAILABLE = "55P03"
_QUERY_CANCELED = "57014"
_DEADLOCK_DETECTED = "40P01"
_READ_ONLY_TRANSACTION = "25006"
_DISK_FULL = "53100"
INSUFFICIENT_PRIVILEGE = "42501"
_UNIQUE_VIOLATION = "23505"
_UNIQUE_EVENT_ID = "uq_events_event_id"  # schema.py's naming convention
#: SQLSTATE classes and codes meaning the connection is gone: connection exceptions,
#: and the server ending the session (admin shutdown, crash shutdown, cannot connect now).
_CONNECTION_GONE = ("08", "57P01", "57P02", "57P03")

# A connection that dies in the pool makes SQLAlchemy log "Exception during reset or
# similar" with a traceback; with no logging configured, Python's last-resort handler
# prints it on stderr. The caller already gets one clear error for the same failure,
# so the pool's logger gets a handler of its own that prints nothing. An application
# that configures logging still sees the records (they propagate to its handlers).
logging.getLogger("sqlalchemy.pool").addHandler(logging.NullHandler())
# Likewise psycopg's "error ignored terminating <Pipeline ...>: pipeline aborted", logged
# when a statement of a pipelined append failed (a write this user may not make).
logging.getLogger("psycopg").addHandler(logging.NullHandler())


#: libpq settings every connection gets unless the URL sets them itself. Without them a
#: server that vanished (powered off, a network partition, a failover that left the old
#: address silent) holds a statement in flight for the kernel's retransmission limit,
#: about 15 minutes on Linux, with the service's writer and every client waiting on it.
#: Keepalives find a silent peer under an idle or waiting connection within 30 + 3 x 10 s;
#: `tcp_user_timeout` (ms) ends one whose sent data stays unacknowledged for 60 s. A
#: server that is merely slow still acknowledges at the TCP level and is not cut off.
CONNECTION_DEFAULTS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}


def connection_defaults(url: str) -> dict[str, int]:
    """`CONNECTION_DEFAULTS` less what `url`'s query sets (the operator's choice wins)."""
    given = make_url(url).query
    return {k: v for k, v in CONNECTION_DEFAULTS.items() if k not in given}


class PostgresBackend(Backend):
    """A PostgreSQL database through psycopg 3."""

    name = "PostgreSQL"
    driver_error = psycopg.Error
    #: From this many rows on, an append writes with COPY instead of one INSERT of arrays
    #: (client CPU per row about equal at 5,000 rows, where COPY asks less of the server;
    #: at 100 rows the INSERT cost 10 % less and joins the pipeline of the head's update).
    copy_from = 1000

    placeholder = "%s"

    def __init__(self, url: str, lock_timeout: float, *, read_only: bool = False) -> None:
        super().__init__(url, lock_timeout, read_only=read_only)
        # A raw '@' in a password: the URL parser ends the password at the first '@' and
        # takes the rest for the host, which every message then shows (the password's
        # tail, in "cannot reach PostgreSQL at ..."). Refused before anything is shown.
        authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
        if authority.count("@") > 1:
            raise ValueError(
                "the PostgreSQL URL holds '@' more than once before its host: a user name "
                "or password holding '@' must write it %40 (and ':' %3A, '/' %2F); the URL "
                "is not shown, as it would show part of the password")

    def create_engine(self) -> Engine:
        """A pooled engine; connecting gives up after 10 s with a clear error, and a
        server that vanished (see `CONNECTION_DEFAULTS`) is found within about a minute.

        Every connection bounds its lock waits (head row, advisory keys) by
        lock_timeout, set once per connection rather than per transaction: one
        round trip less on every append.
        """
        engine = create_engine(self.url, connect_args=connection_defaults(self.url))
        ms = max(1, int(self.lock_timeout * 1000))
        read_only = "SET default_transaction_read_only = on" if self.read_only else None

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: psycopg.Connection[object], _record: object) -> None:
            dbapi_conn.execute(f"SET lock_timeout = {ms}")
            if read_only:
                dbapi_conn.execute(read_only)
            dbapi_conn.commit()

        @event.listens_for(engine, "checkin")
        def _on_checkin(_conn: object, record: Any) -> None:
            record.info["idle_since"] = time.monotonic()

        @event.listens_for(engine, "checkout")
        def _on_checkout(dbapi_conn: psycopg.Connection[object], record: Any,
                         _proxy: object) -> None:
            if not _alive(dbapi_conn, record.info.get("idle_since")):
                # The pool drops this connection and hands out a fresh one instead.
                raise DisconnectionError("the pooled connection was closed by the server")

        return engine

    keeps_connections = True

    def reusable(self, conn: Connection) -> bool:
        """As the pool's checkout judges it (`_alive`), and idle at the driver too: the
        journal's own transactions send BEGIN and COMMIT past SQLAlchemy, so a session
        left inside one (which the pool's rollback on check-in would have ended) is not
        handed on."""
        raw = dbapi(conn)
        return (super().reusable(conn) and _alive(raw, conn.info.get("idle_since"))
                and raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)

    def idle(self, conn: Connection) -> None:
        conn.info["idle_since"] = time.monotonic()

    @contextmanager
    def begin_write(self, conn: Connection, locks: Sequence[str]) -> Iterator[None]:
        """BEGIN, then take the key locks (the head row is locked by the append)."""
        with conn.begin():
            self.lock_more(conn, locks)
            yield

    @contextmanager
    def one_statement(self, conn: Connection) -> Iterator[None]:
        """In autocommit: the driver would send BEGIN, then the statement, then COMMIT,
        three round trips where one does (a statement is its own snapshot)."""
        raw = dbapi(conn)
        with self.direct(conn):
            raw.autocommit = True
        try:
            yield
        finally:
            if not (raw.closed or raw.broken):
                raw.autocommit = False

    @contextmanager
    def own_transaction(self, conn: Connection) -> Iterator[None]:
        """The driver in autocommit, so that it sends no BEGIN of its own (a round trip):
        `begin_lock_and_probe` sends BEGIN with its statements, `write(..., commit=True)`
        COMMIT with its own; anything raised in between rolls back."""
        raw = dbapi(conn)
        with self.direct(conn):
            raw.autocommit = True
        try:
            yield
            if raw.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with self.direct(conn):
                    raw.commit()
        except BaseException:
            if not (raw.closed or raw.broken):
                with self.direct(conn):
                    raw.rollback()
            raise
        finally:
            if not (raw.closed or raw.broken):
                raw.autocommit = False

    def begin_lock_and_probe(self, conn: Connection, locks: Sequence[str], ids: Sequence[str],
                             streams: Sequence[str], unbound: Sequence[str] = ()) -> Probe:
        """BEGIN, every key tried without waiting and, if all were free, the head locked,
        then the probe: one query string, one round trip (the simple protocol runs each
        statement on a snapshot of its own, so the probe, after the head's lock, sees the
        append before it). A key held elsewhere leaves the head unlocked: then the keys
        are taken as `lock_more` takes them and the head locked after them, the global
        order kept."""
        ordered = self._ordered(conn, locks)
        raw = dbapi(conn)
        params = {"keys": "{" + ",".join([str(k) for k, _ in ordered]) + "}",
                  "shared": "{" + ",".join(["t" if shared else "f"
                                            for _, (_, shared) in ordered]) + "}",
                  "ids": text_array(ids), "streams": text_array(streams),
                  "unbound": text_array(unbound)}
        self._prepare(conn)
        with self._naming("the journal head row (every append queues there)"), self.direct(conn):
            cur = _kept_cursor(conn, "locks_head_probe", client=True)
            try:
                cur.execute(_EXECUTE_BEGIN_LOCKS_HEAD_PROBE, params)
            except psycopg.errors.InvalidSqlStatementName:
                # The driver deallocates every statement of the session after a rollback
                # once it has prepared some of its own. The transaction failed at its
                # first statement, holding nothing: end it, prepare again, begin again.
                raw.rollback()
                self._prepare(conn, again=True)
                cur.execute(_EXECUTE_BEGIN_LOCKS_HEAD_PROBE, params)
            cur.nextset()
            head = cur.fetchone()
            cur.nextset()
            probe = cur.fetchone()
        assert probe is not None  # the probe is one row of aggregates
        last, last_position, last_hash, any_existing, versions, any_bound = probe
        if head is None:  # a key was held: wait for the keys in order, then the head
            self.lock_more(conn, locks)
            return self.lock_and_probe(conn, ids, streams, unbound)
        return Probe(head[0], head[1], last or 0,
                     {s: v for s, v in zip(streams, versions, strict=True) if v},
                     bool(any_existing), last_position or 0, last_hash or "",
                     bool(any_bound))

    def _prepare(self, conn: Connection, *, again: bool = False) -> None:
        """The append's statements prepared on this connection, once in its life (see
        `_PREPARED`); `again`: they were found deallocated."""
        info = conn.info
        if info.get(_PREPARED_KEY) and not again:
            return
        raw = dbapi(conn)
        with self.direct(conn):
            # In `own_transaction` the driver is in autocommit: PREPARE runs on its own,
            # outside the append's transaction (a prepared statement outlives a rollback).
            raw.execute(";".join(_PREPARED), prepare=False)
        info[_PREPARED_KEY] = True

    def _ordered(self, conn: Connection, locks: Sequence[str]) -> _Ordered:
        """The keys' lock numbers, each with its name and whether it is shared, in the
        global order every writer takes them in (shared keys and keys named `*...` first,
        then by number)."""
        # Advisory locks are database-wide, journals are per schema: two journals in one
        # database must not lock each other out, so the schema is part of every key.
        return _ordered_keys(self._namespace(conn), tuple(locks))

    def lock_more(self, conn: Connection, locks: Sequence[str]) -> None:
        """pg_advisory_xact_lock per key, in one global order so two writers cannot deadlock.

        A key written `shared:NAME` takes NAME's lock in shared mode: many holders at once,
        excluded only by an exclusive holder of NAME (e.g. the scheduler's queue, read by
        every submit and taken whole by start_next).
        """
        ordered = self._ordered(conn, locks)
        if not ordered:
            return
        raw = dbapi(conn)
        if len(ordered) > 1:
            # Most keys are free: one statement tries them all, in order, without waiting,
            # and stops at the first one another transaction holds. Per key, a statement
            # each would cost more than the rest of a batch's database work (a batch of
            # 100 events to 100 accounts took 100). Stopping there keeps the global order:
            # what is held is a prefix of it, and the rest is waited for in order below.
            ordered = ordered[self._try_prefix(conn, ordered):]
            if not ordered:
                return
        # One round trip for the rest: pipelined, the statements still run one after the
        # other in this order, each waiting for its key, and a lock that times out aborts
        # the rest. The first statement without a result names that key.
        cursors = []
        try:
            with self.direct(conn), raw.pipeline():
                for k, (_, shared) in ordered:
                    cur = raw.cursor()
                    cur.execute(_LOCK_SHARED if shared else _LOCK, (k,))
                    cursors.append(cur)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) in (_LOCK_NOT_AVAILABLE, _QUERY_CANCELED):
                failed = next((i for i, c in enumerate(cursors) if c.pgresult is None),
                              len(ordered) - 1)
                name, shared = ordered[failed][1]
                raise self._lock_timeout(
                    f"the {'shared ' if shared else ''}lock on key {name!r}") from exc
            raise
        finally:
            for cur in cursors:
                cur.close()

    def try_lock_more(self, conn: Connection, locks: Sequence[str]) -> bool:
        """`lock_more` without waiting: every key tried in the global order, stopping at
        the first one another transaction holds; whether all were taken."""
        ordered = self._ordered(conn, locks)
        return not ordered or self._try_prefix(conn, ordered) == len(ordered)

    def _try_prefix(self, conn: Connection,
                    ordered: Sequence[tuple[int, tuple[str, bool]]]) -> int:
        """How many of the ordered keys one statement took, trying each without waiting
        until one is held elsewhere. The arrays go as array literals: the driver's list
        adaptation costs more than the statement for a hundred keys. Pipelined, the
        transaction's BEGIN goes in the same round trip."""
        raw = dbapi(conn)
        with self._naming("a lock key"), self.direct(conn):
            with raw.pipeline():
                cur = raw.execute(_TRY_LOCKS, {
                    "keys": "{" + ",".join([str(k) for k, _ in ordered]) + "}",
                    "shared": "{" + ",".join(["t" if shared else "f"
                                              for _, (_, shared) in ordered]) + "}",
                })
            got: int = cur.fetchone()[0]
        return got

    def _namespace(self, conn: Connection) -> str:
        """The journal's schema (cached: a journal's search_path does not change)."""
        cached: str | None = getattr(self, "_schema", None)
        if cached is None:
            cached = str(conn.execute(text("SELECT current_schema()")).scalar_one())
            self._schema = cached
        return cached

    @contextmanager
    def _naming(self, lock: str) -> Iterator[None]:
        """A lock wait that times out says which lock it was."""
        try:
            yield
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) in (_LOCK_NOT_AVAILABLE, _QUERY_CANCELED):
                raise self._lock_timeout(lock) from exc
            raise

    def _lock_timeout(self, lock: str) -> LockTimeout:
        return LockTimeout(
            f"PostgreSQL {self.describe()}: {lock} was not granted within "
            f"{self.lock_timeout:g} s (the lock_timeout): another transaction holds it; "
            "retry, or look for a long transaction in pg_stat_activity"
        )

    def lock_and_probe(self, conn: Connection, ids: Sequence[str], streams: Sequence[str],
                       unbound: Sequence[str] = ()) -> Probe:
        """Lock the head row FOR UPDATE, then probe: one round trip (a pipeline).

        Two statements on purpose: a SELECT ... FOR UPDATE that waited re-reads the
        locked row, but anything else in the same statement would still come from
        the snapshot taken before the wait. The probe, a separate statement, gets a
        fresh snapshot (READ COMMITTED) that already includes the previous append.
        Pipelined, the pair (and the transaction's BEGIN) costs one round trip.
        """
        raw = dbapi(conn)
        with self._naming("the journal head row (every append queues there)"), self.direct(conn):
            with raw.pipeline():
                head = raw.execute(_LOCK_HEAD)
                probe = raw.execute(_PROBE, (text_array(ids), text_array(streams),
                                             text_array(unbound)))
            position, digest = head.fetchone()
            last, last_position, last_hash, any_existing, versions, any_bound = (
                probe.fetchone())
        return Probe(
            position,
            digest,
            last or 0,
            {s: v for s, v in zip(streams, versions, strict=True) if v},
            bool(any_existing),
            last_position or 0,
            last_hash or "",
            bool(any_bound),
        )

    def head_and_existing(self, conn: Connection, ids: Sequence[str]
                          ) -> tuple[int, list[StoredRow]]:
        """One statement (one snapshot, one round trip): a group commit asks both before
        every batch."""
        with self.direct(conn):
            cur = _kept_cursor(conn, "head_and_existing")
            found = cur.execute(_HEAD_AND_EXISTING, (text_array(ids),)).fetchall()
        return int(found[0][0]), [row[1:] for row in found if row[1] is not None]

    def head_existing_and_bound(self, conn: Connection, ids: Sequence[str],
                                keys: Sequence[str]) -> tuple[int, list[StoredRow], list[str]]:
        """One statement, as `head_and_existing`: a group commit of single writes asks
        this before every batch."""
        with self.direct(conn):
            cur = _kept_cursor(conn, "head_existing_and_bound")
            found = cur.execute(_HEAD_EXISTING_AND_BOUND,
                                (text_array(keys), text_array(ids))).fetchall()
        return (int(found[0][0]), [row[2:] for row in found if row[2] is not None],
                list(found[0][1]))

    def existing(self, conn: Connection, ids: Sequence[str]) -> list[StoredRow]:
        """The recorded rows among these ids."""
        with self.direct(conn):
            return list(dbapi(conn).execute(_EXISTING, (text_array(ids),)))

    def write(self, conn: Connection, rows: Sequence[StoredRow],
              private: Sequence[tuple[int, str, str]] = (),
              batch: BatchRow | None = None, *, commit: bool = False,
              requests: Sequence[RequestRow] = ()) -> None:
        """Insert the rows (and private parts), move the head, write the batch's row: one
        pipelined round trip, or COPY then one pipelined round trip. With `commit`, the
        COMMIT joins that round trip: an error of any statement before it aborts the
        transaction, and the COMMIT then ends it with nothing written (the error is
        raised here, as it would be without).

        COPY is several times faster than INSERT for a large batch but cannot join
        a pipeline. Either way it all runs inside the append's transaction.
        """
        raw = dbapi(conn)
        last = (rows[-1][0], rows[-1][8])
        after: list[tuple[str, tuple[object, ...]]] = [
            *batch_statements(batch, "%s"), *request_statements(requests, "%s")]
        with self.direct(conn):
            if commit and not private and len(rows) < self.copy_from:
                # In `own_transaction`: the statements and the COMMIT as one query string,
                # one message and one round trip (a pipeline sends each statement in a
                # write of its own, and syncs once more as it ends). An error in any of
                # them skips the rest, COMMIT included, and the transaction rolls back.
                self._prepare(conn)
                cur = _kept_cursor(conn, "write", client=True)
                cur.execute(_write_and_commit(tuple(q for q, _ in after)),
                            [*_columns(rows, _EVENT_ARRAYS), *last,
                             *(p for _, params in after for p in params)])
                return
            if len(rows) < self.copy_from:
                # One statement for all the rows, each column one array literal: a
                # statement per row (executemany) cost the driver more than the insert.
                with raw.pipeline(), raw.cursor() as cur:
                    cur.execute(_INSERT_ARRAYS, _columns(rows, _EVENT_ARRAYS))
                    if private:
                        cur.execute(_INSERT_PRIVATE_ARRAYS, _columns(private, _PRIVATE_ARRAYS))
                    cur.execute(_MOVE_HEAD, last)
                    for sql, params in after:
                        cur.execute(sql, params)
                    if commit:
                        raw.commit()
                return
            with raw.cursor() as cur:
                with cur.copy(f"COPY events ({COLUMNS_SQL}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                if private:
                    with cur.copy("COPY private_parts (position, salt, data) FROM STDIN") as cp:
                        for part in private:
                            cp.write_row(part)
                with raw.pipeline():
                    cur.execute(_MOVE_HEAD, last)
                    for sql, params in after:
                        cur.execute(sql, params)
                    if commit:
                        raw.commit()

    def after_erase(self, engine: Engine) -> tuple[str, ...]:
        """VACUUM FULL the private parts: a deleted row stays in the table's file until the
        table is rewritten (a plain VACUUM only marks its space free)."""
        try:
            with engine.connect() as conn:
                auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                auto.exec_driver_sql("VACUUM FULL private_parts")
        except DBAPIError as exc:
            first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else ""
            return (f"PostgreSQL could not rewrite the private_parts table now ({first}): the "
                    "erased rows are deleted but their bytes stay in the table's files until "
                    "`VACUUM FULL private_parts` runs; run it, or `gpu-credits erase` again",)
        return ()

    # A refused statement aborts the transaction, and `write` sends the rows and the
    # COMMIT together: a recorded id leaves nothing written.
    refuses_recorded_ids = True

    def recorded_id(self, exc: DBAPIError) -> bool:
        orig = exc.orig
        return (getattr(orig, "sqlstate", None) == _UNIQUE_VIOLATION
                and isinstance(orig, psycopg.Error)
                and orig.diag.constraint_name == _UNIQUE_EVENT_ID)

    def translate_read(self, exc: DBAPIError) -> JournalError | None:
        if exc.connection_invalidated:
            # Lost while reading: no COMMIT of ours was in doubt, whatever the driver saw.
            u = make_url(self.url)
            orig = exc.orig
            first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
            return ConnectionProblem(
                f"lost the connection to PostgreSQL at {u.host or 'localhost'}:"
                f"{u.port or 5432} while reading ({first}); nothing was written: run it again")
        return self.translate(exc)

    def translate(self, exc: DBAPIError) -> JournalError | None:
        """Lock waits -> LockTimeout; unreachable server or lost connection ->
        ConnectionProblem; a full disk -> JournalError saying so."""
        orig = exc.orig
        state = getattr(orig, "sqlstate", None)
        if state in (_LOCK_NOT_AVAILABLE, _QUERY_CANCELED):
            return self._lock_timeout("a journal lock")
        if state == _DEADLOCK_DETECTED:
            return LockOrderConflict(
                f"PostgreSQL {self.describe()} found this transaction and another waiting "
                "for each other's locks and rolled this one back: nothing of it was "
                "written; run it again")
        if state == _READ_ONLY_TRANSACTION:
            return ReadOnlyJournal(
                f"PostgreSQL {self.describe()} is open read-only: nothing was written"
            )
        if state == INSUFFICIENT_PRIVILEGE:
            return ReadOnlyJournal(
                f"PostgreSQL {self.describe()}: this database user may not write there "
                f"({_first_line(orig or exc)}): nothing was written; grant it what the journal "
                "needs (SELECT, INSERT, UPDATE and DELETE on the journal's tables), or "
                "connect as a user who has it")
        if state == _DISK_FULL:
            said = str(orig).strip().splitlines()[0] if str(orig).strip() else "disk full"
            return JournalError(
                f"PostgreSQL {self.describe()}: the disk holding the server's data is full "
                f"({said}); nothing of the failed transaction was stored: free space on the "
                "database server, then retry with the same event ids")
        gone = state is not None and state.startswith(_CONNECTION_GONE)
        if exc.connection_invalidated or gone or (
            isinstance(orig, psycopg.OperationalError) and state is None
        ):
            u = make_url(self.url)
            first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
            if exc.connection_invalidated:
                # An established connection died (server restart, pg_terminate_backend,
                # network): a COMMIT in flight may or may not have happened.
                return CommitOutcomeUnknown(
                    f"lost the connection to PostgreSQL at {u.host or 'localhost'}:"
                    f"{u.port or 5432} during a transaction ({first}); it may or may not "
                    "have committed: retry with the same event ids (appends are idempotent)"
                )
            if gone:
                # The server ended a session that had sent nothing of ours yet (it died
                # while being set up): nothing was written.
                return ConnectionProblem(
                    f"PostgreSQL at {u.host or 'localhost'}:{u.port or 5432} closed the "
                    f"connection ({first}); nothing was written: retry"
                )
            return ConnectionProblem(
                f"cannot reach PostgreSQL at {u.host or 'localhost'}:{u.port or 5432} "
                f"(database {u.database!r}, user {u.username!r}): {first}; check that the "
                "server is running and the URL's host, port, user and password"
            )
        return None


_Ordered = tuple[tuple[int, tuple[str, bool]], ...]


@lru_cache(maxsize=1024)
def _ordered_keys(namespace: str, locks: tuple[str, ...]) -> _Ordered:
    """`PostgresBackend._ordered`, kept for the key sets asked for again: a group commit
    asks for its accounts' keys batch after batch, and ordering a hundred of them cost
    about 0.1 ms each time."""
    wanted: dict[int, tuple[str, bool]] = {}
    for key in locks:
        name, shared = (key[len(SHARED):], True) if key.startswith(SHARED) else (key, False)
        k = lock_key(f"{namespace}:{name}")
        # Asked for both ways in one transaction: the exclusive lock covers both.
        wanted[k] = (name, shared and wanted.get(k, (name, True))[1])
    # One order for every transaction, which the key alone decides, not the mode this
    # transaction takes it in: keys taken shared, and every key named `*...` (the queue:
    # decisions share it, one takes it whole), come first, then by number. Ordered by
    # mode, a transaction taking the queue whole beside another key (a start-next
    # batched with a usage report) took that key first when its number was lower, and
    # waited for the queue holding it, while a sharer of the queue waited for that key:
    # a deadlock, one of the two failed after the database's deadlock_timeout.
    return tuple(sorted(wanted.items(),
                        key=lambda kv: (not (kv[1][1] or kv[1][0].startswith(FIRST)), kv[0])))


def _columns(rows: Sequence[Sequence[Any]], types: Sequence[str]) -> list[str]:
    """Each column of `rows` as one array literal (`types`: "int" or "text" per column)."""
    return [text_array(col) if kind == "text" else "{" + ",".join(map(str, col)) + "}"
            for kind, col in zip(types, zip(*rows, strict=True), strict=True)]


def text_array(values: Sequence[str]) -> str:
    """A `text[]` literal of `values`, each quoted (a backslash or double quote in it
    escaped), to pass as one parameter cast with `::text[]`.

    Why not a list: the driver's list adaptation inspects every element to choose the
    array's type, which cost more than the rest of the statement for a batch's ids and
    streams. The values are names without NUL (the journal refuses NUL before any SQL).

    The escapes are made on all the values at once, joined by NUL (then each NUL becomes
    the quotes and comma between two elements): a replace per value cost more than the
    statement for a batch's payloads."""
    if not values:
        return "{}"
    joined = NUL.join(values)
    if joined.count(NUL) != len(values) - 1:  # not the journal's text: the slow way
        return "{" + ",".join(['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                               for v in values]) + "}"
    if "\\" in joined:
        joined = joined.replace("\\", "\\\\")
    if '"' in joined:
        joined = joined.replace('"', '\\"')
    return '{"' + joined.replace(NUL, '","') + '"}'


_CURSORS_KEY = "gpu_credits_cursors"


def _kept_cursor(conn: Connection, name: str, *, client: bool = False
                 ) -> psycopg.Cursor[Any]:
    """This connection's cursor for one statement that runs batch after batch (a
    `ClientCursor` with `client`). psycopg keeps a cursor's adaptation set-up (the
    parameters' dumpers, the result's loaders) while the same query object runs on it
    again, where a new cursor builds it all anew: about a third of the driver's CPU for
    the head and key look-up. Kept in the pool's record of the connection, which is
    emptied when the connection is replaced."""
    raw = dbapi(conn)
    cursors: dict[str, psycopg.Cursor[Any]] = conn.info.setdefault(_CURSORS_KEY, {})
    cur = cursors.get(name)
    if cur is None or cur.closed or cur.connection is not raw:
        cur = cursors[name] = psycopg.ClientCursor(raw) if client else raw.cursor()
    return cur


@lru_cache(maxsize=16)
def _write_and_commit(after: tuple[str, ...]) -> str:
    """The write's statements and the COMMIT as one query string: the same string object
    for the same statements, so its kept cursor keeps its set-up (see `_kept_cursor`)."""
    return ";".join([_EXECUTE_INSERT_ARRAYS, _EXECUTE_MOVE_HEAD, *after, "COMMIT"])


def _alive(conn: psycopg.Connection[object], idle_since: float | None) -> bool:
    """Whether a pooled connection can still be used, asked before it is handed out.

    A ping on every checkout costs a round trip on every transaction. A server that ends
    a session (restart, pg_terminate_backend) says so on the socket, so an idle
    connection with something to read, or none left, is dead, found without a round
    trip. Only a connection idle for long, which a firewall may have dropped without a
    word, gets a real ping."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    if readable:
        return False
    if idle_since is not None and time.monotonic() - idle_since > PING_AFTER_IDLE:
        try:
            conn.execute("SELECT 1")
            conn.rollback()
        except psycopg.Error:
            return False
    return True


PING_AFTER_IDLE = 30.0
"""Seconds a pooled connection may sit idle before it is pinged on its next checkout."""

_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(%s)"
# How many of the keys, tried in order without waiting, were taken before the first one
# another transaction holds (a recursive step per key: the next is tried only after the
# one before it was taken, so nothing past a refusal is held).
_TRY_LOCKS = """
WITH RECURSIVE taken(n, ok) AS (
    SELECT 0, true
  UNION ALL
    SELECT n + 1, CASE WHEN (%(shared)s::boolean[])[n + 1]
                       THEN pg_try_advisory_xact_lock_shared((%(keys)s::bigint[])[n + 1])
                       ELSE pg_try_advisory_xact_lock((%(keys)s::bigint[])[n + 1]) END
    FROM taken WHERE ok AND n < cardinality(%(keys)s::bigint[])
)
SELECT count(*) - 1 FROM taken WHERE ok
"""
_LOCK_HEAD = "SELECT position, hash FROM journal_head WHERE id = 1 FOR UPDATE"
# Each id is looked up on its own, in a LATERAL subquery: `event_id = ANY(ids)` let the
# planner choose a sequential scan that compares every row with every id (it prices the
# comparisons with an array of a hundred far too low, and under EXISTS hopes to stop at
# an early match that a fresh batch never has): the append's cost then grew with the
# journal, 3.6 ms of the server's CPU per batch of 100 at 3,000 events, 17 ms at 30,000.
# A lookup that refers to its id can only be a probe of the unique index (its LIMIT,
# true of a unique id anyway, keeps the planner from turning it back into a join, which
# it would again answer with a scan).
_BY_ID = ("unnest(%s::text[]) AS u(id) CROSS JOIN LATERAL "
          "(SELECT {columns} FROM events WHERE event_id = u.id LIMIT 1) AS e")
# The last recorded_at, whether any id exists, max(version) per stream (each an index
# seek on (stream, version)), in the order the streams were given, and whether any of
# the request keys that must still be free is bound (each a probe of its primary key).
_PROBE = """
SELECT
    (SELECT recorded_at FROM events ORDER BY position DESC LIMIT 1),
    (SELECT position FROM events ORDER BY position DESC LIMIT 1),
    (SELECT hash FROM events ORDER BY position DESC LIMIT 1),
    EXISTS (SELECT 1 FROM """ + _BY_ID.format(columns="1") + """),
    ARRAY(
        SELECT (SELECT max(e.version) FROM events e WHERE e.stream = u.s)
        FROM unnest(%s::text[]) WITH ORDINALITY AS u(s, n)
        ORDER BY u.n
    ),
    EXISTS (SELECT 1 FROM unnest(%s::text[]) AS k(key) CROSS JOIN LATERAL
            (SELECT 1 FROM request_keys r WHERE r.key = k.key LIMIT 1) AS b)
"""
# Repeated ids are looked up once (callers pass distinct ids; ANY did that by itself).
_DISTINCT_BY_ID = _BY_ID.replace("unnest(%s::text[]) AS u(id)",
                                 "(SELECT DISTINCT id FROM unnest(%s::text[]) AS id) AS u")
_EXISTING = (f"SELECT {', '.join(f'e.{c}' for c in COLUMNS)} FROM "
             + _DISTINCT_BY_ID.format(columns=COLUMNS_SQL))
# The head, then each recorded row among the ids (one row of NULLs after the head: none).
_HEAD_AND_EXISTING = (
    "SELECT h.head, " + ", ".join(f"e.{c}" for c in COLUMNS)
    + " FROM (SELECT coalesce(max(position), 0) AS head FROM events) h"
    " LEFT JOIN (SELECT e.* FROM " + _DISTINCT_BY_ID.format(columns=COLUMNS_SQL)
    + ") e ON true"
)
# The same, with the request keys bound among the first parameter's (an array) after the
# head.
_HEAD_EXISTING_AND_BOUND = (
    "SELECT h.head, h.bound, " + ", ".join(f"e.{c}" for c in COLUMNS)
    + " FROM (SELECT (SELECT coalesce(max(position), 0) FROM events) AS head,"
    " ARRAY(SELECT key FROM request_keys WHERE key = ANY(%s::text[])) AS bound) h"
    " LEFT JOIN (SELECT e.* FROM " + _DISTINCT_BY_ID.format(columns=COLUMNS_SQL)
    + ") e ON true"
)
# The rows of a batch as one array per column (see `PostgresBackend.write`).
_EVENT_ARRAYS = ("int", "text", "text", "int", "text", "int", "int", "text", "text")
_INSERT_ARRAYS = (
    f"INSERT INTO events ({COLUMNS_SQL}) SELECT * FROM unnest(%s::bigint[], %s::text[], "
    "%s::text[], %s::integer[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], "
    "%s::text[])"
)
_PRIVATE_ARRAYS = ("int", "text", "text")
_INSERT_PRIVATE_ARRAYS = ("INSERT INTO private_parts (position, salt, data) "
                          "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[])")
_MOVE_HEAD = "UPDATE journal_head SET position = %s, hash = %s WHERE id = 1"

# BEGIN; the keys tried in order and, only if every one was taken, the head locked (no
# row: not all were); the probe. Parameters by name: `keys` and `shared` appear twice.
_BEGIN_LOCKS_HEAD_PROBE = (
    "BEGIN;"
    + _TRY_LOCKS.replace("SELECT count(*) - 1 FROM taken WHERE ok", "")
    + """, got AS (SELECT count(*) - 1 AS n FROM taken WHERE ok)
SELECT h.position, h.hash FROM got, journal_head h
WHERE h.id = 1 AND got.n = cardinality(%(keys)s::bigint[])
FOR UPDATE OF h;"""
    + _PROBE.replace("unnest(%s::text[]) AS u(id)", "unnest(%(ids)s::text[]) AS u(id)")
    .replace("unnest(%s::text[]) WITH ORDINALITY", "unnest(%(streams)s::text[]) WITH ORDINALITY")
    .replace("unnest(%s::text[]) AS k(key)", "unnest(%(unbound)s::text[]) AS k(key)")
)


# `Journal.append_at` (a group commit's write, batch after batch) sends its statements as
# one query string (one message, one round trip), which the simple protocol parses,
# analyses and plans anew every time: about a quarter of PostgreSQL's CPU for a batch of
# 100 events. Prepared once per connection (named, session-wide), they are run by
# EXECUTE in the same one string: the plan is cached, only the EXECUTE is parsed.
# (The driver's own automatic preparing needs the extended protocol: a message and a
# sync per statement.) A statement a migration changes under them is planned again by
# PostgreSQL itself.
_PREPARED_KEY = "gpu_credits_prepared_v2"


def _numbered(sql: str, names: Sequence[str] = ()) -> str:
    """A driver statement with `$n` parameters: `%(name)s` by the order of `names`, else
    each `%s` in turn."""
    for n, name in enumerate(names, 1):
        sql = sql.replace(f"%({name})s", f"${n}")
    parts = sql.split("%s")
    return "".join(part + (f"${n}" if n < len(parts) else "")
                   for n, part in enumerate(parts, 1))


_LOCKS_HEAD = _BEGIN_LOCKS_HEAD_PROBE[len("BEGIN;"):_BEGIN_LOCKS_HEAD_PROBE.index(
    "FOR UPDATE OF h;") + len("FOR UPDATE OF h")]
_PREPARED = (
    "PREPARE gpu_credits_locks_head (bigint[], boolean[]) AS "
    + _numbered(_LOCKS_HEAD, ("keys", "shared")),
    "PREPARE gpu_credits_probe (text[], text[], text[]) AS " + _numbered(_PROBE),
    "PREPARE gpu_credits_insert (bigint[], text[], text[], integer[], text[], bigint[], "
    "bigint[], text[], text[]) AS " + _numbered(_INSERT_ARRAYS),
    "PREPARE gpu_credits_move_head (bigint, text) AS " + _numbered(_MOVE_HEAD),
)
_EXECUTE_BEGIN_LOCKS_HEAD_PROBE = ("BEGIN;EXECUTE gpu_credits_locks_head(%(keys)s, %(shared)s);"
                                   "EXECUTE gpu_credits_probe(%(ids)s, %(streams)s, "
                                   "%(unbound)s)")
_EXECUTE_INSERT_ARRAYS = "EXECUTE gpu_credits_insert(" + ", ".join(["%s"] * 9) + ")"
_EXECUTE_MOVE_HEAD = "EXECUTE gpu_credits_move_head(%s, %s)"


def _first_line(error: BaseException) -> str:
    """The first line of a driver error's message (its type when it has none)."""
    said = str(error).strip()
    return said.splitlines()[0] if said else type(error).__name__
