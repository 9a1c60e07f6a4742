"""Rules of late-event re-projection that the randomized tests reach only by chance.

Each test here pins one rule of `Projector` (docs/semantics.md, "Late events"): which
events a batch taken in parts may revise, which snapshot a refold starts from, and what
a revision lists.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.projector import Projector
from projections.replay import account_reader, journal_reader, lean_records, locator
from tests.replay.test_replay import assert_equals_a_cold_fold


def _grant(event_id: str, account: str, amount: int, time: int) -> NewEvent:
    return NewEvent(event_id, account, "grant", time,
                    {"account": account, "amount": amount, "pool": None, "expiry": None})


def _consume(event_id: str, account: str, amount: int, time: int) -> NewEvent:
    return NewEvent(event_id, account, "consume", time,
                    {"account": account, "amount": amount, "pool": None})


def _projector(journal: MemoryJournal, by_account: bool, **options: Any) -> Projector:
    return Projector(journal_reader(journal), locate=locator(journal),
                     account_reader=account_reader(journal) if by_account else None,
                     **options)


@pytest.mark.parametrize("by_account", [True, False])
def test_a_batch_taken_in_parts_never_revises_its_own_first_event(by_account: bool) -> None:
    """The first event of a batch handed over a part at a time is known with the batch:
    a later part landing before it changes its outcome, and no revision is reported."""
    journal = MemoryJournal()
    journal.append([_consume("use", "a", 5, 10), _grant("late-grant", "a", 10, 5)])
    projector = _projector(journal, by_account)
    records = list(lean_records(journal, order="position"))
    for rec in records:  # one event at a time, each part known with the batch's first
        projector.ingest_batch([rec], known_before=records[0].position)
    assert_equals_a_cold_fold(projector.ledger, journal, records[-1].position)
    assert projector.revisions == []
