"""projections.importing: every line validated, ids stable, exports that import back."""

from __future__ import annotations

import contextlib
import csv
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.errors import InvalidTransition
from projections.events import TIMELINE_START
from projections.importing import (
    CSV_COLUMNS,
    ImportRejected,
    append_plan,
    content_id,
    export_records,
    import_file,
    import_stream,
    not_utf8_at,
    parse_record,
    plan_import,
    read_jsonl,
    write_csv,
    write_jsonl,
)
from projections.personal import erase_user
from projections.replay import replay
from projections.session import session_of


def _lines(*records: dict[str, object]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


@pytest.mark.parametrize(("record", "message"), [
    ({"account": "a"}, 'missing "type"'),
    ({"type": "refund", "time": 1}, "unknown type 'refund'"),
    ({"type": "grant", "account": "a", "amount": 5}, "missing time"),
    ({"type": "grant", "account": "a", "amount": 0, "time": 1}, "positive"),
    ({"type": "grant", "account": "a", "amount": False, "time": 1}, "integer"),
    ({"type": "grant", "account": "a", "amount": 5, "time": 1.5}, "time must be an integer"),
    ({"type": "grant", "account": "a", "amount": 5, "time": 2**63}, "time must be at most"),
    ({"type": "grant", "account": "a", "amount": 5, "time": 3, "expiry": 3}, "after its time"),
    ({"type": "grant", "account": "a", "amount": 5, "time": 3, "extra": 1}, "unknown field"),
    ({"type": "consume", "amount": 5, "time": 3}, "missing account"),
    ({"type": "submit", "account": "a", "job": "j", "cost": -1, "priority": 0, "time": 1},
     "cost"),
    ({"type": "complete", "job": "j", "success": "yes", "time": 1}, "success"),
    ({"type": "complete", "job": "j", "success": False, "time": 1, "refund_fraction": -0.1},
     "refund_fraction"),
    ({"type": "account", "account": "a", "max_running": 0}, "max_running"),
    ({"type": "grant", "account": "a", "amount": 5, "time": 1, "id": ""}, "id"),
])
def test_bad_records(record: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_record(record)


def test_good_records() -> None:
    assert parse_record({"type": "account", "account": "a"})[1] == TIMELINE_START
    assert parse_record({"type": "account", "account": "a", "time": 7})[1] == 7
    event_id, time, event = parse_record({"type": "grant", "account": "a", "amount": 5,
                                          "time": 1, "pool": None, "id": "g"})
    assert (event_id, time, event.pool) == ("g", 1, "general")  # type: ignore[union-attr]


def test_a_line_may_give_its_times_as_iso_8601_with_an_offset_as_a_batch_over_http_does(
        ) -> None:
    """`POST /v1/events` takes lines of this format with ISO 8601 times: a file of them
    imports alike, the same event (and so the same derived id) as its integer spelling."""
    journal = MemoryJournal()
    spelled = _lines({"type": "grant", "account": "a", "amount": 5,
                      "time": "2026-11-01T05:30:00+05:30", "expiry": "2026-11-02T00:00:00Z"})
    plain = _lines({"type": "grant", "account": "a", "amount": 5, "time": 1793491200,
                    "expiry": 1793577600})
    first = import_file(journal, spelled, "spelled.jsonl")
    assert (first.appended, journal.get(plan_import(plain, "f", journal).events[0].id)
            .time) == (1, 1793491200)
    assert import_file(journal, plain, "plain.jsonl").already_present == 1
    for time, told in (("2026-11-01", "2026-11-01T00:00:00Z"),
                       ("1793491200", "digits in a string"), ("soon", "not a time")):
        with pytest.raises(ValueError, match=f"{time!r}.*{told}|{told}.*{time!r}"):
            parse_record({"type": "consume", "account": "a", "amount": 1, "time": time})
    with pytest.raises(ValueError, match=r"expiry.*'2026-11-02'"):
        parse_record({"type": "grant", "account": "a", "amount": 1, "time": 1,
                      "expiry": "2026-11-02"})


def test_problems_name_their_lines_and_blank_lines_are_skipped() -> None:
    data = b'\n{"type": "cancel", "job": "j", "time": 1}\n\n{oops\n\xff\n'
    entries, problems = read_jsonl(data)
    assert [e.line for e in entries] == [2]
    assert [(p.line, p.message.split(":")[0]) for p in problems] == [
        (4, "not valid JSON"), (5, "not UTF-8")]
    assert problems[0].render("f.jsonl").startswith("f.jsonl:4: ")
    assert problems[1].message == "not UTF-8: byte 0xff (invalid start byte) at column 1"


@given(st.text(), st.data())
def test_a_byte_that_is_not_utf8_is_found_at_its_line_and_column_counted_in_characters(
        text: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(text)), label="cut")
    bad = data.draw(st.sampled_from([b"\xff", b"\x80", b"\xc3"]), label="bad")
    before = text[:cut]
    with pytest.raises(UnicodeDecodeError) as caught:
        (before.encode() + bad + b"!" + text[cut:].encode()).decode("utf-8")
    assert not_utf8_at(caught.value) == (
        before.count("\n") + 1, len(before.rsplit("\n", 1)[-1]) + 1,
        f"byte 0x{bad[0]:02x} ({caught.value.reason})")


def test_ids_come_from_content_and_occurrence() -> None:
    journal = MemoryJournal()
    data = _lines({"type": "grant", "account": "a", "amount": 5, "time": 1},
                  {"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "mine"})
    plan = plan_import(data, "f", journal)
    assert plan.events[0].id.startswith("import-")
    assert plan.events[1].id == "mine"
    assert plan_import(data, "f", journal).events == plan.events
    # Another line ending or a line added at the end changes no id.
    other = plan_import(data + b"\n", "f", journal)
    assert other.events[0].id == plan.events[0].id
    assert content_id("x", 0) != content_id("x", 1)


def test_import_is_all_or_nothing_and_idempotent() -> None:
    journal = MemoryJournal()
    good = _lines({"type": "grant", "account": "a", "amount": 5, "time": 1},
                  {"type": "consume", "account": "a", "amount": 2, "time": 2})
    bad = good + b'{"type": "consume", "account": "a", "time": 2}\n'
    with pytest.raises(ImportRejected) as caught:
        import_file(journal, bad, "bad.jsonl")
    assert [p.line for p in caught.value.problems] == [3]
    assert journal.head() == 0
    first = import_file(journal, good, "good.jsonl")
    assert (first.appended, first.already_present) == (2, 0)
    second = import_file(journal, good, "good.jsonl")
    assert (second.appended, second.already_present) == (0, 2)


def test_conflicting_id_in_the_journal_is_reported_by_line() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 5})])
    data = _lines({"type": "grant", "account": "a", "amount": 6, "time": 1, "id": "g"})
    plan = plan_import(data, "f", journal)
    with pytest.raises(ImportRejected) as caught:
        append_plan(journal, plan)
    assert caught.value.problems[0].line == 1
    assert "already recorded at position 1" in caught.value.problems[0].message
    assert journal.head() == 1


