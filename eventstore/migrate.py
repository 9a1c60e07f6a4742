"""Bringing a database's schema to this code's Alembic head, or refusing it.

Alembic is configured in code (`Config()` with `script_location` at the installed
`migrations` package), so this works from an installed package and from any
current folder.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from .backend import Backend
from .errors import SchemaError

#: Lock key serialising concurrent upgrades of one PostgreSQL database.
MIGRATION_LOCK = "eventstore:migrations"


def alembic_config() -> Config:
    """An Alembic Config for the `migrations` package, wherever it is installed."""
    import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return cfg


@cache
def _script() -> ScriptDirectory:
    # Parsing the version files once per process keeps opening a journal cheap.
    return ScriptDirectory.from_config(alembic_config())


def code_head() -> str:
    """The newest revision this code knows."""
    head = _script().get_current_head()
    if head is None:  # pragma: no cover - the package always ships 0001
        raise SchemaError("the migrations package has no revision")
    return head


def known_revisions() -> set[str]:
    """Every revision this code knows."""
    return {s.revision for s in _script().walk_revisions()}


def current_revision(conn: Connection) -> str | None:
    """The database's Alembic revision, None when it was never upgraded."""
    return MigrationContext.configure(conn).get_current_revision()


def refuse_unknown(backend: Backend, current: str | None) -> None:
    """Raise SchemaError if the database is at a revision this code does not know."""
    if current is not None and current not in known_revisions():
        raise SchemaError(
            f"{backend.name} database {backend.describe()} is at schema revision {current!r}, "
            f"which this code does not know (its newest is {code_head()!r}): the database "
            "was upgraded by a newer gpu-credits; upgrade this installation"
        )


def check(backend: Backend, conn: Connection) -> None:
    """Raise SchemaError unless the database is exactly at this code's head."""
    with conn.begin():
        current = current_revision(conn)
    refuse_unknown(backend, current)
    if current != code_head():
        state = "has no journal schema" if current is None else f"is at revision {current!r}"
        raise SchemaError(
            f"{backend.name} database {backend.describe()} {state}; this code needs "
            f"revision {code_head()!r}: run `gpu-credits db upgrade`"
        )


def upgrade(backend: Backend, conn: Connection) -> tuple[str | None, str]:
    """Upgrade to head under the write lock; return (revision before, revision after)."""
    head = code_head()
    with conn.begin():
        before = current_revision(conn)
    refuse_unknown(backend, before)
    if before == head:
        return before, head
    # Under the journal's write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an
    # advisory lock), so processes opening a fresh database together upgrade once.
    with backend.begin_write(conn, [MIGRATION_LOCK]):
        before = current_revision(conn)
        refuse_unknown(backend, before)
        if before != head:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    return before, head
