"""Event times in bodies and query strings: an integer, or ISO 8601 with an offset.

The service is stricter than the command line about one thing: an ISO 8601 string must
say its offset (`Z`, `+01:00`). A server has no "local time" a client could mean, so a
bare `2026-11-03T12:00` is refused rather than guessed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

# 2200-01-01T00:00Z: event times after this are probably milliseconds (refused unless the
# service was started with --allow-far-times); expiries may be later.
from projections.events import FAR_TIME
from projections.timefmt import parse_offset_time
from projections.validation import require_time

_INTEGER = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only, as every integer read


def parse_event_time(value: Any) -> int:
    """An event time in a body: a JSON integer, or an ISO 8601 string with an offset
    (a string of digits is neither: bodies are strict, as for every integer); ValueError."""
    return _event_time(value, digits=False)


def parse_query_time(text: str) -> int:
    """An event time in a query string, where everything is text: ASCII digits (after an
    optional `-`), or ISO 8601 with an offset; ValueError."""
    return _event_time(text, digits=True)


_SPACED_OFFSET = re.compile(r"(.*\d:\d{2}(?::\d{2}(?:[.,]\d+)?)?) (\d{2}(?::?\d{2})?)")


def query_text(value: str) -> str:
    """A time of a query string with the `+` of its offset back, if form decoding took it
    (`?at=2026-11-20T00:00:00+01:00` sent as is arrives with a space)."""
    spaced = _SPACED_OFFSET.fullmatch(value.strip())
    return value if spaced is None else f"{spaced[1]}+{spaced[2]}"


def _event_time(value: Any, *, digits: bool) -> int:
    if isinstance(value, bool):
        raise ValueError(f"a time is an integer or ISO 8601 text with an offset, got {value!r}")
    if isinstance(value, int):
        moment = value
    elif isinstance(value, str):
        text = value.strip() if digits else value
        if _INTEGER.fullmatch(text):
            if not digits:
                raise ValueError(f"a time in a body is a JSON integer or ISO 8601 text with "
                                 f"an offset, not digits in a string: {value!r}")
            moment = int(text)
        else:
            moment = parse_offset_time(text)
    else:
        raise ValueError(f"a time is an integer or ISO 8601 text with an offset, got {value!r}")
    return require_time("a time", moment)


_TIME_SCHEMA = {
    "anyOf": [
        {"type": "integer", "description": "event time, e.g. seconds since the Unix epoch"},
        {"type": "string", "format": "date-time",
         "description": "ISO 8601 with an offset, e.g. 2026-11-03T12:00:00Z"},
    ],
}

EventTime = Annotated[int, BeforeValidator(parse_event_time), WithJsonSchema(_TIME_SCHEMA)]
"""A body field holding an event time (an integer after validation)."""


def check_far(name: str, value: int | None, allow_far_times: bool) -> None:
    """Refuse an event time after 2200-01-01 (probably milliseconds) unless allowed."""
    if value is not None and value > FAR_TIME and not allow_far_times:
        raise ValueError(
            f"{name} {value} is after 2200-01-01T00:00Z ({FAR_TIME}): probably milliseconds; "
            "send seconds, or start the service with --allow-far-times")
