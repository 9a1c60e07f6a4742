"""Helpers for tests of any layer: open a journal by backend kind or URL.

`tests/conftest.py` re-exports `open_journal`; import it from here
(`from eventstore.testing import open_journal`) so the import does not depend on
which conftest pytest loaded last.
"""

from __future__ import annotations

from collections.abc import Sequence

from .interface import JournalLike
from .journal import Journal
from .memory import MemoryJournal
from .records import NewEvent


def open_journal(kind_or_url: str | None) -> JournalLike:
    """MemoryJournal() for "memory", else Journal(url) (None: in-memory SQLite)."""
    if kind_or_url == "memory":
        return MemoryJournal()
    return Journal(kind_or_url)


def write_at_revision(url: str, revision: str, events: Sequence[NewEvent]) -> None:
    """Make the empty database at `url` one at schema `revision` holding `events`,
    appended together, as the code of that revision wrote them: for tests of what later
    migrations and code make of old data. The rows go in by SQL, so no code of today
    decides what they hold."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from .migrate import alembic_config

    source = MemoryJournal()
    source.append(list(events))
    rows = list(source._stored)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            for r in rows:
                conn.execute(text(
                    "INSERT INTO events (position, event_id, stream, version, type, "
                    "event_time, recorded_at, payload, hash) VALUES "
                    "(:p, :i, :s, :v, :t, :et, :ra, :pl, :h)"),
                    dict(zip(("p", "i", "s", "v", "t", "et", "ra", "pl", "h"), r,
                             strict=True)))
            conn.execute(text("UPDATE journal_head SET position = :p, hash = :h"),
                         {"p": rows[-1][0], "h": rows[-1][8]})
    finally:
        engine.dispose()
