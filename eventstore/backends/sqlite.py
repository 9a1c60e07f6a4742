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
- A new database file is created 0600 (owner only) before SQLite opens it: a ledger
  is nobody else's to read. SQLite gives its -wal and -shm files the database
  file's mode.
- read_only: connections are opened with the `mode=ro` URI, so SQLite itself refuses
  every write and never creates the file. A WAL database needs its -shm file to be read
  (SQLite creates it beside the file): on a read-only file system without one, and
  with no -wal file holding commits, the file is opened `immutable=1` (nobody can
  write there, so no lock or -shm is needed); with a -wal file holding commits it
  cannot be read there at all, and the message says what to do.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from ..backend import (
    Backend,
    BatchRow,
    Probe,
    RequestRow,
    batch_statements,
    dbapi,
    request_statements,
)
from ..errors import ConnectionProblem, JournalError, JournalNotFound, LockTimeout, ReadOnlyJournal
from ..migrate import HEAD_REVISION, not_upgraded, revision_of
from ..records import COLUMNS_SQL, StoredRow

# Execution option marking a connection whose next BEGIN must be IMMEDIATE.
_WRITE = "eventstore_write"
# Connection info key: (device, inode) of the database file the connection opened.
_FILE_ID = "eventstore_file_id"


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"))


