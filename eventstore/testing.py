"""Helpers for tests of any layer: open a journal by backend kind or URL.

`tests/conftest.py` re-exports `open_journal`; import it from here
(`from eventstore.testing import open_journal`) so the import does not depend on
which conftest pytest loaded last.
"""

from __future__ import annotations

from .interface import JournalLike
from .journal import Journal
from .memory import MemoryJournal


def open_journal(kind_or_url: str | None) -> JournalLike:
    """MemoryJournal() for "memory", else Journal(url) (None: in-memory SQLite)."""
    if kind_or_url == "memory":
        return MemoryJournal()
    return Journal(kind_or_url)
