"""Grant priority, manual adjustments and voids, folded from journal events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, InvalidTransition, Scheduler, UnknownAccount
from projections.corrections import Corrections
from projections.events import (
    CreditsAdjusted,
    CreditsGranted,
    EventReversed,
    GrantVoided,
    from_payload,
    to_payload,
)
from projections.queries import explain_job
from projections.replay import fold_canonical


def journal_of(*events: tuple[str, str, int, dict[str, Any]]) -> MemoryJournal:
    """A journal of (id, type, time, payload) events, each in its account's stream."""
    journal = MemoryJournal()
    journal.append([NewEvent(event_id, str(payload.get("account", "a")), kind, time, payload)
                    for event_id, kind, time, payload in events])
    return journal


def balance(journal: MemoryJournal, at: int, account: str = "a") -> int:
    return GPUCreditTracker(journal, account).get_balance(at)


def test_default_priority_is_omitted_from_the_payload() -> None:
    event = CreditsGranted("a", 10, 20)
    assert to_payload(event) == {"account": "a", "amount": 10, "expiry": 20}
    assert to_payload(CreditsGranted("a", 10, 20, priority=10, memo="PO 4411")) == {
        "account": "a", "amount": 10, "expiry": 20, "priority": 10, "memo": "PO 4411"}


@pytest.mark.parametrize("payload", [
    {"account": "a", "amount": 1, "priority": -1},
    {"account": "a", "amount": 1, "priority": 101},
    {"account": "a", "amount": 1, "priority": True},
    {"account": "a", "amount": 1, "memo": ""},
    {"account": "a", "amount": 1, "memo": "two\nlines"},
])
def test_bad_grant_fields_are_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        from_payload("grant", payload)


def test_new_event_types_validate_on_construction() -> None:
    with pytest.raises(ValueError, match="must not be 0"):
        CreditsAdjusted("a", 0, "typo")
    with pytest.raises(ValueError, match="reason"):
        from_payload("adjust", {"account": "a", "amount": 5, "reason": ""})
    with pytest.raises(ValueError, match="missing reason"):
        from_payload("reverse", {"event": "x"})
    assert GrantVoided("g1").reason is None
    assert to_payload(EventReversed("u", "ms")) == {"event": "u", "reason": "ms"}


def test_lower_priority_number_is_used_first_whatever_the_expiry() -> None:
    tracker = GPUCreditTracker()
    tracker.grant(10, 0, 100, priority=10, event_id="late-expiring")
    tracker.grant(10, 0, 5, event_id="soon-expiring")
    tracker.consume(10, 1)
    # The priority-10 grant paid, so the default one still expires unused at 5.
    assert tracker.get_balance(4) == 10
    assert tracker.get_balance(5) == 0


def test_a_positive_adjustment_pays_debt_then_stays_without_expiry() -> None:
    journal = journal_of(
        ("u1", "consume", 1, {"account": "a", "amount": 30}),
        ("x1", "adjust", 2, {"account": "a", "amount": 50, "reason": "goodwill"}),
    )
    assert balance(journal, 1) == -30
    assert balance(journal, 10**9) == 20


def test_a_credit_adjustment_pays_the_debt_so_later_usage_owes_nothing() -> None:
    """The balance alone cannot tell paid debt from debt beside active credits: the debt
    after the next usage report can."""
    journal = journal_of(
        ("u1", "consume", 1, {"account": "a", "amount": 30}),
        ("x1", "adjust", 2, {"account": "a", "amount": 50, "reason": "goodwill"}),
    )
    tracker = GPUCreditTracker(journal, "a")
    assert tracker.consume(20, 3) == 0
    assert tracker.get_balance(3) == 0


def test_a_credit_adjustment_opens_the_account_and_a_debit_alone_does_not() -> None:
    journal = journal_of(
        ("x1", "adjust", 1, {"account": "a", "amount": 20, "reason": "goodwill"}),
        ("x2", "adjust", 1, {"account": "b", "amount": -5, "reason": "billed late"}),
    )
    scheduler = Scheduler(journal, clock=lambda: 2)
    assert scheduler.submit("j1", "a", 15, 0)
    with pytest.raises(UnknownAccount):
        scheduler.submit("j2", "b", 1, 0)


