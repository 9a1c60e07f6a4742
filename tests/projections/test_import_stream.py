"""Streaming import: the same events, ids, streams and problems as planning the whole file
in memory, however the file falls into the chunks it is appended in."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections import importing
from projections.importing import (
    ImportRejected,
    append_plan,
    import_file,
    import_stream,
    plan_import,
    read_csv,
)

Record = dict[str, Any]


def _jsonl(records: list[Record]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _contents(journal: MemoryJournal) -> list[tuple[Any, ...]]:
    # A seal is salted afresh in every journal: compare the fields it seals instead.
    records = list(journal.read(order="position"))
    private = journal.private(r.id for r in records)
    return [(r.position, r.id, r.stream, r.type, r.time,
             {k: v for k, v in r.payload.items() if k != "$private"}, private.get(r.id))
            for r in records]


def _in_memory(journal: MemoryJournal, data: bytes) -> Any:
    try:
        plan = plan_import(data, "f", journal)
        result = append_plan(journal, plan)
    except ImportRejected as exc:
        return [(p.line, p.message) for p in exc.problems]
    return result


def _streamed(journal: MemoryJournal, data: bytes) -> Any:
    try:
        return import_file(journal, data, "f")
    except ImportRejected as exc:
        return [(p.line, p.message) for p in exc.problems]


_ID = st.none() | st.sampled_from(["e1", "e2", "g1"])
_LINE = st.one_of(
    st.fixed_dictionaries({"type": st.just("grant"), "account": st.sampled_from(["a", "b"]),
                           "amount": st.integers(1, 2), "time": st.integers(0, 3)},
                          optional={"id": _ID}),
    st.fixed_dictionaries({"type": st.just("consume"), "account": st.sampled_from(["a", "b"]),
                           "amount": st.integers(1, 2), "time": st.integers(0, 3)},
                          optional={"id": _ID, "user": st.sampled_from(["ada", "bob"]),
                                    "memo": st.just("PO 1")}),
    st.fixed_dictionaries({"type": st.just("submit"), "account": st.sampled_from(["a", "b"]),
                           "job": st.sampled_from(["j1", "j2"]), "cost": st.integers(0, 2),
                           "priority": st.just(0), "time": st.integers(0, 3)}),
    st.fixed_dictionaries({"type": st.sampled_from(["start", "cancel"]),
                           "job": st.sampled_from(["j1", "j2", "j3"]),
                           "time": st.integers(0, 3)}),
    st.fixed_dictionaries({"type": st.just("void"), "grant": st.sampled_from(["g1", "e1"]),
                           "time": st.integers(0, 3)}),
    st.fixed_dictionaries({"type": st.just("reverse"), "event": st.sampled_from(["e1", "e2"]),
                           "reason": st.just("typo"), "time": st.integers(0, 3)}),
    st.just({"type": "consume", "account": "a", "time": 1}),  # a bad line
)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(_LINE, max_size=4), lines=st.lists(_LINE, max_size=14),
       chunk=st.integers(1, 4))
def test_a_streamed_import_does_what_the_in_memory_plan_does(
        before: list[Record], lines: list[Record], chunk: int) -> None:
    journals = MemoryJournal(clock=lambda: 7), MemoryJournal(clock=lambda: 7)
    first = [_in_memory(journal, _jsonl(before)) for journal in journals]
    assert first[0] == first[1]
    planned = _in_memory(journals[0], _jsonl(lines))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importing, "APPEND_CHUNK", chunk)
        streamed = _streamed(journals[1], _jsonl(lines))
    if isinstance(planned, list) and streamed != planned:
        # The plan stops at the file's own problems before it looks for ids the journal
        # holds with other content; the streamed import names those lines as well. An id
        # the journal holds and the file uses otherwise is named as the journal's, and what
        # the plan then concluded from the file's use of that id (a second use on another
        # line, a void naming it) is the same fault seen from the file's side; what the
        # streamed import concludes from the journal's record under that id (a void naming
        # it finds the journal's consume, not the file's grant) is that fault seen from the
        # journal's side.
        assert isinstance(streamed, list)
        recorded = "is already recorded at position"
        held = {m.split("'")[1] for _, m in streamed if recorded in m}

        def names_held(message: str) -> bool:
            return any(f"'{i}'" in message for i in held)

        for line, message in planned:
            assert (line, message) in streamed or names_held(message)
        for line, message in streamed:
            assert (line, message) in planned or recorded in message or names_held(message)
    else:
        assert streamed == planned
    assert _contents(journals[1]) == _contents(journals[0])


def test_an_id_repeated_in_a_later_chunk_is_still_named_by_its_first_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A line repeated word for word in a later chunk, then the id used for another event
    in that chunk: the problem names the line that first used the id, as a whole file's
    plan does, not the repeat."""
    monkeypatch.setattr(importing, "APPEND_CHUNK", 2)
    grant = {"type": "grant", "account": "a", "amount": 1, "time": 3, "id": "g1"}
    other = {"type": "grant", "account": "a", "amount": 1, "time": 0}
    lines = [other, {**other, "time": 1}, grant, {**other, "time": 2}, grant,
             {**grant, "time": 0}]
    for run in (_in_memory, _streamed):
        journal = MemoryJournal()
        assert run(journal, _jsonl(lines)) == [(6, "id 'g1' is used on line 3 for another event")]
        assert journal.head() == 0


