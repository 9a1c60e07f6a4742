"""`Journal`: append and store over a SQLAlchemy engine (read and verify: `base.py`).

Plain SQLAlchemy Core against `schema.py`; whatever differs between SQLite and
PostgreSQL, including the append's own round trips, is asked of the `Backend`
(see `backend.py` and `backends/`). What an append means (validation,
idempotency, versions, hashes) is decided in `appending.py`, shared with
`MemoryJournal`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any, NoReturn

from sqlalchemy import (
    Column,
    Connection,
    LargeBinary,
    and_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.compiler import SQLCompiler

from . import appending, migrate
from .appending import (
    bound_already,
    require_int,
    require_text,
    storable,
    validate_request,
    validate_snapshot,
    wall_clock_us,
)
from .backend import BatchRow, dbapi, translating
from .backends import backend_for
from .base import JournalBase, Reader, to_event
from .errors import (
    ChainBroken,
    JournalError,
    JournalNotFound,
    LockOrderConflict,
    ReadOnlyJournal,
    VersionConflict,
    rewritten_under,
)
from .hashing import GENESIS_HASH, pinned
from .reading import ReadQuery
from .records import (
    COLUMNS,
    PRIVATE_KEY,
    Anchor,
    Batch,
    Erasure,
    LookUp,
    NewEvent,
    PinnedRow,
    RecordedEvent,
    RequestKey,
    SnapshotInfo,
    StoredRow,
)
from .schema import batches, events, journal_head, private_parts, request_keys, snapshots
from .versions import KnownVersions

# SQLite allows 999 bound parameters in old builds; stay below for IN (...) lists.
_CHUNK = 900

_EVENT_COLUMNS = tuple(events.c[name] for name in COLUMNS)
_TIME = COLUMNS.index("event_time")
_PREVIOUS = events.alias("previous")
# The predecessor's stored hash beside each row, by a correlated lookup on the primary
# key (one index probe per row, in the same statement): what a read needs to check each
# row's own link of the chain (`hashing.pinned`) without another round trip.
_PINNED_COLUMNS = (*_EVENT_COLUMNS, select(_PREVIOUS.c.hash)
                   .where(_PREVIOUS.c.position == events.c.position - 1)
                   .scalar_subquery().label("previous_hash"))
# One event by its id: built once, so a look-up pays neither for building the statement
# nor for its cache key (together about three times the query on SQLite).
_GET_BY_ID = select(*_PINNED_COLUMNS).where(events.c.event_id == bindparam("event_id"))
_REQUEST_COLUMNS = (
    request_keys.c.key,
    request_keys.c.fingerprint,
    request_keys.c.answer,
    request_keys.c.position,
    request_keys.c.recorded_at,
    request_keys.c.first_position,
    request_keys.c.last_position,
)

_SNAPSHOT_COLUMNS = (
    snapshots.c.id,
    snapshots.c.name,
    snapshots.c.position,
    snapshots.c.event_time,
    snapshots.c.digest,
)


_COMPILED_KEEP = 256
"""Compiled reads kept, every dialect's together: a read's shape (which bounds and filters
it has, its order, its columns) and its dialect pick one; there are a few dozen."""

_compiled_reads: dict[tuple[Any, ...], SQLCompiler] = {}


def _compiled(stmt: Select[Any], dialect: Dialect
              ) -> tuple[SQLCompiler, Mapping[str, Any]]:
    """`stmt` compiled for `dialect`, and its parameters' values.

    Why: compiling cost about as much as the rest of a short read (the few events a
    decision catches up with), on every read. A statement's shape is compiled once per
    dialect and kept, by SQLAlchemy's own cache key, whose extracted values then fill
    the compiled statement's parameters (what the engine's compiled cache does)."""
    key = stmt._generate_cache_key()
    if key is None:  # not cacheable: compiled afresh
        compiled = stmt.compile(dialect=dialect)
        return compiled, compiled.params
    slot = (type(dialect), dialect.paramstyle, dialect.server_version_info, key.key)
    kept = _compiled_reads.get(slot)
    if kept is None:
        if len(_compiled_reads) >= _COMPILED_KEEP:
            _compiled_reads.clear()
        kept = stmt.compile(dialect=dialect, cache_key=key)
        _compiled_reads[slot] = kept
    return kept, kept.construct_params(extracted_parameters=key.bindparams)


_compiled_once: dict[tuple[Any, ...], SQLCompiler] = {}


def _compiled_fixed(stmt: Select[Any], dialect: Dialect) -> SQLCompiler:
    """A statement built once at import (its values all bound parameters), compiled
    once per dialect."""
    slot = (id(stmt), type(dialect), dialect.paramstyle, dialect.server_version_info)
    kept = _compiled_once.get(slot)
    if kept is None:
        kept = _compiled_once[slot] = stmt.compile(dialect=dialect)
    return kept


def _moved_on(at: int, head: int, recorded: int, events: int) -> str:
    """Why `append_at` wrote nothing: the head elsewhere, or events recorded already."""
    ids = f"{recorded} of its {events} events are recorded already or repeated"
    if head == at - 1:
        why = f"the head is there, but {ids}"
    elif head >= at:
        why = f"the journal's head has moved on to {head}" + (f", and {ids}" if recorded
                                                                else "")
    else:
        why = f"the journal's head is at {head}: what was to be written before it is not"
    return (f"the append was placed at position {at}, right after a head at {at - 1}; "
            f"{why}: nothing was appended; decide them again")


def _snapshot(row: Sequence[Any]) -> SnapshotInfo:
    return SnapshotInfo(id=row[0], name=row[1], position=row[2], event_time=row[3], digest=row[4])


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _after(key: tuple[int, int]) -> ColumnElement[bool]:
    """(event_time, position) > key, written so an index on (event_time, position) serves it."""
    t, p = key
    return and_(events.c.event_time >= t, or_(events.c.event_time > t, events.c.position > p))


class SqlTransaction(Reader):
    """A read-decide-append transaction on one connection (see `Journal.transaction`).

    `read` sees the journal as this transaction does, its own appends included."""

    def __init__(self, journal: Journal, conn: Connection) -> None:
        self._journal = journal
        self.conn = conn
        self.open = True
        # The first position this transaction appended: every later append of it joins
        # that batch (`batches`), since no reader can see the transaction's appends apart.
        self.batch_first: int | None = None
        self.batch_row = False  # whether its row in `batches` is written
        # Whether it locked the journal's head (an append did, until the transaction
        # ends): from then on a key held elsewhere is refused, never waited for.
        self.holds_head = False
        # (position, chain hash) its appends must chain from when the head is there
        # (`expect_head`); None: whatever the head holds.
        self.expected_head: tuple[int, str] | None = None

    def _check(self) -> Connection:
        if not self.open:
            raise JournalError("this transaction has ended; open a new journal.transaction()")
        return self.conn

    def _query(self, q: ReadQuery) -> Iterator[RecordedEvent]:
        return self._journal._read(q, self)

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append inside the transaction; others see it only at commit."""
        return self._journal._append_batch(events, expected_versions, self)

    def head(self) -> int:
        """The last position as this transaction sees it."""
        return self._journal._head(self)

    def expect_head(self, position: int, hash_: str) -> None:
        """What its caller read the journal as ending with: an append of this transaction
        that finds the head at `position` holding another chain hash (the journal
        restored from an older copy, then written on by another process up to there)
        raises ChainBroken and writes nothing. Checked against the head the append reads
        anyway: no round trip of its own."""
        self.expected_head = (require_int("position", position), hash_)

    def hold_head(self) -> int:
        """Lock the journal's head now, as an append does, and return its position: no
        other transaction appends until this one ends (on SQLite its write lock already
        holds it), so what this one appends from here on follows it directly."""
        return self._journal._hold_head(self)