def test_a_conflict_among_new_lines_is_reported_at_its_line_alone() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 5})])
    data = _lines({"type": "grant", "account": "a", "amount": 3, "time": 1},
                  {"type": "consume", "account": "a", "amount": 1, "time": 2, "id": "c"},
                  {"type": "grant", "account": "a", "amount": 6, "time": 1, "id": "g"})
    with pytest.raises(ImportRejected) as caught:
        append_plan(journal, plan_import(data, "f", journal))
    assert [p.line for p in caught.value.problems] == [3]
    assert journal.head() == 1


def test_job_streams() -> None:
    journal = MemoryJournal()
    Scheduler(journal, clock=lambda: 0).open_account("acct", 10)
    Scheduler(journal, clock=lambda: 1).submit("old", "acct", 1, 0)
    data = _lines({"type": "start", "job": "old", "time": 2},
                  {"type": "start", "job": "new", "time": 3},
                  {"type": "submit", "account": "b", "job": "new", "cost": 1, "priority": 0,
                   "time": 2},
                  {"type": "cancel", "job": "nobody", "time": 4})
    plan = plan_import(data, "f", journal)
    assert [e.stream for e in plan.events] == ["acct", "b", "b", "job:nobody"]


def test_a_job_submitted_before_goes_to_the_account_the_projection_gives_it() -> None:
    # Two accounts submitted job "j": b's was recorded first, a's came late and lands
    # before it on the timeline, so the fold gives the job to a (b's is the anomaly).
    journal = MemoryJournal()
    journal.append([NewEvent("s-b", "b", "submit", 10, {"account": "b", "job": "j",
                                                        "cost": 0, "priority": 0})])
    journal.append([NewEvent("s-a", "a", "submit", 5, {"account": "a", "job": "j",
                                                       "cost": 0, "priority": 0})])
    replay(journal, checkpoint=True, checkpoint_every=1)  # the index from a checkpoint too
    journal.append([NewEvent("s-c", "c", "submit", 7, {"account": "c", "job": "k",
                                                       "cost": 0, "priority": 0})])
    data = _lines({"type": "cancel", "job": "j", "time": 20},
                  {"type": "cancel", "job": "k", "time": 20})
    assert [e.stream for e in plan_import(data, "f", journal).events] == ["a", "c"]
    head = journal.head()
    assert import_stream(journal, io.BytesIO(data), "f").appended == 2
    assert [r.stream for r in journal.read(after_position=head, order="position")] == ["a", "c"]