def test_ids_used_twice_across_chunks_are_named_with_their_first_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importing, "APPEND_CHUNK", 2)
    journal = MemoryJournal()
    lines = [{"type": "grant", "account": "a", "amount": 5, "time": t} for t in range(5)]
    lines.append({"type": "grant", "account": "a", "amount": 6, "time": 1, "id": "x"})
    lines.insert(1, {"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "x"})
    with pytest.raises(ImportRejected) as caught:
        import_file(journal, _jsonl(lines), "f")
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (7, "id 'x' is used on line 2 for another event")]
    assert journal.head() == 0


def test_a_bad_line_late_in_the_file_undoes_every_chunk_appended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importing, "APPEND_CHUNK", 3)
    journal = MemoryJournal()
    lines: list[Record] = [{"type": "grant", "account": "a", "amount": 5, "time": t}
                           for t in range(10)]
    lines.append({"type": "void", "grant": "nothing", "time": 11})
    with pytest.raises(ImportRejected) as caught:
        import_file(journal, _jsonl(lines), "f")
    assert caught.value.problems[0].line == 11
    assert journal.head() == 0
    assert import_file(journal, _jsonl(lines[:-1]), "f").appended == 10


def test_progress_is_reported_in_bytes_then_in_lines() -> None:
    data = _jsonl([{"type": "grant", "account": "a", "amount": 5, "time": t}
                   for t in range(2500)])
    checked: list[tuple[int, int]] = []
    appended: list[tuple[int, int]] = []
    import_stream(MemoryJournal(), io.BytesIO(data), "f",
                  checking=lambda d, t: checked.append((d, t)),
                  appending=lambda d, t: appended.append((d, t)))
    assert checked[-1] == (len(data), len(data))
    assert appended[-1] == (2500, 2500)
    assert [d for d, _ in appended] == sorted(d for d, _ in appended)
    # Lines are reported along the way, not only once done, always out of the file's.
    assert appended[0][0] < 2500 and {t for _, t in appended} == {2500}
    # ... and an import that follows nothing (`import_file` follows the first pass
    # alone) still goes through a file that long.
    assert import_file(MemoryJournal(), data, "f").appended == 2500


@pytest.mark.parametrize(("data", "expected"), [
    (b"id,type,time\r\nx,grant,\xff\r\n", [(2, "byte 0xff in column 'time'")]),
    (b"\xef\xbb\xbfid,type,time\r\nx,grant,1\xe2\x82", [(2, "byte 0xe2 in column 'time'")]),
    (b"\xef\xbb\xbf" + b"id,type,account,amount,time\n" + b"a,grant,a,5,1\n" * 100_000
     + b"\xc3(\n", [(100_002, "byte 0xc3 in column 'id'")]),
    (b"type,time,account,amount\ngrant,0,a,-5\ngrant,2,a\xff,5\ngrant,3,a,0\n",
     [(2, "amount must be a positive"), (3, "byte 0xff in column 'account'"),
      (4, "amount must be a positive")]),
    (b"type,ti\xffme\ngrant,0\n", [(1, "byte 0xff in cell 2")]),
])
def test_csv_that_is_not_utf8_names_each_line_holding_such_a_byte(
        data: bytes, expected: list[tuple[int, str]]) -> None:
    _, problems = read_csv(data)
    assert [(p.line, p.message.removeprefix("not UTF-8: ")[:len(why)])
            for p, (_, why) in zip(problems, expected, strict=True)] == expected


def test_import_effects_count_only_the_new_events() -> None:
    from projections.queries import import_effects

    journal = MemoryJournal()
    import_file(journal, _jsonl([
        {"type": "grant", "account": "a", "amount": 10, "time": 1},
        {"type": "start", "job": "nobody", "time": 2},  # an anomaly before the import
        {"type": "consume", "account": "a", "amount": 4, "time": 5, "id": "use"},
    ]), "old")
    head, latest = journal.head(), journal.max_time()
    import_file(journal, _jsonl([
        {"type": "consume", "account": "a", "amount": 8, "time": 3},  # late: revises "use"
        {"type": "cancel", "job": "ghost", "time": 6},  # a new anomaly
        {"type": "grant", "account": "a", "amount": 1, "time": 7},
    ]), "new")
    effects = import_effects(journal, after=head, latest_before=latest)
    assert (effects.appended, effects.late, effects.revisions) == (3, 1, 1)
    assert [why for _, _, why in effects.anomalies] == [
        "cancel of unknown job 'ghost'"]