class Journal(JournalBase):
    """An append-only, idempotent, hash-chained journal on SQLite or PostgreSQL.

    `Journal()` is an in-memory SQLite database; `Journal("sqlite:///path.db")` a
    file any number of processes may share; `Journal("postgresql+psycopg://...")`
    a PostgreSQL database. Opening upgrades the schema to this code's Alembic head
    unless `upgrade=False`; a schema newer than the code is refused (SchemaError).
    Safe to share between threads. Inside `with journal.transaction():` every
    call of this thread joins that transaction.
    """

    url: str | None

    def __init__(
        self,
        url: str | None = None,
        *,
        upgrade: bool = True,
        lock_timeout: float = 10.0,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        """Open the journal at url (None: in-memory SQLite).

        upgrade: bring the schema to this code's head (else refuse any other revision).
        create=False: the database must already hold a journal; a missing SQLite file
        (or a database without the journal's schema) raises JournalNotFound and
        nothing is created or written. read_only=True: create=False and upgrade=False,
        and every connection refuses writes (ReadOnlyJournal): for verify and queries.
        """
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float):
            raise ValueError(f"lock_timeout must be a number of seconds, got {lock_timeout!r}")
        if not lock_timeout > 0:
            raise ValueError(f"lock_timeout must be > 0 seconds, got {lock_timeout!r}")
        if read_only:
            create = upgrade = False
        self.url = url
        self.read_only = read_only
        self._backend = backend_for(url, float(lock_timeout), read_only=read_only)
        self._local = threading.local()
        self._closed = False
        self._clock: Callable[[], int] = wall_clock_us
        # The stream versions `append_at` left, so the next one asks only for new streams.
        self._versions = KnownVersions()
        if create and upgrade:
            self._backend.prepare()
        elif create:
            # Refused unless at this code's revision: a database not there yet, or one
            # without a journal, is refused before its first connection writes (creates
            # the SQLite file, sets its WAL mode).
            try:
                self._backend.require_existing()
            except JournalNotFound:
                raise migrate.not_upgraded(self._backend, None) from None
        else:
            self._backend.require_existing()
        #: (revision before, revision after) when opening upgraded an existing journal
        #: (not a new one): an earlier release can no longer open it, worth saying.
        self.upgraded: tuple[str, str] | None = None
        self._engine = self._backend.create_engine()
        try:
            with self._errors(), self._backend.guard(), self._engine.connect() as conn:
                if not create:
                    migrate.require_journal(self._backend, conn)
                if upgrade:
                    before, after = migrate.upgrade(self._backend, conn)
                    if before is not None and before != after:
                        self.upgraded = (before, after)
                else:
                    migrate.check(self._backend, conn)
        except BaseException:
            self._engine.dispose()
            raise

    # -- connections -----------------------------------------------------------

    def _errors(self) -> AbstractContextManager[None]:
        return translating(self._backend)

    @contextmanager
    def keeping_connection(self) -> Iterator[None]:
        """Until the block ends, this thread's transactions reuse one pooled connection
        rather than checking one out and in around each (on a database whose backend
        allows it, PostgreSQL): for a thread that runs one short transaction after
        another, such as a group commit's writer.

        The pool's checkout and check-in cost about 35 us of CPU around each transaction
        (a sixth of the head-and-keys look-up's). A reused connection is checked as the
        pool checks one before handing it out (`Backend.reusable`), and one that a
        transaction left in error is returned to the pool as before, not reused."""
        if not self._backend.keeps_connections or getattr(self._local, "keep", False):
            yield  # not here, or kept by an outer block already
            return
        self._local.keep = True
        try:
            yield
        finally:
            self._local.keep = False
            self._release_kept()

    def _release_kept(self) -> None:
        kept: Connection | None = getattr(self._local, "kept", None)
        self._local.kept = None
        if kept is not None:
            kept.close()

    @contextmanager
    def _pooled(self) -> Iterator[Connection]:
        """A connection from the pool, or the one this thread keeps (see
        `keeping_connection`); a block that raises gives a kept one back to the pool.
        A block inside another (a read's rows being iterated) gets one from the pool:
        the kept one is busy."""
        if not getattr(self._local, "keep", False) or getattr(self._local, "busy", False):
            with self._engine.connect() as fresh:
                yield fresh
            return
        kept: Connection | None = getattr(self._local, "kept", None)
        if kept is not None and not self._backend.reusable(kept):
            self._release_kept()
            kept = None
        if kept is None:
            kept = self._local.kept = self._engine.connect()
        self._local.busy = True
        try:
            yield kept
        except BaseException:
            self._release_kept()
            raise
        finally:
            self._local.busy = False
        self._backend.idle(kept)

    def _current(self) -> SqlTransaction | None:
        tx: SqlTransaction | None = getattr(self._local, "tx", None)
        return tx

    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction of this journal (one that a new
        `transaction()` would join, and whose rollback is its owner's)."""
        return self._current() is not None

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError(f"this journal ({self._backend.describe()}) is closed: open it "
                               "again with Journal(url) to read or write it")

    @contextmanager
    def _reading(self, tx: SqlTransaction | None = None, *,
                 one_statement: bool = False) -> Iterator[Connection]:
        """A connection in a read transaction: tx, else this thread's open one, else new.
        `one_statement`: the caller runs one statement, so a new connection needs no
        transaction (a statement sees one snapshot by itself; on PostgreSQL BEGIN and
        COMMIT around it cost two more round trips, and a writer asks one before every
        batch)."""
        tx = tx or self._current()
        if tx is not None:
            with self._errors():
                yield tx._check()
            return
        self._check_open()
        with self._errors(), self._backend.guard(), self._pooled() as conn:
            try:
                with self._backend.one_statement(conn) if one_statement else conn.begin():
                    yield conn
            except DBAPIError as exc:
                # This connection only read: if it is the one lost, nothing is in doubt
                # (a write of the caller's, on a connection of its own, was translated
                # there already).
                err = self._backend.translate_read(exc) if conn.invalidated else None
                if err is None:
                    raise
                raise err from exc

    @contextmanager
    def _writing(
        self, locks: Sequence[str] = (), tx: SqlTransaction | None = None
    ) -> Iterator[Connection]:
        """A connection in a write transaction: tx, else this thread's open one, else new."""
        tx = tx or self._current()
        if tx is not None:
            with self._errors():
                conn = tx._check()
                self._more_keys(tx, locks)
                yield conn
            return
        with self._new_write(lambda conn: self._backend.begin_write(conn, locks)) as conn:
            yield conn

    def _more_keys(self, tx: SqlTransaction, keys: Sequence[str]) -> None:
        """Take more keys in tx. Before its first append, waiting for them in order; after
        it (tx holds the head, which every writer takes after its keys), only keys free
        now: waiting for one could wait for a transaction queued for our head."""
        conn = tx._check()
        if not tx.holds_head:
            self._backend.lock_more(conn, keys)
        elif not self._backend.try_lock_more(conn, keys):
            raise LockOrderConflict(
                f"the lock keys {sorted(set(keys))!r} were asked for after this transaction "
                "appended (it holds the journal's head), and another transaction holds one "
                "of them: waiting could deadlock with it. Let this error end the "
                "transaction (it rolls back: nothing of it is written) and run it again, "
                "asking for every key before the first append")

    @contextmanager
    def _new_write(self, begin: Callable[[Connection], AbstractContextManager[object]]
                   ) -> Iterator[Connection]:
        """A pooled connection in a write transaction that `begin(conn)` opens; refused
        on a closed or read-only journal."""
        self._check_open()
        if self.read_only:
            raise ReadOnlyJournal(
                f"this journal ({self._backend.describe()}) was opened read-only: "
                "nothing was written; open it without read_only=True to write"
            )
        with (
            self._errors(),
            self._backend.guard(),
            self._pooled() as conn,
            begin(conn),
        ):
            yield conn

    @contextmanager
    def transaction(self, locks: Iterable[str] = ()) -> Iterator[SqlTransaction]:
        """One database transaction for a read-decide-append.

        PostgreSQL: pg_advisory_xact_lock per key (sorted, keyed by a stable 64-bit
        hash), so decisions on different keys do not wait for each other; a key
        `shared:NAME` takes NAME's lock in shared mode. SQLite:
        BEGIN IMMEDIATE (one writer). Commits on clean exit, rolls back on exception.
        A lock not obtained within lock_timeout raises LockTimeout. Nested calls in
        the same thread join the outer transaction (and take their extra keys).
        """
        keys = [require_text("lock key", k) for k in locks]
        outer = self._current()
        if outer is not None:
            with self._errors():
                self._more_keys(outer, keys)
            yield outer
            return
        with self._writing(keys) as conn:
            tx = SqlTransaction(self, conn)
            self._local.tx = tx
            try:
                yield tx
            finally:
                self._local.tx = None
                tx.open = False

    # -- writing ---------------------------------------------------------------

    def append(
        self, events: Sequence[NewEvent], *, expected_versions: Mapping[str, int] | None = None
    ) -> list[RecordedEvent]:
        """Append a batch atomically; return one RecordedEvent per input event.

        An id already recorded (or repeated in the batch) with the same content
        (stream, type, time, payload) is not appended again: its original record is
        returned in its place. The same id with other content raises
        IdempotencyConflict. expected_versions {stream: version} must match each
        stream's current version (0 = empty) else VersionConflict; a batch that
        appends nothing new is not checked. Malformed events raise ValueError.
        Whatever is raised, nothing of the batch is appended.
        """
        return self._append_batch(events, expected_versions, None)

    def append_at(self, events: Sequence[NewEvent], *, at: int,
                  locks: Iterable[str] = (),
                  requests: Sequence[tuple[str, str, str, Sequence[int]]] = (),
                  unbound: Sequence[str] = (),
                  after_hash: str | None = None) -> list[RecordedEvent]:
        """Append every event as new at positions `at`, `at` + 1, ..., in a transaction
        of its own holding `locks` (as `transaction` takes them), and commit: for a
        writer that decided the events before and only needs them written where it
        placed them. On PostgreSQL two round trips in all: BEGIN, the keys, the head's
        lock and the probe in one; the rows and the COMMIT in the other.

        Raises VersionConflict, writing nothing, when the journal's head is not at
        `at` - 1 or an event is recorded already (or repeated in the batch): whoever
        placed the events there decided on a journal that has moved on. Otherwise as
        `append` (ValueError, IdempotencyConflict).

        `requests`: (key, fingerprint, answer, positions) of request keys to bind with the
        events, in the same write (see `bind_request`); a key bound already makes the
        write fail (the database's IntegrityError), with nothing written.

        `unbound`: request keys the writer found bound to nothing when it decided, before
        it held `locks`; one bound since (a request that appended nothing, decided by
        another writer under the same key) raises VersionConflict, writing nothing: the
        events would record a second answer under that key.

        `after_hash`: the chain hash the writer read at `at` - 1 (what it decided on). A
        head there holding another (the journal restored from an older copy, then
        written on by another process up to there) raises ChainBroken, writing nothing:
        checked against the head the probe reads anyway, in the same round trip."""
        keys = [require_text("lock key", k) for k in locks]
        require_int("at", at)
        spans = [(key, fingerprint, answer, *validate_request(key, fingerprint, answer, positions))
                 for key, fingerprint, answer, positions in requests]
        batch = appending.plan(events)
        if not batch.candidates:
            if spans:
                raise ValueError("request keys are bound with the events of their request: "
                                 "append_at got keys and no event")
            return []
        if self._current() is not None:
            raise JournalError("append_at commits a transaction of its own: call it outside "
                               "journal.transaction(), or use the transaction's append")
        committed: list[Callable[[], None]] = []
        try:
            with self._new_write(self._backend.own_transaction) as conn:
                recorded = self._append(conn, batch, None, None, True, at, keys, committed,
                                        spans, sorted(set(unbound)),
                                        None if after_hash is None else (at - 1, after_hash))
        except IntegrityError as exc:
            if not self._backend.recorded_id(exc):
                raise
            self._recorded_under(batch, at)
        for note in committed:  # what holds once the transaction is committed
            note()
        return recorded

    def _recorded_under(self, batch: appending.Plan, at: int) -> NoReturn:
        """Raise what `append_at` raises for a batch the database refused because an id of
        it was recorded (its ids were not asked about before the write, see
        `Backend.refuses_recorded_ids`): IdempotencyConflict where a recorded id holds
        other content, else VersionConflict. Nothing was written; the records are looked
        at after the refusal."""
        existing = self.get_many(batch.ids)
        with self._reading() as conn:
            held = self._held(conn, [r for r in existing.values() if PRIVATE_KEY in r.payload])
        fresh = appending.check_existing(batch, existing, held)
        raise VersionConflict(_moved_on(at, at - 1, len(batch.slots) - len(fresh),
                                        len(batch.slots)))

    def _append_batch(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int] | None,
        tx: SqlTransaction | None,
        *,
        commit: bool = False,
        at: int | None = None,
    ) -> list[RecordedEvent]:
        # Validate before touching the database: a bad batch never waits for a lock.
        batch = appending.plan(events)
        appending.validate_expected(expected)
        if not batch.candidates:
            return []
        with self._writing(tx=tx) as conn:
            return self._append(conn, batch, expected, tx or self._current(), commit, at)

    def _append(
        self, conn: Connection, batch: appending.Plan, expected: Mapping[str, int] | None,
        tx: SqlTransaction | None, commit: bool = False, at: int | None = None,
        locks: Sequence[str] | None = None,
        committed: list[Callable[[], None]] | None = None,
        requests: Sequence[tuple[str, str, str, int | None, int | None]] = (),
        unbound: Sequence[str] = (),
        after: tuple[int, str] | None = None,
    ) -> list[RecordedEvent]:
        """`committed` (`append_at` only): where to leave what to note once the
        transaction has committed; `requests` (`append_at` only): the request keys to
        bind with the rows (key, fingerprint, answer, first and last position named);
        `unbound` (`append_at` only): request keys that must still be bound to nothing;
        `after`: (position, hash) the caller read the journal's head as (else
        `tx.expected_head`), refused when the head is there with another hash."""
        # Lock the head first: from here until commit no other append can run, so
        # the duplicate and version checks below cannot be overtaken.
        ids = batch.ids
        streams = appending.streams_of(batch.candidates, expected)
        # A batch that follows this journal's own last append_at asks only for the
        # versions of streams that append did not know (see `versions.py`).
        asked = streams if committed is None or at is None else self._versions.unknown(
            at - 1, streams)
        # append_at on a database whose insert refuses a recorded id leaves the ids to the
        # insert (`_recorded_under` says what was recorded): a batch of new events, the
        # writer's usual one, probes none of them.
        probed = ids if committed is None or not self._backend.refuses_recorded_ids else []
        probe = (self._backend.lock_and_probe(conn, probed, asked) if locks is None
                 else self._backend.begin_lock_and_probe(conn, locks, probed, asked, unbound))
        if tx is not None:
            tx.holds_head = True
        if (probe.last_position, probe.last_hash or GENESIS_HASH) != (probe.position, probe.hash):
            # The head row is where appends chain from: one that no longer names the last
            # record (edited, or records removed or added past it) would leave a gap or a
            # break in the chain under the new events. Refused before anything is written.
            raise ChainBroken(
                min(probe.position, probe.last_position) + 1,
                f"the journal's head marker names position {probe.position}, the last "
                f"record is at {probe.last_position}"
                + (" with another hash" if probe.position == probe.last_position else "")
                + "; nothing was appended")
        if after is None and tx is not None:
            after = tx.expected_head
        if after is not None and probe.position == after[0] and probe.hash != after[1]:
            raise rewritten_under(after[0])
        if probe.any_bound:
            # Asked with the probe, after the locks and the head's: a binding committed
            # before them is seen (a statement of its own, a snapshot of its own), and
            # none can come after, since binding one takes the same locks.
            taken = self._backend.bound(conn, unbound)
            raise VersionConflict(
                f"request key {(taken or ['?'])[0]!r} was bound by another writer after the "
                f"batch to be written at {at} was decided; nothing was appended")
        versions = probe.versions
        if len(asked) != len(streams) and probe.position + 1 == at:
            unasked = set(asked)
            known = self._versions.at((probe.position, probe.hash),
                                      [s for s in streams if s not in unasked])
            if known is None:  # not noted at this head (another chain): ask for them all
                asked = streams
                versions = self._backend.lock_and_probe(conn, ids, streams).versions
            else:
                versions = {**known, **probe.versions}
        existing: dict[str, RecordedEvent] = {}
        held: dict[str, str] = {}
        # Rare: a retry, or an import run twice; or a batch whose ids were not asked about
        # and that is refused before its write (a head elsewhere, an id repeated): the
        # refusal says what is recorded, as after the probe.
        if probe.any_existing or (probed is not ids and (
                probe.position + 1 != at or len(batch.candidates) != len(batch.slots))):
            existing = {r[1]: to_event(r) for r in self._backend.existing(conn, ids)}
            held = self._held(conn, [r for r in existing.values() if PRIVATE_KEY in r.payload])
        fresh = appending.check_existing(batch, existing, held)
        if at is not None and (probe.position + 1 != at or len(fresh) != len(batch.slots)):
            raise VersionConflict(_moved_on(at, probe.position, len(batch.slots) - len(fresh),
                                            len(batch.slots)))
        if not fresh:
            return appending.results(batch, existing, [])
        appending.check_expected(expected, versions)
        # Never earlier than the last record: position_at() relies on it.
        recorded_at = max(self._clock(), probe.recorded_at)
        rows = appending.build(
            fresh,
            head_position=probe.position,
            head_hash=probe.hash,
            versions=versions,
            recorded_at=recorded_at,
        )
        head = rows[-1].event.position
        bound = [(key, fingerprint, answer, head, recorded_at, first, last)
                 for key, fingerprint, answer, first, last in requests]
        # One bulk write for the batch: hashes were computed in Python, so there
        # is no per-event round trip.
        private = [p for p in (r.stored_private() for r in rows) if p is not None]
        # The batch's row goes with the same write (the same round trip on PostgreSQL).
        self._backend.write(conn, [r.stored() for r in rows], private,
                            self._batch_row(rows[0].event.position, rows[-1].event.position, tx),
                            commit=commit, requests=bound)
        if committed is not None:
            last = rows[-1].event
            committed.append(partial(
                self._versions.noted, (probe.position, probe.hash), versions, asked,
                [(r.event.stream, r.event.version) for r in rows], (last.position, last.hash)))
        return appending.results(batch, existing, rows)

    @staticmethod
    def _batch_row(first: int, last: int, tx: SqlTransaction | None) -> BatchRow | None:
        """How to note that positions `first`..`last` were appended together with whatever
        this transaction appended before them (the head stays locked until it commits, so
        its positions are contiguous); None: nothing to note."""
        if tx is not None:
            if tx.batch_first is None:
                tx.batch_first = first
            first = tx.batch_first
        if last <= first:
            return None  # a batch of one event needs no row
        if tx is not None and tx.batch_row:
            return BatchRow(first, last, extend=True)
        if tx is not None:
            tx.batch_row = True
        return BatchRow(first, last, extend=False)

    def batches(self, *, after_position: int = 0,
                to_position: int | None = None) -> list[Batch]:
        """The batches of two events or more holding a position in (after_position,
        to_position], in position order, whole (one may reach past to_position).

        A position in none of them was appended alone (or before batches were recorded):
        it is a batch of its own.
        """
        require_int("after_position", after_position)
        # Batches never overlap: those reaching past after_position begin after it, but
        # for the one holding it, which begins at the last start up to it. Bounded so by
        # first_position (the key), a catch-up's look at the few newest batches reads
        # those, not the whole table as a filter on last_position alone would.
        holding = (select(func.max(batches.c.first_position))
                   .where(batches.c.first_position <= after_position).scalar_subquery())
        q = (select(batches.c.first_position, batches.c.last_position)
             .where(batches.c.last_position > after_position,
                    batches.c.first_position >= func.coalesce(holding, 0))
             .order_by(batches.c.first_position))
        if to_position is not None:
            q = q.where(batches.c.first_position <= require_int("to_position", to_position))
        with self._reading() as conn:
            return [Batch(int(r[0]), int(r[1])) for r in conn.execute(q)]

    def _held(self, conn: Connection, records: Sequence[RecordedEvent]) -> dict[str, str]:
        """The private parts still stored of these records, by id (canonical text)."""
        if not records:
            return {}
        by_position = {r.position: r.id for r in records}
        q = select(private_parts.c.position, private_parts.c.data).where(
            private_parts.c.position.in_(sorted(by_position)))
        return {by_position[p]: data for p, data in conn.execute(q)}

    # -- private parts -----------------------------------------------------------

    def _private_rows(self, after_position: int, to_position: int | None,
                      batch_size: int) -> Iterator[tuple[int, str, str, str]]:
        cursor = after_position
        while True:
            q = (select(private_parts.c.position, events.c.event_id, private_parts.c.salt,
                        private_parts.c.data)
                 .join(events, events.c.position == private_parts.c.position)
                 .where(private_parts.c.position > cursor)
                 .order_by(private_parts.c.position).limit(batch_size))
            if to_position is not None:
                q = q.where(private_parts.c.position <= to_position)
            with self._reading() as conn:
                rows: list[Any] = self._fetch(conn, q)
                batch = [(r[0], r[1], r[2], r[3]) for r in rows]
            yield from batch
            if len(batch) < batch_size:
                return
            cursor = batch[-1][0]

    def _private_of(self, ids: Sequence[str]) -> list[tuple[StoredRow, str, str]]:
        q = (select(*_EVENT_COLUMNS, private_parts.c.salt, private_parts.c.data)
             .join(private_parts, private_parts.c.position == events.c.position)
             .where(events.c.event_id.in_(list(ids))))
        with self._reading() as conn:
            return [(tuple(r[:9]), r[9], r[10]) for r in conn.execute(q)]

    def _erase_private(self, ids: Sequence[str], record: NewEvent) -> Erasure:
        with self._writing() as conn:
            found: list[tuple[int, str]] = []
            for chunk in _chunks(ids, _CHUNK):
                found.extend((int(r[0]), str(r[1])) for r in conn.execute(
                    select(private_parts.c.position, events.c.event_id)
                    .join(events, events.c.position == private_parts.c.position)
                    .where(events.c.event_id.in_(list(chunk)))))
            recorded: RecordedEvent | None = None
            erased: tuple[str, ...] = ()
            if found:
                found.sort()
                erased = tuple(event_id for _, event_id in found)
                batch = appending.plan([appending.erasure_record(record, erased)])
                (recorded,) = self._append(conn, batch, None, self._current())
                self._backend.before_erase(conn)
                positions = [p for p, _ in found]
                for start in range(0, len(positions), _CHUNK):
                    conn.execute(delete(private_parts).where(
                        private_parts.c.position.in_(positions[start:start + _CHUNK])))
                # A request's digest was made from its fields, private ones too: the
                # bindings of the requests that named these records go with them.
                for start in range(0, len(positions), 100):
                    conn.execute(delete(request_keys).where(or_(*(
                        and_(request_keys.c.first_position <= p,
                             request_keys.c.last_position >= p)
                        for p in positions[start:start + 100]))))
        # Also when nothing was left to erase: a second run finishes what the database
        # could not do the first time (a busy WAL, a table lock).
        notes = () if self._current() is not None else self._backend.after_erase(self._engine)
        return Erasure(recorded, erased, notes)

    # -- reading ---------------------------------------------------------------

    def _rows(self, q: ReadQuery, tx: SqlTransaction | None) -> Iterator[StoredRow]:
        return itertools.chain.from_iterable(self._select(q, tx, _EVENT_COLUMNS, _TIME))

    def _row_batches(self, q: ReadQuery, tx: SqlTransaction | None
                     ) -> Iterator[list[StoredRow]]:
        return self._select(q, tx, _EVENT_COLUMNS, _TIME)

    def _pinned_rows(self, q: ReadQuery, tx: SqlTransaction | None) -> Iterator[PinnedRow]:
        return itertools.chain.from_iterable(self._select(q, tx, _PINNED_COLUMNS, _TIME))

    def _hashes_at(self, positions: Sequence[int], tx: SqlTransaction | None
                   ) -> dict[int, str]:
        found: dict[int, str] = {}
        with self._reading(tx) as conn:
            for start in range(0, len(positions), _CHUNK):
                stmt = select(events.c.position, events.c.hash).where(
                    events.c.position.in_(list(positions[start:start + _CHUNK])))
                found.update((int(r[0]), str(r[1])) for r in conn.execute(stmt))
        return found

    def _select(
        self, q: ReadQuery, tx: SqlTransaction | None, columns: Sequence[ColumnElement[Any]],
        at: int,
    ) -> Iterator[list[Any]]:
        """The rows of `columns` (position first, event time at index `at`) the query
        selects, in its order, in lists of `batch_size` (the last may be shorter, never
        empty)."""
        if q.empty:
            return
        position: ColumnElement[int] = events.c.position
        if q.order == "canonical" and not q.narrow:
            # `position + 0` cannot use the primary key, so the planners walk the
            # (event_time, position) index in order instead of fetching the whole
            # position range and sorting it for every batch.
            position = events.c.position + 0
        # In position order the lower bound moves with each batch and is given once (see
        # below): with two `position >` terms SQLite may seek on the stale one and scan
        # every earlier row again, making a long read quadratic.
        base = [position <= q.to_position]
        if q.order != "position" and q.after_position > 0:
            # Only a bound that excludes something: `position + 0 > 0` holds for every
            # row, but PostgreSQL's planner cannot know it and, estimating a few hundred
            # rows left, chose a parallel scan and sort of the whole table for every batch
            # (~200 ms at 10^6 events) over the index walk (~2 ms).
            base.append(position > q.after_position)
        if q.from_time is not None:
            base.append(events.c.event_time >= q.from_time)
        if q.to_time is not None:
            base.append(events.c.event_time <= q.to_time)
        if q.stream is not None:
            base.append(events.c.stream == q.stream)
        if q.type is not None:
            base.append(events.c.type == q.type)
        if q.after is not None:
            base.append(_after(q.after))
        order_by: tuple[Column[Any], ...] = (
            (events.c.position,)
            if q.order == "position"
            else (events.c.event_time, events.c.position)
        )
        cursor: Any = None
        while True:
            where = list(base)
            if q.order == "position":
                lower = q.after_position if cursor is None else cursor[0]
                where.append(events.c.position > lower)
            elif cursor is not None:
                where.append(_after((cursor[at], cursor[0])))
            stmt = select(*columns).where(*where).order_by(*order_by).limit(q.batch_size)
            # Each batch in its own short transaction: a long replay holds no
            # snapshot open (WAL checkpoints and VACUUM can proceed).
            with self._reading(tx) as conn:
                batch = self._fetch(conn, stmt)
            if batch:
                yield batch
            if len(batch) < q.batch_size:
                return
            cursor = batch[-1]

    def _fetch(self, conn: Connection, stmt: Select[Any]) -> list[StoredRow]:
        """Run a query built with SQLAlchemy straight on the driver's cursor.

        Compiling costs once per batch; SQLAlchemy's per-row result processing
        would cost on every row of a replay.
        """
        compiled, params = _compiled(stmt, conn.dialect)
        return self._run(conn, compiled, params)

    def _run(self, conn: Connection, compiled: SQLCompiler, params: Mapping[str, Any]
             ) -> list[Any]:
        """A compiled query's rows (tuples of its columns), straight from the driver's
        cursor."""
        args = _driver_args(compiled, params)
        with self._backend.direct(conn):
            cur = dbapi(conn).cursor()
            try:
                cur.execute(compiled.string, args)
                rows: list[Any] = cur.fetchall()
            except Exception as exc:
                if _NOT_UTF8 not in str(exc):
                    raise
                raise _undecodable(dbapi(conn), compiled.string, args) from None
            finally:
                cur.close()
        return rows

    def head(self) -> int:
        """The last position, 0 when empty."""
        return self._head(None)

    def head_holding(self, position: int) -> tuple[int, str | None]:
        """`head()` and `stored_hash(position)` in one statement, as of one moment."""
        require_int("position", position)
        if position == 0:
            return self.head(), GENESIS_HASH
        with self._reading(one_statement=True) as conn:
            return self._backend.head_holding(conn, position)

    def _hold_head(self, tx: SqlTransaction) -> int:
        with self._writing(tx=tx) as conn:
            probe = self._backend.lock_and_probe(conn, [], [])
            tx.holds_head = True
            return probe.position

    def _head(self, tx: SqlTransaction | None) -> int:
        with self._reading(tx) as conn:
            return self._backend.head(conn)

    def get(self, event_id: str) -> RecordedEvent | None:
        """The event recorded under this id, or None; checked as `read` checks each event
        (ChainBroken at its position when its stored hash does not match)."""
        if not isinstance(event_id, str) or not storable(event_id):
            return None  # no such id can be recorded (and PostgreSQL could not compare it)
        with self._reading() as conn:
            compiled = _compiled_fixed(_GET_BY_ID, conn.dialect)
            rows = self._run(conn, compiled, compiled.construct_params({"event_id": event_id}))
        return to_event(next(pinned(rows))) if rows else None

    def get_many(self, event_ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of these ids, by id: one query per 1,000 ids."""
        wanted = sorted({i for i in event_ids if isinstance(i, str) and storable(i)})
        found: dict[str, RecordedEvent] = {}
        with self._reading(one_statement=len(wanted) <= 1000) as conn:
            for chunk in _chunks(wanted, 1000):
                # The driver directly: a writer asks this before every batch, and
                # SQLAlchemy's statement machinery cost more than the query.
                for row in self._backend.existing(conn, chunk):
                    rec = to_event(row)
                    found[rec.id] = rec
        return found

    def head_and_get_many(self, event_ids: Iterable[str]
                          ) -> tuple[int, dict[str, RecordedEvent]]:
        """`head()` and `get_many(event_ids)`: one query, so as of one moment, for up to
        1,000 ids (a group commit asks both before every batch); beyond, one query after
        the other."""
        wanted = sorted({i for i in event_ids if isinstance(i, str) and storable(i)})
        if len(wanted) > 1000:
            return self.head(), self.get_many(wanted)
        with self._reading(one_statement=True) as conn:
            head, rows = self._backend.head_and_existing(conn, wanted)
        return head, {r.id: r for r in map(to_event, rows)}

    def look_up(self, event_ids: Iterable[str], request_keys: Iterable[str] = ()) -> LookUp:
        """`head()`, `get_many(event_ids)` and which of `request_keys` are bound: one
        query, so as of one moment, for up to 1,000 ids and `_CHUNK` keys (a group
        commit of single writes asks all three before every batch); beyond, one query
        after the other."""
        wanted = sorted({i for i in event_ids if isinstance(i, str) and storable(i)})
        keys = sorted({k for k in request_keys if isinstance(k, str) and storable(k)})
        if len(wanted) > 1000 or len(keys) > _CHUNK:
            head, recorded = self.head_and_get_many(wanted)
            with self._reading() as conn:
                bound = self._backend.bound(conn, keys)
            return LookUp(head, recorded, frozenset(bound))
        with self._reading(one_statement=True) as conn:
            head, rows, bound = self._backend.head_existing_and_bound(conn, wanted, keys)
        return LookUp(head, {r.id: r for r in map(to_event, rows)}, frozenset(bound))

    def stream_version(self, stream: str) -> int:
        """The stream's current version, 0 when it has no event."""
        if not isinstance(stream, str) or not storable(stream):
            return 0  # no such stream can be recorded
        with self._reading() as conn:
            v = conn.execute(select(func.max(events.c.version)).where(events.c.stream == stream))
            return int(v.scalar_one() or 0)

    def max_time(self, streams: Iterable[str] | None = None) -> int | None:
        """The latest event time recorded (in those streams), None when none."""
        with self._reading() as conn:
            if streams is None:
                t0: int | None = conn.execute(select(func.max(events.c.event_time))).scalar_one()
                return t0
            best: int | None = None
            # A name with NUL or a lone surrogate cannot be recorded (nor compared by
            # PostgreSQL): skip it.
            names = sorted({s for s in streams if isinstance(s, str) and storable(s)})
            for chunk in _chunks(names, _CHUNK):
                # Walk the (event_time, position) index back from the end until a
                # row of these streams: quick when they are active, no extra index.
                t = conn.execute(
                    select(events.c.event_time)
                    .where(events.c.stream.in_(chunk))
                    .order_by(events.c.event_time.desc(), events.c.position.desc())
                    .limit(1)
                ).scalar_one_or_none()
                if t is not None and (best is None or t > best):
                    best = t
            return best

    def position_at(self, recorded_at: int) -> int:
        """The last position recorded at or before that wall-clock time (µs), 0 if none."""
        require_int("recorded_at", recorded_at)
        # recorded_at never decreases along positions: walk the primary key back
        # from the head (quick for recent times, which are the usual question).
        q = (
            select(events.c.position)
            .where(events.c.recorded_at <= recorded_at)
            .order_by(events.c.position.desc())
            .limit(1)
        )
        with self._reading() as conn:
            return int(conn.execute(q).scalar_one_or_none() or 0)

    def _ends(self) -> tuple[Anchor, Anchor]:
        """The head row and the last record, read in one statement (one moment)."""
        last = (
            select(events.c.position, events.c.hash)
            .order_by(events.c.position.desc())
            .limit(1)
            .subquery()
        )
        head_position = select(journal_head.c.position).scalar_subquery()
        last_position = select(last.c.position).scalar_subquery()
        with self._reading() as conn:
            # Each part a subquery, so that one row comes back even when the head row
            # was deleted (a `verify` finding, not a crash).
            row: Any
            try:
                row = self._fetch(conn, select(
                    head_position, select(journal_head.c.hash).scalar_subquery(),
                    last_position, select(last.c.hash).scalar_subquery()))[0]
            except JournalError:
                # A hash that is not text (SQLite keeps any bytes an edit puts there): each
                # read alone, the unreadable one left out (`verify_chain` says where).
                row = [self._fetch(conn, select(head_position))[0][0],
                       self._readable(conn, select(journal_head.c.hash).scalar_subquery()),
                       self._fetch(conn, select(last_position))[0][0],
                       self._readable(conn, select(last.c.hash).scalar_subquery())]
        return Anchor(row[0], row[1]), Anchor(row[2] or 0, row[3] or GENESIS_HASH)

    def _readable(self, conn: Connection, value: Any) -> Any:
        """One stored value, `_UNREADABLE` when it is not text."""
        try:
            return self._fetch(conn, select(value))[0][0]
        except JournalError:
            return _UNREADABLE

    # -- snapshots -------------------------------------------------------------

    def save_snapshot(
        self, name: str, position: int, event_time: int, digest: str, state: bytes
    ) -> SnapshotInfo:
        """Store a projection state (a cache of a fold, never truth)."""
        validate_snapshot(name, position, event_time, digest, state)
        with self._writing() as conn:
            result = conn.execute(
                insert(snapshots).values(
                    name=name,
                    position=position,
                    event_time=event_time,
                    digest=digest,
                    state=bytes(state),
                    recorded_at=self._clock(),
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return SnapshotInfo(int(key[0]), name, position, event_time, digest)

    def snapshots(self, name: str) -> list[SnapshotInfo]:
        """The snapshots saved under name, ordered by (event_time, position)."""
        q = (
            select(*_SNAPSHOT_COLUMNS)
            .where(snapshots.c.name == name)
            .order_by(snapshots.c.event_time, snapshots.c.position, snapshots.c.id)
        )
        with self._reading() as conn:
            # A row whose numbers are not integers, or whose text is not UTF-8 (SQLite
            # keeps what it is given) is a damaged cache entry, never truth: left out, as
            # a checkpoint that does not decode is.
            rows: list[Any]
            try:
                rows = self._fetch(conn, q)
            except JournalError:
                compiled, params = _compiled(q, conn.dialect)
                stored = _rows_as_bytes(dbapi(conn), compiled.string,
                                        _driver_args(compiled, params))
                rows = [tuple(_utf8(v) for v in r) for r in stored
                        if all(_utf8(v) is not None for v in r)]
            return [_snapshot(r) for r in rows
                    if all(isinstance(v, int) for v in (r[0], r[2], r[3]))]

    def load_snapshot(self, snapshot_id: int) -> bytes:
        """The state bytes of one snapshot; KeyError if there is none with that id."""
        found = appending.snapshot_id(snapshot_id)
        if found is None:
            raise KeyError(f"no snapshot with id {snapshot_id!r}")
        with self._reading() as conn:
            # As bytes whatever was stored: SQLite keeps text in a BLOB column (and would
            # fail to decode text that is not UTF-8); the checkpoint's reader then finds
            # it damaged.
            state = conn.execute(
                select(cast(snapshots.c.state, LargeBinary)).where(snapshots.c.id == found)
            ).scalar_one_or_none()
        if state is None:
            raise KeyError(f"no snapshot with id {snapshot_id}")
        return bytes(state)

    def drop_snapshots(self, name: str, *, from_time: int | None = None,
                       before_position: int | None = None,
                       through_id: int | None = None,
                       from_id: int | None = None) -> int:
        """Drop snapshots with event_time >= from_time, position < before_position and
        from_id <= id <= through_id (each bound: none if None); return how many."""
        appending.snapshot_bounds(from_time, before_position, through_id, from_id)
        stmt = delete(snapshots).where(snapshots.c.name == name)
        if from_time is not None:
            stmt = stmt.where(snapshots.c.event_time >= from_time)
        if before_position is not None:
            stmt = stmt.where(snapshots.c.position < before_position)
        if through_id is not None:
            stmt = stmt.where(snapshots.c.id <= through_id)
        if from_id is not None:
            stmt = stmt.where(snapshots.c.id >= from_id)
        with self._writing() as conn:
            return int(conn.execute(stmt).rowcount)

    # -- request keys ----------------------------------------------------------

    def request(self, key: str) -> RequestKey | None:
        """What `key` was bound to (`bind_request`), or None."""
        require_text("request key", key)
        with self._reading(one_statement=True) as conn:
            row = conn.execute(select(*_REQUEST_COLUMNS).where(request_keys.c.key == key)
                               ).one_or_none()
        return None if row is None else RequestKey(*row)

    def bind_request(self, key: str, fingerprint: str, answer: str,
                     positions: Sequence[int] = ()) -> RequestKey:
        """Bind a request's idempotency key to the request's digest and to the answer it
        got, in this thread's transaction (with the events the request appended: both or
        neither are kept), else in one of its own. `positions`: the journal positions the
        request named (erasing a record among them drops the binding). The same key and
        fingerprint again: the binding already there, unchanged; another fingerprint:
        IdempotencyConflict."""
        first, last = validate_request(key, fingerprint, answer, positions)
        with self._writing() as conn:
            row = conn.execute(select(*_REQUEST_COLUMNS).where(request_keys.c.key == key)
                               ).one_or_none()
            if row is not None:
                return bound_already(RequestKey(*row), fingerprint)
            bound = RequestKey(key, fingerprint, answer, self._backend.head(conn),
                               self._clock(), first, last)
            conn.execute(insert(request_keys).values(
                key=key, fingerprint=fingerprint, answer=answer, position=bound.position,
                recorded_at=bound.recorded_at, first_position=first, last_position=last))
            return bound

    # -- life ------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection; the journal is unusable afterwards."""
        self._closed = True
        self._engine.dispose()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Journal({self._backend.describe()!r})"


def upgrade(url: str | None) -> tuple[str | None, str]:
    """Apply the Alembic migrations to the database at url (`gpu-credits db upgrade`).

    Returns (revision before, revision after); before is None for a new database.
    Raises SchemaError if the database is newer than this code.
    """
    backend = backend_for(url, 10.0)
    with translating(backend):
        backend.prepare()  # a new SQLite file is made 0600, as a journal opened makes it
    engine = backend.create_engine()
    try:
        with translating(backend), backend.guard(), engine.connect() as conn:
            return migrate.upgrade(backend, conn)
    finally:
        engine.dispose()


_UNREADABLE: Any = b"\xff"
"""A stored hash that does not read as text (see `_ends`)."""

# SQLite's message for a TEXT value that is not UTF-8. The journal writes only UTF-8, and
# PostgreSQL stores nothing else; on SQLite an edit of the file can put any bytes there.
_NOT_UTF8 = "Could not decode to UTF-8"


def _driver_args(compiled: SQLCompiler, params: Mapping[str, Any]) -> Any:
    """A compiled query's parameters as its driver takes them (a tuple in order, or the
    mapping)."""
    if compiled.positional:
        return tuple(params[k] for k in compiled.positiontup or ())
    return params


def _rows_as_bytes(raw: Any, sql: str, args: Any) -> list[Any]:
    """A query's rows on SQLite's own connection, its text as the bytes stored."""
    factory = raw.text_factory
    raw.text_factory = bytes
    try:
        return list(raw.execute(sql, args).fetchall())
    finally:
        raw.text_factory = factory


def _utf8(value: Any) -> Any:
    """A stored value as text if it was bytes (None if they are not UTF-8), else as is."""
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _undecodable(raw: Any, sql: str, args: Any) -> JournalError:
    """The error for a query whose rows (position first) hold text that is not UTF-8:
    `ChainBroken` at the first such row, found by reading the rows again as bytes."""
    for row in _rows_as_bytes(raw, sql, args):
        bad = next((v for v in row[1:] if isinstance(v, bytes) and _utf8(v) is None), None)
        if bad is not None and isinstance(row[0], int):
            return ChainBroken(
                row[0], f"journal record at position {row[0]} holds stored text that is "
                f"not UTF-8 ({bytes(bad[:24])!r}): the journal writes only UTF-8, so it "
                "was written outside the journal")
    return JournalError("the journal's database holds stored text that is not UTF-8: it "
                        "was written outside the journal; run `gpu-credits verify`")
