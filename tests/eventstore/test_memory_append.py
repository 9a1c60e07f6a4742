"""The in-memory journal's quick append (new events with flat payloads) against its
planned path (`appending.plan`, what every backend runs): for any batch, the same
records, the same refusal, and the same journal afterwards."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from eventstore.records import PRIVATE_KEY

CLOCK = 1_700_000_000_000_000

# Values a facade writes, and some it never does (nested, NaN, a NUL, a subclass of str,
# a key that is not a str, the journal's own key): each must be refused or taken alike.
VALUES = st.one_of(
    st.integers(-(2**64), 2**64), st.booleans(), st.none(), st.text(max_size=3),
    st.floats(allow_nan=True, allow_infinity=True), st.just("a\x00b"),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=2),
                                                             st.integers(0, 3), max_size=2))
KEYS = st.one_of(st.sampled_from(["account", "amount", "job", "pool", PRIVATE_KEY]),
                 st.integers(0, 2))


class Word(str):
    """A str subclass: not a value the quick path takes."""


NAMES = st.sampled_from(["account", "amount", "job"])
EDGES = st.sampled_from(["a\x00b", 1.5, -0.0, math.nan, math.inf, Word("w"), True, None,
                         2**70, "é"])
PAYLOADS = st.one_of(st.dictionaries(NAMES, st.integers(0, 9), max_size=3),
                     st.dictionaries(NAMES | st.just(PRIVATE_KEY), EDGES, max_size=2),
                     st.dictionaries(KEYS, VALUES, max_size=3))




def mostly(usual: st.SearchStrategy[Any], *odd: Any) -> st.SearchStrategy[Any]:
    """Usually a value of `usual`, now and then one of `odd`: most events are
    valid, so most batches reach the quick path, and each odd field still comes up."""
    return st.tuples(st.integers(0, 15), usual, st.sampled_from(odd)).map(
        lambda drawn: drawn[2] if drawn[0] == 9 else drawn[1])


EVENTS = st.builds(
    NewEvent,
    id=mostly(st.sampled_from(["e1", "e2", "e3", "e4", "e5", "e6"]), "", "e\x00"),
    stream=mostly(st.sampled_from(["a", "b"]), "", Word("c"), "s\x00"),
    type=mostly(st.sampled_from(["consume", "grant"]), "", "t\x00"),
    time=mostly(st.integers(0, 9), 2**63, -(2**63) - 1, True),
    payload=PAYLOADS,
    private=mostly(st.none(), {"user": "u"}, {}),
)
RUNS = st.lists(st.lists(EVENTS, max_size=4), min_size=1, max_size=6)


def _planned(journal: MemoryJournal) -> MemoryJournal:
    """`journal` with every append taking the planned path."""
    journal.append = lambda events, **kw: journal._append_planned(  # type: ignore[method-assign]
        events, kw.get("expected_versions"))
    return journal


def _outcome(journal: MemoryJournal, batch: list[NewEvent]) -> Any:
    try:
        return journal.append(batch)
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))


def _state(journal: MemoryJournal) -> Any:
    records = [rec._replace(payload=canonical(rec.payload)) for rec in journal.read(
        order="position")]
    return (records, journal._canonical, journal._stream_canonical, journal._versions,
            journal._max_time, journal._batches, journal._last_recorded_at,
            sorted(journal._by_id.items()), [r[:8] for r in journal._stored])


def canonical(payload: Mapping[str, Any]) -> Any:
    """A payload compared by value, NaN equal to itself."""
    return sorted((k, "nan" if isinstance(v, float) and math.isnan(v) else repr(v))
                  for k, v in payload.items())


@settings(max_examples=150, deadline=None)
@given(RUNS)
def test_quick_and_planned_appends_record_and_refuse_alike(runs: list[list[NewEvent]]) -> None:
    quick = MemoryJournal(clock=lambda: CLOCK)
    planned = _planned(MemoryJournal(clock=lambda: CLOCK))
    for batch in runs:
        # A private part's seal is salted at random: the same salt for both.
        with mock.patch("eventstore.appending.secrets.token_hex", return_value="5a17"):
            got = _outcome(quick, batch)
            want = _outcome(planned, batch)
        if isinstance(want, list):
            assert isinstance(got, list)
            assert [r._replace(payload=canonical(r.payload)) for r in got] == [
                r._replace(payload=canonical(r.payload)) for r in want]
        else:
            assert got == want
        assert _state(quick) == _state(planned)


def test_a_facade_event_takes_the_quick_path_and_its_record_is_a_fresh_copy() -> None:
    journal = MemoryJournal(clock=lambda: CLOCK)
    payload = {"account": "a", "amount": 5}
    (rec,) = journal.append([NewEvent("u1", "a", "consume", 3, payload)])
    assert journal._append_new([NewEvent("u2", "a", "consume", 3, payload)]) is not None
    assert journal._append_new([NewEvent("u1", "a", "consume", 3, payload)]) is None  # repeat
    assert isinstance(rec.payload, dict)
    rec.payload["amount"] = 6  # the caller's copy: the journal is untouched
    assert journal.get("u1").payload == {"account": "a", "amount": 5}  # type: ignore[union-attr]
    assert list(rec.payload) == sorted(rec.payload)