def _refuse_other_than_a_file(path: Path) -> None:
    """JournalNotFound when `path` names something that is there but is no file (a
    directory, a device): SQLite would fail on it later with a misleading reason, a
    disk I/O error on /dev/null."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing (created, or refused, later), or unreadable (reported later)
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise JournalNotFound(f"no journal at {path}: it is {kind}, not a file (nothing was "
                          "written); give the path of a SQLite file, sqlite:///path.db")


class SQLiteBackend(Backend):
    """A SQLite file shared by any number of processes, or one in-memory database."""

    name = "SQLite"
    driver_error = sqlite3.Error
    own_database = True

    def __init__(self, url: str, lock_timeout: float, *, read_only: bool = False) -> None:
        super().__init__(url, lock_timeout, read_only=read_only)
        parsed = make_url(url)
        if parsed.query:
            # The file is opened with the journal's own settings (read-only where only
            # reading), so an option would be dropped without a word: `?mode=ro` would
            # still write.
            options = url[url.index("?"):]
            raise ValueError(f"a SQLite journal URL takes no options, got {options!r} in "
                             f"{url!r}: give the file alone, sqlite:///path.db (a journal "
                             "is opened read-only by the commands that only read)")
        database = parsed.database
        self.in_memory = database in (None, "", ":memory:")
        self.path = None if self.in_memory or database is None else Path(database)
        if self.path is not None:
            _refuse_other_than_a_file(self.path)
        # An in-memory database lives in one connection (StaticPool) shared by all
        # threads: sqlite3 cannot run two transactions on one connection, so the
        # journal holds this lock around each use (a transaction: for its duration).
        self._shared = threading.RLock() if self.in_memory else None
        # The query string of a read-only connection's URI (see `_read_only_query`).
        self._ro_query = "mode=ro"

    def create_engine(self) -> Engine:
        """An engine with the pragmas set on every new connection."""
        busy_ms = int(self.lock_timeout * 1000)
        connect_args: dict[str, Any] = {"timeout": self.lock_timeout, "check_same_thread": False}
        if self.in_memory:
            engine = create_engine("sqlite://", connect_args=connect_args, poolclass=StaticPool)
        elif self.read_only:
            assert self.path is not None
            uri = f"{self.path.absolute().as_uri()}?{self._ro_query}"
            engine = create_engine(
                "sqlite://",
                creator=lambda: sqlite3.connect(uri, uri=True, **connect_args),
            )
        else:
            engine = create_engine(self.url, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
            # Let SQLAlchemy's "begin" event emit BEGIN itself (the driver's implicit
            # BEGIN would be DEFERRED).
            dbapi_conn.isolation_level = None
            if self.path is not None:
                record.info[_FILE_ID] = _file_id(self.path)
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if not self.in_memory and not self.read_only:
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = FULL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get(_WRITE, False)
            # Readers BEGIN deferred: in WAL mode they never wait for the writer.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def require_existing(self) -> None:
        """JournalNotFound for an in-memory database or a file that does not exist."""
        if self.path is None:
            raise JournalNotFound(
                "an in-memory SQLite database never exists before it is opened: "
                "give a file, sqlite:///path.db"
            )
        if not self.path.is_file():  # (anything but a file was refused on opening)
            raise JournalNotFound(
                f"no journal at {self.path}: the file does not exist (nothing was "
                "created); check the path, or create it with `gpu-credits db upgrade`"
            )
        # Look before the engine's first connection, which sets WAL mode (a write):
        # a file that holds no journal must be left exactly as it was.
        query = self._read_only_query()
        if self.read_only:
            self._ro_query = query
        try:
            tables, versions = self._look(query)
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise ConnectionProblem(
                    f"{self.path} is not a SQLite database ({exc}); check the path"
                ) from None
            raise ConnectionProblem(f"cannot read SQLite database {self.path}: "
                                    f"{_io_problem(exc, self.path)}") from None
        if revision_of(self, tables, versions) is None:
            raise JournalNotFound(
                f"SQLite database {self.path} holds no journal (no schema was written); "
                "check the path, or create one with `gpu-credits db upgrade`"
            )

    def _look(self, query: str = "mode=ro") -> tuple[list[str], list[str] | None]:
        """The file's table names and its alembic_version rows (None: no such table),
        read on a connection of its own opened with `query`, which writes nothing."""
        assert self.path is not None
        ro = sqlite3.connect(f"{self.path.absolute().as_uri()}?{query}", uri=True)
        try:
            tables = [str(name) for (name,) in ro.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            if "alembic_version" not in tables:
                return tables, None
            return tables, [str(v) for (v,) in ro.execute(
                "SELECT version_num FROM alembic_version")]
        finally:
            ro.close()

    def _read_only_query(self) -> str:
        """`mode=ro`, or `mode=ro&immutable=1` for a file SQLite cannot open read-only
        because its WAL index (the -shm file) is missing and cannot be created beside
        it; ConnectionProblem when the file cannot be read there at all.

        immutable=1 makes SQLite read the file alone, without locks, -shm or -wal: right
        only where no one can write it (a read-only file system) and where no -wal file
        holds commits it would then leave out."""
        assert self.path is not None
        try:
            # The file opens lazily: the first read is what needs the -shm file.
            probe = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True)
            try:
                probe.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            finally:
                probe.close()
            return "mode=ro"
        except sqlite3.DatabaseError as exc:
            # As root on a read-only file system: "unable to open database file"; as a
            # user who may not write in the folder: SQLITE_READONLY_DIRECTORY.
            name = getattr(exc, "sqlite_errorname", "")
            if "unable to open" not in str(exc) and name not in _NO_INDEX:
                return "mode=ro"  # the caller's own look reports it
        if not os.access(self.path, os.R_OK):
            raise ConnectionProblem(
                f"cannot read SQLite database {self.path}: permission denied; give this "
                "user read access to it")
        folder = self.path.absolute().parent
        wal = Path(f"{self.path}-wal")
        shm = Path(f"{self.path}-shm")
        commits = wal.is_file() and wal.stat().st_size > 0
        if _read_only_fs(self.path) and not commits:
            return "mode=ro&immutable=1"
        if commits:
            raise ConnectionProblem(
                f"cannot read SQLite database {self.path}: its write-ahead log {wal} holds "
                f"commits, and SQLite needs the index {shm} beside it to read them, which "
                f"it cannot create in {folder} (read-only); copy {self.path.name} with its "
                "-wal file into a folder you can write, or have the journal's owner run "
                f"`sqlite3 {self.path.name} \"PRAGMA wal_checkpoint(TRUNCATE)\"` (which "
                "folds the log into the file) before handing it over")
        raise ConnectionProblem(
            f"cannot read SQLite database {self.path}: SQLite needs to create its index "
            f"{shm} beside it, and cannot write in {folder}; give this user write access "
            f"to {folder}, or copy {self.path.name} into a folder it can write (on a "
            "read-only file system it is read as it stands)")

    def prepare(self) -> None:
        """Create a missing database file empty and 0600, before SQLite makes it 0644."""
        if self.path is None or self.read_only:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            self._refuse_other_than_a_journal()
            return
        except OSError as exc:
            raise ConnectionProblem(
                f"cannot create SQLite database {self.path}: {exc.strerror}; check that "
                "its folder exists and is writable"
            ) from None
        os.close(fd)

    def _refuse_other_than_a_journal(self) -> None:
        """SchemaError for an existing file that is not a journal (another application's
        database, a journal's revision edited away), ReadOnlyJournal for an old journal
        that cannot be upgraded where it is; seen before the engine's first connection
        switches the file to WAL mode: a refused file is left as it was."""
        assert self.path is not None
        try:
            if self.path.stat().st_size == 0:
                return  # an empty file (`touch`): a new journal's to fill
            tables, versions = self._look()
        except (OSError, sqlite3.Error):
            return  # the engine's own connection reports what stands in the way
        current = revision_of(self, tables, versions)
        if current is not None and current != HEAD_REVISION and self.unwritable():
            raise ReadOnlyJournal(str(not_upgraded(self, current)))

    def unwritable(self) -> str | None:
        """A read-only file system or a file this user may not write (a folder it may not
        write in is not enough: the -wal and -shm files may be there already)."""
        if self.path is None or not self.path.exists():
            return None
        if _read_only_fs(self.path):
            return f"{self.path.absolute().parent} is on a read-only file system"
        if not os.access(self.path, os.W_OK):
            return f"this user may not write {self.path}"
        return None

    def upgrade_advice(self) -> str:
        """Upgrade in place, or a copy where the file cannot be written: reading an old
        journal needs it upgraded, so "run `gpu-credits db upgrade`" there led nowhere."""
        why = self.unwritable()
        if why is None:
            return super().upgrade_advice()
        assert self.path is not None
        return (f"it cannot be upgraded where it is ({why}; nothing was written): copy "
                f"{self.path.name} (and its -wal file, if there is one) into a folder you "
                "can write, run `gpu-credits db upgrade --db sqlite:///COPY` and use the copy")

    def guard(self) -> AbstractContextManager[object]:
        """The in-memory database's connection lock; nothing for a file."""
        return self._shared if self._shared is not None else nullcontext()

    @contextmanager
    def begin_write(self, conn: Connection, locks: Sequence[str]) -> Iterator[None]:
        """BEGIN IMMEDIATE: the one write lock covers every key, so keys need nothing more."""
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            self._require_same_file(conn)
            yield

    def _require_same_file(self, conn: Connection) -> None:
        """ConnectionProblem when the database file this connection opened is no longer
        at its path (deleted, moved, replaced): SQLite would go on writing to the open
        file, and every write acknowledged from then on would be lost with it."""
        if self.path is None:
            return
        opened = conn.info.get(_FILE_ID)
        if opened is not None and _file_id(self.path) != opened:
            raise ConnectionProblem(
                f"SQLite database {self.path} was removed or replaced after this process "
                "opened it: a write to the file it holds open would be lost; put the file "
                "back, or restart the process on the database now at that path")

    def lock_and_probe(self, conn: Connection, ids: Sequence[str], streams: Sequence[str]) -> Probe:
        """Read the head and what the append needs; BEGIN IMMEDIATE already holds the lock.

        Lists travel as one JSON array parameter (json_each), so each statement
        has a fixed text the driver's statement cache keeps, whatever the batch size.
        """
        with self.direct(conn):
            cur = dbapi(conn).cursor()
            position, digest = cur.execute(_HEAD).fetchone()
            last = cur.execute(_LAST_RECORDED).fetchone()
            any_existing = cur.execute(_ANY_EXISTING, (json.dumps(ids),)).fetchone()[0]
            versions = {
                s: v for s, v in cur.execute(_VERSIONS, (json.dumps(streams),)) if v is not None
            }
            cur.close()
        return Probe(position, digest, last[0] if last else 0, versions, bool(any_existing),
                     last[1] if last else 0, last[2] if last else "")

    def existing(self, conn: Connection, ids: Sequence[str]) -> list[StoredRow]:
        """The recorded rows among these ids."""
        with self.direct(conn):
            return list(dbapi(conn).execute(_EXISTING, (json.dumps(ids),)))

    def write(self, conn: Connection, rows: Sequence[StoredRow],
              private: Sequence[tuple[int, str, str]] = (),
              batch: BatchRow | None = None, *, commit: bool = False,
              requests: Sequence[RequestRow] = ()) -> None:
        """executemany the rows (and private parts), then move the head and write the
        batch's row."""
        with self.direct(conn):
            cur = dbapi(conn).cursor()
            cur.executemany(_INSERT, rows)
            if private:
                cur.executemany(_INSERT_PRIVATE, private)
            cur.execute(_MOVE_HEAD, (rows[-1][0], rows[-1][8]))
            for sql, params in [*batch_statements(batch, "?"),
                                *request_statements(requests, "?")]:
                cur.execute(sql, params)
            cur.close()

    def before_erase(self, conn: Connection) -> None:
        """secure_delete: SQLite overwrites what it deletes with zeros, instead of leaving
        it in free space in the file."""
        conn.exec_driver_sql("PRAGMA secure_delete = ON")

    def after_erase(self, engine: Engine) -> tuple[str, ...]:
        """Checkpoint the WAL into the file and truncate it: page images written before the
        erasure (holding the erased text) are in the WAL, or in the database file, until
        the checkpoint writes the zeroed pages over them."""
        if self.in_memory:
            return ()
        with self.guard(), engine.connect() as conn:
            busy = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy is not None and busy[0]:
            return (f"SQLite could not truncate the write-ahead log of {self.describe()} "
                    "now (another connection is reading): earlier copies of the erased "
                    "pages stay in the database file or its -wal file until a checkpoint "
                    "overwrites them; run "
                    "`gpu-credits erase` again (it retries) or wait for the readers to end",)
        return ()

    def translate(self, exc: DBAPIError) -> JournalError | None:
        """'database is locked' -> LockTimeout; cannot open -> ConnectionProblem."""
        text = str(exc.orig)
        read_only_fs = self.path is not None and _read_only_fs(self.path)
        if read_only_fs and ("readonly database" in text or
                             "unable to open database file" in text):
            assert self.path is not None
            return ReadOnlyJournal(
                f"SQLite database {self.describe()}: {self.path.absolute().parent} is on "
                "a read-only file system: nothing can be written there, and nothing "
                "was (commands that only read still answer)")
        if "readonly database" in text:
            return ReadOnlyJournal(
                f"SQLite database {self.describe()} is open read-only (or its file is not "
                "writable): nothing was written"
            )
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
            where = f" holding {self.path.absolute().parent}" if self.path is not None else ""
            return JournalError(
                f"SQLite database {self.describe()}: the disk{where} is full ({text}); "
                "nothing of the failed transaction was stored: free space and retry"
            )
        if "disk I/O error" in text and self.path is not None:
            return JournalError(
                f"SQLite database {self.describe()}: {_io_problem(exc.orig or exc, self.path)}")
        if isinstance(exc.orig, sqlite3.DatabaseError) and "not a database" in text:
            return ConnectionProblem(
                f"{self.describe()} is not a SQLite database ({text}); check the path"
            )
        return None


# SQLite's errors for a WAL index (-shm file) it may not create beside the database.
_NO_INDEX = ("SQLITE_READONLY_DIRECTORY", "SQLITE_READONLY_CANTINIT", "SQLITE_CANTOPEN")


def _read_only_fs(path: Path) -> bool:
    """Whether the folder of `path` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(path.absolute().parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _io_problem(exc: BaseException, path: Path) -> str:
    """What a SQLite error opening or reading `path` means, and what to do.

    A full disk shows as a disk I/O error when SQLite cannot grow the -shm file of a
    WAL database (which even a read needs), not as "database or disk is full"."""
    name = getattr(exc, "sqlite_errorname", "")
    folder = path.absolute().parent
    if name.startswith("SQLITE_IOERR_SHM"):
        return (f"disk I/O error ({name}): SQLite could not make the -shm file beside it, "
                f"which even a read needs; the disk holding {folder} is probably full: "
                "free space there and retry (nothing was written)")
    if "disk I/O error" in str(exc):
        # A write may fail at its commit's sync: whether the commit stands is unknown.
        return (f"disk I/O error ({name or exc}) on the file or the -wal and -shm files "
                f"beside it; check the disk holding {folder} (full? failing?); a write "
                "that failed so may or may not be stored: look with `gpu-credits head`, "
                "and retry with the same event ids")
    return f"{exc}; check the path and that this user may read it"


_HEAD = "SELECT position, hash FROM journal_head WHERE id = 1"
_LAST_RECORDED = "SELECT recorded_at, position, hash FROM events ORDER BY position DESC LIMIT 1"
_ANY_EXISTING = (
    "SELECT EXISTS (SELECT 1 FROM events WHERE event_id IN (SELECT value FROM json_each(?)))"
)
# max(version) per stream: each one an index seek on (stream, version).
_VERSIONS = (
    "SELECT j.value, (SELECT max(e.version) FROM events e WHERE e.stream = j.value) "
    "FROM json_each(?) AS j"
)
_EXISTING = f"SELECT {COLUMNS_SQL} FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
_INSERT = f"INSERT INTO events ({COLUMNS_SQL}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_MOVE_HEAD = "UPDATE journal_head SET position = ?, hash = ? WHERE id = 1"
_INSERT_PRIVATE = "INSERT INTO private_parts (position, salt, data) VALUES (?, ?, ?)"