def test_a_submit_recorded_to_an_account_known_only_from_usage_is_to_an_unknown_account(
        ) -> None:
    """Usage alone opens no account: a submit to it (only an import can record one) is
    rejected as to an unknown account, not for want of credits."""
    journal = journal_of(
        ("u1", "consume", 1, {"account": "b", "amount": 5}),
        ("s1", "submit", 2, {"account": "b", "job": "j1", "cost": 0, "priority": 0}),
    )
    job = explain_job(journal, "j1")
    assert (job.accepted, job.reason) == (False, "unknown account 'b'")


def test_both_facades_name_the_journal_they_share() -> None:
    journal = MemoryJournal()
    tracker, scheduler = GPUCreditTracker(journal, account="a"), Scheduler(journal)
    assert tracker.journal is journal and scheduler.journal is journal


def test_a_negative_adjustment_is_debited_like_usage() -> None:
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 10, "expiry": 100}),
        ("x1", "adjust", 4, {"account": "a", "amount": -25, "reason": "double-billed"}),
    )
    assert balance(journal, 3) == 10
    assert balance(journal, 4) == -15


def test_a_void_stops_the_unused_rest_from_counting_and_keeps_what_it_paid() -> None:
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 100}),
        ("u1", "consume", 2, {"account": "a", "amount": 30}),
        ("v1", "void", 6, {"grant": "g1", "reason": "contract cancelled"}),
        ("u2", "consume", 8, {"account": "a", "amount": 5}),
    )
    assert balance(journal, 5) == 70
    assert balance(journal, 6) == 0
    assert balance(journal, 8) == -5
    totals = fold_canonical(journal).accounts["a"].book.totals
    assert (totals.voided, totals.expired, totals.consumed) == (70, 70, 35)


def test_usage_after_a_void_is_paid_by_the_other_grants_alone() -> None:
    """The voided grant is out of the draw: it is not named as a payer of nothing."""
    c = Corrections(clock=lambda: 0)
    c.grant("a", 10, at=0, expiry=100, event_id="g1")  # drawn first: earlier expiry
    c.grant("a", 10, at=0, expiry=200, event_id="g2")
    c.void("g1", at=2)
    assert c.consume("a", 5, at=3).paid_by == (("g2", 5),)


def test_a_void_takes_only_its_own_grant_out_wherever_the_grant_sorts() -> None:
    """g2 is not the next to be drawn (g1 expires first): voided, g2 lapses and g1 stays,
    unused credits and held ones alike."""
    c = Corrections(clock=lambda: 0)
    c.grant("a", 10, at=0, expiry=100, event_id="g1")
    c.grant("a", 10, at=0, expiry=200, event_id="g2")
    c.void("g2", at=2)
    assert c.consume("a", 5, at=3).paid_by == (("g1", 5),)
    assert c.ledger().accounts["a"].balance == 5

    held = Corrections(clock=lambda: 0)
    held.grant("a", 10, at=0, expiry=100, event_id="g1")
    held.grant("a", 10, at=0, expiry=200, event_id="g2")
    s = Scheduler(held.journal, clock=lambda: 1)
    assert s.submit("j1", "a", cost=15, priority=1)  # holds g1's 10, then 5 of g2
    held.void("g2", at=2)
    s.cancel("j1", at=3)  # g1's 10 come back; g2's 5 lapse
    book = held.ledger().accounts["a"].book
    assert (book.active_total, book.totals.voided) == (10, 10)


@pytest.mark.parametrize("holder", ["x", "b"])
def test_a_void_of_a_grant_whose_id_is_a_refill_buckets_takes_out_that_grant(
        holder: str) -> None:
    """Event ids are the caller's, so a grant may carry the id the fold gives account
    b's refill bucket (`refill:b`). Voided, that grant lapses, in its own account or in
    b; b's bucket, unused and held credits alike, is no grant's and stays."""
    journal = journal_of(
        ("open", "account", 0, {"account": "b", "refill_rate": 3600, "refill_cap": 1000}),
        ("refill:b", "grant", 1, {"account": holder, "amount": 5, "expiry": 1000,
                                  "pool": "h100"}),
        ("s1", "submit", 10, {"account": "b", "job": "j1", "cost": 4, "priority": 1}),
        ("v1", "void", 20, {"grant": "refill:b"}),
        ("c1", "cancel", 30, {"job": "j1"}),  # the 4 held go back to the bucket
    )
    accounts = fold_canonical(journal).accounts
    assert accounts[holder].book.totals.voided == 5
    assert accounts["b"].refill_batch is not None
    assert accounts["b"].refill_batch.amount == 30  # a credit a second from 0 to 30
    assert balance(journal, 30, "b") == 30
    assert balance(journal, 30, holder) == (30 if holder == "b" else 0)


