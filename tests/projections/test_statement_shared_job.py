"""A statement read from the account's own events is that of the whole fold, also when
another account submitted the same job id first (only an import can record that)."""

from __future__ import annotations

from eventstore import MemoryJournal, NewEvent
from projections import queries
from projections.queries.walk import account_events
from projections.replay import replay


def _opening() -> list[NewEvent]:
    """Both accounts granted, then a submits job j."""
    return [
        NewEvent("g-a", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("g-b", "b", "grant", 1, {"account": "b", "amount": 100}),
        NewEvent("s-a", "a", "submit", 2, {"account": "a", "job": "j", "cost": 30,
                                           "priority": 1}),
    ]


def _shared_job(checkpointed: bool) -> MemoryJournal:
    journal = MemoryJournal()
    journal.append(_opening())
    if checkpointed:
        replay(journal, checkpoint=True)
    journal.append([NewEvent("s-b", "b", "submit", 3, {"account": "b", "job": "j",
                                                       "cost": 50, "priority": 1})])
    return journal


def _lines(st: queries.Statement) -> list[tuple[object, ...]]:
    return [(line.event_id, line.type, line.status, line.change, line.balance,
             line.reserved) for line in st.lines]


def test_a_job_id_submitted_first_by_another_account_is_an_anomaly_in_the_statement() -> None:
    for checkpointed in (False, True):
        journal = _shared_job(checkpointed)
        # The account's own events alone would take its submit as accepted.
        assert account_events(journal, "b") is not None
        st = queries.statement(journal, "b")
        submit = next(line for line in st.lines if line.event_id == "s-b")
        assert submit.status == "anomaly"
        assert st.closing == (100, 0)
        assert not st.subtotals.problems
        # The first submitter's statement is untouched by it.
        a = queries.statement(journal, "a")
        assert a.closing == (100, 30)
        known = queries.statement(journal, "b", as_known_at=journal.head())
        assert _lines(known) == _lines(st)


def test_before_the_other_submit_was_recorded_the_statement_takes_it_as_accepted() -> None:
    journal = MemoryJournal()
    journal.append([
        NewEvent("g-b", "b", "grant", 1, {"account": "b", "amount": 100}),
        NewEvent("s-b", "b", "submit", 3, {"account": "b", "job": "j", "cost": 50,
                                           "priority": 1}),
    ])
    journal.append([
        NewEvent("g-a", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("s-a", "a", "submit", 2, {"account": "a", "job": "j", "cost": 30,
                                           "priority": 1}),
    ])
    # As known at position 2, b's submit was the only one; a's (earlier on the timeline)
    # arrived later and takes the job id.
    assert queries.statement(journal, "b", as_known_at=2).closing == (100, 50)
    assert queries.statement(journal, "b").closing == (100, 0)


def test_the_first_submitter_sees_its_job_events_recorded_in_the_other_stream() -> None:
    # One imported file named the job twice: its events went to the later submitter's
    # stream, and they are the first submitter's job's events.
    journal = MemoryJournal()
    journal.append([
        *_opening(),
        NewEvent("s-b", "b", "submit", 3, {"account": "b", "job": "j", "cost": 50,
                                           "priority": 1}),
        NewEvent("st", "b", "start", 4, {"job": "j"}),
        NewEvent("c", "b", "complete", 5, {"job": "j", "success": True}),
    ])
    a = queries.statement(journal, "a")
    assert a.closing == (70, 0)
    assert [line.event_id for line in a.lines if line.type == "complete"] == ["c"]
    assert queries.statement(journal, "b").closing == (100, 0)
