"""A long-lived facade (a worker's `GPUCreditTracker` or `Scheduler`) whose SQLite
journal is restored from an older backup under it: it refuses to answer from what the
journal no longer holds, and a decision it refuses records nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import ChainBroken, Journal
from projections import GPUCreditTracker
from tests.sqlite_copies import online_backup, restored_tables, saved_tables


def _read_past_a_backup(tmp_path: Path) -> tuple[Path, Path, GPUCreditTracker]:
    """A long-lived tracker that recorded 3 grants of 10, its file backed up after the
    first: the file, the backup, the tracker."""
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    tracker = GPUCreditTracker(f"sqlite:///{live}", account="a")
    tracker.grant(10, 1, 100)
    online_backup(live, backup)
    tracker.grant(10, 2, 100)
    tracker.grant(10, 3, 100)
    return live, backup, tracker


def test_a_decision_on_a_journal_restored_behind_it_records_nothing(tmp_path: Path) -> None:
    live, backup, tracker = _read_past_a_backup(tmp_path)
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



def _restored_then_rewritten_to_the_same_head(tmp_path: Path) -> tuple[Path, GPUCreditTracker]:
    """A long-lived tracker that read 3 records; its file restored from a copy holding 1,
    then written up to 3 again, with other events, by another process."""
    live, backup, tracker = _read_past_a_backup(tmp_path)
    assert tracker.get_balance(5) == 30
    online_backup(backup, live)
    other = GPUCreditTracker(f"sqlite:///{live}", account="a")
    other.grant(100, 2, 100)
    other.grant(100, 3, 100)
    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert journal.head() == 3
    return live, tracker


def test_a_read_on_a_journal_rewritten_up_to_its_head_is_refused(tmp_path: Path) -> None:
    _, tracker = _restored_then_rewritten_to_the_same_head(tmp_path)
    with pytest.raises(ChainBroken, match="position 3") as caught:
        tracker.get_balance(5)
    assert caught.value.position == 4


def test_a_decision_on_a_journal_rewritten_up_to_its_head_records_nothing(
        tmp_path: Path) -> None:
    live, tracker = _restored_then_rewritten_to_the_same_head(tmp_path)
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.consume(1, 6)
    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert journal.head() == 3  # the refused consume left nothing
        assert journal.verify() is None
    assert GPUCreditTracker(f"sqlite:///{live}", account="a").get_balance(5) == 210


def test_a_decision_on_a_journal_rewritten_past_its_head_records_nothing(
        tmp_path: Path) -> None:
    live, tracker = _restored_then_rewritten_to_the_same_head(tmp_path)
    GPUCreditTracker(f"sqlite:///{live}", account="a").grant(100, 4, 100)
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.consume(1, 6)
    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert journal.head() == 4  # the refused consume left nothing
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.get_balance(5)


@pytest.mark.postgres
def test_a_journal_restored_and_rewritten_on_postgres_is_refused(pg_fresh_url: str) -> None:
    """A PostgreSQL database rolled back to a copy under a long-lived tracker, then
    written on by another process up to (then past) the head the tracker read."""
    tracker = GPUCreditTracker(pg_fresh_url, account="a")
    tracker.grant(10, 1, 100)
    copy = saved_tables(pg_fresh_url)
    tracker.grant(10, 2, 100)
    tracker.grant(10, 3, 100)
    assert tracker.get_balance(5) == 30
    restored_tables(pg_fresh_url, copy)
    other = GPUCreditTracker(pg_fresh_url, account="a")
    other.grant(100, 2, 100)
    other.grant(100, 3, 100)
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.consume(1, 6)
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.get_balance(5)
    other.grant(100, 4, 100)
    with pytest.raises(ChainBroken, match="position 3"):
        tracker.consume(1, 6)
    with Journal(pg_fresh_url, read_only=True) as journal:
        assert journal.head() == 4  # the refused consumes left nothing
        assert journal.verify() is None
