"""Credits expiring in a window: walking only the top of each heap (and the holds of
pending and running jobs) finds what `gpu-credits expiring` finds by looking at every
batch, held credits included."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.ledger import Ledger
from projections.queries.reports import expiring, expiring_credits
from projections.replay import fold_canonical
from projections.timeline import ExpiringEntry, expiring_entries
from tests.projections.test_history import arrivals
from tests.projections.test_reversals import ACCOUNTS


def scanned(ledger: Ledger, at: int, until: int) -> list[ExpiringEntry]:
    """What the command line's `expiring` lists: every batch of every account and every
    hold looked at, the obviously right answer."""
    return sorted((c.ends, c.account, c.pool, c.grant, c.amount, c.held)
                  for c in expiring_credits(ledger, at, until))


@st.composite
def heaped_arrivals(draw: st.DrawFn) -> MemoryJournal:
    """`arrivals` and then, arriving late, a few grants of one account, pool and priority
    that expire after the generated events' times (0 to 20): a heap of several batches
    that the walk goes down (the generated journals alone rarely leave two batches in one
    heap, and almost never two that expire in the window)."""
    journal: MemoryJournal = draw(arrivals())
    account, pool = draw(st.sampled_from(ACCOUNTS)), draw(st.sampled_from([None, "h100"]))
    priority = draw(st.sampled_from([None, 10]))
    for n in range(draw(st.integers(2, 5))):
        payload: dict[str, object] = {"account": account, "amount": draw(st.integers(1, 40)),
                                      "expiry": draw(st.integers(21, 26))}
        if pool is not None:
            payload["pool"] = pool
        if priority is not None:
            payload["priority"] = priority
        journal.append([NewEvent(f"heaped{n}", account, "grant", draw(st.integers(0, 20)),
                                 payload)])
    return journal


def _deepest_walk(ledger: Ledger, until: int) -> int:
    """The most batches of one heap that expire by `until`: from two on, the walk goes
    below a heap's top."""
    return max((sum(1 for b in heap if b.expiry is not None and b.expiry <= until)
                for account in ledger.accounts.values() for heap in account.book.heaps.values()),
               default=0)


def test_the_heap_walk_finds_what_a_full_scan_finds() -> None:
    below_the_top = 0

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(journal=heaped_arrivals(), at=st.integers(-1, 26), span=st.integers(0, 26))
    def check(journal: MemoryJournal, at: int, span: int) -> None:
        nonlocal below_the_top
        ledger = fold_canonical(journal)
        deepest = _deepest_walk(ledger, at + span)
        event(f"batches of one heap expiring in the window: {min(deepest, 3)}")
        below_the_top += deepest >= 2
        assert expiring_entries(ledger, at, at + span) == scanned(ledger, at, at + span)

    check()
    # The case the walk could get wrong is drawn, not left to chance.
    assert below_the_top >= 8, below_the_top


def test_the_soonest_end_comes_first_whatever_the_account_or_priority() -> None:
    # Accounts are walked by name and a heap by priority first: neither is the order.
    journal = MemoryJournal()
    journal.append([
        NewEvent("a-late", "a", "grant", 0, {"account": "a", "amount": 5, "expiry": 10,
                                             "priority": 0}),
        NewEvent("a-soon", "a", "grant", 0, {"account": "a", "amount": 5, "expiry": 7,
                                             "priority": 90}),
        NewEvent("b-soonest", "b", "grant", 0, {"account": "b", "amount": 5, "expiry": 5})])
    entries = expiring_entries(fold_canonical(journal), 0, 20)
    assert [(end, grant) for end, _, _, grant, _, _ in entries] == [
        (5, "b-soonest"), (7, "a-soon"), (10, "a-late")]


@pytest.mark.parametrize("grants", [2, 3, 4, 7])
def test_every_batch_of_one_priority_ending_in_the_window_is_found(grants: int) -> None:
    # One heap of many batches: the walk goes down both children of each one it keeps.
    journal = MemoryJournal()
    journal.append([NewEvent(f"g{i}", "a", "grant", 0, {"account": "a", "amount": 5,
                                                       "expiry": 10 + i})
                    for i in range(grants)])
    ledger = fold_canonical(journal)
    entries = expiring_entries(ledger, 0, 100)
    assert [grant for _, _, _, grant, _, _ in entries] == [f"g{i}" for i in range(grants)]
    assert entries == scanned(ledger, 0, 100)


def test_held_credits_ending_at_the_window_end_are_in_it() -> None:
    # The window is (at, until]: credits a pending job holds that expire at `until` lapse
    # within it, held ones as well as unused ones.
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 1)
    GPUCreditTracker(journal, account="a").grant(10, timestamp=0, expiry=20)
    scheduler.open_account("a", 0, at=0)
    assert scheduler.submit("j", "a", 4, 1, at=1)
    grant = next(rec.id for rec in journal.read() if rec.type == "grant")
    ledger = fold_canonical(journal)
    assert expiring_entries(ledger, 1, 20) == [(20, "a", "general", grant, 6, 4)]
    assert expiring_entries(ledger, 1, 19) == []


def test_a_grant_voided_twice_ahead_ends_at_the_earlier_void() -> None:
    # From the first void on its credits no longer count: the second stops nothing.
    journal = MemoryJournal()
    journal.append([
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("u", "a", "consume", 5, {"account": "a", "amount": 10}),
        NewEvent("v2", "a", "void", 1500, {"grant": "g"}),
        NewEvent("v1", "a", "void", 1000, {"grant": "g"})])
    report = expiring(journal, at=5, within=1995)
    assert [(c.grant, c.ends, c.amount, c.voided) for c in report.credits] == [
        ("g", 1000, 90, True)]


@pytest.mark.parametrize("within", [0, -1])
def test_an_empty_or_negative_window_is_refused(within: int) -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1,
                                                    "expiry": 0})])
    with pytest.raises(ValueError, match="the window must be positive"):
        expiring(journal, within=within)


def test_the_default_window_is_seven_days() -> None:
    week = 7 * 86_400
    journal = MemoryJournal()
    journal.append([
        NewEvent("in", "a", "grant", 0, {"account": "a", "amount": 1, "expiry": 10 + week}),
        NewEvent("out", "a", "grant", 0, {"account": "a", "amount": 1,
                                          "expiry": 11 + week}),
        NewEvent("u", "b", "grant", 10, {"account": "b", "amount": 1})])
    report = expiring(journal)
    assert (report.at, report.within, report.until) == (10, week, 10 + week)
    assert [c.grant for c in report.credits] == ["in"]
