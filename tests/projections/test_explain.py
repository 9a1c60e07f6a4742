"""`explain`: the lineage of each grant and a job's life, case by case, where the
generated journals rarely go."""

from __future__ import annotations

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.errors import UnknownAccount
from projections.queries import explain_account, explain_job


def _journal(*events: NewEvent) -> MemoryJournal:
    journal = MemoryJournal()
    journal.append(list(events))
    return journal


def _submit(event_id: str, job: str, time: int, cost: int) -> NewEvent:
    return NewEvent(event_id, "a", "submit", time, {"account": "a", "job": job, "cost": cost,
                                                    "priority": 1})


def test_credits_released_after_their_grants_expiry_count_as_expired() -> None:
    # The job holds 10 of a grant expiring at 20 and is cancelled at 30: the credits it
    # releases lapse as they are released, expired unused, never remaining.
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 20}),
        _submit("s", "j", 1, 10),
        NewEvent("c", "job:j", "cancel", 30, {"job": "j"}))
    (grant,) = explain_account(journal, "a").grants
    assert (grant.used, grant.expired, grant.remaining, grant.held) == (0, 50, 0, [])


def test_a_job_says_how_much_of_what_it_released_lapsed_with_its_grant() -> None:
    # Held 10: 6 of g1 (expiring at 20), 4 of g2 (never expiring; g1 goes first by its
    # expiry). The job fails at 30 with everything refunded: g1's 6 lapse as they are
    # released; g3's 5, unused and expired at 25, are evicted at the same moment (not the
    # job's); only g2's 4 are usable again.
    journal = _journal(
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 20}),
        NewEvent("u", "a", "consume", 1, {"account": "a", "amount": 44}),
        NewEvent("g2", "a", "grant", 2, {"account": "a", "amount": 40}),
        _submit("s", "j", 3, 10),
        NewEvent("st", "job:j", "start", 4, {"job": "j"}),
        NewEvent("g3", "a", "grant", 5, {"account": "a", "amount": 5, "expiry": 25}),
        NewEvent("c", "job:j", "complete", 30, {"job": "j", "success": False,
                                                "refund_fraction": 1.0}))
    explained = explain_job(journal, "j")
    assert explained.held_from == (("g1", 6), ("g2", 4))
    assert (explained.charge, explained.released, explained.lapsed) == (0, 10, 6)
    # Cancelled before the expiry, nothing it released lapses.
    early = _journal(
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 20}),
        _submit("s", "j", 3, 10),
        NewEvent("c", "job:j", "cancel", 10, {"job": "j"}))
    assert (explain_job(early, "j").released, explain_job(early, "j").lapsed) == (10, 0)


def test_reversed_grants_and_consumes_have_no_lineage() -> None:
    journal = _journal(
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("g2", "a", "grant", 1, {"account": "a", "amount": 40, "priority": 1}),
        NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 30}),
        NewEvent("r1", "a", "reverse", 3, {"event": "g2", "reason": "wrong account"}),
        NewEvent("r2", "a", "reverse", 4, {"event": "u", "reason": "billed twice"}))
    explained = explain_account(journal, "a")
    assert [(g.grant_id, g.used, g.remaining) for g in explained.grants] == [("g1", 0, 100)]
    assert explained.spends == []
    # As known before the reversals, g2 (priority 1) paid the consume.
    before = explain_account(journal, "a", as_known_at=3)
    assert [(g.grant_id, g.used, g.remaining) for g in before.grants] == [
        ("g1", 0, 100), ("g2", 30, 10)]
    assert [(s.event_id, s.paid_by) for s in before.spends] == [("u", (("g2", 30),))]


def test_a_spend_names_the_pool_it_drew_in() -> None:
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 50, "pool": "h100"}),
        NewEvent("u", "a", "consume", 1, {"account": "a", "amount": 30, "pool": "h100"}),
        NewEvent("d", "a", "adjust", 2, {"account": "a", "amount": -5, "pool": "h100",
                                         "reason": "billed twice"}),
        NewEvent("w", "a", "consume", 3, {"account": "a", "amount": 4}))
    spends = explain_account(journal, "a").spends
    assert [(s.event_id, s.kind, s.amount, s.pool, s.debt_created) for s in spends] == [
        ("u", "consume", 30, "h100", 0), ("d", "adjust", 5, "h100", 0),
        ("w", "consume", 4, "general", 4)]


