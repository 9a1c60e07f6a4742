"""`GPUCreditTracker` against the expiring-credit design note: its examples, edge cases,
bad input, late calls, and replay on the same journal (memory, SQLite file, PostgreSQL)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from invariants import assert_invariants

from eventstore import MemoryJournal
from eventstore.testing import open_journal
from projections import GPUCreditTracker, Scheduler
from projections.outcomes import Outcome
from projections.projector import fold


def grant_ids(tracker: GPUCreditTracker) -> list[str]:
    """Event ids of the grants, in arrival order."""
    journal: Any = tracker.journal
    return [rec.id for rec in journal.read(order="position") if rec.type == "grant"]


def outcomes(tracker: GPUCreditTracker) -> list[Outcome]:
    """Every event's outcome on the current timeline, in canonical order."""
    journal: Any = tracker.journal
    return [outcome for _, outcome, _ in fold(journal.read(order="canonical"))]


def batches(tracker: GPUCreditTracker) -> list[tuple[str, int | None, int]]:
    """(grant id, expiry, amount) of every batch in the book's heaps, in expiry order, then
    in the order they are drawn (grant order on an equal expiry: ids are random)."""
    book = tracker.ledger().accounts[tracker.account].book
    held = sorted((b for heap in book.heaps.values() for b in heap),
                  key=lambda b: (b.expiry if b.expiry is not None else 2**64, b.key))
    return [(b.grant_id, b.expiry, b.amount) for b in held]


# -- the design note's worked examples, exactly -------------------------------------------


def test_worked_example_earliest_expiry_first_then_debt_then_a_grant_pays_it() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(amount=100, timestamp=0, expiry=10)
    tracker.grant(amount=50, timestamp=2, expiry=5)
    assert tracker.consume(amount=70, timestamp=3) == 0
    assert tracker.get_balance(timestamp=4) == 80
    assert tracker.consume(amount=90, timestamp=8) == 10
    assert tracker.get_balance(timestamp=8) == -10
    tracker.grant(amount=30, timestamp=12, expiry=20)
    assert tracker.get_balance(timestamp=12) == 20
    assert_invariants(tracker.ledger())


def test_worked_example_lineage_takes_earliest_expiry_first() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(amount=100, timestamp=0, expiry=10)
    tracker.grant(amount=50, timestamp=2, expiry=5)
    tracker.consume(amount=70, timestamp=3)
    g100, g50 = grant_ids(tracker)
    (consume,) = [o for o in outcomes(tracker) if o.type == "consume"]
    assert consume.paid_by == ((g50, 50), (g100, 20))
    assert batches(tracker) == [(g100, 10, 80)]


def test_unused_credits_expire_and_a_later_consume_is_debt() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(amount=50, timestamp=0, expiry=5)
    assert tracker.get_balance(timestamp=5) == 0
    assert tracker.consume(amount=20, timestamp=6) == 20
    assert tracker.get_balance(timestamp=6) == -20
    assert_invariants(tracker.ledger())


def test_expiry_is_exclusive() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 5)
    assert tracker.get_balance(0) == 10
    assert tracker.get_balance(4) == 10
    assert tracker.get_balance(5) == 0
    assert tracker.consume(4, 4) == 0  # t=4 < expiry: usable
    assert tracker.consume(1, 5) == 1  # t=5 = expiry: gone
    assert tracker.get_balance(4) == 6
    assert tracker.get_balance(5) == -1


def test_a_statement_lists_an_expiry_before_the_events_of_its_second() -> None:
    """Credits expiring at T are gone for every event at T (docs/semantics.md, "Credits"):
    the statement's `expire` line comes first among the changes at T, and what a job
    holding them releases at T expires after the completion's line."""
    from projections.queries import statement

    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(10, 0, 100)
    tracker.grant(10, 0, 200)
    assert scheduler.submit("j", "a", 8, 1, at=50)
    assert scheduler.start_next(at=60) is not None
    assert tracker.consume(1, 100) == 0
    scheduler.complete("j", success=False, refund_fraction=0.5, at=100)
    lines = [(line.time, line.type, line.change, line.balance)
             for line in statement(journal, "a").lines if line.time == 100]
    assert lines == [(100, "expire", -2, 18), (100, "consume", -1, 17),
                     (100, "complete", -4, 13), (100, "expire", -4, 9)]
    assert tracker.get_balance(99) == 20 and tracker.get_balance(100) == 9


# -- edge cases -----------------------------------------------------------------------------