def test_a_job_submitted_twice_in_a_file_goes_with_its_first_submit_on_the_timeline() -> None:
    # b's submit comes later in the file but first on the timeline: the job is b's (a's
    # submit is the anomaly), so its events go with b.
    data = _lines({"type": "submit", "account": "a", "job": "j", "cost": 0, "priority": 0,
                   "time": 10},
                  {"type": "submit", "account": "b", "job": "j", "cost": 0, "priority": 0,
                   "time": 5},
                  {"type": "submit", "account": "c", "job": "j", "cost": 0, "priority": 0,
                   "time": 5},
                  {"type": "start", "job": "j", "time": 11})
    assert [e.stream for e in plan_import(data, "f", MemoryJournal()).events] == [
        "a", "b", "c", "b"]
    journal = MemoryJournal()
    import_stream(journal, io.BytesIO(data), "f")
    assert [r.stream for r in journal.read(order="position")] == ["a", "b", "c", "b"]


def test_a_file_that_grew_another_submit_of_a_job_appends_only_its_new_lines() -> None:
    # The job's events were recorded with b's submit; the grown file also holds a's submit
    # of the same id, earlier on the timeline. The lines imported before are the same
    # events: already present, not a conflict.
    first = _lines({"type": "grant", "account": "b", "amount": 30, "time": 0, "id": "g"},
                   {"type": "submit", "account": "b", "job": "j", "cost": 5, "priority": 0,
                    "time": 13, "id": "s-b"},
                   {"type": "start", "job": "j", "time": 14},
                   {"type": "complete", "job": "j", "success": True, "time": 15, "id": "c"})
    grown = first + _lines({"type": "submit", "account": "a", "job": "j", "cost": 0,
                            "priority": 0, "time": 10, "id": "s-a"})
    journal = MemoryJournal()
    import_file(journal, first, "f")
    result = import_file(journal, grown, "f")
    assert (result.appended, result.already_present) == (1, 4)
    again = MemoryJournal()
    append_plan(again, plan_import(first, "f", again))
    result = append_plan(again, plan_import(grown, "f", again))
    assert (result.appended, result.already_present) == (1, 4)
    assert [r.stream for r in again.read(order="position")] == ["b", "b", "b", "b", "a"]


def _random_history(ops: list[tuple[str, int, int]]) -> MemoryJournal:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="t")
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("s", 50, max_running=1, at=0)
    for n, (op, time, amount) in enumerate(ops):
        if op == "grant":
            tracker.grant(amount, time, time + amount, pool="h100" if amount % 2 else None)
        elif op == "consume":
            tracker.consume(amount, time)
        elif op == "submit":
            with contextlib.suppress(InvalidTransition):  # it would undo a recorded start
                scheduler.submit(f"j{n}", "s", amount, amount % 3, at=time)
        elif op == "start":
            scheduler.start_next(at=time)
    return journal


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["grant", "consume", "submit", "start"]),
                          st.integers(0, 30), st.integers(1, 40)), max_size=25))
def test_exports_import_back_to_the_same_digest(ops: list[tuple[str, int, int]]) -> None:
    journal = _random_history(ops)
    digest = replay(journal).digest
    for write, fmt in ((write_jsonl, "jsonl"), (write_csv, "csv")):
        out = io.StringIO()
        count = write(export_records(journal), out)
        assert count == journal.head()
        fresh = MemoryJournal()
        result = import_file(fresh, out.getvalue().encode(), "export", fmt=fmt)
        assert result.appended == journal.head()
        assert replay(fresh).digest == digest
        assert import_file(journal, out.getvalue().encode(), "export",
                           fmt=fmt).appended == 0