def test_an_accounts_rejection_gives_the_folds_reason() -> None:
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 10}),
        _submit("s", "big", 1, 50))
    (rejection,) = explain_account(journal, "a").rejections
    job = explain_job(journal, "big")
    assert job.accepted is False and job.reason
    assert (rejection.job, rejection.time, rejection.reason) == ("big", 1, job.reason)


def test_jobs_holding_a_grant_are_listed_by_job_id() -> None:
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 50}),
        _submit("s1", "zeta", 1, 10),
        _submit("s2", "alpha", 2, 5))
    (grant,) = explain_account(journal, "a").grants
    assert grant.held == [("alpha", 5), ("zeta", 10)]
    assert grant.remaining == 35


def test_grants_at_one_time_are_listed_in_the_order_recorded() -> None:
    journal = _journal(
        NewEvent("z", "a", "grant", 0, {"account": "a", "amount": 1}),
        NewEvent("b", "a", "grant", 0, {"account": "a", "amount": 2}))
    assert [g.grant_id for g in explain_account(journal, "a").grants] == ["z", "b"]


def test_an_account_recorded_only_later_has_nothing_yet_as_known_before() -> None:
    # As `balance` answers zeros then; a name the journal never records is unknown.
    journal = _journal(
        NewEvent("ga", "a", "grant", 0, {"account": "a", "amount": 1}),
        NewEvent("gb", "b", "grant", 0, {"account": "b", "amount": 2}))
    early = explain_account(journal, "b", as_known_at=1)
    assert (early.grants, early.spends, early.figures.balance) == ([], [], 0)
    with pytest.raises(UnknownAccount):
        explain_account(journal, "nobody", as_known_at=1)


def test_a_repeated_completion_changes_nothing_the_first_settled() -> None:
    # The second completion is an anomaly (the job is no longer running): the job was
    # paid for and released what the first said.
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 50}),
        _submit("s", "j", 1, 10),
        NewEvent("t", "job:j", "start", 2, {"job": "j"}),
        NewEvent("c1", "job:j", "complete", 3, {"job": "j", "success": False,
                                                "refund_fraction": 0.5}),
        NewEvent("c2", "job:j", "complete", 4, {"job": "j", "success": True}))
    job = explain_job(journal, "j")
    assert (job.state, job.charge, job.paid_by, job.released) == (
        "failed", 5, (("g", 5),), 5)
    assert [(e.event_id, e.ok) for e in job.events] == [
        ("s", True), ("t", True), ("c1", True), ("c2", False)]


def test_a_repeated_cancel_keeps_what_the_first_released() -> None:
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 50}),
        _submit("s", "j", 1, 10),
        NewEvent("c1", "job:j", "cancel", 2, {"job": "j"}),
        NewEvent("c2", "job:j", "cancel", 3, {"job": "j"}))
    job = explain_job(journal, "j")
    assert (job.state, job.released) == ("cancelled", 10)


def test_debt_a_refill_paid_off_between_events_is_no_longer_owed() -> None:
    # 5 owed in h100 at 0; the bucket accrues a credit a second and has paid it by 20,
    # the latest time (another account's event): no pool owes anything then, as after an
    # event of the account at 20, which would settle the refill the same way.
    journal = _journal(
        NewEvent("o", "a", "account", 0, {"account": "a", "refill_rate": 3600,
                                          "refill_cap": 10}),
        NewEvent("u", "a", "consume", 0, {"account": "a", "amount": 5, "pool": "h100"}),
        NewEvent("g", "b", "grant", 20, {"account": "b", "amount": 1}))
    explanation = explain_account(journal, "a")
    assert explanation.figures.debt == 0
    assert explanation.debt == {}
    journal.append([NewEvent("u2", "a", "consume", 20, {"account": "a", "amount": 1})])
    assert explain_account(journal, "a").debt == {}
