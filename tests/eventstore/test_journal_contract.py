"""The journal contract (journal_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so the journals cannot drift apart in
what append, read, verify, anchors and transactions mean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from journal_contract import JournalContract


class TestMemoryJournal(JournalContract):
    """`MemoryJournal()`."""

    @pytest.fixture
    def journal_url(self) -> str:
        return "memory"


class TestSQLiteJournal(JournalContract):
    """`Journal("sqlite:///...")` on a file."""

    @pytest.fixture
    def journal_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.mark.postgres
class TestPostgresJournal(JournalContract):
    """`Journal("postgresql+psycopg://...")` in a fresh schema."""

    @pytest.fixture
    def journal_url(self, pg_fresh_url: str) -> str:
        return pg_fresh_url
