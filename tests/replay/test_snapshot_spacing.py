"""How often the projector copies its state while it folds: never in proportion to the
state's size times the events, whatever the state holds."""

from __future__ import annotations

from typing import Any

import pytest

import projections.projector as projector_module
from eventstore import MemoryJournal, NewEvent
from projections.projector import Projector
from projections.replay import journal_reader


def test_credits_that_pile_up_space_the_snapshots_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Grants without expiry that nothing uses (an import of a year of small grants): each
    # stays a live batch, which every snapshot copies. Spaced by jobs and accounts alone,
    # snapshots came every 1,000 events however large the state: a service's start-up
    # after an import of 200,000 such grants took 50 s (copies), where a replay takes 4.
    journal = MemoryJournal()
    journal.append([NewEvent(f"g{i}", "acct", "grant", i, {"account": "acct", "amount": 1})
                    for i in range(4000)])
    copies = 0
    real = projector_module.snapshot

    def counting(ledger: Any) -> Any:
        nonlocal copies
        copies += 1
        return real(ledger)

    monkeypatch.setattr(projector_module, "snapshot", counting)
    projector = Projector(journal_reader(journal), min_snapshot_every=100)
    for rec in journal.read(order="position"):
        projector.ingest(rec)
    assert projector.ledger.accounts["acct"].balance == 4000
    # Spaced in proportion to the batches a copy holds: about log2(4000 / 100) copies,
    # where every 100 events was 40.
    assert copies <= 10, copies
