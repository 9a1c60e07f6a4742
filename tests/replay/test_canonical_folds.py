"""`verify`'s folds to its checkpoints' positions, sharing what they have in common, equal
a whole canonical fold to each position."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.ledger import Ledger
from projections.replay import canonical_folds, fold_canonical
from tests.replay.test_account_refold import Event, _journal, histories


def _state(ledger: Ledger) -> tuple[object, ...]:
    """What a checkpoint's digest covers, and what it leaves out that a fold carries."""
    return (ledger.digest(), sorted(ledger.anomalies), ledger.applied, ledger.rejected,
            ledger.last)


@settings(max_examples=150, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.data())
def test_each_state_equals_a_whole_fold_to_its_position(
        events: list[Event], rnd: random.Random, data: st.DataObject) -> None:
    rnd.shuffle(events)  # arrival order: late events, reversals among the later ones
    journal = _journal(events)
    positions = sorted(data.draw(st.sets(st.integers(0, journal.head() + 1), max_size=4)))
    got = [_state(ledger) for ledger in canonical_folds(journal, positions)]
    assert got == [_state(fold_canonical(journal, to_position=p)) for p in positions]


def test_later_states_fold_only_the_events_since_the_earliest_time_after_the_first() -> None:
    journal = MemoryJournal()
    for i in range(1, 101):
        journal.append([NewEvent(f"u{i}", "a", "consume", i * 10, {"account": "a", "amount": 1})])
    # A late event at 905, then events in order: the later states share the first 90.
    journal.append([NewEvent("g", "a", "grant", 905, {"account": "a", "amount": 50})])
    journal.append([NewEvent("u101", "a", "consume", 1010, {"account": "a", "amount": 1})])
    read: list[dict[str, Any]] = []
    reading = journal.read_lean

    def counted(**query: Any) -> Iterator[Any]:
        read.append(query)
        return reading(**query)

    journal.read_lean = counted  # type: ignore[method-assign]
    states = [_state(ledger) for ledger in canonical_folds(journal, [100, 101, 102])]
    journal.read_lean = reading  # type: ignore[method-assign]
    assert states == [_state(fold_canonical(journal, to_position=p)) for p in (100, 101, 102)]
    tails = [q for q in read if q.get("from_time") == 905]
    assert [q["to_position"] for q in tails] == [100, 101, 102]
    assert not any(q.get("order") == "canonical" and "from_time" not in q
                   and q.get("to_time") != 904 for q in read)


def test_a_reversal_after_the_first_position_folds_each_state_whole() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 10, {"account": "a", "amount": 50})])
    journal.append([NewEvent("u", "a", "consume", 20, {"account": "a", "amount": 5})])
    journal.append([NewEvent("r", "a", "reverse", 10, {"event": "g", "reason": "typo"})])
    states = [_state(ledger) for ledger in canonical_folds(journal, [2, 3])]
    assert states == [_state(fold_canonical(journal, to_position=p)) for p in (2, 3)]
    assert states[0] != states[1]


def test_positions_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match=r"ascending, got \[3, 2\]"):
        list(canonical_folds(MemoryJournal(), [3, 2]))