def test_consuming_at_zero_balance_increases_debt() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 100)
    assert tracker.consume(10, 1) == 0
    assert tracker.get_balance(1) == 0
    assert tracker.consume(5, 2) == 5
    assert tracker.consume(3, 3) == 8
    assert tracker.consume(1, 3) == 9
    assert tracker.get_balance(3) == -9
    book = tracker.ledger().accounts["default"].book
    assert book.debt == {"general": 9}
    assert_invariants(tracker.ledger())


def test_grant_swallowed_whole_by_debt_never_enters_the_expiry_queue() -> None:
    tracker = GPUCreditTracker()
    assert tracker.consume(20, 0) == 20
    tracker.grant(15, 1, 10)  # pays 15 of 20: nothing left to keep
    assert batches(tracker) == []
    assert tracker.get_balance(1) == -5
    tracker.grant(5, 2, 10)  # pays exactly the rest: still nothing to keep
    assert batches(tracker) == []
    assert tracker.get_balance(2) == 0
    tracker.grant(7, 3, 10)
    g15, g5, g7 = grant_ids(tracker)
    assert batches(tracker) == [(g7, 10, 7)]
    paid = {o.event_id: o.paid_debt for o in outcomes(tracker) if o.type == "grant"}
    assert paid == {g15: (("general", 15),), g5: (("general", 5),), g7: ()}
    # At expiry nothing of the swallowed grants expires: only the kept batch does.
    assert tracker.get_balance(10) == 0
    assert tracker.consume(1, 11) == 1
    expired = [e for o in outcomes(tracker) for e in o.expired]
    assert [(e.grant_id, e.amount) for e in expired] == [(g7, 7)]
    assert_invariants(tracker.ledger())


def test_grant_partly_swallowed_keeps_only_the_rest() -> None:
    tracker = GPUCreditTracker()
    tracker.consume(10, 0)
    tracker.grant(30, 1, 20)
    (g,) = grant_ids(tracker)
    assert batches(tracker) == [(g, 20, 20)]
    assert tracker.get_balance(1) == 20


def test_grants_with_the_same_expiry_are_consumed_in_grant_order() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 50)
    tracker.grant(10, 1, 50)
    tracker.grant(10, 2, 50)
    tracker.grant(10, 3, 40)  # expires first: drawn before all of them
    g1, g2, g3, g4 = grant_ids(tracker)
    assert tracker.consume(25, 4) == 0
    (consume,) = [o for o in outcomes(tracker) if o.type == "consume"]
    assert consume.paid_by == ((g4, 10), (g1, 10), (g2, 5))
    assert batches(tracker) == [(g2, 50, 5), (g3, 50, 10)]  # g4 and g1 used up
    assert tracker.consume(10, 5) == 0
    consume2 = [o for o in outcomes(tracker) if o.type == "consume"][1]
    assert consume2.paid_by == ((g2, 5), (g3, 5))


def test_same_expiry_grant_order_is_timeline_order_for_a_late_grant() -> None:
    """Grant order among equal expiries is the timeline's (event time, position): a late
    grant stamped earlier is the earlier grant."""
    tracker = GPUCreditTracker()
    tracker.grant(10, 5, 50)
    tracker.consume(4, 6)
    tracker.grant(10, 1, 50)  # late, but earlier on the timeline
    g_at5, g_at1 = grant_ids(tracker)
    (consume,) = [o for o in outcomes(tracker) if o.type == "consume"]
    assert consume.paid_by == ((g_at1, 4),)
    assert batches(tracker) == [(g_at1, 50, 6), (g_at5, 50, 10)]  # drawn first: g_at1


def test_a_far_expiry_is_still_consumed_before_credits_that_never_expire() -> None:
    """open_account's credits never expire; a grant expiring at 2**64 does, so it goes first.
    (Refusing such an expiry with ValueError would be fine too: then nothing is appended.)"""
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", 10)
    tracker = GPUCreditTracker(journal, account="a")
    head = journal.head()
    try:
        tracker.grant(10, 0, 2**64)
    except ValueError:
        assert journal.head() == head
        return
    assert tracker.consume(10, 1) == 0
    assert tracker.get_balance(2**64) == 10  # the never-expiring 10 are what is left


