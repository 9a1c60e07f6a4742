"""One fold for an account's statement, lineage and timeline: the same answers as the
separate queries, on generated journals with late events, voids and reversals, as known at
every position."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.errors import UnknownAccount
from projections.queries import explain_account, latest_time, statement, to_dict
from projections.queries.history import account_history, event_lines, lines_of
from projections.timeline import account_timeline
from tests.projections.test_reversals import ACCOUNTS, Raw, journals, stream_of


@st.composite
def arrivals(draw: st.DrawFn) -> MemoryJournal:
    """A generated journal recorded in a shuffled order (so some events arrive late), with
    reversals of earlier events (and of reversals) recorded among them."""
    events: list[Raw] = draw(journals().filter(bool))
    return recorded_in(draw, events, draw(st.permutations(range(len(events)))), 6)


def recorded_in(draw: st.DrawFn, events: list[Raw], order: Sequence[int],
                reversal_one_in: int) -> MemoryJournal:
    """`events` recorded in `order`, each followed, one time in `reversal_one_in`, by a
    reversal of an event recorded before it (or of a reversal)."""
    journal = MemoryJournal()
    recorded: list[tuple[str, str]] = []  # (id, stream)
    for n, i in enumerate(order):
        raw = events[i]
        stream = stream_of(raw, events)
        journal.append([NewEvent(raw[0], stream, raw[1], raw[2], raw[3])])
        recorded.append((raw[0], stream))
        if draw(st.integers(0, reversal_one_in - 1)) == 0:
            target, target_stream = draw(st.sampled_from(recorded))
            rid = f"r{n}"
            journal.append([NewEvent(rid, target_stream, "reverse", draw(st.integers(0, 25)),
                                     {"event": target, "reason": "wrong"})])
            recorded.append((rid, target_stream))
    return journal


def answers(journal: MemoryJournal, account: str, position: int) -> tuple[Any, Any] | None:
    """statement and explain_account as known at `position`, None for an unknown account."""
    try:
        return (to_dict(statement(journal, account, as_known_at=position)),
                to_dict(explain_account(journal, account, as_known_at=position)))
    except UnknownAccount:
        return None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=arrivals())
def test_one_fold_answers_what_the_statement_and_the_explanation_answer(
        journal: MemoryJournal) -> None:
    at = latest_time(journal)
    for position in range(1, journal.head() + 1):
        known = list(journal.read(to_position=position, order="position"))
        for account in ACCOUNTS:
            expected = answers(journal, account, position)
            history = account_history(known, account, at=at, as_known_at=position)
            if expected is None:
                assert not history.seen
                continue
            assert (to_dict(history.statement), to_dict(history.explanation)) == expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=arrivals())
def test_what_an_event_changed_is_the_same_with_or_without_the_whole_statement(
        journal: MemoryJournal) -> None:
    known = list(journal.read(order="position"))
    at = latest_time(journal)
    for account in ACCOUNTS:
        lines = account_history(known, account, at=at).statement.lines
        for rec in known:
            alone = event_lines(known, account, rec.position)
            assert alone == lines_of(lines, rec.position), rec
            if alone:
                assert alone[0].position == rec.position


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=arrivals())
def test_the_timeline_is_account_timeline_with_a_point_for_each_void(
        journal: MemoryJournal) -> None:
    at = latest_time(journal)
    known = list(journal.read(order="position"))
    voids = {rec.position for rec in known if rec.type == "void"}
    for account in ACCOUNTS:
        alone = account_timeline(journal.read(order="canonical"), account, until=at)
        points = account_history(known, account, at=at).timeline
        assert [p for p in points if p.position not in voids] == alone


def test_the_chart_ends_with_the_expiries_up_to_its_end_and_at_it_none_later() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent(f"g{expiry}", "a", "grant", 1,
                             {"account": "a", "amount": 10, "expiry": expiry})
                    for expiry in (5, 9, 12)])
    points = account_timeline(journal.read(), "a", until=9)
    assert [(p.time, p.position, p.balance) for p in points[3:]] == [
        (5, None, 20), (9, None, 10)]


def test_a_reversed_usage_is_not_on_the_chart() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 100}),
                    NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 30}),
                    NewEvent("r", "a", "reverse", 2, {"event": "u", "reason": "wrong"})])
    history = account_history(journal.read(), "a", at=3)
    assert [(p.position, p.balance) for p in history.timeline] == [(1, 100)]
    assert history.explanation.figures.balance == 100


def test_memos_kept_beside_their_records_are_on_the_statement() -> None:
    from projections.personal import kept_apart

    journal = MemoryJournal()
    journal.append([kept_apart(NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 100,
                                                               "memo": "Q3 allocation"})),
                    kept_apart(NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 5,
                                                                 "memo": "backfill"}))])
    known = list(journal.read())
    history = account_history(known, "a", at=2, as_known_at=2, private=journal.private)
    assert history.statement == statement(journal, "a")
    assert [line.memo for line in history.statement.lines] == ["Q3 allocation", "backfill"]
    assert [line.memo for line in event_lines(known, "a", 2, private=journal.private)] == [
        "backfill"]
    assert account_history(known, "a", at=2).statement.lines[0].memo is None
