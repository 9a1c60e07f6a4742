"""The backends a contract kit runs on: mixins that provide its `journal_url` fixture.

A kit (tests/eventstore/journal_contract.py, tests/contract/facade_contract.py) is a
class of tests over `journal_url`; a backend's test class puts one of these first:

    class TestSQLiteJournal(OnSQLiteFile, JournalContract):
        '''`Journal("sqlite:///...")` on a file.'''
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


class OnMemory:
    """`MemoryJournal()`."""

    @pytest.fixture
    def journal_url(self) -> str:
        return "memory"


class OnSQLiteFile:
    """A new SQLite file of the test's own, created by the journal that opens it."""

    @pytest.fixture
    def journal_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'journal.db'}"


class OnMigratedSQLiteCopy:
    """A SQLite file of the test's own, copied from an empty journal migrated once per
    session (`migrated_sqlite`): for kits about what sits above the journal, which need
    not pay for a migration per test."""

    @pytest.fixture
    def journal_url(self, tmp_path: Path, migrated_sqlite: Path) -> str:
        path = tmp_path / "journal.db"
        shutil.copyfile(migrated_sqlite, path)
        return f"sqlite:///{path}"


@pytest.mark.postgres
class OnPostgres:
    """A fresh PostgreSQL schema (skipped without GPU_CREDITS_TEST_PG, failed under CI)."""

    @pytest.fixture
    def journal_url(self, pg_fresh_url: str) -> str:
        return pg_fresh_url
