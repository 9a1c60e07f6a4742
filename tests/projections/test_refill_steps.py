"""A refill is the same however often events touch the account: one long gap pays what
many short ones would, and an answer between events is what an event there would make."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.figures import Figures
from projections.queries import balance, statement
from projections.replay import fold_canonical


def _account(name: str, time: int, rate: int | None, cap: int | None) -> NewEvent:
    payload: dict[str, Any] = {"account": "a"}
    if rate is not None:
        payload.update(refill_rate=rate, refill_cap=cap)
    return NewEvent(name, "a", "account", time, payload)


def _figures(events: list[NewEvent], at: int) -> tuple[int, int, dict[str, int]]:
    journal = MemoryJournal()
    journal.append(events)
    figures = Figures.of(fold_canonical(journal).accounts["a"], at)
    return figures.balance, figures.debt, {p: v for p, v in figures.pools.items() if v}


@settings(max_examples=100, deadline=None)
@given(rate=st.integers(1, 7200), cap=st.integers(1, 50),
       debts=st.lists(st.tuples(st.sampled_from([None, "a100", "h100"]),
                                st.integers(1, 120)), min_size=1, max_size=3),
       touches=st.lists(st.integers(11, 400_000), max_size=6, unique=True),
       at=st.integers(11, 400_000))
def test_touching_the_account_changes_no_figure(rate: int, cap: int,
                                                debts: list[tuple[str | None, int]],
                                                touches: list[int], at: int) -> None:
    opening = [_account("open", 0, rate, cap)]
    for n, (pool, amount) in enumerate(debts):
        payload: dict[str, Any] = {"account": "a", "amount": amount}
        if pool is not None:
            payload["pool"] = pool
        opening.append(NewEvent(f"u{n}", "a", "consume", 10, payload))
    # The same declaration again: it changes nothing but brings the account to its time.
    touched = [*opening, *(_account(f"t{t}", t, rate, cap) for t in sorted(touches) if t <= at)]
    assert _figures(touched, at) == _figures(opening, at)
    # Asked between events, the figures are those an event at that time would leave.
    assert _figures(opening, at) == _figures([*opening, _account("now", at, rate, cap)], at)


def test_no_refill_accrues_while_it_is_off() -> None:
    # One credit an hour: on for the first hour, off for nine, on again.
    events = [_account("on", 0, 1, 100), _account("off", 3600, None, None),
              _account("again", 36_000, 1, 100)]
    assert _figures(events, 36_000)[0] == 1  # the first hour only
    assert _figures(events, 39_600)[0] == 2


def test_turning_the_refill_off_drops_the_part_of_a_credit_accrued() -> None:
    # One credit an hour: half an hour accrued (1,800 credit-seconds), then off. Turned on
    # again, it accrues from that event's time: another half hour is half a credit, not
    # the whole one the two halves would make.
    events = [_account("on", 0, 1, 100), _account("off", 1800, None, None),
              _account("again", 36_000, 1, 100)]
    assert _figures(events, 36_000 + 1800)[0] == 0
    assert _figures(events, 36_000 + 3600)[0] == 1


def test_explain_names_the_refill_as_what_paid_a_debt() -> None:
    # 60 credits an hour, cap 10: the first ten minutes' 10 pay the debt of 4 and leave 6.
    events = [_account("open", 0, 60, 10),
              NewEvent("u0", "a", "consume", 0, {"account": "a", "amount": 4}),
              NewEvent("g", "a", "grant", 600, {"account": "a", "amount": 3, "expiry": 5000}),
              NewEvent("u1", "a", "consume", 1200, {"account": "a", "amount": 6})]
    journal = MemoryJournal()
    journal.append(events)
    for at in (1200, 1500):  # at the last event, and between events (5 more accrued)
        explained = explain_account_at(journal, at)
        refill = next(g for g in explained.grants if g.grant_id == "refill:a")
        assert refill.debt_paid == 4
        assert refill.used == 3 and refill.remaining == _figures(events, at)[0]
        assert refill.amount == refill.debt_paid + refill.used + refill.remaining
        assert sum(explained.debt.values()) == 0


def test_explain_counts_refill_credits_a_job_holds_in_the_refill_batch() -> None:
    # 60 credits an hour, cap 10: ten minutes accrue 10, then a job holds 4 of them.
    events = [_account("open", 0, 60, 10),
              NewEvent("s", "a", "submit", 600, {"account": "a", "job": "j", "cost": 4,
                                                 "priority": 1})]
    journal = MemoryJournal()
    journal.append(events)
    refill = next(g for g in explain_account_at(journal, 600).grants
                  if g.grant_id == "refill:a")
    assert (refill.held, refill.remaining, refill.amount) == ([("j", 4)], 6, 10)


def explain_account_at(journal: MemoryJournal, at: int) -> Any:
    """`explain_account`, asked at `at` rather than the latest event time."""
    from projections.queries.explain import LineageBuilder
    from projections.queries.walk import AccountWalk

    walk = AccountWalk("a")
    builder = LineageBuilder(walk)
    for rec in journal.read(order="canonical"):
        step = walk.apply(rec)
        if step is not None:
            builder.take(step)
    return builder.finish(at)


@pytest.mark.parametrize(("start", "end"), [(600, 600), (500, 600), (300, 600), (600, 899),
                                            (100, 100), (50, 120)])
def test_a_window_of_a_refill_account_runs_on_from_its_opening(start: int, end: int) -> None:
    # Lines no event of the account makes (the expiry at 600, a reversed usage and its
    # reversal at 100) come between the opening, which holds the refill accrued by then,
    # and the refill line: they run on from the opening, and the window closes on what
    # `balance` says at its end.
    journal = MemoryJournal()
    journal.append([
        _account("open", 0, 3600, 1000),
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 600,
                                          "pool": "h100"}),
        NewEvent("u1", "a", "consume", 100, {"account": "a", "amount": 7}),
        NewEvent("r1", "a", "reverse", 100, {"event": "u1", "reason": "oops"}),
        NewEvent("u2", "a", "consume", 900, {"account": "a", "amount": 1}),
    ])
    part = statement(journal, "a", from_time=start, to_time=end)
    assert part.opening is not None
    running = part.opening.balance
    for line in part.lines:
        running += line.change
        assert line.balance == running, line
    assert part.closing.balance == balance(journal, "a", at=end).figures.balance



@pytest.mark.parametrize("start", [None, 2, 7, 12, 16])
def test_a_line_of_an_event_that_changes_nothing_shows_the_balance_at_its_time(
        start: int | None) -> None:
    # The second void finds nothing left to void, and a reversed usage report is as if it
    # had never happened, so the fold does not bring the account to their times; their
    # lines (and the reversal's) still say what `balance --at` says there, the refill
    # accrued since the account's last event included, and no credit is counted twice.
    journal = MemoryJournal()
    journal.append([
        _account("open", 0, 3600, 1000),
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 10, "expiry": 50}),
        NewEvent("v1", "a", "void", 5, {"grant": "g1", "reason": "contract cancelled"}),
        NewEvent("v2", "a", "void", 10, {"grant": "g1", "reason": "cancelled again"}),
        NewEvent("u1", "a", "consume", 14, {"account": "a", "amount": 3}),
        NewEvent("r1", "a", "reverse", 15, {"event": "u1", "reason": "not ours"}),
        NewEvent("u2", "a", "consume", 20, {"account": "a", "amount": 1}),
    ])
    part = statement(journal, "a", from_time=start, to_time=30)
    shown = {line.event_id: line.balance for line in part.lines if line.position}
    for event_id, time in (("v2", 10), ("u1", 14), ("r1", 15)):
        if start is None or time >= start:
            assert shown[event_id] == balance(journal, "a", at=time).figures.balance, event_id
    running = 0 if part.opening is None else part.opening.balance
    for line in part.lines:
        running += line.change
        assert line.balance == running, line
    assert part.closing.balance == balance(journal, "a", at=30).figures.balance
    # Every credit the refill accrued is on one line: 30 seconds at one a second.
    accrued = sum(line.change for line in part.lines if line.type == "refill")
    assert accrued == 30 - (start or 0)


def test_explain_says_when_the_refill_bucket_was_made_and_its_priority() -> None:
    # 60 credits an hour, cap 10: the grant at 600 is the account's first touch since it
    # opened, and the refill puts credits in its bucket there (after paying the debt).
    from tools import wording

    events = [_account("open", 0, 60, 10),
              NewEvent("u0", "a", "consume", 0, {"account": "a", "amount": 4}),
              NewEvent("g", "a", "grant", 600, {"account": "a", "amount": 3, "expiry": 5000,
                                                "priority": 10}),
              NewEvent("u1", "a", "consume", 1200, {"account": "a", "amount": 6})]
    journal = MemoryJournal()
    journal.append(events)
    explained = explain_account_at(journal, 1200)
    said = [(g["grant"], g["time"], g["priority"], g["refill"])
            for g in wording.to_dict(explained)["grants"]]
    assert said == [("refill:a", 600, 50, True), ("g", 600, 10, False)]
    # A bucket only the time since the last event filled: made where an event would be.
    quiet = MemoryJournal()
    quiet.append([_account("open", 0, 60, 10)])
    (bucket,) = explain_account_at(quiet, 900).grants
    assert (bucket.grant_id, bucket.time, bucket.priority, bucket.refill) == (
        "refill:a", 900, 50, True)
