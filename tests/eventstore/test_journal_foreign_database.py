"""A database that is not a gpu-credits journal: refused in one line naming it, left as it was.

A `--db` or `$GPU_CREDITS_DB` pointing at another application's database (its SQLite
file, its PostgreSQL schema, with or without Alembic of its own) must not be given the
journal's tables, nor be told it was "upgraded by a newer gpu-credits"; a journal whose
`alembic_version` was edited by hand is named as damaged, never as missing.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

import eventstore
from eventstore import Journal, JournalError, JournalNotFound, SchemaError

OPENINGS: dict[str, Callable[[str], object]] = {
    "write": lambda url: Journal(url).close(),
    "db upgrade": eventstore.upgrade,
    "create=False": lambda url: Journal(url, create=False).close(),
    "read_only": lambda url: Journal(url, read_only=True).close(),
}


def _execute(url: str, script: str) -> None:
    """Run `script` (statements separated by `;`) on the database at `url`."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            conn.executescript(script)
        finally:
            conn.close()
        return
    engine = create_engine(url)
    try:
        with engine.begin() as c:
            for statement in filter(str.strip, script.split(";")):
                c.execute(text(statement))
    finally:
        engine.dispose()


def _state(url: str) -> object:
    """What a refusal must leave as it was: the SQLite file's bytes, or the PostgreSQL
    schema's tables and their rows."""
    if url.startswith("sqlite"):
        return hashlib.sha256(Path(url.removeprefix("sqlite:///")).read_bytes()).hexdigest()
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            names = sorted(inspect(c).get_table_names())
            return {n: c.execute(text(f'SELECT * FROM "{n}"')).all() for n in names}
    finally:
        engine.dispose()


@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_a_sqlite_file_of_another_application_is_not_given_a_journal(
        tmp_path: Path, opening: str) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    _execute(url, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
                  "INSERT INTO users VALUES (1, 'bob')")
    before = _state(url)
    with pytest.raises(JournalError) as caught:
        OPENINGS[opening](url)
    message = str(caught.value)
    assert "app.db" in message and "no journal" in message and "\n" not in message
    if opening in ("write", "db upgrade"):
        assert "users" in message  # what is there instead
    assert _state(url) == before  # not even switched to WAL mode
    assert [p.name for p in tmp_path.iterdir()] == ["app.db"]


@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_another_application_s_alembic_schema_is_not_taken_for_a_newer_journal(
        database_url: str, opening: str) -> None:
    _execute(database_url,
             "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY);"
             "INSERT INTO alembic_version VALUES ('ae1027a6acf');"
             "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    before = _state(database_url)
    with pytest.raises(JournalError) as caught:
        OPENINGS[opening](database_url)
    message = str(caught.value)
    assert "'ae1027a6acf'" in message and "not a gpu-credits journal" in message
    assert "newer gpu-credits" not in message and "\n" not in message
    assert _state(database_url) == before


@pytest.mark.parametrize("opening", ["write", "db upgrade"])
def test_a_table_of_the_journal_s_name_made_by_something_else_is_named(
        database_url: str, opening: str) -> None:
    _execute(database_url, "CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
    before = _state(database_url)
    with pytest.raises(JournalError) as caught:
        OPENINGS[opening](database_url)
    message = str(caught.value)
    # One line naming the table, not the driver's error with the CREATE TABLE it failed.
    assert "events" in message and "CREATE TABLE" not in message and "\n" not in message
    assert _state(database_url) == before


@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_a_journal_whose_revision_row_was_edited_is_named_as_damaged(
        database_url: str, opening: str) -> None:
    with Journal(database_url) as journal:
        journal.append([eventstore.NewEvent("e1", "acct", "grant", 1, {"amount": 10})])
    _execute(database_url, "INSERT INTO alembic_version VALUES ('0003')")
    with pytest.raises(SchemaError, match=r"'0003'.*'0006'|'0006'.*'0003'"):
        OPENINGS[opening](database_url)
    _execute(database_url, "DELETE FROM alembic_version")
    before = _state(database_url)
    with pytest.raises(SchemaError) as caught:
        OPENINGS[opening](database_url)
    # Its events are there: not "holds no journal", and no offer to create one.
    assert "alembic_version" in str(caught.value) and "create" not in str(caught.value)
    assert _state(database_url) == before


def test_an_empty_file_is_still_made_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.touch()
    with pytest.raises(JournalNotFound):
        Journal(f"sqlite:///{path}", read_only=True)
    with Journal(f"sqlite:///{path}") as journal:
        assert journal.head() == 0


@pytest.mark.parametrize("revision", ["0003", "0006"])
@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_another_application_whose_revisions_are_numbered_like_ours_is_refused(
        database_url: str, opening: str, revision: str) -> None:
    # Alembic projects often number their revisions 0001, 0002...: such an application's
    # database was taken for an old journal and "upgraded", the journal's tables added
    # and its alembic_version overwritten; or, at 0006, opened as a journal.
    _execute(database_url,
             "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY);"
             f"INSERT INTO alembic_version VALUES ('{revision}');"
             "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    before = _state(database_url)
    with pytest.raises(JournalError) as caught:
        OPENINGS[opening](database_url)
    message = str(caught.value)
    assert f"'{revision}'" in message and "not a gpu-credits journal" in message
    assert "\n" not in message
    assert _state(database_url) == before