def test_an_expiry_at_time_0_is_earlier_than_one_at_1() -> None:
    """Times may be negative, so 0 is an expiry like any other: the grant expiring at 0
    goes first though it was granted second (the draw key writes a missing expiry as 0
    beside a flag, and must not mistake a real 0 for it)."""
    tracker = GPUCreditTracker()
    tracker.grant(10, -10, 1)
    tracker.grant(10, -10, 0)
    assert tracker.consume(10, -5) == 0
    assert tracker.get_balance(0) == 10  # the 10 expiring at 1 are left


def test_pool_credit_before_general_on_equal_expiry() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 8)
    tracker.grant(10, 0, 8, pool="h100")
    assert tracker.consume(5, 1, pool="h100") == 0
    assert tracker.pool_balances(1) == {"general": 10, "h100": 5}
    # An earlier-expiring general credit still goes first.
    tracker.grant(3, 1, 7)
    assert tracker.consume(6, 2, pool="h100") == 0
    assert tracker.pool_balances(2) == {"general": 10, "h100": 2}
    # A general consume never touches pool credits.
    assert tracker.consume(12, 3) == 2
    assert tracker.pool_balances(3) == {"general": -2, "h100": 2}
    assert tracker.get_balance(3) == 0
    assert_invariants(tracker.ledger())


def test_debt_is_per_pool_and_paid_in_documented_order() -> None:
    tracker = GPUCreditTracker()
    assert tracker.consume(5, 0, pool="h100") == 5
    assert tracker.consume(3, 0, pool="a100") == 8
    assert tracker.consume(2, 0) == 10
    tracker.grant(4, 1, 10, pool="h100")  # pays only h100's debt
    assert per_pool(tracker, 1) == {"general": -2, "h100": -1, "a100": -3}
    tracker.grant(4, 2, 10)  # general: general debt, then a100, then h100
    assert per_pool(tracker, 2) == {"general": 0, "h100": -1, "a100": -1}
    tracker.grant(10, 3, 10)
    assert per_pool(tracker, 3) == {"general": 8, "h100": 0, "a100": 0}
    assert tracker.get_balance(3) == 8
    assert_invariants(tracker.ledger())


def test_pool_credits_pay_only_their_pools_debt() -> None:
    tracker = GPUCreditTracker()
    assert tracker.consume(5, 0) == 5
    assert tracker.consume(2, 0, pool="h100") == 7
    tracker.grant(10, 1, 10, pool="h100")  # pays h100's 2; general's 5 stay owed
    assert per_pool(tracker, 1) == {"general": -5, "h100": 8, "a100": 0}
    assert tracker.consume(1, 2) == 6  # general usage: h100 credits cannot pay it


def test_credits_of_several_pools_expiring_by_one_event_are_told_in_expiry_order() -> None:
    """An outcome lists what expired by its event earliest expiry first (then pool),
    whatever order the account first used its pools in."""
    tracker = GPUCreditTracker()
    tracker.grant(7, 0, 10, pool="zz")
    tracker.grant(5, 1, 5)
    tracker.grant(3, 2, 8, pool="mm")
    tracker.consume(1, 20)
    expired = outcomes(tracker)[-1].expired
    assert [(e.expiry, e.pool, e.amount) for e in expired] == [
        (5, "general", 5), (8, "mm", 3), (10, "zz", 7)]


def per_pool(tracker: GPUCreditTracker, t: int) -> dict[str, int]:
    return {pool: tracker.get_balance(t, pool=pool) for pool in ("general", "h100", "a100")}


def test_consume_returns_total_debt_over_pools() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 100, pool="h100")
    assert tracker.consume(4, 1) == 4  # general consume cannot use h100 credits
    assert tracker.consume(12, 2, pool="h100") == 6
    assert tracker.get_balance(2) == -6
    assert tracker.get_balance(2, pool="h100") == -2
    assert tracker.get_balance(2, pool="general") == -4


# -- bad input: ValueError, nothing appended, nothing changed ----------------------------

