"""Several processes on one SQLite file: what one of them reads or writes while another
command changes the file under it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import SMALL, Run, cli

from eventstore import Journal
from projections import GPUCreditTracker
from projections.checkpoint import CHECKPOINT
from projections.replay import verify
from projections.verifications import last_verification
from tools import cli as cli_app


class _ReplayedMeanwhile(Journal):
    """A journal whose first checkpoint load lets another process run `gpu-credits
    replay` first: that replay saves fresh checkpoints and drops the ones it replaces,
    the ones this process listed a moment before."""

    def __init__(self, url: str, folder: Path) -> None:
        super().__init__(url, read_only=True)
        self._folder = folder
        self.replays = 0

    def load_snapshot(self, snapshot_id: int) -> bytes:
        if not self.replays:
            self.replays += 1
            done = cli("replay", "--db", self.url or "", cwd=self._folder)
            assert done.returncode == 0, done.stderr
        return super().load_snapshot(snapshot_id)


def test_verify_passes_while_a_replay_replaces_the_checkpoints(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "small.jsonl").write_text(SMALL)
    assert cli("import", "small.jsonl", "--db", url, cwd=tmp_path).returncode == 0
    assert cli("replay", "--db", url, cwd=tmp_path).returncode == 0
    with Journal(url, read_only=True) as journal:
        before = {info.id for info in journal.snapshots(CHECKPOINT)}
    with _ReplayedMeanwhile(url, tmp_path) as journal:
        report = verify(journal)
        after = {info.id for info in journal.snapshots(CHECKPOINT)}
    assert journal.replays == 1 and before and not before & after  # all replaced
    # A checkpoint dropped by another process is a cache gone, not an altered journal.
    assert report.ok, report.problem
    assert report.first_bad_position is None


def test_a_replay_beside_a_long_writer_waits_once_and_says_what_it_did(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (a long import) holds SQLite's write lock for the whole replay:
    the replay's digest stands, and it says once that no checkpoint was saved. It
    recorded nothing, so it never says "what this command recorded is committed (do not
    run it again)", and it does not wait for the lock a second time for the verified
    mark, which that same writer holds."""
    import functools

    # Recorded by a service (which keeps no verified mark): the mark lies behind the head.
    GPUCreditTracker(db, account="b").grant(5, 20, 30)
    monkeypatch.setattr(cli_app, "Journal", functools.partial(Journal, lock_timeout=0.2))
    other = sqlite3.connect(db.removeprefix("sqlite:///"), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        done = run("replay")
    finally:
        other.rollback()
        other.close()
    assert done.exit_code == 0, done.stderr
    assert "digest " in done.stdout
    assert done.stderr.splitlines() == [
        "gpu-credits: warning: the replay stands, but no fresh checkpoint was saved "
        f"(SQLite database {db} stayed locked by another writer for 0.2 s (the "
        "lock_timeout); retry, or find the process holding a long write transaction); "
        "the checkpoints saved before are kept"]


def test_verify_beside_a_long_writer_answers_without_waiting_for_its_lock(
        run: Run, small: Path, db: str) -> None:
    """`verify` reads: while another process holds SQLite's write lock (a long import),
    it answers at once rather than after lock_timeout (10 s), waiting for the lock only
    to keep its verdict for the web view, which then keeps none."""
    import time

    assert run("verify").exit_code == 0  # recorded: the verdict the web view shows
    with Journal(db, read_only=True) as journal:
        kept = last_verification(journal)
    other = sqlite3.connect(db.removeprefix("sqlite:///"), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        done = run("verify")
        took = time.monotonic() - began
    finally:
        other.rollback()
        other.close()
    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith("ok: 12 events, hash chain intact")
    assert done.stderr == ""
    assert took < 5, f"verify waited {took:.1f} s for a write lock it does not need"
    with Journal(db, read_only=True) as journal:
        assert last_verification(journal) == kept


def test_a_mark_that_cannot_be_moved_leaves_the_previous_one(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning says the next command checks the chain from the previous mark: so the
    previous mark must still be there when the new one could not be written (another
    writer took the lock in between, the disk filled up)."""
    from eventstore import JournalError
    from projections.anchors import VERIFIED

    with Journal(db, read_only=True) as journal:
        before = [(s.position, s.digest) for s in journal.snapshots(VERIFIED)]
    assert before and before[0][0] == 12
    save = Journal.save_snapshot

    def full_disk(self: Journal, name: str, *args: Any) -> Any:
        if name == VERIFIED:
            raise JournalError("the disk is full")
        return save(self, name, *args)

    monkeypatch.setattr(Journal, "save_snapshot", full_disk)
    done = run("grant", "b", "5")
    assert done.exit_code == 0, done.stderr
    assert "the next command checks the chain from the previous mark" in done.stderr
    monkeypatch.undo()
    with Journal(db, read_only=True) as journal:
        assert [(s.position, s.digest) for s in journal.snapshots(VERIFIED)] == before


def test_a_verdict_that_cannot_be_kept_leaves_the_previous_one(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The web view shows the last verification kept: one that could not be written
    (another writer took the lock in between, a full disk) leaves the one before, never
    none ("never verified")."""
    from eventstore import JournalError
    from projections.verifications import VERIFICATION

    assert run("verify").exit_code == 0
    with Journal(db, read_only=True) as journal:
        kept = last_verification(journal)
    assert kept is not None and kept.ok
    save = Journal.save_snapshot

    def full_disk(self: Journal, name: str, *args: Any) -> Any:
        if name == VERIFICATION:
            raise JournalError("the disk is full")
        return save(self, name, *args)

    monkeypatch.setattr(Journal, "save_snapshot", full_disk)
    assert run("verify").exit_code == 0
    monkeypatch.undo()
    with Journal(db, read_only=True) as journal:
        assert last_verification(journal) == kept
