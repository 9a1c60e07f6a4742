"""Opening a journal: read-only and never-create modes, file permissions.

An auditor's `verify` or a query on a mistyped path must not create an empty
journal and report on it; a reader must not be able to write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from journal_testkit import ev

from eventstore import (
    ConnectionProblem,
    Journal,
    JournalError,
    JournalNotFound,
    ReadOnlyJournal,
    SchemaError,
)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.mark.parametrize("mode", [{"create": False}, {"read_only": True}])
def test_a_missing_sqlite_file_is_an_error_and_stays_missing(
    tmp_path: Path, mode: dict[str, bool]
) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(JournalNotFound) as caught:
        Journal(sqlite_url(path), **mode)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    assert isinstance(caught.value, JournalError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [{"create": False}, {"read_only": True}])
def test_an_in_memory_database_cannot_be_opened_without_creating_it(
    mode: dict[str, bool],
) -> None:
    with pytest.raises(JournalNotFound, match="in-memory"):
        Journal(None, **mode)


@pytest.mark.parametrize("mode", [{"create": False}, {"read_only": True}])
def test_a_file_without_a_journal_is_not_given_a_schema(
    tmp_path: Path, mode: dict[str, bool]
) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(JournalNotFound, match="holds no journal"):
        Journal(sqlite_url(path), **mode)
    assert path.stat().st_size == 0


@pytest.mark.parametrize(("url", "message"), [
    (Path("ledger.db"), "a journal URL is text, got the path 'ledger.db': for a SQLite file "
                        "pass 'sqlite:///ledger.db'"),
    (5, "a journal URL must be a str such as 'sqlite:///ledger.db', or None (in memory), "
        "got 5 (int)"),
])
def test_a_journal_url_that_is_not_text_is_named(url: object, message: str) -> None:
    # A TypeError as Python names the wrong kind of argument, still the ValueError it was
    with pytest.raises(TypeError) as refused:
        Journal(url)  # type: ignore[arg-type]
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == message
    assert not Path("ledger.db").exists()


def test_a_closed_journal_says_how_to_go_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    journal = Journal(url)
    journal.close()
    with pytest.raises(JournalError) as refused:
        journal.head()
    assert str(refused.value) == (f"this journal ({url}) is closed: open it "
                                  "again with Journal(url) to read or write it")


def test_a_directory_is_not_a_journal(tmp_path: Path) -> None:
    with pytest.raises(JournalNotFound, match="not a file"):
        Journal(sqlite_url(tmp_path), read_only=True)


def test_a_read_only_journal_reads_and_refuses_every_write(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "j.db")
    with Journal(url) as writer:
        writer.append([ev("a", 1), ev("b", 2)])
        writer.save_snapshot("n", 2, 2, "d", b"state")
    with Journal(url, read_only=True) as reader:
        assert reader.head() == 2 and reader.verify() is None
        assert [e.id for e in reader.read()] == ["a", "b"]
        assert [s.name for s in reader.snapshots("n")] == ["n"]
        with pytest.raises(ReadOnlyJournal, match="read-only"):
            reader.append([ev("c", 3)])
        with pytest.raises(ReadOnlyJournal):
            reader.save_snapshot("n", 2, 2, "d", b"x")
        with pytest.raises(ReadOnlyJournal):
            reader.drop_snapshots("n")
        with pytest.raises(ReadOnlyJournal), reader.transaction():
            pass
    with Journal(url) as again:
        assert again.head() == 2 and len(again.snapshots("n")) == 1


def test_a_read_only_journal_sees_appends_made_after_it_opened(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "j.db")
    with Journal(url) as writer, Journal(url, read_only=True) as reader:
        assert reader.head() == 0
        writer.append([ev("a", 1)])
        assert reader.head() == 1


def test_read_only_does_not_upgrade_an_old_schema(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "j.db")
    Journal(url).close()
    import sqlite3

    conn = sqlite3.connect(tmp_path / "j.db")
    conn.execute("UPDATE alembic_version SET version_num = '0000'")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError):
        Journal(url, read_only=True)


def test_an_existing_journal_opens_with_create_false(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "j.db")
    Journal(url).close()
    with Journal(url, create=False) as j:
        j.append([ev("a")])  # create=False only forbids creating; writing is fine
        assert j.head() == 1


def test_a_sqlite_journal_made_by_an_upgrade_is_readable_by_its_owner_only(
        tmp_path: Path) -> None:
    from eventstore import upgrade

    path = tmp_path / "upgraded.db"
    old = os.umask(0o022)
    try:
        assert upgrade(sqlite_url(path))[0] is None
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_a_new_sqlite_journal_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    old = os.umask(0o022)
    try:
        with Journal(sqlite_url(path)) as j:
            j.append([ev("a")])
            files = [p for p in tmp_path.iterdir() if p.name.startswith("private.db")]
            assert {p.name for p in files} >= {"private.db", "private.db-wal"}
            for p in files:
                assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name
    finally:
        os.umask(old)


def test_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    Journal(sqlite_url(path)).close()
    path.chmod(0o640)
    Journal(sqlite_url(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.postgres
def test_postgres_read_only_refuses_writes(pg_fresh_url: str) -> None:
    with Journal(pg_fresh_url) as writer:
        writer.append([ev("a")])
    with Journal(pg_fresh_url, read_only=True) as reader:
        assert reader.head() == 1 and reader.verify() is None
        with pytest.raises(ReadOnlyJournal):
            reader.append([ev("b")])


@pytest.mark.postgres
def test_postgres_schema_without_a_journal_is_not_given_one(pg_fresh_url: str) -> None:
    with pytest.raises(JournalNotFound, match="holds no journal"):
        Journal(pg_fresh_url, read_only=True)
    with pytest.raises(JournalNotFound):
        Journal(pg_fresh_url, create=False)
    from sqlalchemy import create_engine, inspect

    engine = create_engine(pg_fresh_url)
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


def test_sql_journal_repr_hides_the_password() -> None:
    j = Journal()
    try:
        assert "sqlite" in repr(j) and j.url is None
    finally:
        j.close()


@pytest.mark.parametrize("how", ["removed", "moved", "replaced"])
def test_a_write_to_a_database_file_gone_from_its_path_is_refused(tmp_path: Path,
                                                                  how: str) -> None:
    """SQLite writes on to the file it holds open: every write acknowledged after the
    file was removed, moved away or replaced would be lost with it. The write is
    refused instead, and goes through again once the file is back."""
    path = tmp_path / "journal.db"
    with Journal(f"sqlite:///{path}") as journal:
        journal.append([ev("a")])
        aside = tmp_path / "aside.db"
        os.rename(path, aside)
        if how == "removed":
            for suffix in ("-wal", "-shm"):
                if Path(f"{path}{suffix}").exists():
                    os.rename(f"{path}{suffix}", f"{aside}{suffix}")
        elif how == "replaced":
            path.write_bytes(aside.read_bytes())
        with pytest.raises(ConnectionProblem, match="removed or replaced"):
            journal.append([ev("b")])
        if how == "replaced":
            path.unlink()
        os.rename(aside, path)
        assert journal.append([ev("c")])[0].position == 2
        assert [r.id for r in journal.read(order="position")] == ["a", "c"]


@pytest.mark.postgres
def test_postgres_url_naming_a_schema_that_does_not_exist_is_one_clear_error(
        pg_database_url: str) -> None:
    import uuid

    from tests.conftest import _schema_url

    url = _schema_url(pg_database_url, f"missing_{uuid.uuid4().hex[:8]}")
    with pytest.raises(SchemaError, match="no schema to create the journal in") as err:
        Journal(url)
    assert "\n" not in str(err.value) and "CREATE SCHEMA" in str(err.value)
    # A reader (`balance`, `verify`) says the same: it sent the operator to `gpu-credits
    # db upgrade`, which cannot create a journal in a schema that is not there.
    with pytest.raises(JournalNotFound) as read:
        Journal(url, read_only=True)
    assert "CREATE SCHEMA" in str(read.value) and "\n" not in str(read.value)


@pytest.mark.parametrize("query", ["mode=ro", "uri=true&mode=ro", "cache=shared",
                                   "timeout=abc"])
def test_a_sqlite_url_with_options_is_refused_and_nothing_is_written(
        tmp_path: Path, query: str) -> None:
    # The journal opens the file itself, so options were silently dropped: an auditor's
    # `?mode=ro` still let a grant be written.
    path = tmp_path / "j.db"
    Journal(sqlite_url(path)).close()
    before = path.read_bytes()
    with pytest.raises(ValueError) as refused:
        Journal(f"{sqlite_url(path)}?{query}")
    message = str(refused.value)
    assert f"?{query}" in message and "sqlite:///" in message and "\n" not in message
    assert path.read_bytes() == before
    with pytest.raises(ValueError, match=r"\?mode=ro"):
        Journal("sqlite://?mode=ro")


@pytest.mark.parametrize("mode", [{}, {"create": False}, {"read_only": True}])
def test_a_device_is_not_a_journal_whatever_the_mode(mode: dict[str, bool]) -> None:
    # A write to /dev/null used to fail as a disk I/O error "check the disk holding
    # /dev", and a read offered `db upgrade`, which cannot make a device a journal.
    with pytest.raises(JournalNotFound) as refused:
        Journal("sqlite:////dev/null", **mode)
    message = str(refused.value)
    assert "/dev/null" in message and "a character device" in message
    assert "db upgrade" not in message and "\n" not in message


def test_a_directory_is_not_a_journal_to_write_either(tmp_path: Path) -> None:
    with pytest.raises(JournalNotFound, match="a directory, not a file"):
        Journal(sqlite_url(tmp_path))
    assert list(tmp_path.iterdir()) == []