BAD_CALLS: list[tuple[str, Callable[[GPUCreditTracker], object]]] = [
    ("grant amount 0", lambda t: t.grant(0, 10, 20)),
    ("grant amount negative", lambda t: t.grant(-5, 10, 20)),
    ("grant amount True", lambda t: t.grant(True, 10, 20)),
    ("grant amount 1.5", lambda t: t.grant(1.5, 10, 20)),  # type: ignore[arg-type]
    ("grant amount 2.0", lambda t: t.grant(2.0, 10, 20)),  # type: ignore[arg-type]
    ("grant amount '3'", lambda t: t.grant("3", 10, 20)),  # type: ignore[arg-type]
    ("grant amount None", lambda t: t.grant(None, 10, 20)),  # type: ignore[arg-type]
    ("grant expiry == timestamp", lambda t: t.grant(5, 10, 10)),
    ("grant expiry < timestamp", lambda t: t.grant(5, 10, 3)),
    ("grant expiry 20.0", lambda t: t.grant(5, 10, 20.0)),  # type: ignore[arg-type]
    ("grant expiry None", lambda t: t.grant(5, 10, None)),  # type: ignore[arg-type]
    ("grant timestamp 1.5", lambda t: t.grant(5, 1.5, 20)),  # type: ignore[arg-type]
    ("grant timestamp '1'", lambda t: t.grant(5, "1", 20)),  # type: ignore[arg-type]
    ("grant timestamp True", lambda t: t.grant(5, True, 20)),
    ("grant pool ''", lambda t: t.grant(5, 10, 20, pool="")),
    ("consume amount 0", lambda t: t.consume(0, 10)),
    ("consume amount negative", lambda t: t.consume(-1, 10)),
    ("consume amount True", lambda t: t.consume(True, 10)),
    ("consume amount 1.5", lambda t: t.consume(1.5, 10)),  # type: ignore[arg-type]
    ("consume amount '3'", lambda t: t.consume("3", 10)),  # type: ignore[arg-type]
    ("consume timestamp 2.5", lambda t: t.consume(1, 2.5)),  # type: ignore[arg-type]
    ("consume timestamp None", lambda t: t.consume(1, None)),  # type: ignore[arg-type]
    ("get_balance timestamp '3'", lambda t: t.get_balance("3")),  # type: ignore[arg-type]
    ("get_balance timestamp 3.0", lambda t: t.get_balance(3.0)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("call", [c for _, c in BAD_CALLS], ids=[n for n, _ in BAD_CALLS])
def test_bad_input_raises_value_error_and_appends_nothing(
    call: Callable[[GPUCreditTracker], object],
) -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal)
    tracker.grant(10, 0, 100)
    tracker.consume(3, 1)
    head, digest = journal.head(), tracker.state_digest()
    with pytest.raises(ValueError):
        call(tracker)
    assert journal.head() == head
    assert tracker.state_digest() == digest
    assert tracker.get_balance(50) == 7
    # The tracker still works afterwards.
    assert tracker.consume(1, 50) == 0
    assert journal.head() == head + 1


def test_bad_input_on_an_empty_journal_appends_nothing() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal)
    for _, call in BAD_CALLS:
        with pytest.raises(ValueError):
            call(tracker)
    assert journal.head() == 0
    assert tracker.get_balance(10) == 0


# -- late calls ---------------------------------------------------------------------------


def test_late_grant_turns_debt_into_credit() -> None:
    tracker = GPUCreditTracker()
    assert tracker.consume(10, 5) == 10
    assert tracker.get_balance(5) == -10
    tracker.grant(30, 2, 20)  # late: before the consume on the timeline
    assert tracker.get_balance(1) == 0
    assert tracker.get_balance(2) == 30
    assert tracker.get_balance(4) == 30
    assert tracker.get_balance(5) == 20
    assert tracker.get_balance(20) == 0
    # The consume was told 10; on the corrected timeline it left no debt: a revision.
    (revision,) = tracker.revisions
    assert revision.type == "consume"
    assert revision.before["debt_after"] == 10
    assert revision.after["debt_after"] == 0
    assert_invariants(tracker.ledger())


def test_late_grant_after_expiry_of_the_consume_does_not_help() -> None:
    tracker = GPUCreditTracker()
    assert tracker.consume(10, 5) == 10
    tracker.grant(30, 1, 5)  # late, but expired by the consume's time
    assert tracker.get_balance(4) == 30
    assert tracker.get_balance(5) == -10
    assert tracker.revisions == []


def test_late_consume_returns_debt_right_after_it_on_the_corrected_timeline() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 100)
    assert tracker.consume(20, 10) == 10
    tracker.grant(50, 20, 100)  # pays the 10: 40 left
    assert tracker.get_balance(20) == 40
    # Late consume at 5: 6 of the first grant remain after it; debt 0 right after it.
    assert tracker.consume(4, 5) == 0
    # The consume at 10 now leaves 14 of debt, which the grant at 20 pays.
    assert tracker.get_balance(10) == -14
    assert tracker.get_balance(20) == 36
    # Late consume at 15: right after it the debt is 14 + 3, though today it is 0.
    assert tracker.consume(3, 15) == 17
    assert tracker.get_balance(15) == -17
    assert tracker.get_balance(20) == 33
    assert tracker.consume(1, 20) == 0
    assert_invariants(tracker.ledger())


