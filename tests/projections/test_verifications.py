"""The last verification, kept beside the journal: newest wins, read back as data, and a
journal that cannot be written keeps nothing without failing the verification."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import Journal, MemoryJournal, NewEvent
from projections.checkpoint import CHECKPOINT
from projections.replay import replay, verify
from projections.verifications import (
    VERIFICATION,
    Verification,
    last_verification,
    record_verification,
)


def test_the_newest_verdict_is_the_one_read_back() -> None:
    journal = MemoryJournal()
    assert last_verification(journal) is None
    first = Verification(True, 10, 10, 1, finished_at=100.0, by="cli")
    second = Verification(False, 12, 12, 0, 7, "hash chain broken at position 7", 200.5, "http")
    assert record_verification(journal, first) is None
    assert last_verification(journal) == first
    assert record_verification(journal, second) is None
    assert last_verification(journal) == second
    assert len(journal.snapshots(VERIFICATION)) == 1


def test_recording_a_verdict_leaves_the_checkpoints_alone(tmp_path: Path) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 5})])
        replay(journal, checkpoint=True)
        before = journal.snapshots(CHECKPOINT)
        record_verification(journal, Verification(True, 1, 1, 1, finished_at=1.0))
        assert journal.snapshots(CHECKPOINT) == before
        assert verify(journal).ok  # a verdict is not a checkpoint to compare replay with
    finally:
        journal.close()


def test_a_read_only_journal_keeps_no_verdict_and_says_why(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    Journal(url).close()
    with Journal(url, read_only=True) as reader:
        why = record_verification(reader, Verification(True, 0, 0, finished_at=1.0))
        assert why is not None and why
        assert last_verification(reader) is None


@pytest.mark.parametrize("state", [b"not json", b"[1, 2]", b'{"ok": "yes", "head": 1}',
                                   b'{"ok": true, "head": true, "events": 1, '
                                   b'"finished_at": 1}',
                                   b'{"ok": true, "head": 1, "events": 1}',
                                   b'{"ok": true, "head": 1, "events": 1, "finished_at": 1, '
                                   b'"stale_checkpoints": "checkpoint 1"}',
                                   b'{"ok": true, "head": 1, "events": 1, "finished_at": 1, '
                                   b'"stale_checkpoints": [1]}'])
def test_a_malformed_record_reads_as_none(state: bytes) -> None:
    journal = MemoryJournal()
    journal.save_snapshot(VERIFICATION, 1, 0, "ok", state)
    assert last_verification(journal) is None


def test_a_record_reads_back_field_for_field() -> None:
    verdict = Verification(False, 3, 3, 2, 2, "replay differs", 1700000000.25, "web")
    assert Verification.from_dict(verdict.as_dict()) == verdict


def test_the_stale_checkpoints_a_verdict_passed_over_are_kept_with_it() -> None:
    verdict = Verification(True, 3, 3, 0, finished_at=1.0, by="cli",
                           stale_checkpoints=("checkpoint 1 at position 3: version 1",))
    assert Verification.from_dict(verdict.as_dict()) == verdict
    kept_before = {k: v for k, v in verdict.as_dict().items() if k != "stale_checkpoints"}
    assert Verification.from_dict(kept_before).stale_checkpoints == ()
