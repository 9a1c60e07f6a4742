"""A long-lived facade (a worker's `GPUCreditTracker` or `Scheduler`) whose SQLite
journal is restored from an older backup under it: it refuses to answer from what the
journal no longer holds, and a decision it refuses records nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import ChainBroken, Journal
from projections import GPUCreditTracker
from tests.sqlite_copies import online_backup


def test_a_decision_on_a_journal_restored_behind_it_records_nothing(tmp_path: Path) -> None:
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    tracker = GPUCreditTracker(f"sqlite:///{live}", account="a")
    tracker.grant(10, 1, 100)
    online_backup(live, backup)
    tracker.grant(10, 2, 100)
    tracker.grant(10, 3, 100)
    online_backup(backup, live)
    with pytest.raises(ChainBroken, match="ends at position 1") as caught:
        tracker.consume(1, 6)
    assert caught.value.position == 2
    assert "2..3" in str(caught.value)
    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert journal.head() == 1  # the refused consume left nothing
    with pytest.raises(ChainBroken, match="ends at position 1"):
        tracker.get_balance(5)
    # A fresh facade opens the journal as it stands.
    assert GPUCreditTracker(f"sqlite:///{live}", account="a").get_balance(5) == 10
