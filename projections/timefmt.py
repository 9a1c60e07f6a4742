"""Event times as people write them and read them: integers or ISO-8601, always UTC.

Event times are integers (by convention seconds since the Unix epoch; small integers
are fine too). `parse_time` accepts either spelling; `format_time` shows ISO-8601 only
when an integer looks like epoch seconds (between 2000-01-01 and 2100-01-01), so a
seed's `t = 12` stays `12` and never becomes a date in 1970.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from projections.events import TIMELINE_START

EPOCH_LOW = 946_684_800
"""2000-01-01T00:00:00Z: below this an integer is shown as it is."""

EPOCH_HIGH = 4_102_444_800
"""2100-01-01T00:00:00Z: from this on an integer is shown as it is."""

# ASCII digits after an optional "-", as every integer a ledger reads (`\d` would also
# take Arabic-Indic or full-width digits, and int() a "+").
_INTEGER = re.compile(r"-?[0-9]+")


def looks_like_epoch(value: int) -> bool:
    """Whether `value` reads best as a date: epoch seconds between 2000 and 2100."""
    return EPOCH_LOW <= value < EPOCH_HIGH


def from_iso(text: str) -> datetime:
    """`datetime.fromisoformat`, which also reads a `z` in lowercase as RFC 3339 allows
    (the `date-time` of the OpenAPI document): it took a lowercase `t` and refused the
    `z`. Raises ValueError."""
    return datetime.fromisoformat(text[:-1] + "Z" if text.endswith("z") else text)


def parse_time(text: str) -> int:
    """An event time from `text`: an integer, or an ISO-8601 date or date-time.

    `2026-11-03` is midnight UTC; `2026-11-03T12:00Z`, `2026-11-03T12:00:00+01:00` and
    `2026-11-03 12:00` (no offset: UTC) are accepted. A fraction of a second is rounded
    down to the whole second it falls in. Raises ValueError naming what was expected.
    """
    cleaned = text.strip()
    if _INTEGER.fullmatch(cleaned):
        return int(cleaned)
    try:
        moment = from_iso(cleaned)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r}; expected an integer or ISO-8601 such as "
            "2026-11-03 or 2026-11-03T12:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return epoch_seconds(moment)


def parse_offset_time(text: str) -> int:
    """An event time from ISO 8601 text that says its offset (`2026-11-03T12:00:00Z`,
    `...+05:30`), as a line of events or a body gives one: whoever wrote it had no local
    time this side could mean, so a time without an offset is refused, with the spelling
    that would be taken. A fraction of a second is rounded down. Raises ValueError."""
    try:
        parsed = from_iso(text)
    except ValueError:
        raise ValueError(f"not a time: {text!r}; expected an integer or ISO 8601 with an "
                         "offset such as 2026-11-03T12:00:00Z") from None
    if parsed.tzinfo is None:
        utc = f"{text}Z" if len(text) > 10 else f"{text}T00:00:00Z"
        raise ValueError(f"{text!r} has no offset; write it as {utc} (UTC) or with +HH:MM")
    return epoch_seconds(parsed)


def is_date_alone(text: str) -> bool:
    """Whether `text` is an ISO-8601 date without a time of day (`2026-11-30`), not an
    integer event time."""
    cleaned = text.strip()
    if _INTEGER.fullmatch(cleaned):
        return False
    try:
        date.fromisoformat(cleaned)
    except ValueError:
        return False
    return True


DAY = 86_400
"""Seconds in a day of UTC (event times have no leap seconds)."""


def parse_end_time(text: str) -> int:
    """The end of a window from `text`, included: a date alone is its whole day, so its
    last second (`2026-11-30` is 2026-11-30T23:59:59Z); anything else as `parse_time`.

    A month's window written `--from 2026-11-01 --to 2026-11-30` then holds the whole of
    November, as people who write dates mean it, not November less its last day."""
    when = parse_time(text)
    return when + DAY - 1 if is_date_alone(text) else when


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


def epoch_seconds(moment: datetime) -> int:
    """The whole second (since the Unix epoch) an aware `moment` falls in: exact, and
    rounded down (`int(moment.timestamp())` rounds a moment before 1970 up)."""
    return (moment - _EPOCH) // _SECOND


_COMPACT_DATE = re.compile(r"(19[7-9][0-9]|2[01][0-9][0-9])([0-9]{2})([0-9]{2})")


def spelled_date(text: str) -> str | None:
    """The ISO date that `text` spells as YYYYMMDD (years 1970-2199), None when it spells
    none. Such an integer is an event time in August or September 1970; a person typing
    `20261203` most likely meant the day, which `2026-12-03` says."""
    found = _COMPACT_DATE.fullmatch(text.strip())
    if found is None:
        return None
    try:
        day = datetime(int(found[1]), int(found[2]), int(found[3]), tzinfo=UTC)
    except ValueError:  # no such month or day: not a date
        return None
    return day.strftime("%Y-%m-%d")


def iso(value: int) -> str:
    """ISO-8601 UTC spelling of epoch seconds: `2026-11-03T12:00:00Z`."""
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time(value: int | None) -> str:
    """How a time is shown: ISO-8601 for epoch-looking seconds, else the integer.

    `None` is shown as `-` and `TIMELINE_START` as `start` (an account event without time).
    """
    if value is None:
        return "-"
    if value == TIMELINE_START:
        return "start"
    if looks_like_epoch(value):
        return iso(value)
    return str(value)


def format_micros(micros: int) -> str:
    """A recorded-at time (µs since the epoch) as ISO-8601 UTC with microseconds:
    `2026-11-03T12:00:00.123456Z`, what `parse_micros` reads back."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micros(text: str) -> int:
    """A wall-clock instant (microseconds since the epoch) from ISO-8601 text.

    For `--as-known-at`: recorded-at times are kept in microseconds. Raises ValueError.
    """
    try:
        moment = from_iso(text.strip())
    except ValueError:
        raise ValueError(
            f"not an ISO-8601 time: {text!r}; expected e.g. 2026-11-03T12:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
