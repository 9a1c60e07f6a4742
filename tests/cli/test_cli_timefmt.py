"""Times on the command line: integers or ISO-8601 in, ISO-8601 out when epoch-like."""

from __future__ import annotations

import pytest

from projections.events import TIMELINE_START
from projections.timefmt import format_time, parse_micros, parse_time


@pytest.mark.parametrize(("text", "value"), [
    ("12", 12), ("-3", -3), ("1793491200", 1793491200),
    ("2026-11-01", 1793491200), ("2026-11-03T12:00Z", 1793491200 + 2 * 86400 + 12 * 3600),
    ("2026-11-03T12:00:00+01:00", 1793491200 + 2 * 86400 + 11 * 3600),
    ("2026-11-03 12:00", 1793491200 + 2 * 86400 + 12 * 3600),
])
def test_parse_time(text: str, value: int) -> None:
    assert parse_time(text) == value


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
