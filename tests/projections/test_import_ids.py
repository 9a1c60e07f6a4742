"""Import ids that depend only on a line's content: re-deliveries append only what is new,
far times are refused, and voids and reversals must name events recorded before them."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.events import FAR_TIME
from projections.importing import ImportRejected, import_file, plan_import

Record = dict[str, Any]


def jsonl(records: list[Record], *, end: str = "\n", shuffle_keys: bool = False) -> bytes:
    lines = []
    for i, record in enumerate(records):
        items = list(record.items())
        if shuffle_keys:
            random.Random(i).shuffle(items)
        lines.append(json.dumps(dict(items), separators=(", ", ": ")))
    return "".join(line + end for line in lines).encode()


records = st.lists(st.fixed_dictionaries({
    "type": st.sampled_from(["grant", "consume"]),
    "account": st.sampled_from(["a", "b"]),
    "amount": st.integers(1, 3),  # few values: identical lines are common
    "time": st.integers(0, 3),
}), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None)
@given(records=records, more=records)
def test_a_grown_file_appends_only_its_new_lines(records: list[Record],
                                                 more: list[Record]) -> None:
    journal = MemoryJournal()
    first = import_file(journal, jsonl(records), "bill.jsonl")
    assert first.appended == len(records)
    again = import_file(journal, jsonl(records + more), "bill.jsonl")
    assert (again.appended, again.already_present) == (len(more), len(records))


@settings(max_examples=30, deadline=None)
@given(records=records)
def test_a_plan_gives_each_line_the_id_an_import_records(records: list[Record]) -> None:
    # The service's batches are planned (`plan_entries`), files are streamed
    # (`import_stream`): one line must get one id either way, identical lines included.
    data = jsonl(records)
    planned = [event.id for event in plan_import(data, "bill.jsonl", MemoryJournal()).events]
    journal = MemoryJournal()
    import_file(journal, data, "bill.jsonl")
    # The journal keeps them in time order, not the file's.
    assert sorted(planned) == sorted(rec.id for rec in journal.read())
    assert len(set(planned)) == len(records)


@settings(max_examples=30, deadline=None)
@given(records=records)
def test_crlf_spacing_and_key_order_append_nothing(records: list[Record]) -> None:
    journal = MemoryJournal()
    import_file(journal, jsonl(records), "bill.jsonl")
    redelivered = import_file(journal, jsonl(records, end="\r\n", shuffle_keys=True),
                              "bill-copy.jsonl")
    assert (redelivered.appended, redelivered.already_present) == (0, len(records))


@settings(max_examples=30, deadline=None)
@given(records=records, data=st.data())
def test_a_reordered_file_appends_nothing(records: list[Record], data: st.DataObject) -> None:
    journal = MemoryJournal()
    import_file(journal, jsonl(records), "bill.jsonl")
    reordered = data.draw(st.permutations(records))
    assert import_file(journal, jsonl(reordered), "bill.jsonl").appended == 0


@pytest.mark.parametrize("spelling", ["0", "0.0", "-0.0", "-0", "0e5", "-0E-3"])
def test_every_spelling_of_a_zero_refund_fraction_is_one_event(spelling: str) -> None:
    journal = MemoryJournal()
    lines = ['{"type": "grant", "account": "a", "amount": 100, "time": 0}',
             '{"type": "submit", "account": "a", "job": "j", "cost": 10, "priority": 1, '
             '"time": 1}',
             '{"type": "start", "job": "j", "time": 2}',
             '{"type": "complete", "job": "j", "success": false, "refund_fraction": 0, '
             '"time": 3}']
    import_file(journal, "\n".join(lines).encode(), "bill.jsonl")
    lines[-1] = lines[-1].replace('"refund_fraction": 0,', f'"refund_fraction": {spelling},')
    again = import_file(journal, "\n".join(lines).encode(), "bill-copy.jsonl")
    assert (again.appended, again.already_present) == (0, 4)
    (completion,) = journal.read(type="complete")
    assert json.dumps(completion.payload["refund_fraction"]) == "0.0"


def test_identical_lines_count_each_time_they_occur() -> None:
    journal = MemoryJournal()
    line: Record = {"type": "consume", "account": "a", "amount": 5, "time": 1}
    assert import_file(journal, jsonl([line, line]), "f").appended == 2
    assert import_file(journal, jsonl([line, line, line]), "f").appended == 1


def test_a_redelivery_under_other_ids_is_warned_about_not_refused() -> None:
    journal = MemoryJournal()
    line: Record = {"type": "consume", "account": "a", "amount": 5, "time": 1}
    import_file(journal, jsonl([{**line, "id": "u-1"}]), "with-ids.jsonl")
    result = import_file(journal, jsonl([line]), "without-ids.jsonl")
    assert result.appended == 1
    (warning,) = result.warnings
    assert "re-delivery" in warning and "1 of 1" in warning


def test_usage_in_another_pool_at_the_same_time_is_no_redelivery() -> None:
    # h100 and a100 usage of the same amount in the same hour are two reports, not one
    # delivered twice: a re-delivery names the pool its report named.
    journal = MemoryJournal()
    line: Record = {"type": "consume", "account": "a", "amount": 5, "time": 1, "pool": "h100"}
    import_file(journal, jsonl([{**line, "id": "u-1"}]), "h100.jsonl")
    other = import_file(journal, jsonl([{**line, "pool": "a100"}, {**line, "pool": None}]),
                        "others.jsonl")
    assert (other.appended, other.warnings) == (2, ())
    again = import_file(journal, jsonl([line]), "h100-again.jsonl")
    (warning,) = again.warnings
    assert "re-delivery" in warning and "consume of 5 in pool 'h100' for a at 1" in warning


def test_far_times_are_refused_unless_allowed() -> None:
    journal = MemoryJournal()
    millis: Record = {"type": "consume", "account": "a", "amount": 5, "time": 1796083200000}
    with pytest.raises(ImportRejected) as caught:
        import_file(journal, jsonl([millis]), "f")
    assert "probably milliseconds" in caught.value.problems[0].message
    assert journal.head() == 0
    # The limit itself is fine, and so is an expiry beyond it.
    grant: Record = {"type": "grant", "account": "a", "amount": 5, "time": FAR_TIME,
                     "expiry": 10**15}
    assert import_file(journal, jsonl([grant]), "f").appended == 1
    assert import_file(journal, jsonl([millis]), "f", allow_far_times=True).appended == 1


def test_voids_and_reversals_name_events_recorded_before_them() -> None:
    journal = MemoryJournal()
    grant: Record = {"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "g1"}
    usage: Record = {"type": "consume", "account": "a", "amount": 5, "time": 1, "id": "u1"}
    void: Record = {"type": "void", "grant": "g1", "time": 2}
    for bad, why in [([void], "neither in the journal"),
                     ([usage, {"type": "void", "grant": "u1", "time": 2}], "not a grant"),
                     ([{"type": "reverse", "event": "x", "reason": "r", "time": 2}],
                      "neither in the journal")]:
        with pytest.raises(ImportRejected) as caught:
            import_file(journal, jsonl(bad), "f")
        assert why in caught.value.problems[0].message
    plan = plan_import(jsonl([grant, void]), "f", journal)
    assert plan.ok and plan.events[1].stream == "a"
    import_file(journal, jsonl([grant]), "f")
    assert import_file(journal, jsonl([void]), "f").appended == 1


def test_a_void_or_reversal_may_name_an_event_later_in_the_file_by_its_id() -> None:
    """An export lists a void or a reversal timed before the event it names first (the
    timeline's order): the import finds that event further on, appends the lines in the
    file's order, and the journal folds, replays and verifies as one that had them the
    other way round."""
    from projections.replay import fold_canonical, replay, verify
    from projections.session import LedgerSession

    lines: list[Record] = [
        {"type": "grant", "account": "a", "amount": 30, "time": 0, "id": "g0"},
        {"type": "void", "grant": "g1", "time": 10, "reason": "cancelled", "id": "v1"},
        {"type": "reverse", "event": "r2", "time": 12, "reason": "undo", "id": "r3"},
        {"type": "reverse", "event": "c1", "time": 15, "reason": "ms", "id": "r2"},
        {"type": "grant", "account": "a", "amount": 100, "time": 50, "id": "g1"},
        {"type": "consume", "account": "a", "amount": 20, "time": 70, "id": "c1"},
        {"type": "consume", "account": "a", "amount": 5, "time": 80, "id": "c2"},
    ]
    forward = MemoryJournal()
    assert import_file(forward, jsonl(lines), "f").appended == 7
    assert [r.id for r in forward.read(order="position")] == [str(r["id"]) for r in lines]
    assert {r.id: r.stream for r in forward.read()} == dict.fromkeys(
        ["g0", "v1", "r3", "r2", "g1", "c1", "c2"], "a")
    # The same events, each correction recorded after what it names.
    backward = MemoryJournal()
    for i in (0, 4, 5, 6, 3, 2, 1):
        import_file(backward, jsonl([lines[i]]), "f")
    assert fold_canonical(forward).digest() == fold_canonical(backward).digest()
    # g1 void from before it counts; c1 reversed, then the reversal reversed: 30 - 20 - 5.
    assert fold_canonical(forward).accounts["a"].balance == 5
    assert replay(forward).digest == fold_canonical(forward).digest()
    assert verify(forward).ok
    # A live projection following the journal one event at a time agrees with a fresh
    # fold at every step, and so does a replay up to each position.
    live = MemoryJournal()
    session = LedgerSession(live)
    for rec in forward.read(order="position"):
        live.append([NewEvent(rec.id, rec.stream, rec.type, rec.time, rec.payload)])
        session.catch_up()
        assert session.digest() == fold_canonical(live).digest(), rec.id
        assert replay(forward, to_position=rec.position).digest == fold_canonical(
            forward, to_position=rec.position).digest(), rec.id


def test_corrections_that_name_nothing_or_each_other_are_refused() -> None:
    journal = MemoryJournal()
    ring: list[Record] = [
        {"type": "reverse", "event": "r2", "time": 1, "reason": "x", "id": "r1"},
        {"type": "reverse", "event": "r1", "time": 1, "reason": "x", "id": "r2"}]
    late_void: list[Record] = [
        {"type": "void", "grant": "u1", "time": 1},
        {"type": "consume", "account": "a", "amount": 5, "time": 2, "id": "u1"}]
    for bad, why in [(ring, "neither in the journal nor in the file"),
                     (late_void, "which is a consume, not a grant")]:
        with pytest.raises(ImportRejected) as caught:
            import_file(journal, jsonl(bad), "f")
        assert why in caught.value.problems[0].message, caught.value.problems
    assert journal.head() == 0


def test_a_byte_order_mark_before_the_first_line_is_not_part_of_it() -> None:
    """Some Windows tools begin a UTF-8 file with a BOM: the file imports, to the same
    ids as without it (a re-delivery with or without one appends nothing)."""
    lines: list[Record] = [{"type": "grant", "account": "a", "amount": 5, "time": 1},
                           {"type": "consume", "account": "a", "amount": 2, "time": 2}]
    journal = MemoryJournal()
    assert import_file(journal, b"\xef\xbb\xbf" + jsonl(lines), "bom.jsonl").appended == 2
    again = import_file(journal, jsonl(lines), "plain.jsonl")
    assert (again.appended, again.already_present) == (0, 2)


def test_a_batch_appended_together_is_one_step_of_knowledge_in_a_live_projection() -> None:
    """Late events appended in one batch are re-projected once, as a replay takes the
    batch: the same state and the same revisions (only events known before the batch are
    revised, never one of the batch by another)."""
    from projections.importing import plan_import
    from projections.replay import fold_canonical, replay
    from projections.session import LedgerSession

    journal = MemoryJournal()
    base: list[Record] = [{"type": "grant", "account": "a", "amount": 10, "time": 0,
                           "id": "g"}]
    base += [{"type": "consume", "account": "a", "amount": 3, "time": 100 + i, "id": f"c{i}"}
             for i in range(5)]
    import_file(journal, jsonl(base), "base")
    session = LedgerSession(journal)
    late: list[Record] = [{"type": "consume", "account": "a", "amount": 4, "time": 50 - i,
                           "id": f"l{i}"} for i in range(3)]  # each before the one before
    plan = plan_import(jsonl(late), "late", journal)
    recorded = journal.append(plan.events)
    assert session.ingest_appended(recorded, plan.decoded)
    assert session.digest() == fold_canonical(journal).digest()
    again = replay(journal)
    assert [(r.event_id, r.late_event_id) for r in session.projector.revisions] == [
        (r.event_id, r.late_event_id) for r in again.revisions]
    assert {r.event_id for r in again.revisions} <= {"c0", "c1", "c2", "c3", "c4"}


def _in_time_then_late() -> tuple[list[Record], list[Record]]:
    """A grant and five usage reports in time order, and five reports each before the one
    before and all before the first five (an import of late events)."""
    base: list[Record] = [{"type": "grant", "account": "a", "amount": 10, "time": 0,
                           "id": "g"}]
    base += [{"type": "consume", "account": "a", "amount": 3, "time": 100 + i, "id": f"c{i}"}
             for i in range(5)]
    late: list[Record] = [{"type": "consume", "account": "a", "amount": 4, "time": 50 - i,
                           "id": f"l{i}"} for i in range(5)]
    return base, late


def test_a_projection_catching_up_on_a_stored_journal_takes_each_batch_as_replay_does(
        tmp_path: Any) -> None:
    """A facade catching up on an import of late events folds it as one step of
    knowledge (re-projected once, not once per event): the state of a fresh fold and the
    revisions of a replay; read a part at a time (a batch too large to hold), the same
    state. Opened on the journal afterwards, it takes everything as one step: the same
    state, and no revisions of its own (it had reported nothing)."""
    from eventstore import Journal
    from projections import projector
    from projections.replay import fold_canonical, replay
    from projections.session import LedgerSession

    base, late = _in_time_then_late()
    for part in (50_000, 2):
        with Journal(f"sqlite:///{tmp_path / f'j{part}.db'}") as journal:
            import_file(journal, jsonl(base), "base")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(projector, "_CATCH_UP_PART", part)
                session = LedgerSession(journal)
                import_file(journal, jsonl(late), "late")
                import_file(journal, jsonl([{"type": "grant", "account": "a", "amount": 1,
                                             "time": 1, "id": "alone"}]), "one")
                assert session.digest() == fold_canonical(journal).digest()
                opened = LedgerSession(journal)
            want = [(r.event_id, r.late_event_id) for r in replay(journal).revisions]
            assert want and all(late_id in ("l0", "l1", "l2", "l3", "l4", "alone")
                                for _, late_id in want)
            if part > len(late):
                assert [(r.event_id, r.late_event_id)
                        for r in session.projector.revisions] == want
            assert opened.digest() == fold_canonical(journal).digest()
            assert opened.revisions == []


@pytest.mark.parametrize("where", ["file", "in-memory"])
def test_a_decision_catching_up_on_another_process_import_takes_it_as_one_batch(
        tmp_path: Any, where: str) -> None:
    """A facade whose projection is behind an import of late events another process
    recorded catches up on it, under its write lock, as one step of knowledge (as a
    replay, or a facade opening the journal, takes it): the revisions a replay reports,
    none of a late line by the next one. Event by event, a decision behind an import of
    30,000 late lines held SQLite's one write lock for minutes."""
    from eventstore import Journal
    from projections.corrections import Corrections
    from projections.replay import fold_canonical, replay
    from projections.session import LedgerSession

    base, late = _in_time_then_late()
    url = f"sqlite:///{tmp_path / 'j.db'}" if where == "file" else "sqlite://"
    with Journal(url) as journal:
        import_file(journal, jsonl(base), "base")
        session = LedgerSession(journal)  # its projection: the base alone
        finance = Corrections(session)
        # Another process's import (on an in-memory database, the same journal).
        other = Journal(url) if where == "file" else journal
        try:
            import_file(other, jsonl(late), "late")
        finally:
            if other is not journal:
                other.close()
        finance.consume("a", 1, at=200, event_id="after")
        want = [(r.event_id, r.late_event_id) for r in replay(journal).revisions]
        assert {event_id for event_id, _ in want} <= {f"c{i}" for i in range(5)}
        assert [(r.event_id, r.late_event_id) for r in session.projector.revisions] == want
        assert session.digest() == fold_canonical(journal).digest()


def test_a_facade_on_a_journal_in_memory_takes_another_facade_import_as_one_batch(
        ) -> None:
    """Two facades on one journal in memory: the import of late events one records, the
    other catches up on as one step of knowledge, as on a database: the revisions a
    replay reports. It took them one event at a time, and reported each late line's
    revisions of the lines before it."""
    from eventstore import MemoryJournal
    from projections.replay import fold_canonical, replay
    from projections.session import LedgerSession

    base, late = _in_time_then_late()
    journal = MemoryJournal()
    import_file(journal, jsonl(base), "base")
    session = LedgerSession(journal)  # its projection: the base alone
    import_file(journal, jsonl(late), "late")
    with session.reading():
        pass
    want = [(r.event_id, r.late_event_id) for r in replay(journal).revisions]
    assert want
    assert [(r.event_id, r.late_event_id) for r in session.projector.revisions] == want
    assert session.digest() == fold_canonical(journal).digest()


def test_a_checkpoint_saved_after_a_late_import_outlives_a_process_learning_of_it_later(
        tmp_path: Any) -> None:
    """The checkpoints `replay` saves after an import of late events hold that import:
    a decision by another process that only now catches up on the import leaves them
    (it dropped every checkpoint after the import's earliest time, and the next process
    to start folded the journal from its first event); one saved before the import is
    stale, and goes."""
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT, checkpoint_is_valid
    from projections.corrections import Corrections
    from projections.replay import replay
    from projections.session import LedgerSession

    base, late = _in_time_then_late()
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with Journal(url) as journal:
        import_file(journal, jsonl(base), "base")
        replay(journal, checkpoint=True)
        (before,) = journal.snapshots(CHECKPOINT)
        finance = Corrections(LedgerSession(journal))  # its projection: the base alone
        with Journal(url) as other:  # another process: an import, then a replay
            import_file(other, jsonl(late), "late")
            assert not checkpoint_is_valid(other, before)
            replay(other, checkpoint=True)
            fresh = other.snapshots(CHECKPOINT)
            assert fresh and all(checkpoint_is_valid(other, info) for info in fresh)
            # The replay replaced them all: put the stale one back beside the fresh ones.
            other.save_snapshot(CHECKPOINT, before.position, before.event_time,
                                before.digest, b"stale")
        finance.consume("a", 1, at=200, event_id="after")
        assert [info.id for info in journal.snapshots(CHECKPOINT)] == [
            info.id for info in fresh]


def test_derived_ids_are_fixed_values_without_the_user() -> None:
    """A derived id is part of the journal forever: a file imported by an earlier version
    must get the same ids again, so they are pinned here, not only compared with each
    other. The `user` is left out of what is hashed (a hash of a name is easy to confirm by
    hashing guesses, which would undo an erasure), so a line with a user and one without
    get one id; blank and whitespace-only lines are skipped and count for nothing."""
    grant = {"type": "grant", "account": "a", "amount": 5, "time": 1}
    plan = plan_import(b"  \t \n" + jsonl([grant, grant]), "f.jsonl", MemoryJournal())
    assert plan.problems == []
    assert [e.id for e in plan.events] == ["import-32030c1ef1db361", "import-bb279766f56c219"]
    used = {"type": "consume", "account": "a", "amount": 2, "time": 3}
    ids = [plan_import(jsonl([line]), "f.jsonl", MemoryJournal()).events[0].id
           for line in (used, {**used, "user": "alice"})]
    assert ids == ["import-fe2396bf1a0771b"] * 2