def test_a_void_before_its_grant_on_the_timeline_voids_all_of_it() -> None:
    journal = journal_of(
        ("v1", "void", 1, {"grant": "g1"}),
        ("g1", "grant", 3, {"account": "a", "amount": 100}),
    )
    assert balance(journal, 5) == 0
    totals = fold_canonical(journal).accounts["a"].book.totals
    assert (totals.granted, totals.voided, totals.expired) == (100, 100, 100)


def test_a_void_at_its_grants_own_time_recorded_first_voids_all_of_it() -> None:
    """Stopping from T on, a void at the grant's time T leaves nothing of it to count,
    even at T (the void is first at T: it was recorded first)."""
    journal = journal_of(
        ("v1", "void", 3, {"grant": "g1"}),
        ("g1", "grant", 3, {"account": "a", "amount": 100}),
    )
    assert balance(journal, 3) == 0 and balance(journal, 5) == 0
    totals = fold_canonical(journal).accounts["a"].book.totals
    assert (totals.granted, totals.voided) == (100, 100)


def test_a_grant_voided_twice_before_it_arrives_stopped_at_the_first_void() -> None:
    """Only an import can record two voids of one grant; the earlier one is when its
    credits stopped counting, whichever was recorded first."""
    journal = journal_of(
        ("v2", "void", 2, {"grant": "g1"}),
        ("g1", "grant", 3, {"account": "a", "amount": 100}),
    )
    journal.append([NewEvent("v1", "a", "void", 1, {"grant": "g1"})])
    tracker = GPUCreditTracker(journal, "a")
    assert tracker.get_balance(5) == 0
    with pytest.raises(ValueError, match="already voided from 1"):
        Corrections(journal).void("g1", at=5)


def test_a_void_of_a_grant_a_job_holds_all_of_lapses_what_the_job_gives_back() -> None:
    """Nothing of it is unused, yet the void finds it: cancelled, the job's 30 lapse."""
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 30}),
        ("s1", "submit", 1, {"account": "a", "job": "j1", "cost": 30, "priority": 1}),
        ("v1", "void", 2, {"grant": "g1"}),
        ("c1", "cancel", 3, {"job": "j1"}),
    )
    book = fold_canonical(journal).accounts["a"].book
    assert (book.totals.voided, book.active_total, book.held) == (30, 0, 0)
    assert balance(journal, 3) == 0


def test_credits_of_a_voided_grant_held_by_a_job_stay_with_the_job() -> None:
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 100}),
        ("s1", "submit", 1, {"account": "a", "job": "j1", "cost": 40, "priority": 1}),
        ("s2", "submit", 1, {"account": "a", "job": "j2", "cost": 10, "priority": 1}),
        ("v1", "void", 2, {"grant": "g1"}),
        ("t1", "start", 3, {"job": "j1"}),
        ("c1", "complete", 4, {"job": "j1", "success": True}),
        ("c2", "cancel", 4, {"job": "j2"}),
    )
    ledger = fold_canonical(journal)
    assert ledger.jobs["j1"].charge == 40
    book = ledger.accounts["a"].book
    # 50 unused at the void, 10 more released by the cancelled job: 60 voided in all.
    assert (book.totals.voided, book.active_total, book.held) == (60, 0, 0)
    assert not ledger.anomalies




def test_held_credits_of_a_grant_voided_at_its_expiry_expired_not_voided() -> None:
    """At its expiry the grant's credits had already stopped counting (valid for
    t < expiry): released later, the job's 10 lapse as expired at 10, not as voided."""
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 10, "expiry": 10}),
        ("s1", "submit", 1, {"account": "a", "job": "j1", "cost": 10, "priority": 1}),
        ("v1", "void", 10, {"grant": "g1"}),
        ("c1", "cancel", 12, {"job": "j1"}),
    )
    ledger = fold_canonical(journal)
    book = ledger.accounts["a"].book
    assert (book.totals.expired, book.totals.voided, book.active_total) == (10, 0, 0)

