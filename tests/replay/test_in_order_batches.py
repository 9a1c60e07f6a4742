"""An in-order batch folded by the compiled loop (`Ledger.apply_own`) is folded as the
per-event loop folds it: the same outcomes, state, and notes for later per-account
re-projections (events of another stream's account, job events that found no job). And
a replay's plain rows (`Projector.ingest_rows`) are taken as their `Lean` records are."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.projector import Projector, as_lean
from projections.replay import (
    account_reader,
    fold_canonical,
    journal_reader,
    lean_records,
    lean_rows,
    locator,
)
from tests.replay.test_account_refold import Event, _journal, histories


def _notes(projector: Projector) -> tuple[Any, ...]:
    return (sorted(projector._mixed), sorted(projector._floating.items(), key=repr),
            projector._unpartitioned, sorted(projector._voided_from.items(), key=repr))


@settings(max_examples=200, deadline=None)
@given(histories())
def test_the_compiled_loop_folds_an_in_order_batch_as_the_per_event_loop(
        events: list[Event]) -> None:
    # In time order and without reversals: the batch takes the in-order path.
    in_order = sorted((e for e in events if e[2] != "reverse"), key=lambda e: e[3])
    if not in_order:
        return
    journal = _journal(in_order)
    batch = list(lean_records(journal, order="position"))
    common: dict[str, Any] = {"locate": locator(journal),
                              "account_reader": account_reader(journal)}
    # No outcome remembered and no snapshot before a late event: the compiled loop.
    compiled = Projector(journal_reader(journal), recent_outcomes=0,
                         snapshot_once_late=True, **common)
    # Outcomes remembered: the per-event loop.
    per_event = Projector(journal_reader(journal), recent_outcomes=1000, **common)
    got = compiled.ingest_batch(batch)
    want = per_event.ingest_batch(batch)
    assert list(got.items()) == list(want.items())
    assert compiled.ledger.digest() == per_event.ledger.digest()
    assert _notes(compiled) == _notes(per_event)


@settings(max_examples=150, deadline=None)
@given(histories(), st.lists(st.integers(1, 6), min_size=1, max_size=30))
def test_plain_rows_are_ingested_as_their_lean_records(
        events: list[Event], sizes: list[int]) -> None:
    # Any order, reversals included, cut into batches of random sizes: a batch that cannot
    # take the rows' own loop (a late event, a reversal, a late event seen before) goes
    # down `ingest_batch` as records, and either way ends where records end.
    journal = _journal(events)
    rows = list(lean_rows(journal, order="position"))
    common: dict[str, Any] = {"locate": locator(journal), "recent_outcomes": 1000,
                              "account_reader": account_reader(journal),
                              "snapshot_once_late": True, "remember_once_late": True}
    by_rows = Projector(journal_reader(journal), **common)
    by_records = Projector(journal_reader(journal), **common)
    start = 0
    for size in itertools.cycle(sizes):
        if start >= len(rows):
            break
        part = rows[start:start + size]
        by_rows.ingest_rows(part, known_before=part[0][0])
        by_records.ingest_batch([as_lean(r) for r in part], known_before=part[0][0])
        assert by_rows.ledger.digest() == by_records.ledger.digest()
        start += size
    assert by_rows.ledger.digest() == fold_canonical(journal).digest()
    assert [repr(r) for r in by_rows.revisions] == [repr(r) for r in by_records.revisions]
    assert _notes(by_rows) == _notes(by_records)
    assert by_rows.position == by_records.position == len(rows)


def test_plain_rows_refuse_a_batch_out_of_position_order() -> None:
    journal = _journal([("e1", "a", "grant", 1, {"account": "a", "amount": 5}),
                        ("e2", "a", "grant", 2, {"account": "a", "amount": 5})])
    rows = list(lean_rows(journal, order="position"))
    projector = Projector(journal_reader(journal), snapshot_once_late=True,
                          remember_once_late=True)
    with pytest.raises(ValueError, match="not in increasing position order"):
        projector.ingest_rows(rows[::-1])
    assert projector.position == 0 and projector.ledger.applied == 0


def test_the_same_event_applied_twice_is_refused() -> None:
    """(time, position) must move forward: the event at the last applied place again
    would count its credits twice."""
    from projections.events import CreditsGranted
    from projections.ledger import Ledger

    ledger = Ledger()
    grant = CreditsGranted("a", 10, None)
    ledger.apply(1, "g1", 5, grant)
    with pytest.raises(ValueError, match=r"applied after \(5, 1\): not in canonical order"):
        ledger.apply(1, "g1", 5, grant)
    assert ledger.accounts["a"].balance == 10