# Text a CSV has to quote or guard, and a spreadsheet would run: commas, quotes, a
# leading = + - @ or apostrophe (full-width too), non-ASCII, combining marks; printable.
_AWKWARD = st.text(alphabet=st.sampled_from(
    [*"ab ,\"'=+-@;|\\{}[]0.e", "\uff1d", "\u00e4", "\U0001f600", "\u0301"]),
    min_size=1, max_size=6).filter(lambda t: t.isprintable() and bool(t.strip()))
_NAMES = st.one_of(st.sampled_from(["a", "-5", "'x", "=1", "1e5", " a", "a ", "a,b"]),
                   _AWKWARD)
_BIG = 2**53 - 1


@st.composite
def _journal_lines(draw: st.DrawFn) -> list[dict[str, object]]:
    """Import lines of every type, with optional fields, extreme integers and awkward
    text: voids name grants of the file, reversals any event of it (reversals included)."""
    accounts = draw(st.lists(_NAMES, min_size=1, max_size=3))
    lines: list[dict[str, object]] = []
    jobs: list[str] = []
    for n in range(draw(st.integers(1, 18))):
        kind = draw(st.sampled_from(["account", "grant", "consume", "adjust", "submit",
                                     "start", "complete", "cancel", "void", "reverse"]))
        time = draw(st.one_of(st.integers(-5, 30), st.sampled_from([-_BIG, 7258118401])))
        line: dict[str, object] = {"type": kind, "time": time, "id": f"e{n}"}
        account = draw(st.sampled_from(accounts))
        if kind == "account":
            line.update(account=account)
            if draw(st.booleans()):
                del line["time"]
            if draw(st.booleans()):
                line["max_running"] = draw(st.sampled_from([1, 2, _BIG]))
        elif kind in ("grant", "consume"):
            line.update(account=account, amount=draw(st.sampled_from([1, 7, _BIG])))
            if kind == "grant" and draw(st.booleans()):
                line.update(expiry=time + draw(st.integers(1, 40)),
                            priority=draw(st.sampled_from([0, 50, 100])))
        elif kind == "adjust":
            line.update(account=account, amount=draw(st.sampled_from([-_BIG, -3, 4, _BIG])),
                        reason=draw(_AWKWARD))
        elif kind == "submit":
            job = draw(_NAMES) + f"#{n}"
            jobs.append(job)
            line.update(account=account, job=job, cost=draw(st.sampled_from([0, 3, _BIG])),
                        priority=draw(st.sampled_from([-_BIG, 0, _BIG])))
        elif kind in ("start", "complete", "cancel"):
            line["job"] = draw(st.sampled_from(jobs)) if jobs else "ghost"
            if kind == "complete":
                line["success"] = draw(st.booleans())
                line["refund_fraction"] = draw(st.sampled_from([0, 1, 0.5, 1 / 3, 1e-05]))
        else:
            named = [str(x["id"]) for x in lines
                     if "id" in x and (kind == "reverse" or x["type"] == "grant")]
            if not named:
                continue
            line["grant" if kind == "void" else "event"] = draw(st.sampled_from(named))
            line["reason"] = draw(_AWKWARD)
        if kind in ("grant", "consume", "adjust", "submit") and draw(st.booleans()):
            line["pool"] = draw(_NAMES)
        if kind in ("consume", "submit") and draw(st.booleans()):
            line["user"] = draw(_NAMES)
        if draw(st.booleans()):
            line["memo"] = draw(_AWKWARD)
        if draw(st.booleans()):
            del line["id"]  # an id derived from the line
        lines.append(line)
    return lines


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_journal_lines(), st.booleans())
def test_every_event_type_and_awkward_text_import_back_from_either_format(
        lines: list[dict[str, object]], erase: bool) -> None:
    """A journal of every event type (extreme integers, far times, text CSV must quote
    and guard, an erasure) exports in either format to a file that imports into an empty
    journal as the same events (the same export) and state digest, and that appends
    nothing to the journal it came from."""
    journal = MemoryJournal()
    data = "".join(json.dumps(line, ensure_ascii=False) + "\r\n" for line in lines)
    import_file(journal, data.encode(), "lines", allow_far_times=True)
    users = sorted({str(line["user"]) for line in lines if "user" in line})
    if erase and users:
        erase_user(journal, users[0], reason="request 1")
    digest = replay(journal).digest
    plain = io.StringIO()
    write_jsonl(export_records(journal), plain)
    for write, fmt in ((write_jsonl, "jsonl"), (write_csv, "csv")):
        out = io.StringIO()
        write(export_records(journal), out)
        fresh = MemoryJournal()
        result = import_file(fresh, out.getvalue().encode(), "export", fmt=fmt,
                             allow_far_times=True)
        assert result.appended == journal.head(), fmt
        copy = io.StringIO()
        write_jsonl(export_records(fresh), copy)
        assert copy.getvalue() == plain.getvalue(), fmt
        assert replay(fresh).digest == digest, fmt
        assert import_file(journal, out.getvalue().encode(), "export", fmt=fmt,
                           allow_far_times=True).appended == 0, fmt