def test_import_effects_name_an_earlier_event_a_late_one_made_an_anomaly() -> None:
    from projections.queries import import_effects

    journal = MemoryJournal()
    import_file(journal, _jsonl([
        {"type": "account", "account": "a", "max_running": 1},
        {"type": "grant", "account": "a", "amount": 100, "time": 0},
        {"type": "submit", "account": "a", "job": "j1", "cost": 5, "priority": 1, "time": 1},
        {"type": "submit", "account": "a", "job": "j2", "cost": 5, "priority": 1, "time": 2},
        {"type": "start", "job": "j2", "time": 5, "id": "start-j2"},
    ]), "old")
    head, latest = journal.head(), journal.max_time()
    import_file(journal, _jsonl([{"type": "start", "job": "j1", "time": 3}]), "new")
    effects = import_effects(journal, after=head, latest_before=latest)
    assert (effects.appended, effects.late, effects.revisions) == (1, 1, 1)
    assert [(time, event_id) for time, event_id, _ in effects.anomalies] == [
        (5, "start-j2")]


@pytest.mark.parametrize("chunk", [1, 2, 100])
def test_one_id_for_two_users_is_named_as_another_event_however_imported(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # The derived-id content leaves the user out; whether two lines are one event must not.
    monkeypatch.setattr(importing, "APPEND_CHUNK", chunk)
    lines: list[Record] = [
        {"type": "consume", "account": "a", "amount": 2, "time": 1, "id": "g1", "user": "ada"},
        {"type": "consume", "account": "a", "amount": 2, "time": 1, "id": "g1", "user": "bob"},
    ]
    expected = [(2, "id 'g1' is used on line 1 for another event")]
    journal = MemoryJournal()
    assert _in_memory(journal, _jsonl(lines)) == expected
    assert _streamed(journal, _jsonl(lines)) == expected
    assert journal.head() == 0


@pytest.mark.parametrize("records", [
    # A reversal of a void, timed before both the void and its grant: the export lists
    # the reversal, then the grant, then the void.
    [{"type": "grant", "account": "b", "amount": 22, "time": 21, "id": "g3"},
     {"type": "void", "grant": "g3", "time": 34, "reason": "v", "id": "v32"},
     {"type": "reverse", "event": "v32", "time": 20, "reason": "r", "id": "r35"}],
    # Reversals of reversals, each timed before the one it names.
    [{"type": "account", "account": "a", "id": "acc1"},
     {"type": "reverse", "event": "acc1", "time": 15, "reason": "r", "id": "r11"},
     {"type": "reverse", "event": "r11", "time": 43, "reason": "r", "id": "r12"},
     {"type": "reverse", "event": "r12", "time": 26, "reason": "r", "id": "r13"},
     {"type": "reverse", "event": "r13", "time": 9, "reason": "r", "id": "r14"}],
], ids=["reversal-of-a-void-before-its-grant", "reversals-of-reversals"])
def test_an_export_imports_back_whatever_its_corrections_name_ahead(
        records: list[Record]) -> None:
    from projections.importing import export_records

    journal = MemoryJournal()
    import_stream(journal, io.BytesIO(_jsonl(records)), "first.jsonl")
    exported = [line for _, line in export_records(journal)]
    again = MemoryJournal()
    import_stream(again, io.BytesIO(_jsonl(exported)), "export.jsonl")
    assert [line for _, line in export_records(again)] == exported


def test_a_reversal_of_an_account_event_without_time_exports_and_imports_back() -> None:
    from projections.corrections import Corrections
    from projections.importing import export_records

    journal = MemoryJournal()
    import_stream(journal, io.BytesIO(_jsonl([
        {"type": "account", "account": "a", "id": "acc-a"},
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "id": "g1"}])), "a.jsonl")
    Corrections(journal).reverse("acc-a", "declared by mistake", event_id="r1")
    exported = [line for _, line in export_records(journal)]
    assert {"type": "reverse", "event": "acc-a", "reason": "declared by mistake",
            "id": "r1"} in exported  # no time: the start of the timeline
    again = MemoryJournal()
    import_stream(again, io.BytesIO(_jsonl(exported)), "export.jsonl")
    assert [line for _, line in export_records(again)] == exported
