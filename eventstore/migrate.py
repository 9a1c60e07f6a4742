"""Bringing a database's schema to this code's Alembic head, or refusing it.

Alembic is configured in code (`Config()` with `script_location` at the installed
`migrations` package), so this works from an installed package and from any
current folder.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from .backend import Backend
from .errors import JournalNotFound, SchemaError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

#: Lock key serialising concurrent upgrades of one PostgreSQL database.
MIGRATION_LOCK = "eventstore:migrations"

HEAD_REVISION = "0006"
"""The newest revision in `migrations/` (a test checks it against Alembic's own head).

Opening a journal whose database is already there needs nothing more: Alembic (a tenth
of a second and 14 MB to import) is loaded only to upgrade or to explain a mismatch.
"""


def alembic_config() -> Config:
    """An Alembic Config for the `migrations` package, wherever it is installed."""
    from alembic.config import Config

    import migrations

    # Alembic's default stdout is whatever sys.stdout was when it was first imported,
    # which (imported lazily) may be a stream long closed since: pass today's.
    cfg = Config(stdout=sys.stdout)
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return cfg


@cache
def _script() -> ScriptDirectory:
    # Parsing the version files once per process keeps opening a journal cheap.
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def _at_head(conn: Connection) -> bool:
    """Whether the database is at HEAD_REVISION, read without Alembic (False if unsure)."""
    try:
        with conn.begin():
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except DBAPIError:  # no such table yet: let Alembic say what it is
        return False
    return [tuple(row) for row in rows] == [(HEAD_REVISION,)]


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
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def refuse_unknown(backend: Backend, current: str | None) -> None:
    """Raise SchemaError if the database is at a revision this code does not know."""
    if current is not None and current not in known_revisions():
        raise SchemaError(
            f"{backend.name} database {backend.describe()} is at schema revision {current!r}, "
            f"which this code does not know (its newest is {code_head()!r}): the database "
            "was upgraded by a newer gpu-credits; upgrade this installation"
        )


def _revision(conn: Connection) -> str | None:
    """The database's revision: HEAD_REVISION read cheaply when it is there, else asked of
    Alembic (None when it was never upgraded)."""
    if _at_head(conn):
        return HEAD_REVISION
    with conn.begin():
        return current_revision(conn)


def require_journal(backend: Backend, conn: Connection) -> None:
    """Raise JournalNotFound unless the database holds a journal schema (writes nothing)."""
    if _revision(conn) is None:
        raise JournalNotFound(
            f"{backend.name} database {backend.describe()} holds no journal (no schema "
            "was written); check the URL, or create one with `gpu-credits db upgrade`"
        )


def check(backend: Backend, conn: Connection) -> None:
    """Raise SchemaError unless the database is exactly at this code's head."""
    current = _revision(conn)
    if current == HEAD_REVISION:
        return
    refuse_unknown(backend, current)
    if current != code_head():
        raise not_upgraded(backend, current)


def not_upgraded(backend: Backend, current: str | None) -> SchemaError:
    """What `check` raises for a database at `current` (None: no journal schema), which
    `gpu-credits db upgrade` brings to this code's revision."""
    state = "has no journal schema" if current is None else f"is at revision {current!r}"
    return SchemaError(
        f"{backend.name} database {backend.describe()} {state}; this code needs "
        f"revision {code_head()!r}: run `gpu-credits db upgrade`"
    )


def upgrade(backend: Backend, conn: Connection) -> tuple[str | None, str]:
    """Upgrade to head under the write lock; return (revision before, revision after)."""
    before = _revision(conn)
    if before == HEAD_REVISION:
        return HEAD_REVISION, HEAD_REVISION
    head = code_head()
    refuse_unknown(backend, before)
    if before == head:
        return before, head
    # Under the journal's write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an
    # advisory lock), so processes opening a fresh database together upgrade once.
    with backend.begin_write(conn, [MIGRATION_LOCK]):
        before = current_revision(conn)
        refuse_unknown(backend, before)
        if before != head:
            from alembic import command

            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            try:
                command.upgrade(cfg, "head")
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) == _INVALID_SCHEMA_NAME:
                    raise SchemaError(
                        f"{backend.name} database {backend.describe()}: no schema to "
                        "create the journal in (the search_path names none that "
                        "exists); create it first (CREATE SCHEMA ...), or check the URL"
                    ) from None
                raise
    return before, head


_INVALID_SCHEMA_NAME = "3F000"
"""PostgreSQL's SQLSTATE for creating in a schema that does not exist."""