def started_on_a_grant() -> tuple[Corrections, Scheduler]:
    """Grant g1 of 100 at 0; job j1 (cost 30) submitted at 2 and started at 3."""
    corrections = Corrections(clock=lambda: 0)
    corrections.grant("a", 100, at=0, event_id="g1")
    scheduler = Scheduler(corrections.journal, clock=lambda: 2)
    assert scheduler.submit("j1", "a", cost=30, priority=1, at=2)
    started = scheduler.start_next(at=3)
    assert started is not None and started.id == "j1"
    return corrections, scheduler


@pytest.mark.parametrize("correct", [
    lambda c: c.void("g1", at=1, reason="backdated"),
    lambda c: c.adjust("a", -100, "backdated debit", at=1),
], ids=["void", "debit"])
def test_a_correction_placed_before_a_started_job_may_not_take_its_credits_back(
        correct: Callable[[Corrections], object]) -> None:
    corrections, scheduler = started_on_a_grant()
    head = corrections.journal.head()
    with pytest.raises(InvalidTransition, match="would invalidate the start"):
        correct(corrections)
    assert corrections.journal.head() == head
    assert scheduler.ledger().jobs["j1"].state == "running"
    assert not scheduler.ledger().anomalies


def test_the_same_corrections_after_the_start_are_recorded() -> None:
    corrections, scheduler = started_on_a_grant()
    corrections.void("g1", at=4, reason="contract cancelled")
    corrections.adjust("a", -5, "late fee", at=4)
    assert scheduler.ledger().jobs["j1"].state == "running"
    assert scheduler.accounts["a"].balance == 30 - 5
    assert not scheduler.ledger().anomalies


def test_a_credit_placed_in_the_past_is_never_refused() -> None:
    corrections, scheduler = started_on_a_grant()
    corrections.adjust("a", 10, "goodwill", at=1)
    assert scheduler.accounts["a"].balance == 110


def test_a_void_placed_in_the_past_may_still_re_decide_a_pending_job() -> None:
    corrections = Corrections(clock=lambda: 0)
    corrections.grant("a", 100, at=0, event_id="g1")
    scheduler = Scheduler(corrections.journal, clock=lambda: 2)
    assert scheduler.submit("j1", "a", cost=30, priority=1, at=2)
    corrections.void("g1", at=1, reason="backdated")
    assert scheduler.ledger().jobs["j1"].state == "rejected"
    assert scheduler.accounts["a"].reserved == 0


def test_an_erasure_changes_no_figure_and_is_no_anomaly() -> None:
    journal = journal_of(
        ("u1", "consume", 1, {"account": "a", "amount": 3, "user": "alice"}),
        ("e1", "erase", 2, {"events": ["u1"], "reason": "request"}),
    )
    ledger = fold_canonical(journal)
    assert ledger.anomalies == [] and balance(journal, 2) == -3


def test_a_grant_dead_on_arrival_is_an_anomaly_that_adds_nothing() -> None:
    """Only an import can record a grant whose expiry is not after its time."""
    journal = journal_of(("g1", "grant", 5, {"account": "a", "amount": 10, "expiry": 5}))
    ledger = fold_canonical(journal)
    assert [a[2] for a in ledger.anomalies] == ["grant expires at 5, not after its time 5"]
    assert balance(journal, 5) == 0


def test_cancelling_a_cancelled_job_again_is_a_no_op_not_an_anomaly() -> None:
    """The contract: "Cancelling an already cancelled job is a no-op"."""
    journal = journal_of(
        ("g1", "grant", 0, {"account": "a", "amount": 30}),
        ("s1", "submit", 1, {"account": "a", "job": "j1", "cost": 10, "priority": 1}),
        ("c1", "cancel", 2, {"job": "j1"}),
        ("c2", "cancel", 3, {"job": "j1"}),
    )
    ledger = fold_canonical(journal)
    assert ledger.anomalies == [] and ledger.jobs["j1"].state == "cancelled"
    assert balance(journal, 3) == 30
