"""A statement read from the account's own events is that of the whole fold, also when
another account submitted the same job id first (only an import can record that)."""

from __future__ import annotations

from eventstore import MemoryJournal, NewEvent
from projections import queries
from projections.owners import account_events
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


def _imported(*batches: list[dict[str, object]]) -> MemoryJournal:
    """A journal of these import files, each appended as one file."""
    import json

    from projections.importing import import_file

    journal = MemoryJournal()
    for batch in batches:
        import_file(journal, "\n".join(json.dumps(e) for e in batch).encode(), "f.jsonl")
    return journal


def _unplaced(st: queries.Statement) -> list[tuple[object, ...]]:
    """The statement's lines without the positions, which depend on arrival order."""
    return [(line.time, line.event_id, line.type, line.status, line.change, line.balance,
             line.reserved, line.grants) for line in st.lines]


GRANT = {"type": "grant", "account": "a", "amount": 100, "time": 0, "id": "g1"}
SUBMIT = {"type": "submit", "account": "a", "job": "j1", "cost": 10, "priority": 1,
          "time": 10, "id": "s1"}
START = {"type": "start", "job": "j1", "time": 20, "id": "st1"}
REVERSE = {"type": "reverse", "event": "st1", "time": 30, "reason": "wrong job", "id": "r1"}


def test_the_reversal_of_a_start_that_came_before_its_submit_is_in_the_statement() -> None:
    in_order = _imported([GRANT], [SUBMIT], [START], [REVERSE])
    start_first = _imported([GRANT], [START], [SUBMIT], [REVERSE])
    assert start_first.get("r1").stream == "job:j1"  # type: ignore[union-attr]
    st = queries.statement(start_first, "a")
    assert [(line.event_id, line.status) for line in st.lines] == [
        ("g1", "ok"), ("s1", "ok"), ("st1", "reversed"), ("r1", "ok")]
    assert _unplaced(st) == _unplaced(queries.statement(in_order, "a"))
    for journal in (in_order, start_first):  # the whole fold says the same
        walked = queries.statement(journal, "a", as_known_at=journal.head())
        assert _unplaced(walked) == _unplaced(st)


def _grants() -> list[dict[str, object]]:
    return [{"type": "grant", "account": name, "amount": 100, "time": 0, "id": f"g-{name}"}
            for name in ("a", "b")]


B_SUBMITS = {"type": "submit", "account": "b", "job": "j", "cost": 25, "priority": 1,
             "time": 5, "id": "s-b"}
A_SUBMITS = {"type": "submit", "account": "a", "job": "j", "cost": 40, "priority": 1,
             "time": 10, "id": "s-a"}


def test_a_jobs_steps_filed_under_the_other_submitter_are_in_the_owners_statement() -> None:
    # a's submit known first: the steps went to a's stream; b's, earlier on the
    # timeline, makes the job b's. A completion while the job is pending is an anomaly
    # of b's job, and a reversed start changed nothing: neither changes b's figures, and
    # both are b's lines, as when b's submit arrives first.
    steps = [{"type": "complete", "job": "j", "success": True, "time": 30, "id": "c"},
             {"type": "start", "job": "j", "time": 20, "id": "st"},
             {"type": "reverse", "event": "st", "time": 25, "reason": "no", "id": "r"}]
    owner_last = _imported([*_grants(), A_SUBMITS], steps[:2], [steps[2]], [B_SUBMITS])
    owner_first = _imported([*_grants(), B_SUBMITS], [A_SUBMITS], steps[:2], [steps[2]])
    assert owner_last.get("c").stream == "a"  # type: ignore[union-attr]
    assert owner_first.get("c").stream == "b"  # type: ignore[union-attr]
    b = queries.statement(owner_last, "b")
    assert [(line.event_id, line.status) for line in b.lines] == [
        ("g-b", "ok"), ("s-b", "ok"), ("st", "reversed"), ("r", "ok"), ("c", "anomaly")]
    for account in ("a", "b"):
        assert _unplaced(queries.statement(owner_last, account)) == _unplaced(
            queries.statement(owner_first, account))
