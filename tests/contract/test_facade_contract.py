"""The facades' contract (facade_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so a facade cannot answer differently
depending on where its journal lives. What does not depend on a backend (the defaults)
is checked once, at the end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contract.facade_contract import FacadeContract
from eventstore.testing import open_journal
from projections import GPUCreditTracker


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite journal at the schema's head, made once: copying it is much
    cheaper than migrating a new file for every test."""
    path = tmp_path_factory.mktemp("template") / "journal.db"
    open_journal(f"sqlite:///{path}").close()
    return path


class TestMemoryFacades(FacadeContract):
    """On `MemoryJournal()`."""

    @pytest.fixture
    def journal_url(self) -> str:
        return "memory"


class TestSQLiteFacades(FacadeContract):
    """On `Journal("sqlite:///...")`, a file of the test's own."""

    @pytest.fixture
    def journal_url(self, tmp_path: Path, migrated_sqlite: Path) -> str:
        path = tmp_path / "journal.db"
        shutil.copyfile(migrated_sqlite, path)
        return f"sqlite:///{path}"


@pytest.mark.postgres
class TestPostgresFacades(FacadeContract):
    """On `Journal("postgresql+psycopg://...")`, in a fresh schema."""

    @pytest.fixture
    def journal_url(self, pg_fresh_url: str) -> str:
        return pg_fresh_url


def test_default_tracker_is_in_memory_with_the_default_account() -> None:
    t = GPUCreditTracker()
    assert t.grant(100, 0, 10) is None  # type: ignore[func-returns-value]
    assert t.get_balance(0) == 100
    assert t.account == "default"
