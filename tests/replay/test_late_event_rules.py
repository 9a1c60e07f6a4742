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
from projections.replay import (
    account_reader,
    fold_canonical,
    journal_reader,
    lean_records,
    locator,
)
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


def _ingested_by_batches(journal: MemoryJournal, by_account: bool) -> Projector:
    """A projection of `journal` fed each batch of events appended together as one, in
    arrival order, as a replay feeds them."""
    projector = _projector(journal, by_account)
    ends = {b.first: b.last for b in journal.batches()}
    records = list(lean_records(journal, order="position"))
    while records:
        end = ends.get(records[0].position, records[0].position)
        batch = [rec for rec in records if rec.position <= end]
        records = records[len(batch):]
        projector.ingest_batch(batch)
    return projector


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


@pytest.mark.parametrize("by_account", [True, False])
def test_an_event_reversed_before_it_arrived_does_not_move_the_applied_end(
        by_account: bool) -> None:
    """A batch's event that a reversal recorded earlier already took out is skipped by
    the fold, and the applied end (`Ledger.last`, what a late event is judged by and a
    checkpoint's time is) stays where a cold fold leaves it, however the batch is
    re-projected."""
    journal = MemoryJournal()
    journal.append([_grant("early", "a", 10, 20)])
    journal.append([NewEvent("undo", "a", "reverse", 25, {"event": "use", "reason": "undo"})])
    journal.append([_consume("use", "a", 5, 40), _grant("late-grant", "a", 3, 10)])
    projector = _ingested_by_batches(journal, by_account)
    cold = fold_canonical(journal)
    assert_equals_a_cold_fold(projector.ledger, journal, journal.head())
    assert projector.ledger.last == cold.last == (20, 1)


@pytest.mark.parametrize("by_account", [True, False])
def test_one_job_id_submitted_late_in_two_accounts_goes_to_the_earlier(
        by_account: bool) -> None:
    """Two late submits of one job id in one batch, by two accounts: who holds the job
    crosses the accounts (the earlier on the timeline takes it, the other is refused as
    a duplicate), so neither is refolded for its account alone."""
    journal = MemoryJournal()
    journal.append([_grant("ga", "a", 100, 1), _grant("gb", "b", 100, 1)])
    journal.append([_consume("now", "a", 1, 50)])
    job = {"job": "j", "cost": 5, "priority": 0, "pool": None}
    journal.append([NewEvent("sa", "a", "submit", 20, {"account": "a", **job}),
                    NewEvent("sb", "b", "submit", 10, {"account": "b", **job})])
    projector = _ingested_by_batches(journal, by_account)
    assert_equals_a_cold_fold(projector.ledger, journal, journal.head())
    assert projector.ledger.jobs["j"].account == "b"