def test_csv_header() -> None:
    out = io.StringIO()
    write_csv(iter([]), out)
    assert out.getvalue().strip().split(",") == list(CSV_COLUMNS)


def test_exports_carry_what_the_journal_recorded_and_import_ignores_it() -> None:
    journal = MemoryJournal(clock=lambda: 1_793_620_800_123_456)
    journal.append([NewEvent("g1", "a", "grant", 5, {"account": "a", "amount": 10}),
                    NewEvent("u1", "a", "consume", 2, {"account": "a", "amount": 3})])
    plain = io.StringIO()
    write_jsonl(export_records(journal), plain)
    assert all(set(json.loads(line)) & {"position", "recorded_at"} == set()
               for line in plain.getvalue().splitlines())
    out = io.StringIO()
    write_jsonl(export_records(journal), out, recorded=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["id"], r["position"], r["recorded_at"]) for r in lines] == [
        ("u1", 2, "2026-11-02T12:00:00.123456Z"), ("g1", 1, "2026-11-02T12:00:00.123456Z")]
    table = io.StringIO()
    write_csv(export_records(journal), table, recorded=True)
    rows = list(csv.DictReader(io.StringIO(table.getvalue())))
    assert [(r["id"], r["position"], r["recorded_at"]) for r in rows] == [
        ("u1", "2", "2026-11-02T12:00:00.123456Z"), ("g1", "1", "2026-11-02T12:00:00.123456Z")]
    # Any position and time, even nonsense: the fresh journal records its own.
    odd = [{**r, "position": "x", "recorded_at": 7} for r in lines]
    fresh = MemoryJournal()
    text = "\n".join(json.dumps(r) for r in odd).encode()
    assert import_file(fresh, text, "odd").appended == 2
    assert [(r.id, r.position) for r in fresh.read(order="position")] == [("u1", 1), ("g1", 2)]
    again = MemoryJournal()
    assert import_file(again, table.getvalue().encode(), "csv", fmt="csv").appended == 2
    assert replay(again).digest == replay(fresh).digest == replay(journal).digest
    grant = fresh.get("g1")
    assert grant is not None and grant.payload == {"account": "a", "amount": 10}


@settings(max_examples=20, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.sampled_from([1e-05, 5e-324, -0.0, 1 / 3])),
                min_size=1, max_size=6))
def test_refund_fractions_of_every_spelling_import_back_from_either_format(
        fractions: list[float]) -> None:
    """Every fraction a completion takes (1e-05 and -0.0 as Python writes them) comes back
    from an export in either format as the same event: re-importing appends nothing."""
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("s", 10**6)
    for n, fraction in enumerate(fractions):
        scheduler.submit(f"j{n}", "s", 10, 0, at=n)
        scheduler.start_next(at=n)
        scheduler.complete(f"j{n}", False, refund_fraction=fraction, at=n)
    journal = session_of(scheduler).journal
    for write, fmt in ((write_jsonl, "jsonl"), (write_csv, "csv")):
        out = io.StringIO()
        write(export_records(journal), out)
        assert import_file(journal, out.getvalue().encode(), "export",
                           fmt=fmt).appended == 0, fmt
        fresh = MemoryJournal()
        import_file(fresh, out.getvalue().encode(), "export", fmt=fmt)
        assert replay(fresh).digest == replay(journal).digest, fmt


def test_import_file_given_text_says_to_pass_bytes() -> None:
    """Not "a bytes-like object is required" from inside io.BytesIO."""
    journal = MemoryJournal()
    with pytest.raises(TypeError, match=r"^data must be bytes \(a file's content as "
                                        r"open\(path, 'rb'\).read\(\) gives\), got str: "
                                        r"pass text.encode\(\)$"):
        import_file(journal, '{"type": "account", "account": "a"}', "f")  # type: ignore[arg-type]
    assert journal.head() == 0
