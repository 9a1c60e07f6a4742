"""Every read's filters against a plain filter of the same events, many reads in a row on
one journal: each read takes its own bounds and filters, whatever shape of read came
before it (the SQL journals keep each shape's compiled statement and fill in its values)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import JournalLike, NewEvent

EVENTS = [NewEvent(f"e{i}", f"s{i % 3}", f"t{i % 2}", (i * 7) % 10, {"i": i})
          for i in range(40)]

FILTERS = st.fixed_dictionaries({}, optional={
    "after_position": st.integers(0, 45),
    "to_position": st.integers(0, 45),
    "from_time": st.integers(-1, 10),
    "to_time": st.integers(-1, 10),
    "stream": st.sampled_from(["s0", "s1", "s2", "s9"]),
    "type": st.sampled_from(["t0", "t1"]),
    "after": st.tuples(st.integers(-1, 10), st.integers(0, 45)),
    "order": st.sampled_from(["canonical", "position"]),
    "batch_size": st.integers(1, 7),
})


def _expected(filters: dict[str, Any]) -> list[int]:
    """The positions a read with `filters` gives, by filtering the events plainly."""
    rows = [(position, event) for position, event in enumerate(EVENTS, 1)]
    kept = [
        (event.time, position) for position, event in rows
        if filters.get("after_position", 0) < position <= filters.get("to_position", 10**9)
        and filters.get("from_time", -10**9) <= event.time <= filters.get("to_time", 10**9)
        and filters.get("stream", event.stream) == event.stream
        and filters.get("type", event.type) == event.type
        and (event.time, position) > filters.get("after", (-10**9, 0))
    ]
    if filters.get("order", "canonical") == "position":
        return sorted(position for _, position in kept)
    return [position for _, position in sorted(kept)]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reads=st.lists(FILTERS, min_size=1, max_size=8))
def test_each_read_filters_as_a_plain_filter_does(journal: JournalLike,
                                                   reads: list[dict[str, Any]]) -> None:
    if journal.head() == 0:
        journal.append(EVENTS)
    for filters in reads:
        got = [rec.position for rec in journal.read(**filters)]
        assert got == _expected(filters), filters
        assert [row[0] for row in journal.read_lean(**filters)] == got, filters


def test_a_read_after_another_of_its_shape_takes_its_own_values(journal: JournalLike) -> None:
    journal.append(EVENTS)
    for low in range(0, 40, 5):  # one shape, eight sets of values
        assert [r.position for r in journal.read(after_position=low, order="position")] == \
            list(range(low + 1, 41))
    for time in range(10):
        assert [r.time for r in journal.read(from_time=time, to_time=time)] == \
            [time] * sum(1 for e in EVENTS if e.time == time)


pytestmark = pytest.mark.filterwarnings("error")
