"""Bringing a database's schema to this code's Alembic head, or refusing it.

Alembic is configured in code (`Config()` with `script_location` at the installed
`migrations` package), so this works from an installed package and from any
current folder.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from .backend import Backend
from .errors import JournalNotFound, SchemaError
from .schema import metadata

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
            # Naming journal_head (a condition always true) fails where it is missing:
            # another application's Alembic at a revision numbered like ours is then
            # looked at whole, and refused.
            rows = conn.execute(text(
                "SELECT version_num FROM alembic_version "
                "WHERE NOT EXISTS (SELECT 1 FROM journal_head WHERE 1 = 0)")).all()
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


JOURNAL_TABLES = frozenset(metadata.tables)
"""The tables a journal's migrations create (beside `alembic_version`)."""


def revision_of(backend: Backend, tables: Collection[str], versions: Sequence[str] | None
                ) -> str | None:
    """The revision of a database holding `tables` whose `alembic_version` holds `versions`
    (None: no such table); None for a database without a journal that one may be
    created in. SchemaError for anything else: another application's database, a
    journal's revision edited away, or a revision newer than this code's."""
    where = f"{backend.name} database {backend.describe()}"
    ours = sorted(set(tables) & JOURNAL_TABLES)
    if not versions:
        # No revision recorded: an empty database, or tables someone else made.
        version_table = "no alembic_version table" if versions is None else (
            "an empty alembic_version table")
        if ours:
            raise SchemaError(
                f"{where} holds table(s) {', '.join(ours)} but {version_table}, so it is "
                "not a journal this code can open as it stands: those tables were made by "
                "another application, or the journal's revision was removed by hand; "
                "check the URL, or restore the journal from a backup (nothing was written)")
        others = sorted(t for t in tables if t != "alembic_version"
                        and not t.startswith("sqlite_"))
        if others and backend.own_database:
            raise SchemaError(
                f"{where} holds no journal but other tables ({', '.join(others[:5])}"
                f"{', ...' if len(others) > 5 else ''}): it is another application's "
                "database, not a gpu-credits journal; check the URL, or give a new file "
                "(nothing was written)")
        return None
    if len(versions) > 1:
        listed = ", ".join(repr(v) for v in sorted(versions))
        raise SchemaError(
            f"{where} records several schema revisions ({listed}) in its alembic_version "
            f"table, where a journal records one (this code's is {code_head()!r}): it was "
            "edited outside gpu-credits; restore the journal from a backup")
    current = versions[0]
    missing = [t for t in ("events", "journal_head") if t not in ours]
    if missing:
        # Every revision of the journal has both (0001 made them): this is another
        # application's Alembic, whose revisions may well be numbered like ours.
        raise SchemaError(
            f"{where} is at schema revision {current!r} of another application (it has "
            f"no {' or '.join(missing)} table): not a gpu-credits journal; check the URL "
            "(nothing was written)")
    if current != HEAD_REVISION and current not in known_revisions():
        raise SchemaError(
            f"{where} is at schema revision {current!r}, which this code does not know "
            f"(its newest is {code_head()!r}): the database was upgraded by a newer "
            "gpu-credits; upgrade this installation"
        )
    return current


def _stored_revision(backend: Backend, conn: Connection) -> str | None:
    """`revision_of` the database, read in the connection's transaction."""
    from sqlalchemy import inspect

    tables = inspect(conn).get_table_names()
    versions = None
    if "alembic_version" in tables:
        versions = [str(v) for v in
                    conn.execute(text("SELECT version_num FROM alembic_version")).scalars()]
    return revision_of(backend, tables, versions)


def _revision(backend: Backend, conn: Connection) -> str | None:
    """The database's revision: HEAD_REVISION read cheaply when it is there, else looked
    at whole (None when it holds no journal schema)."""
    if _at_head(conn):
        return HEAD_REVISION
    with conn.begin():
        return _stored_revision(backend, conn)


def require_journal(backend: Backend, conn: Connection) -> None:
    """Raise JournalNotFound unless the database holds a journal schema (writes nothing)."""
    if _revision(backend, conn) is None:
        if conn.dialect.name == "postgresql":
            with conn.begin():
                schema = conn.execute(text("SELECT current_schema()")).scalar()
            if schema is None:
                # `db upgrade` cannot create a journal there either: say what can.
                raise JournalNotFound(
                    f"{backend.name} database {backend.describe()}: no journal, and no "
                    "schema to hold one (the search_path names none that exists); check "
                    "the URL, or create the schema first (CREATE SCHEMA ...), then run "
                    "`gpu-credits db upgrade`")
        raise JournalNotFound(
            f"{backend.name} database {backend.describe()} holds no journal (no schema "
            "was written); check the URL, or create one with `gpu-credits db upgrade`"
        )


def check(backend: Backend, conn: Connection) -> None:
    """Raise SchemaError unless the database is exactly at this code's head."""
    current = _revision(backend, conn)
    if current == HEAD_REVISION:
        return
    if current != code_head():
        raise not_upgraded(backend, current)


def not_upgraded(backend: Backend, current: str | None) -> SchemaError:
    """What `check` raises for a database at `current` (None: no journal schema), which
    `gpu-credits db upgrade` brings to this code's revision."""
    state = "has no journal schema" if current is None else f"is at revision {current!r}"
    advice = "run `gpu-credits db upgrade`" if current is None else backend.upgrade_advice()
    return SchemaError(
        f"{backend.name} database {backend.describe()} {state}; this code needs "
        f"revision {code_head()!r}: {advice}"
    )


def upgrade(backend: Backend, conn: Connection) -> tuple[str | None, str]:
    """Upgrade to head under the write lock; return (revision before, revision after)."""
    before = _revision(backend, conn)
    if before == HEAD_REVISION:
        return HEAD_REVISION, HEAD_REVISION
    head = code_head()
    if before == head:
        return before, head
    # Under the journal's write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an
    # advisory lock), so processes opening a fresh database together upgrade once.
    with backend.begin_write(conn, [MIGRATION_LOCK]):
        before = _stored_revision(backend, conn)
        if before != head:
            from alembic import command

            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            try:
                command.upgrade(cfg, "head")
            except DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state == _INSUFFICIENT_PRIVILEGE:
                    said = str(exc.orig).strip().splitlines()[0]
                    start = f"{before}:head" if before is not None else "head"
                    raise SchemaError(
                        f"{not_upgraded(backend, before)}; this database user may not "
                        f"({said}; nothing was written): run it as the owner of the "
                        "journal's schema, or have a DBA run the SQL that `alembic -c "
                        f"migrations/alembic.ini -x url=URL upgrade {start} --sql` writes"
                    ) from None
                if state == _INVALID_SCHEMA_NAME:
                    raise SchemaError(
                        f"{backend.name} database {backend.describe()}: no schema to "
                        "create the journal in (the search_path names none that "
                        "exists); create it first (CREATE SCHEMA ...), or check the URL"
                    ) from None
                raise
    return before, head


_INVALID_SCHEMA_NAME = "3F000"
"""PostgreSQL's SQLSTATE for creating in a schema that does not exist."""

_INSUFFICIENT_PRIVILEGE = "42501"
"""PostgreSQL's SQLSTATE for a statement this user may not run (CREATE, ALTER, ...)."""