def test_late_consume_before_an_expiry_uses_the_expiring_credits() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 5)
    tracker.grant(10, 0, 50)
    assert tracker.consume(4, 6) == 0
    assert tracker.get_balance(6) == 6
    assert tracker.consume(3, 2) == 0  # late: takes from the grant expiring at 5
    assert tracker.get_balance(2) == 17
    assert tracker.get_balance(6) == 6  # 7 expired at 5 instead of 10; the 4 from the other
    # Late at 1: 8 of the expiring grant; the consume at 2 then takes its last 2 and 1
    # of the other; nothing is left to expire at 5; the consume at 6 leaves 5.
    assert tracker.consume(8, 1) == 0
    assert tracker.get_balance(4) == 9
    assert tracker.get_balance(6) == 5


def test_late_call_at_the_same_time_goes_after_recorded_events_at_that_time() -> None:
    tracker = GPUCreditTracker()
    tracker.consume(5, 3)
    tracker.grant(10, 3, 20)  # same time, later position: after the consume
    assert tracker.get_balance(3) == 5
    assert tracker.revisions == []


def test_get_balance_answers_from_events_up_to_its_timestamp() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 5, 20)
    tracker.consume(3, 8)
    tracker.consume(20, 25)
    assert [tracker.get_balance(t) for t in (-100, 4, 5, 7, 8, 19, 20, 24, 25, 10**9)] == [
        0, 0, 10, 10, 7, 7, 0, 0, -20, -20,
    ]
    tracker.grant(4, 7, 30)  # late: balances from 7 on change, before 7 they do not
    assert [tracker.get_balance(t) for t in (6, 7, 8, 20, 25)] == [10, 14, 11, 4, -16]


# -- replay on the same journal --------------------------------------------------------------


def script(tracker: GPUCreditTracker) -> list[int]:
    returned = [
        tracker.consume(5, 1),
        tracker.consume(2, 3, pool="h100"),
    ]
    tracker.grant(100, 0, 10)  # late
    tracker.grant(50, 2, 5)  # late
    tracker.grant(20, 4, 30, pool="h100")
    returned.append(tracker.consume(70, 6))
    returned.append(tracker.consume(90, 8))
    tracker.grant(30, 12, 20)
    returned.append(tracker.consume(10, 7, pool="h100"))  # late
    return returned


# By hand, on the final timeline: @0 A=100 (exp 10); @1 consume 5 -> A 95; @2 B=50 (exp 5);
# @3 consume 2 in h100 -> from B (general credits serve h100), B 48; @4 C=20 h100 (exp 30);
# @5 B's 48 expire; @6 consume 70 -> A 25; @7 consume 10 in h100 -> from A (expires
# first), A 15; @8 consume 90 -> A 0, debt 75; @12 D=30 pays debt -> 45.
# At the time of each call the consumes returned 5, 7 (no credits yet), 0, 65, 0.
SCRIPT_RETURNS = [5, 7, 0, 65, 0]


PROBE_TIMES = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 19, 20, 29, 30, 100]


def answers(tracker: GPUCreditTracker) -> list[object]:
    return [
        (tracker.get_balance(t), tracker.get_balance(t, pool="h100"), tracker.pool_balances(t))
        for t in PROBE_TIMES
    ]


def test_the_script_answers_as_computed_by_hand() -> None:
    """The replay script's own answers, computed by hand, so replay tests compare to truth."""
    tracker = GPUCreditTracker()
    assert script(tracker) == SCRIPT_RETURNS
    assert tracker.get_balance(3) == 143
    assert tracker.get_balance(3, pool="h100") == 0
    assert tracker.get_balance(8) == -55
    assert tracker.get_balance(8, pool="general") == -75
    assert tracker.get_balance(8, pool="h100") == 20
    assert tracker.get_balance(12) == -25
    assert tracker.get_balance(30) == -45


def test_second_tracker_on_the_same_journal_object_gives_the_same_answers() -> None:
    journal = MemoryJournal()
    first = GPUCreditTracker(journal)
    script(first)
    second = GPUCreditTracker(journal)
    assert answers(second) == answers(first)
    assert second.state_digest() == first.state_digest()
    # Calls through either are seen by the other.
    assert second.consume(1, 13) == 46
    assert first.get_balance(13) == -26


