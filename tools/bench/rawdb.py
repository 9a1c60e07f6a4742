"""The raw-driver baselines: `sqlite3` and psycopg writing and reading the same rows.

Same table shape as the journal (position primary key, unique event id, unique
(stream, version), an index on (event_time, position), canonical JSON payload) and, for
fairness, the same per-row work a hash chain needs: one SHA-256 per row over the previous
hash and the payload (the journal hashes the whole record's canonical JSON, a little more).
No idempotency lookup, no version query, no head row: that is what the journal adds, and
what the ratios price.

SQLite runs with the journal's pragmas: WAL, synchronous=FULL, BEGIN IMMEDIATE.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tools.bench.workload import MixEvent

Row = tuple[int, str, str, int, str, int, int, str, str]

COLUMNS = "position, event_id, stream, version, type, event_time, recorded_at, payload, hash"
INSERT_SQLITE = f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
INSERT_PG = f"INSERT INTO events ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
SELECT_CANONICAL = f"SELECT {COLUMNS} FROM events ORDER BY event_time, position"


def ddl(int64: str) -> list[str]:
    """The journal's events table, written by hand."""
    return [
        f"""CREATE TABLE events (
            position {int64} PRIMARY KEY,
            event_id TEXT NOT NULL UNIQUE,
            stream TEXT NOT NULL,
            version INTEGER NOT NULL,
            type TEXT NOT NULL,
            event_time BIGINT NOT NULL,
            recorded_at BIGINT NOT NULL,
            payload TEXT NOT NULL,
            hash TEXT NOT NULL,
            UNIQUE (stream, version))""",
        "CREATE INDEX ix_events_time ON events (event_time, position)",
    ]


class Rows:
    """Turns events into rows: position, per-stream version, canonical payload, chained hash."""

    def __init__(self) -> None:
        self.position = 0
        self.prev = "0" * 64
        self.versions: dict[str, int] = {}

    def row(self, e: MixEvent, recorded_at: int) -> Row:
        self.position += 1
        version = self.versions.get(e.stream, 0) + 1
        self.versions[e.stream] = version
        payload = json.dumps(e.fields, sort_keys=True, separators=(",", ":"),
                             ensure_ascii=False)
        digest = hashlib.sha256((self.prev + payload).encode()).hexdigest()
        self.prev = digest
        return (self.position, e.id, e.stream, version, e.type, e.time, recorded_at, payload,
                digest)

    def rows(self, events: Sequence[MixEvent]) -> list[Row]:
        now = time.time_ns() // 1000
        return [self.row(e, now) for e in events]


def batches(events: Sequence[MixEvent], size: int) -> Iterator[Sequence[MixEvent]]:
    for i in range(0, len(events), size):
        yield events[i : i + size]


# -- sqlite3 -----------------------------------------------------------------------------


def sqlite_connect(path: str, *, create: bool) -> sqlite3.Connection:
    """A connection with the journal's pragmas; autocommit, so BEGIN is ours to issue."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    if create:
        for stmt in ddl("INTEGER"):
            conn.execute(stmt)
    return conn


def sqlite_one_per_commit(conn: sqlite3.Connection, events: Sequence[MixEvent]) -> None:
    rows = Rows()
    for e in events:
        row = rows.row(e, time.time_ns() // 1000)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT_SQLITE, row)
        conn.execute("COMMIT")


def sqlite_executemany(conn: sqlite3.Connection, events: Sequence[MixEvent],
                       batch: int) -> None:
    rows = Rows()
    for chunk in batches(events, batch):
        data = rows.rows(chunk)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT_SQLITE, data)
        conn.execute("COMMIT")


def sqlite_read_decode(conn: sqlite3.Connection) -> int:
    """Every row in canonical order, payload JSON-decoded; how many. The connection is
    opened before (`sqlite3.connect(path)`), as our side's journal is opened before its
    timed read."""
    n = 0
    loads = json.loads
    for row in conn.execute(SELECT_CANONICAL):
        loads(row[7])
        n += 1
    return n


# -- psycopg -----------------------------------------------------------------------------


def pg_connect(dsn: str, schema: str, *, create: bool) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, options=f"-csearch_path={schema}")
    if create:
        for stmt in ddl("BIGINT"):
            conn.execute(stmt)
        conn.commit()
    return conn


def pg_one_per_commit(conn: Any, events: Sequence[MixEvent]) -> None:
    rows = Rows()
    for e in events:
        conn.execute(INSERT_PG, rows.row(e, time.time_ns() // 1000))
        conn.commit()


def pg_executemany(conn: Any, events: Sequence[MixEvent], batch: int) -> None:
    rows = Rows()
    for chunk in batches(events, batch):
        with conn.cursor() as cur:
            cur.executemany(INSERT_PG, rows.rows(chunk))
        conn.commit()


def pg_copy(conn: Any, events: Sequence[MixEvent], batch: int) -> None:
    rows = Rows()
    for chunk in batches(events, batch):
        with conn.cursor() as cur, cur.copy(f"COPY events ({COLUMNS}) FROM STDIN") as copy:
            for row in rows.rows(chunk):
                copy.write_row(row)
        conn.commit()


def pg_read_decode(conn: Any, itersize: int = 5000) -> int:
    """Every row in canonical order through a server-side cursor, payload decoded. The
    connection is opened before (`pg_connect`, which imports the driver), as our side's
    journal is opened before its timed read."""
    n = 0
    loads = json.loads
    with conn.cursor(name="bench_read") as cur:
        cur.itersize = itersize
        cur.execute(SELECT_CANONICAL)
        for row in cur:
            loads(row[7])
            n += 1
    conn.commit()
    return n
