"""The journal's tables, as SQLAlchemy Core metadata.

Alembic's env.py imports `metadata` to compare it with the migrations (drift
check); the journal's queries use the Table objects. The migrations, not this
module, create and change the schema.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
)

# On SQLite only "INTEGER PRIMARY KEY" makes a column the rowid: inserts append to
# the table's own b-tree instead of maintaining a second index. Elsewhere BIGINT.
Int64Key = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

events = Table(
    "events",
    metadata,
    # Gapless global arrival order from 1, assigned by the journal, never by the database.
    Column("position", Int64Key, primary_key=True, autoincrement=False),
    Column("event_id", Text, nullable=False),  # idempotency key
    Column("stream", Text, nullable=False),
    Column("version", Integer, nullable=False),  # per-stream, from 1
    Column("type", Text, nullable=False),
    Column("event_time", BigInteger, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),  # µs since the epoch, non-decreasing
    Column("payload", Text, nullable=False),  # canonical JSON
    Column("hash", Text, nullable=False),  # hex SHA-256 chained to position - 1
    UniqueConstraint("event_id"),
    UniqueConstraint("stream", "version"),
    # Canonical order of the timeline: every replay reads along this index.
    Index(None, "event_time", "position"),
)

journal_head = Table(
    "journal_head",
    metadata,
    # Exactly one row: the last position and its hash. Appends lock it (PostgreSQL:
    # SELECT ... FOR UPDATE) to assign positions; see eventstore/backends/postgres.py.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("position", BigInteger, nullable=False),
    Column("hash", Text, nullable=False),
    CheckConstraint("id = 1", name="one_row"),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("id", Int64Key, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("event_time", BigInteger, nullable=False),
    Column("digest", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Index(None, "name", "event_time"),
    # AUTOINCREMENT: an id is never reused after a drop, so a stale id cannot load
    # another snapshot's state.
    sqlite_autoincrement=True,
)

private_parts = Table(
    "private_parts",
    metadata,
    # The private part of the record at `position` (see records.NewEvent.private): kept
    # beside the chain, which covers only its seal, so that erasing it (deleting the row)
    # leaves every hash as it was.
    Column("position", Int64Key, primary_key=True, autoincrement=False),
    Column("salt", Text, nullable=False),  # hex; the seal is sha256(salt + data)
    Column("data", Text, nullable=False),  # canonical JSON of the private fields
)

batches = Table(
    "batches",
    metadata,
    # Positions appended in one transaction (or one append outside one), known together:
    # `first_position` to `last_position`, both included. Only batches of two events or
    # more have a row; a position in none (every position written before this table
    # existed, every single-event append) is a batch of its own. Outside the hash chain:
    # see docs/architecture.md ("Batches").
    Column("first_position", Int64Key, primary_key=True, autoincrement=False),
    Column("last_position", BigInteger, nullable=False),
    CheckConstraint("last_position > first_position", name="more_than_one"),
)

request_keys = Table(
    "request_keys",
    metadata,
    # The idempotency key of a request that appended events together, bound to the answer
    # it got (records.RequestKey): written in the transaction of its events, so both or
    # neither are there. Outside the hash chain, as `batches`: docs/architecture.md
    # ("Request keys").
    Column("key", Text, primary_key=True),
    Column("fingerprint", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Column("first_position", BigInteger, nullable=True),
    Column("last_position", BigInteger, nullable=True),
)
