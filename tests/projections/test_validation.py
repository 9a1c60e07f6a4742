"""One definition of a valid value: the same bounds at every entry, strict file input."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.corrections import Corrections
from projections.events import TIMELINE_START
from projections.importing import ImportRejected, import_file, parse_record, read_csv, read_jsonl
from projections.queries import jobs
from projections.validation import (
    MAX_AMOUNT,
    MAX_NAME_LENGTH,
    MAX_TIME,
    MIN_TIME,
    require_amount,
    require_cost,
    require_fraction,
    require_grant_priority,
    require_job_priority,
    require_name,
    require_signed_amount,
    require_text,
    require_time,
    show,
)

OUTSIDE_TIMES = [MAX_TIME + 1, MIN_TIME - 1, 2**63, -(2**63), 2**63 - 1, 10**30]


@pytest.mark.parametrize(("check", "good", "bad"), [
    (require_amount, [1, MAX_AMOUNT], [0, -1, MAX_AMOUNT + 1, 10**30, True, 1.0, "5", None]),
    (require_cost, [0, 1, MAX_AMOUNT], [-1, MAX_AMOUNT + 1, False, 2.5]),
    (require_grant_priority, [0, 50, 100], [-1, 101, True]),
    (require_job_priority, [-MAX_AMOUNT, 0, MAX_AMOUNT], [MAX_AMOUNT + 1, -MAX_AMOUNT - 1]),
    (require_time, [MIN_TIME, 0, MAX_TIME], OUTSIDE_TIMES),
    (require_signed_amount, [-MAX_AMOUNT, -1, 1, MAX_AMOUNT], [0, MAX_AMOUNT + 1]),
    (require_fraction, [0, 1, 0.5, 0.0, 1.0], [-0.1, 1.1, float("nan"), float("inf"), True,
                                               10**400]),
])
def test_bounds(check: object, good: list[object], bad: list[object]) -> None:
    assert callable(check)
    for value in good:
        assert check("x", value) == value
    for value in bad:
        with pytest.raises(ValueError, match=r"^x must"):
            check("x", value)


def test_names_are_printable_and_bounded() -> None:
    assert require_name("account", "team[/red]") == "team[/red]"
    assert require_name("account", "x" * MAX_NAME_LENGTH)
    for bad in ["", "a\x00b", "a\nb", "tab\there", "x" * (MAX_NAME_LENGTH + 1), 5, None,
                "\ud800"]:
        with pytest.raises(ValueError, match=r"^account must"):
            require_name("account", bad)
    assert require_text("memo", "PO 4411: paid") == "PO 4411: paid"
    with pytest.raises(ValueError, match="memo must"):
        require_text("memo", "a\x00")


@pytest.mark.parametrize(("value", "says"), [
    ("price 5\u00a0EUR", "character 8 is U+00A0 NO-BREAK SPACE, a space other than U+0020"),
    ("family\U0001F468\u200d\U0001F469",
     "character 8 is U+200D ZERO WIDTH JOINER, an invisible format character"),
    ("tab\there", "character 4 is U+0009, a control character"),
    ("a\nb", "character 2 is U+000A, a line break"),
    ("a\x00", "character 2 is U+0000, a control character"),
    ("\ue000", "character 1 is U+E000, a private-use character"),
])
def test_refused_text_names_the_rule_and_the_character(value: str, says: str) -> None:
    """The rule applied is `str.isprintable`; the message states it and names the first
    character it refuses, so a no-break space is not blamed as a control character."""
    for check, field in ((require_name, "account"), (require_text, "memo")):
        with pytest.raises(ValueError) as info:
            check(field, value)
        message = str(info.value)
        assert message.startswith(f"{field} must be printable text: letters, marks, numbers, "
                                  "punctuation, symbols and the plain space U+0020;")
        assert f"; {says}, got {value!r}" in message


def test_errors_name_the_value_and_stay_short() -> None:
    with pytest.raises(ValueError) as info:
        require_amount("amount", 10**400)
    assert "2**" in str(info.value) and len(str(info.value)) < 200
    # The count is the value's own, not its quoted and escaped spelling's: the 201 that
    # broke a limit of 200 reads as 201.
    assert show("x" * 10_000).endswith("(10000 characters)")
    assert show("x" * 201).endswith("(201 characters)")
    assert show("\t" * 50).endswith("(50 characters)")


# -- every path accepts and refuses alike -----------------------------------------------


def _import_one(record: dict[str, object]) -> bool:
    """Whether import accepts `record` (appending it)."""
    journal = MemoryJournal()
    try:
        import_file(journal, (json.dumps(record) + "\n").encode(), "x.jsonl")
    except ImportRejected:
        assert journal.head() == 0
        return False
    return True


def _tracker_grant(amount: int, time: int, expiry: int) -> bool:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    try:
        tracker.grant(amount, time, expiry)
    except ValueError:
        assert journal.head() == 0
        return False
    return True


@pytest.mark.parametrize(("amount", "time", "expiry"), [
    (5, 0, 10),
    (MAX_AMOUNT, 0, 10),
    (MAX_AMOUNT + 1, 0, 10),
    (5, 0, 2**63),
    (5, 0, MAX_TIME),
    (5, 0, MAX_TIME + 1),
    (5, -(2**63), 0),
    (5, MIN_TIME, 0),
    (10**30, 0, 10),
])
def test_facade_and_import_agree_on_grants(amount: int, time: int, expiry: int) -> None:
    record = {"type": "grant", "account": "a", "amount": amount, "time": time,
              "expiry": expiry}
    assert _tracker_grant(amount, time, expiry) == _import_one(record)


@pytest.mark.parametrize(("time", "expiry"), [(5, 5), (5, 4), (0, -3)])
def test_an_expiry_not_after_its_grant_is_worded_alike_everywhere(time: int,
                                                                   expiry: int) -> None:
    rule = "credits count from the grant's time up to, not including, their expiry"
    with pytest.raises(ValueError) as tracker:
        GPUCreditTracker(account="a").grant(5, time, expiry)
    with pytest.raises(ValueError) as corrections:
        Corrections().grant("a", 5, at=time, expiry=expiry)
    with pytest.raises(ImportRejected) as imported:
        import_file(MemoryJournal(), json.dumps(
            {"type": "grant", "account": "a", "amount": 5, "time": time,
             "expiry": expiry}).encode() + b"\n", "x.jsonl")
    assert str(tracker.value) == f"grant expiry {expiry} must be after its timestamp {time}: {rule}"
    assert str(corrections.value) == f"grant expiry {expiry} must be after its time {time}: {rule}"
    assert [p.message for p in imported.value.problems] == [str(corrections.value)]


@pytest.mark.parametrize("time", OUTSIDE_TIMES)
def test_a_time_out_of_range_is_refused_everywhere(time: int) -> None:
    tracker = GPUCreditTracker(account="a")
    with pytest.raises(ValueError, match="timestamp must"):
        tracker.consume(5, time)
    with pytest.raises(ValueError):
        tracker.get_balance(time)
    scheduler = Scheduler(clock=lambda: 0)
    with pytest.raises(ValueError):
        scheduler.open_account("a", 10, at=time)
    assert not _import_one({"type": "consume", "account": "a", "amount": 5, "time": time})
    # ...and the facades keep answering afterwards.
    tracker.grant(10, 0, 100)
    assert tracker.consume(3, 1) == 0
    assert tracker.get_balance(2) == 7


@pytest.mark.parametrize(("cost", "priority"), [
    (-1, 0), (MAX_AMOUNT + 1, 0), (5, MAX_AMOUNT + 1), (5, -(2**63)), (True, 0), (5, 1.5),
])
def test_scheduler_and_import_refuse_the_same_jobs(cost: object, priority: object) -> None:
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("a", 100)
    with pytest.raises(ValueError):
        scheduler.submit("j", "a", cost, priority)  # type: ignore[arg-type]
    assert not _import_one({"type": "submit", "account": "a", "job": "j", "cost": cost,
                            "priority": priority, "time": 1})


@pytest.mark.parametrize("make", [Scheduler, Corrections])
@pytest.mark.parametrize("clock", [5, 0, "now", 1796655487.5])  # a time, not a clock
def test_a_clock_that_cannot_be_called_is_refused_when_the_facade_is_made(
        make: Any, clock: object) -> None:
    """Not at the first decision with "'int' object is not callable", and a falsy one (0)
    is not quietly the wall clock."""
    journal = MemoryJournal()
    with pytest.raises(TypeError, match=r"^clock must be a zero-argument callable .*got "
                                        + re.escape(show(clock))):
        make(journal, clock=clock)
    assert journal.head() == 0


@pytest.mark.parametrize("value", [Fraction(1, 2), Decimal("0.5")])
def test_a_fraction_of_another_number_type_is_refused_saying_to_pass_a_float(
        value: object) -> None:
    with pytest.raises(ValueError, match=r"refund_fraction must be an int or a float in "
                                         r"\[0, 1\]: pass float\(refund_fraction\), got"):
        require_fraction("refund_fraction", value)


# -- strict JSON Lines --------------------------------------------------------------------


@pytest.mark.parametrize(("line", "message"), [
    ('{"type": "consume", "type": "grant", "account": "a", "amount": 5, "time": 1}',
     "key 'type' appears more than once"),
    ('{"type": "grant", "account": "a", "amount": 5, "amount": 5, "time": 1}',
     "key 'amount' appears more than once"),
    ('{"type": "complete", "job": "j", "success": false, "time": 1, "refund_fraction": NaN}',
     "NaN is not a JSON number"),
    ('{"type": "grant", "account": "a", "amount": 5, "time": Infinity}',
     "Infinity is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, "characters long"),
    ("[" * 5_000 + "]" * 5_000, "nested too deeply"),
    ('{"type": "grant", "account": "a", "amount": 5, "time": 1, "x": ' + "[" * 5_000
     + "]" * 5_000 + "}", "nested too deeply"),
    ('{"type": "grant", "account": "a", "amount": ' + "9" * 5000 + ', "time": 1}', "5000 digits"),
])
def test_json_lines_are_read_strictly(line: str, message: str) -> None:
    entries, problems = read_jsonl(f'{{"type": "account", "account": "a"}}\n{line}\n'.encode())
    assert len(entries) == 1
    assert [p.line for p in problems] == [2]
    assert message in problems[0].message


@pytest.mark.parametrize(("line", "message"), [
    ('{"type": "complete", "job": "j", "success": false, "time": 1, "refund_fraction": 1e400}',
     "refund_fraction must be in [0, 1], got 1e400"),
    ('{"type": "complete", "job": "j", "success": false, "time": 1, "refund_fraction": -1E+400}',
     "refund_fraction must be in [0, 1], got -1E+400"),
    ('{"type": "account", "account": "a", "max_running": 1e400}',
     "max_running must be an integer, got 1e400 (float)"),
    ('{"type": "grant", "account": "a", "amount": 5, "time": -1.5e999}',
     "time must be an integer, got -1.5e999 (float)"),
])
def test_a_number_too_large_for_a_float_is_shown_as_written(line: str, message: str) -> None:
    # A double reads 1e400 as inf: "got inf" would name a value nobody wrote.
    entries, problems = read_jsonl(f"{line}\n".encode())
    assert not entries and [p.message for p in problems] == [message]


# -- strict CSV ---------------------------------------------------------------------------


@pytest.mark.parametrize("amount", ["1_000", "+5", " 5", "5 ", "\u0665", "\uff15", "5.0",
                                    "0x10", "1e3", "9" * 21, ""])
def test_csv_integers_are_ascii_digits(amount: str) -> None:
    data = f"type,account,amount,time\ngrant,a,{amount},1\n".encode()
    entries, problems = read_csv(data)
    assert not entries
    assert [p.line for p in problems] == [2]


def test_csv_reads_plain_integers_and_fractions() -> None:
    data = (b"type,account,amount,time,job,success,refund_fraction\n"
            b"grant,a,1000,-5,,,\n"
            b"complete,,,7,j,false,0.25\n")
    entries, problems = read_csv(data)
    assert not problems
    assert entries[0].time == -5
    assert entries[1].event.refund_fraction == 0.25  # type: ignore[union-attr]
    for fraction in ["nan", "inf", "1_0", "\u0660.5", "+0.5"]:
        bad = f"type,job,success,time,refund_fraction\ncomplete,j,false,1,{fraction}\n"
        assert read_csv(bad.encode())[1], fraction
    huge = b"type,job,success,time,refund_fraction\ncomplete,j,false,1,1e400\n"
    assert [p.message for p in read_csv(huge)[1]] == [
        "refund_fraction must be in [0, 1], got 1e400"]


@pytest.mark.parametrize("size", [70_000, 131_073, 300_000])
def test_an_oversized_csv_cell_is_a_line_problem(size: int) -> None:
    data = f"type,account,amount,time\ngrant,a,5,1\ngrant,{'a' * size},5,2\n".encode()
    entries, problems = read_csv(data)
    assert len(entries) == 1
    assert [p.line for p in problems] == [3]


def test_a_repeated_csv_column_is_refused() -> None:
    data = b"type,account,amount,amount,time\ngrant,a,5,6,1\n"
    entries, problems = read_csv(data)
    assert not entries and problems[0].line == 1


# -- fuzzing: a rejected file appends nothing -------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                     st.text(max_size=8), st.sampled_from([2**53, 2**63, -(2**63), 10**30]))
_records = st.dictionaries(
    st.sampled_from(["type", "account", "amount", "time", "expiry", "pool", "job", "cost",
                     "priority", "success", "refund_fraction", "id", "max_running"]),
    st.one_of(_scalars, st.sampled_from(["grant", "consume", "submit", "account", "start",
                                         "complete", "cancel"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_records.map(json.dumps), st.text(max_size=40)), min_size=1,
                max_size=5))
def test_import_is_all_or_nothing_on_any_lines(lines: list[str]) -> None:
    journal = MemoryJournal()
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    try:
        import_file(journal, data, "fuzz.jsonl")
    except ImportRejected as exc:
        assert journal.head() == 0
        assert all(p.line >= 1 for p in exc.problems)
        return
    for rec in journal.read(order="position"):
        # An untimed `account` line is stored at the start of the timeline, outside the
        # times a line may give: read back, it is untimed again (as `export` writes it).
        timed = {} if rec.time == TIMELINE_START else {"time": rec.time}
        record = {"type": rec.type, **timed, **rec.payload}
        parse_record(record)  # what was appended is valid by the same rules


def test_the_job_list_refuses_a_state_no_job_can_be_in() -> None:
    # Not an empty list: "done" is no state, and no job would ever match it.
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1})])
    with pytest.raises(ValueError, match="unknown job state 'done'"):
        jobs(journal, state="done")
    assert jobs(journal, state="pending").rows == []
