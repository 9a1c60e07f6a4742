"""read_lean: the records `read` gives, six fields of each, the payload as stored text."""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import JournalLike, NewEvent
from eventstore.hashing import canonical_json


def _fill(journal: JournalLike) -> None:
    # Times out of arrival order, two streams, payloads with text that JSON escapes.
    times = [5, 3, 9, 3, 1, 7, 5, 2]
    journal.append([NewEvent(f"e{i}", f"s{i % 2}", "note", t,
                             {"n": i, "text": "é \"q\" \\", "list": [1, None]})
                    for i, t in enumerate(times)])


@pytest.mark.parametrize("query", [
    {}, {"order": "position"}, {"after_position": 2, "to_position": 6},
    {"from_time": 3, "to_time": 5}, {"after": (3, 2)},
    {"order": "position", "after_position": 3, "batch_size": 2}, {"batch_size": 3},
    # One stream (a late event's per-account refold reads its account so).
    {"stream": "s1"}, {"stream": "s0", "after": (3, 2), "to_position": 7},
    {"stream": "s1", "order": "position", "batch_size": 2}, {"stream": "absent"},
])
def test_read_lean_is_read_in_six_fields(journal: JournalLike, query: dict[str, Any]) -> None:
    _fill(journal)
    expected = [(r.position, r.id, r.type, r.time, canonical_json(r.payload), r.stream)
                for r in journal.read(**query)]
    assert expected or query.get("stream") == "absent"
    assert list(journal.read_lean(**query)) == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("query", [
    {}, {"order": "position"}, {"after_position": 2, "to_position": 7},
    {"from_time": 3}, {"stream": "s1"}, {"order": "position", "batch_size": 2},
])
def test_a_type_filter_keeps_exactly_the_events_of_that_type(
        journal: JournalLike, query: dict[str, Any]) -> None:
    kinds = ["grant", "note", "reverse", "note", "reverse", "grant", "reverse", "note"]
    times = [5, 3, 9, 3, 1, 7, 5, 2]
    journal.append([NewEvent(f"e{i}", f"s{i % 2}", kind, t, {"n": i})
                    for i, (kind, t) in enumerate(zip(kinds, times, strict=True))])
    for kind in ("reverse", "note", "absent"):
        expected = [r for r in journal.read(**query) if r.type == kind]
        assert list(journal.read(type=kind, **query)) == expected
        assert list(journal.read_lean(type=kind, **query)) == [  # type: ignore[attr-defined]
            row for row in journal.read_lean(**query)  # type: ignore[attr-defined]
            if row[2] == kind]
