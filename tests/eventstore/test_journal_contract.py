"""The journal contract (journal_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so the journals cannot drift apart in
what append, read, verify, anchors and transactions mean.
"""

from __future__ import annotations

from backend_classes import OnMemory, OnPostgres, OnSQLiteFile
from journal_contract import JournalContract


class TestMemoryJournal(OnMemory, JournalContract):
    """`MemoryJournal()`."""


class TestSQLiteJournal(OnSQLiteFile, JournalContract):
    """`Journal("sqlite:///...")` on a file."""


class TestPostgresJournal(OnPostgres, JournalContract):
    """`Journal("postgresql+psycopg://...")` in a fresh schema."""
