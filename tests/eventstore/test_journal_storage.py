"""A SQLite journal whose storage misbehaves: a full disk, a read-only copy.

A full disk is SQLite's own SQLITE_FULL, made here with `PRAGMA max_page_count`. What
needs the file system itself (a read-only mount, a full tmpfs) mounts one: those tests
run as root where mounting is allowed, and are skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from eventstore import ConnectionProblem, Journal, JournalError, NewEvent


def _events(first: int, count: int, size: int = 10) -> list[NewEvent]:
    return [NewEvent(f"e{i}", f"acct-{i % 3}", "grant", i, {"amount": i, "memo": "x" * size})
            for i in range(first, first + count)]


def test_an_append_that_fills_the_disk_stores_nothing_and_says_where(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    journal = Journal(f"sqlite:///{path}")
    journal.append(_events(1, 20))
    with journal._engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()

    def no_more_pages(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(journal._engine, "connect", no_more_pages)
    journal._engine.dispose()
    with pytest.raises(JournalError) as caught:
        journal.append(_events(21, 200, size=500))
    message = str(caught.value)
    assert f"the disk holding {tmp_path} is full" in message
    assert "nothing of the failed transaction was stored" in message
    assert journal.head() == 20
    assert journal.verify() is None
    # Space freed: the same batch goes through, whole.
    event.remove(journal._engine, "connect", no_more_pages)
    journal._engine.dispose()
    journal.append(_events(21, 200, size=500))
    assert journal.head() == 220
    assert journal.verify() is None
    journal.close()


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _journal_in(folder: Path, events: int = 30) -> Path:
    path = folder / "ledger.db"
    with Journal(f"sqlite:///{path}") as journal:
        journal.append(_events(1, events))
    return path


def test_a_journal_on_a_read_only_file_system_reads(tmp_path: Path,
                                                    read_only_mount: Any) -> None:
    """An auditor's copy on a read-only medium, closed cleanly (no -wal, no -shm): a WAL
    database needs its -shm file to be read, and SQLite cannot create it there, so every
    read failed with `... is not a SQLite database (unable to open database file)`."""
    folder = tmp_path / "copy"
    folder.mkdir()
    path = _journal_in(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["ledger.db"]
    read_only_mount(folder)
    with Journal(f"sqlite:///{path}", read_only=True) as journal:
        assert journal.head() == 30
        assert journal.verify() is None
        assert [r.id for r in journal.read()][-1] == "e30"
    assert sorted(p.name for p in folder.iterdir()) == ["ledger.db"]


def test_a_read_only_copy_with_commits_in_its_wal_reads_them_or_says_what_to_do(
        tmp_path: Path, read_only_mount: Any) -> None:
    """Copied while a process had it open: the -wal file holds commits not yet in the
    database file. With the -shm file beside it SQLite reads them; without it (and
    unable to make one) it cannot, and the error says how to fold the log in. Never an
    answer that silently leaves the log's commits out."""
    source = _journal_in(tmp_path)
    holder = sqlite3.connect(source)  # keeps the -wal file: the last close folds it in
    try:
        holder.execute("SELECT 1 FROM events LIMIT 1").fetchall()
        with Journal(f"sqlite:///{source}") as journal:
            journal.append(_events(31, 5))
        with_index = tmp_path / "with-index"
        without = tmp_path / "without-index"
        for folder, suffixes in ((with_index, ("", "-wal", "-shm")), (without, ("", "-wal"))):
            folder.mkdir()
            for suffix in suffixes:
                shutil.copyfile(f"{source}{suffix}", folder / f"ledger.db{suffix}")
    finally:
        holder.close()
    assert (without / "ledger.db-wal").stat().st_size > 0
    read_only_mount(with_index)
    read_only_mount(without)
    with Journal(f"sqlite:///{with_index / 'ledger.db'}", read_only=True) as journal:
        assert journal.head() == 35
    with pytest.raises(ConnectionProblem) as caught:
        Journal(f"sqlite:///{without / 'ledger.db'}", read_only=True)
    message = str(caught.value)
    assert "ledger.db-wal holds commits" in message
    assert "PRAGMA wal_checkpoint(TRUNCATE)" in message
    assert "not a SQLite database" not in message


def test_a_journal_on_a_full_disk_says_the_disk_is_full(tmp_path: Path) -> None:
    """A read on a full disk: SQLite cannot make the -shm file a WAL database needs (a
    disk I/O error, not "database or disk is full"). It said `... is not a SQLite
    database (disk I/O error); check the path`."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    folder = tmp_path / "small"
    folder.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)):
        pytest.skip("tmpfs mounts are not allowed here")
    try:
        path = _journal_in(folder)
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(filler, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(filler)
        with pytest.raises(JournalError) as caught:
            Journal(f"sqlite:///{path}", read_only=True)
        message = str(caught.value)
        assert f"the disk holding {folder} is probably full" in message
        assert "not a SQLite database" not in message
        (folder / "filler").unlink()
        with Journal(f"sqlite:///{path}", read_only=True) as journal:
            assert journal.head() == 30
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, check=True)


def test_a_folder_this_user_may_not_write_is_named_with_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user other than root given a journal in a folder they may not write: SQLite
    cannot create the -shm file and says SQLITE_READONLY_DIRECTORY ("attempt to write a
    readonly database"), which was passed on as `cannot read ...: attempt to write a
    readonly database; check the path`. (Root may write anywhere: the error is SQLite's
    own, raised here where it raises it.)"""
    from eventstore.backends import sqlite as backend

    path = _journal_in(tmp_path)
    connect = sqlite3.connect

    def no_index(database: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if "mode=ro" in database and "immutable" not in database:
            exc = sqlite3.OperationalError("attempt to write a readonly database")
            exc.sqlite_errorname = "SQLITE_READONLY_DIRECTORY"
            raise exc
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(backend.sqlite3, "connect", no_index)
    with pytest.raises(ConnectionProblem) as caught:
        Journal(f"sqlite:///{path}", read_only=True)
    message = str(caught.value)
    assert f"cannot write in {tmp_path}; give this user write access" in message
    assert "or copy ledger.db into a folder it can write" in message
