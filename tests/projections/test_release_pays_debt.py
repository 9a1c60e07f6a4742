"""Credits a job releases pay debt first; every answer traces them to the debt they paid.

A cancel, or a completion that charges less than was held, gives credits back; while the
account owes, they pay the debt before they are usable again. The balance always said so
(the debt goes down); the statement's line of the release, its words, and the lineage of
the grant the credits came back to must say so too, with the same figures.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_queries import journals

from eventstore import MemoryJournal, NewEvent
from projections.queries import balance, explain_account, statement
from projections.replay import fold_canonical
from tools import wording


def _journal(events: list[tuple[str, int, dict[str, Any]]]) -> MemoryJournal:
    journal = MemoryJournal()
    for n, (kind, time, payload) in enumerate(events):
        stream = payload.get("account", "a")
        journal.append([NewEvent(payload.pop("id", f"e{n}"), stream, kind, time, payload)])
    return journal


def _released_in_debt(finish: str) -> MemoryJournal:
    """Grant 10 (g1), a job holding 8, a usage of 5 (2 from g1, 3 owed), then the job
    released: cancelled, failed with a full refund, or failed with half refunded."""
    events: list[tuple[str, int, dict[str, Any]]] = [
        ("grant", 0, {"account": "a", "amount": 10, "expiry": 1000, "id": "g1"}),
        ("submit", 1, {"account": "a", "job": "j1", "cost": 8, "priority": 1}),
        ("consume", 2, {"account": "a", "amount": 5}),
    ]
    if finish == "cancel":
        events.append(("cancel", 3, {"job": "j1"}))
    else:
        events.append(("start", 3, {"job": "j1"}))
        refund = 1.0 if finish == "fail" else 0.5
        events.append(("complete", 4, {"job": "j1", "success": False,
                                       "refund_fraction": refund}))
    return _journal(events)


@pytest.mark.parametrize("finish", ["cancel", "fail", "partial"])
def test_the_release_line_says_the_debt_its_credits_paid(finish: str) -> None:
    journal = _released_in_debt(finish)
    assert balance(journal, "a").figures.debt == 0
    release = statement(journal, "a").lines[-1]
    assert release.type == ("cancel" if finish == "cancel" else "complete")
    assert release.debt_paid == 3
    assert wording.text(release.effect).endswith("3 paid debt first (g1 3)")


@pytest.mark.parametrize("finish", ["cancel", "fail", "partial"])
def test_the_grant_the_credits_came_back_to_paid_that_debt(finish: str) -> None:
    (g1,) = explain_account(_released_in_debt(finish), "a").grants
    assert g1.debt_paid_later == 3 and g1.debt_paid == 3
    (paid,) = g1.released_to_debt
    assert (paid.kind, paid.job, paid.amount) == ("release", "j1", 3)
    assert g1.amount == (g1.debt_paid + g1.used + g1.expired + g1.remaining
                         + sum(a for _, a in g1.held))


def test_a_refill_batch_counts_the_debt_its_released_credits_paid() -> None:
    # A refill batch has no grant event: its amount is what it accounts for, so what
    # its released credits paid must be counted in it.
    journal = _journal([
        ("account", 0, {"account": "a", "refill_rate": 3600, "refill_cap": 10}),
        ("submit", 10, {"account": "a", "job": "j1", "cost": 10, "priority": 1}),
        ("consume", 10, {"account": "a", "amount": 4}),
        ("cancel", 10, {"job": "j1"}),
    ])
    (refill,) = explain_account(journal, "a").grants
    assert refill.debt_paid == 4
    assert refill.amount == 10  # what accrued: 4 paid the debt, 6 remain
    assert statement(journal, "a").lines[-1].debt_paid == 4


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals())
def test_statement_lines_trace_every_change_of_balance_and_debt(
        journal: MemoryJournal) -> None:
    for name in fold_canonical(journal).accounts:
        lines = statement(journal, name).lines
        figures = balance(journal, name).figures
        assert sum(line.change for line in lines) == figures.balance
        created = sum(line.debt_created for line in lines if line.status == "ok")
        paid = sum(line.debt_paid for line in lines if line.status == "ok")
        assert created - paid == figures.debt, [
            (line.type, line.change, line.debt_created, line.debt_paid) for line in lines
            if line.type not in ("grant", "account", "submit", "start", "consume")]
        explained = explain_account(journal, name)
        assert sum(g.debt_paid for g in explained.grants) == paid


@pytest.mark.parametrize("opening", [0, 10, 29, 30, 45])
def test_a_refill_line_says_the_debt_it_paid_after_the_opening(opening: int) -> None:
    # One credit a second; 30 owed from the start; the next event, at 50, brings the
    # refill's 50 credits: the first 30 pay the debt. A statement opening between them
    # holds what accrued by then in its opening balance, debt paid first.
    journal = _journal([
        ("account", 0, {"account": "a", "refill_rate": 3600, "refill_cap": 100}),
        ("consume", 0, {"account": "a", "amount": 30}),
        ("consume", 50, {"account": "a", "amount": 1}),
    ])
    whole = statement(journal, "a")
    (refill,) = [line for line in whole.lines if line.type == "refill"]
    assert refill.debt_paid == 30
    assert wording.text(refill.effect) == "refill of 50 credits accrued; 30 paid debt first"
    part = statement(journal, "a", from_time=opening)
    owed_at_opening = balance(journal, "a", at=opening).figures.debt
    assert owed_at_opening == max(0, 30 - opening)
    assert sum(line.debt_paid for line in part.lines) == owed_at_opening
