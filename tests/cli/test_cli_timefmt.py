"""Times on the command line: integers or ISO-8601 in, ISO-8601 out when epoch-like."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from cli_helpers import Run, error_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.events import TIMELINE_START
from projections.timefmt import (
    format_time,
    is_date_alone,
    parse_end_time,
    parse_micros,
    parse_time,
    spelled_date,
)
from tools.service.times import parse_event_time, parse_query_time


@pytest.mark.parametrize(("text", "value"), [
    ("12", 12), ("-3", -3), ("1793491200", 1793491200),
    ("2026-11-01", 1793491200), ("2026-11-03T12:00Z", 1793491200 + 2 * 86400 + 12 * 3600),
    ("2026-11-03T12:00:00+01:00", 1793491200 + 2 * 86400 + 11 * 3600),
    ("2026-11-03 12:00", 1793491200 + 2 * 86400 + 12 * 3600),
])
def test_parse_time(text: str, value: int) -> None:
    assert parse_time(text) == value


@settings(deadline=None)
@given(st.integers(-(10**10), 10**11), st.integers(0, 999_999),
       st.integers(-14 * 60, 14 * 60))
def test_a_fraction_of_a_second_rounds_down_on_both_sides_of_1970(
        second: int, micros: int, offset_minutes: int) -> None:
    """Text naming an instant within whole second `second` (at any offset) is that
    second, by the command line and the service alike, before 1970 as after."""
    zone = timezone(timedelta(minutes=offset_minutes))
    moment = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=second, microseconds=micros)
              ).astimezone(zone)
    text = moment.isoformat()
    assert parse_time(text) == parse_event_time(text) == second


@pytest.mark.parametrize("text", ["2026-11-03T12:00:00z", "2026-11-03t12:00:00z",
                                  "2026-11-03T12:00:00.5z"])
def test_a_lowercase_z_is_utc_as_rfc_3339_allows_everywhere(text: str) -> None:
    """RFC 3339 (the `date-time` of the OpenAPI document) allows `t` and `z` in lowercase:
    the `t` was taken and the `z` refused, on every surface alike."""
    noon = 1793491200 + 2 * 86400 + 12 * 3600
    assert parse_time(text) == parse_event_time(text) == parse_query_time(text) == noon
    assert parse_micros(text) == noon * 1_000_000 + (500_000 if ".5" in text else 0)


def test_parse_time_rejects_words() -> None:
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_time("tomorrow")


def test_format_time() -> None:
    assert format_time(12) == "12"
    assert format_time(1793491200) == "2026-11-01T00:00:00Z"
    assert format_time(5_000_000_000) == "5000000000"
    assert format_time(None) == "-"
    assert format_time(TIMELINE_START) == "start"


def test_parse_micros() -> None:
    assert parse_micros("1970-01-01T00:00:01.5Z") == 1_500_000
    with pytest.raises(ValueError):
        parse_micros("soon")


@pytest.mark.parametrize("text", ["+5", "٥", "１２", "1_000"])
def test_a_time_is_ascii_digits_after_an_optional_minus(text: str) -> None:
    # As every integer a ledger reads: int() would take each of these.
    with pytest.raises(ValueError, match="not a time"):
        parse_time(text)
    with pytest.raises(ValueError, match="not a time"):
        parse_query_time(text)
    assert parse_time("-5") == parse_query_time("-5") == -5


def test_a_date_without_an_offset_is_told_a_spelling_that_parses() -> None:
    with pytest.raises(ValueError, match="no offset") as refused:
        parse_event_time("2026-11-01")
    suggested = str(refused.value).split("write it as ")[1].split(" ")[0]
    assert parse_event_time(suggested) == parse_time("2026-11-01")


@pytest.mark.parametrize(("text", "day"), [
    ("20261203", "2026-12-03"), (" 19700101", "1970-01-01"), ("21991231", "2199-12-31"),
    ("20240229", "2024-02-29"), ("20230229", None), ("20261301", None), ("20261200", None),
    ("19691231", None), ("22000101", None), ("2026120", None), ("202612031", None),
    ("-20261203", None), ("12", None), ("1793491200", None), ("2026-12-03", None),
])
def test_an_integer_spells_a_date_only_as_a_real_yyyymmdd_day(text: str,
                                                              day: str | None) -> None:
    assert spelled_date(text) == day


def test_an_integer_that_spells_a_date_is_read_as_a_time_and_the_day_s_spelling_told(
        run: Run, small: Path) -> None:
    """The integer keeps its meaning (an event time, as the journal's are); the warning
    says which moment that is and how to write the day meant, and the answer stands."""
    spelled = run("balance", "a", "--at", "20261203", "--json")
    assert spelled.exit_code == 0
    assert error_lines(spelled) == [
        "gpu-credits: warning: --at 20261203 is read as event time 20261203 "
        "(1970-08-23T12:06:43Z); for the day 2026-12-03, write --at 2026-12-03"]
    plain = run("balance", "a", "--at", "1970-08-23T12:06:43Z", "--json")
    assert spelled.stdout == plain.stdout and plain.stderr == ""
    moved = run("balance", "a", "--at", "2026-12-03", "--json")
    assert moved.stderr == "" and moved.stdout == spelled.stdout.replace(
        '"at": 20261203', f'"at": {parse_time("2026-12-03")}')
    assert run("statement", "a", "--to", "20261340").stderr == ""
    assert "write --from 2026-01-01" in run("statement", "a", "--from", "20260101").stderr


@pytest.mark.parametrize(("text", "value"), [
    ("2026-11-30", parse_time("2026-12-01") - 1),  # the day's last second
    (" 2026-11-30 ", parse_time("2026-12-01") - 1),
    ("2026-11-30T00:00Z", parse_time("2026-11-30")),  # a moment stays that moment
    ("2026-11-30T23:59Z", parse_time("2026-11-30T23:59Z")),
    ("1796083140", 1796083140), ("20261130", 20261130),  # integers are event times
])
def test_the_end_of_a_window_written_as_a_date_is_its_last_second(text: str,
                                                                   value: int) -> None:
    assert parse_end_time(text) == value
    assert is_date_alone(text) == (parse_end_time(text) != parse_time(text))


def test_a_statement_to_a_date_holds_that_whole_day(run: Run, tmp_path: Path) -> None:
    """A month's statement written with dates holds its last day: the usage at noon on
    the 30th is in, the one on the 1st of the next month is not, and `replay --to` reads
    the date alike (the web view's ledger: tests/web/test_window_to_a_date.py)."""
    from cli_helpers import imported
    noon = parse_time("2026-11-30T12:00Z")
    imported(run, tmp_path / "month.jsonl", "".join(json.dumps(e) + "\n" for e in [
        {"type": "grant", "account": "a", "amount": 100, "time": parse_time("2026-11-01"),
         "id": "g"},
        {"type": "consume", "account": "a", "amount": 7, "time": noon, "id": "u-30th"},
        {"type": "consume", "account": "a", "amount": 5, "time": parse_time("2026-12-01"),
         "id": "u-1st"},
    ]))
    statement = run("statement", "a", "--from", "2026-11-01", "--to", "2026-11-30", "--json")
    assert statement.exit_code == 0, statement.stderr
    body = json.loads(statement.stdout)
    assert [line["event_id"] for line in body["lines"]] == ["g", "u-30th"]
    assert body["to"] == parse_time("2026-12-01") - 1 and body["closing"]["balance"] == 93
    at_midnight = json.loads(run("statement", "a", "--to", "2026-11-30T00:00Z",
                                 "--json").stdout)
    assert [line["event_id"] for line in at_midnight["lines"]] == ["g"]
    replayed = json.loads(run("replay", "--to", "2026-11-30", "--json").stdout)
    assert (replayed["to"], replayed["events"]) == (parse_time("2026-12-01") - 1, 2)
