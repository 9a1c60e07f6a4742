"""An in-order batch folded by the compiled loop (`Ledger.apply_own`) is folded as the
per-event loop folds it: the same outcomes, state, and notes for later per-account
re-projections (events of another stream's account, job events that found no job)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from projections.projector import Projector
from projections.replay import account_reader, journal_reader, lean_records, locator
from tests.replay.test_account_refold import Event, _journal, histories


def _notes(projector: Projector) -> tuple[Any, ...]:
    return (sorted(projector._mixed), sorted(projector._floating.items(), key=repr),
            projector._unpartitioned, sorted(projector._voided_from.items(), key=repr))


@settings(max_examples=400, deadline=None)
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