def test_reopening_on_the_same_url_gives_the_same_answers(journal_url: str) -> None:
    if journal_url == "memory":
        journal = open_journal("memory")
        first, second_arg = GPUCreditTracker(journal), journal
    else:
        first, second_arg = GPUCreditTracker(journal_url), journal_url
    try:
        assert script(first) == SCRIPT_RETURNS
        expected = answers(first)
        second = GPUCreditTracker(second_arg)  # a new Journal when it is a URL
        try:
            assert answers(second) == expected
            assert second.state_digest() == first.state_digest()
            assert second.consume(1, 13) == 46
            assert first.get_balance(13) == -26
            assert first.state_digest() == second.state_digest()
        finally:
            if isinstance(second_arg, str):
                second.journal.close()  # type: ignore[attr-defined]
    finally:
        first.journal.close()  # type: ignore[attr-defined]


# -- tracker and scheduler: one set of accounts -------------------------------------------


def test_tracker_and_scheduler_see_the_same_credits_of_account_a() -> None:
    journal = MemoryJournal()
    now = [100]
    scheduler = Scheduler(journal, clock=lambda: now[0])
    tracker = GPUCreditTracker(journal, account="a")
    scheduler.open_account("a", 50)
    assert tracker.get_balance(100) == 50
    tracker.grant(20, 100, 1000)
    assert scheduler.accounts["a"].balance == 70
    assert scheduler.submit("j1", "a", 30, 1)
    # Held credits still count in the balance both facades report.
    assert tracker.get_balance(100) == 70
    assert scheduler.accounts["a"].balance == 70
    assert scheduler.accounts["a"].available == 40
    assert tracker.consume(25, 100) == 0  # draws the 40 that are not held
    assert scheduler.accounts["a"].balance == 45
    assert scheduler.accounts["a"].available == 15
    assert not scheduler.submit("j2", "a", 16, 1)
    now[0] = 200
    assert scheduler.start_next() is not None
    scheduler.complete("j1", success=True)
    assert tracker.get_balance(200) == 15
    assert scheduler.accounts["a"].balance == 15
    assert tracker.get_balance(150) == 45  # before the completion
    # A grant through the tracker opens an account the scheduler knows.
    GPUCreditTracker(journal, account="b").grant(5, 200, 300)
    assert scheduler.accounts["b"].balance == 5
    assert scheduler.submit("jb", "b", 5, 0)
    assert_invariants(scheduler.ledger())


def test_tracker_credits_expire_for_the_scheduler_too() -> None:
    journal = MemoryJournal()
    now = [0]
    scheduler = Scheduler(journal, clock=lambda: now[0])
    scheduler.open_account("a")
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(10, 0, 50)
    assert scheduler.accounts["a"].balance == 10
    now[0] = 50
    assert scheduler.accounts["a"].balance == 0
    assert not scheduler.submit("j", "a", 1, 0)
    assert tracker.get_balance(50) == 0


@pytest.mark.parametrize("bad", [42, b"sqlite://", object(), ["sqlite://"]])
def test_a_journal_that_is_none_of_the_three_kinds_is_refused_by_name(bad: object) -> None:
    with pytest.raises(TypeError, match=r"journal must be None \(in memory\), a database URL"):
        GPUCreditTracker(bad)  # type: ignore[arg-type]
    # the same kinds of error as the journal's own refusal of such a URL
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        Scheduler(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("facade", [GPUCreditTracker, Scheduler])
def test_a_path_for_a_journal_is_answered_with_its_url(facade: Any, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with pytest.raises(TypeError, match=re.escape(f"pass 'sqlite:///{path}'")):
        facade(path)
    assert not path.exists()


def test_a_second_expiry_with_no_grant_between_still_ends_its_credits() -> None:
    """Credits are valid for t < expiry, batch after batch: the consume at 12 finds A
    expired (at 10), the one at 25 finds B expired too (at 20), though no grant came
    between the two to bring the book's next expiry back into view."""
    t = GPUCreditTracker()
    t.grant(10, timestamp=0, expiry=10)   # A
    t.grant(10, timestamp=0, expiry=20)   # B
    assert t.consume(1, timestamp=12) == 0  # from B; A expired unused
    assert t.consume(5, timestamp=25) == 5  # B's 9 expired at 20: all of it is debt
    assert t.get_balance(25) == -5
