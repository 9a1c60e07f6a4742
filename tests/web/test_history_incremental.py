"""The account page's history kept across head moves: a fold extended with what the
account's stream gained answers exactly what a fresh fold of the whole stream answers,
whatever arrives (late events and reversals included), and an answer once given never
changes afterwards."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent, RecordedEvent
from projections.queries import to_dict
from projections.queries.history import (
    AccountHistory,
    HistoryFold,
    account_history,
    extended_history,
)
from tests.projections.test_history import recorded_in
from tests.projections.test_reversals import ACCOUNTS, Raw, journals


@st.composite
def appends(draw: st.DrawFn) -> MemoryJournal:
    """A generated journal recorded mostly in event-time order, with some events moved
    later (they arrive late) and reversals of earlier events recorded among them."""
    events: list[Raw] = draw(journals().filter(bool))
    order = sorted(range(len(events)), key=lambda i: events[i][2])
    for _ in range(draw(st.integers(0, 3))):  # move one event later: it arrives late
        moved = order.pop(draw(st.integers(0, len(order) - 1)))
        order.insert(draw(st.integers(0, len(order))), moved)
    return recorded_in(draw, events, order, 10)


def answer(history: AccountHistory) -> tuple[Any, ...]:
    """Everything the page shows of a history, as plain values."""
    return (to_dict(history.statement), to_dict(history.explanation),
            [to_dict(p) for p in history.timeline], history.seen)


def stream(journal: MemoryJournal, account: str, position: int) -> list[RecordedEvent]:
    return list(journal.read(stream=account, to_position=position, order="position"))


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=appends(), data=st.data())
def test_a_fold_extended_as_the_head_moves_answers_what_a_fresh_fold_answers(
        journal: MemoryJournal, data: st.DataObject) -> None:
    head = journal.head()
    # The head moves by one or more events at a time, now and then to an earlier view.
    heads = data.draw(st.lists(st.integers(1, head), min_size=1, max_size=12))
    times = [rec.time for rec in journal.read(order="position")]
    for account in ACCOUNTS:
        fold: HistoryFold | None = None
        given_answers: list[tuple[AccountHistory, tuple[Any, ...]]] = []
        for position in [*sorted(heads), *heads]:
            at = max(times[:position]) + data.draw(st.integers(0, 3))
            events = stream(journal, account, position)
            fold, history = extended_history(fold, events, account, at=at,
                                             as_known_at=position, private=journal.private)
            fresh = account_history(events, account, at=at, as_known_at=position,
                                    private=journal.private)
            assert answer(history) == answer(fresh), (account, position)
            given_answers.append((history, answer(history)))
        for history, then in given_answers:  # later extensions left them as they were
            assert answer(history) == then


def grant(event_id: str, time: int, amount: int, expiry: int | None = None) -> NewEvent:
    return NewEvent(event_id, "a", "grant", time,
                    {"account": "a", "amount": amount, "expiry": expiry})


def consume(event_id: str, time: int, amount: int) -> NewEvent:
    return NewEvent(event_id, "a", "consume", time, {"account": "a", "amount": amount})


def test_events_later_in_time_extend_the_kept_fold() -> None:
    journal = MemoryJournal()
    journal.append([grant("g", 1, 100, expiry=50), consume("u1", 2, 10)])
    fold, first = extended_history(None, stream(journal, "a", 2), "a", at=60)
    journal.append([consume("u2", 3, 5), consume("u3", 3, 5)])
    again, second = extended_history(fold, stream(journal, "a", 4), "a", at=60)
    assert again is fold and fold.events == 4
    assert answer(second) == answer(account_history(stream(journal, "a", 4), "a", at=60))
    # The first answer (finished at 60: the grant's rest expired) is unchanged.
    assert [line.type for line in first.statement.lines] == ["grant", "consume", "expire"]
    assert first.explanation.grants[0].used == 10


def test_a_late_event_or_a_reversal_folds_the_account_anew() -> None:
    journal = MemoryJournal()
    journal.append([grant("g", 1, 100), consume("u1", 5, 10)])
    fold, _ = extended_history(None, stream(journal, "a", 2), "a", at=5)
    journal.append([consume("late", 3, 7)])  # earlier than the last event folded
    anew, history = extended_history(fold, stream(journal, "a", 3), "a", at=5)
    assert anew is not fold
    assert [line.event_id for line in history.statement.lines] == ["g", "late", "u1"]
    journal.append([NewEvent("r", "a", "reverse", 6, {"event": "u1", "reason": "wrong"})])
    again, history = extended_history(anew, stream(journal, "a", 4), "a", at=6)
    assert again is not anew
    assert history.statement.lines[-1].balance == 93  # the reversed usage counts nowhere
