"""The command line when the journal's storage misbehaves: a disk that fills up between a
command's own write and the caches it writes after it.

A command whose decision is committed must say so (exit 0, a warning), never `error`:
a user who reads `error` runs it again, and a grant without `--id` is then recorded
twice. The disk is made full by SQLite's own error ("database or disk is full") raised
where a real full disk raised it on a small tmpfs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, NoReturn

import pytest
from cli_helpers import Run, journal_head
from sqlalchemy.exc import OperationalError

from eventstore import Journal, JournalError
from projections import anchors
from projections.checkpoint import CHECKPOINT


def _disk_full(journal: Any) -> JournalError:
    """The error the journal raises when SQLite finds the disk full."""
    translated = journal._backend.translate(OperationalError(
        "INSERT INTO snapshots ...", {}, sqlite3.OperationalError("database or disk is full")))
    assert isinstance(translated, JournalError)
    return translated


def test_a_grant_committed_before_the_disk_filled_up_is_not_reported_as_failed(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a tmpfs filled to within a few pages, `grant` recorded its grant and then failed
    to record the journal's verified mark: it said `error: ... the disk is full ...
    nothing of the failed transaction was stored` (exit 2), and its retry recorded the
    grant a second time. The mark is a cache: the command succeeds, with a warning."""
    def full(journal: Any) -> NoReturn:
        raise _disk_full(journal)

    monkeypatch.setattr(anchors, "advance_verified", full)
    before = journal_head(db)
    result = run("grant", "b", "5")
    assert result.exit_code == 0, result.stderr
    assert "recorded grant" in result.stdout
    assert "warning: what this command recorded is committed (do not run it again)" in (
        result.stderr)
    assert "the disk holding" in result.stderr and "is full" in result.stderr
    assert journal_head(db) == before + 1


def test_a_late_usage_report_committed_before_the_disk_filled_up_is_not_reported_as_failed(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A late event makes the checkpoints after it stale, and the process that recorded it
    drops them once it is committed: with the disk full by then, the drop failed and the
    committed usage report was reported as an error."""
    assert run("replay").exit_code == 0  # a checkpoint after time 3
    with Journal(db) as journal:
        assert journal.snapshots(CHECKPOINT)
    drop = Journal.drop_snapshots

    def full(self: Journal, kind: str, **kwargs: Any) -> int:
        if kind == CHECKPOINT:
            raise _disk_full(self)
        return drop(self, kind, **kwargs)

    monkeypatch.setattr(Journal, "drop_snapshots", full)
    before = journal_head(db)
    result = run("consume", "b", "1", "--at", "2")
    assert result.exit_code == 0, result.stderr
    assert journal_head(db) == before + 1
    monkeypatch.setattr(Journal, "drop_snapshots", drop)
    # The stale checkpoint left behind is passed over, never used.
    assert run("verify").exit_code == 0
