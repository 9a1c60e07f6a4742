"""Fixtures for the journal's own tests (helpers live in journal_testkit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from eventstore import JournalLike
from eventstore.testing import open_journal


@pytest.fixture
def journal(journal_url: str) -> Iterator[JournalLike]:
    """An empty journal on each backend, closed after the test."""
    with closing(open_journal(journal_url)) as j:
        yield j
