"""The facades' contract (facade_contract.py) on every backend: memory, a SQLite file,
PostgreSQL. The same test bodies run on each, so a facade cannot answer differently
depending on where its journal lives. What does not depend on a backend (the defaults)
is checked once, at the end.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
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


def _parameters(function: Callable[..., object]) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default) for p in
            inspect.signature(function).parameters.values()]


def test_the_facades_have_the_contract_names_arguments_and_defaults() -> None:
    # What a caller may write: the contract's arguments in its order and kinds (the
    # positional ones may be given by name too); anything the facades add comes after
    # them, keyword-only with a default, so no call the contract allows changes meaning.
    empty = inspect.Parameter.empty
    positional, keyword = "POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"
    contract: dict[Callable[..., object], list[tuple[str, str, object]]] = {
        GPUCreditTracker: [("journal", positional, None), ("account", positional, "default")],
        GPUCreditTracker.grant: [("self", positional, empty), ("amount", positional, empty),
                                 ("timestamp", positional, empty),
                                 ("expiry", positional, empty)],
        GPUCreditTracker.consume: [("self", positional, empty), ("amount", positional, empty),
                                   ("timestamp", positional, empty)],
        GPUCreditTracker.get_balance: [("self", positional, empty),
                                       ("timestamp", positional, empty)],
        Scheduler: [("journal", positional, None), ("clock", positional, None)],
        Scheduler.open_account: [("self", positional, empty), ("account_id", positional, empty),
                                 ("balance", positional, 0), ("max_running", keyword, None)],
        Scheduler.submit: [("self", positional, empty), ("job_id", positional, empty),
                           ("account_id", positional, empty), ("cost", positional, empty),
                           ("priority", positional, empty), ("at", keyword, None)],
        Scheduler.start_next: [("self", positional, empty), ("at", keyword, None)],
        Scheduler.complete: [("self", positional, empty), ("job_id", positional, empty),
                             ("success", positional, empty),
                             ("refund_fraction", keyword, 1.0), ("at", keyword, None)],
        Scheduler.cancel: [("self", positional, empty), ("job_id", positional, empty),
                           ("at", keyword, None)],
    }
    for function, promised in contract.items():
        have = _parameters(function)
        promised_names = {name for name, _, _ in promised}
        assert [p for p in have if p[0] in promised_names] == promised, function
        extra = [p for p in have if p[0] not in promised_names]
        assert all(kind == keyword and default is not empty for _, kind, default in extra), (
            function, extra)
    # The Job start_next returns, and the view accounts[...] gives, have the named fields.
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 5)
    assert s.submit("j", "a", 2, 3) is True
    job = s.start_next()
    assert job is not None
    assert (job.id, job.account_id, job.cost, job.priority) == ("j", "a", 2, 3)
    view = s.accounts["a"]
    assert (view.balance, view.reserved, view.available, view.running) == (5, 2, 3, 1)
