"""The facades' contract (facade_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so a facade cannot answer differently
depending on where its journal lives. What does not depend on a backend (the defaults)
is checked once, at the end.
"""

from __future__ import annotations

from backend_classes import OnMemory, OnMigratedSQLiteCopy, OnPostgres

from contract.facade_contract import FacadeContract
from projections import GPUCreditTracker


class TestMemoryFacades(OnMemory, FacadeContract):
    """On `MemoryJournal()`."""


class TestSQLiteFacades(OnMigratedSQLiteCopy, FacadeContract):
    """On `Journal("sqlite:///...")`, a file of the test's own."""


class TestPostgresFacades(OnPostgres, FacadeContract):
    """On `Journal("postgresql+psycopg://...")`, in a fresh schema."""


def test_default_tracker_is_in_memory_with_the_default_account() -> None:
    t = GPUCreditTracker()
    assert t.grant(100, 0, 10) is None  # type: ignore[func-returns-value]
    assert t.get_balance(0) == 100
    assert t.account == "default"
