"""The facades' contract (facade_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so a facade cannot answer differently
depending on where its journal lives. What does not depend on a backend (the defaults)
is checked once, at the end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from backend_classes import OnMemory, OnMigratedSQLiteCopy, OnPostgres

from contract.facade_contract import FacadeContract
from eventstore import Journal
from projections import GPUCreditTracker, Scheduler


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


def test_default_scheduler_is_in_memory_on_the_wall_clock_in_whole_seconds() -> None:
    journal = Journal(None)
    s = Scheduler(journal)
    before = int(time.time())
    s.open_account("a")  # balance defaults to 0
    assert (s.accounts["a"].balance, s.accounts["a"].available) == (0, 0)
    s.open_account("b", 7)
    after = int(time.time())  # after b's open, however long the machine stalled
    # The open took effect at a wall-clock second: seen from then on, not the one before.
    b = GPUCreditTracker(journal, account="b")
    assert b.get_balance(before - 1) == 0
    assert b.get_balance(after + 1) == 7
    fresh = Scheduler()
    fresh.open_account("a", 3)
    assert fresh.accounts["a"].balance == 3
    assert "a" not in Scheduler().accounts  # each default scheduler has its own journal


def test_accounts_is_a_read_only_mapping_of_read_only_views() -> None:
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 10)
    view = s.accounts["a"]
    for name in ("balance", "reserved", "available", "running"):
        with pytest.raises((AttributeError, TypeError)):
            setattr(view, name, 1)
    with pytest.raises(TypeError):
        s.accounts["b"] = view  # type: ignore[index]
    with pytest.raises(TypeError):
        del s.accounts["a"]  # type: ignore[attr-defined]
    assert s.accounts["a"].balance == 10


def test_without_max_running_an_account_has_no_cap() -> None:
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 100, max_running=None)
    for n in range(5):
        assert s.submit(f"j{n}", "a", 1, 1) is True
    started = [s.start_next() for _ in range(5)]
    assert [getattr(j, "id", None) for j in started] == [f"j{n}" for n in range(5)]
    assert s.accounts["a"].running == 5
    assert s.start_next() is None


def test_the_facades_take_a_database_url_string(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    tracker = GPUCreditTracker(url, account="a")
    tracker.grant(100, 0, 50)
    assert tracker.consume(30, 5) == 0
    scheduler = Scheduler(url, clock=lambda: 10)
    assert scheduler.accounts["a"].balance == 70
    assert scheduler.submit("j", "a", 20, 1) is True
    # Opened again (as another process would): the same answers, by replay.
    again = GPUCreditTracker(journal=url, account="a")
    assert [again.get_balance(t) for t in (0, 4, 5, 49)] == [100, 100, 70, 70]
    assert Scheduler(journal=Journal(url=url), clock=lambda: 11).accounts["a"].reserved == 20
