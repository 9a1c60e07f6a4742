"""The command line when the journal's storage misbehaves: a disk that fills up between a
command's own write and the caches it writes after it.

A command whose decision is committed must say so (exit 0, a warning), never `error`:
a user who reads `error` runs it again, and a grant without `--id` is then recorded
twice. The disk is made full by SQLite's own error ("database or disk is full") raised
where a real full disk raised it on a small tmpfs.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any, NoReturn

import pytest
from cli_helpers import SMALL, Run, imported, journal_head
from contract.kit import cli_runner
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


def test_an_auditors_read_only_copy_answers_every_reading_command(
        tmp_path: Path, read_only_mount: Any) -> None:
    """A journal handed over on a read-only medium: every command that only reads
    answers as it does on the original, `replay` prints the digest and says it saved no
    checkpoint, and a write is refused saying the file system is read-only.

    Every one of them said `... is not a SQLite database (unable to open database
    file)`, and `replay` (which saves a checkpoint) could not run at all."""
    original = cli_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    imported(original, tmp_path / "small.jsonl", SMALL)
    assert original("grant", "b", "5", "--at", "20").exit_code == 0
    reads = [("balance", "a", "--at", "4"), ("balance", "a", "--at", "4", "--as-known-at", "5"),
             ("statement", "a"), ("explain", "a"), ("verify",), ("export",),
             ("revisions",), ("accounts",), ("head",), ("jobs",)]
    digest = original("replay", "--json")
    assert digest.exit_code == 0, digest.stderr
    before = {args: original(*args) for args in reads}
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copyfile(tmp_path / "ledger.db", folder / "ledger.db")  # closed: no -wal
    read_only_mount(folder)
    run = cli_runner(f"sqlite:///{folder / 'ledger.db'}")
    for args, answer in before.items():
        result = run(*args)
        assert (result.exit_code, result.stdout) == (answer.exit_code, answer.stdout), args
    replayed = run("replay", "--json")
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stdout == digest.stdout
    assert "is read-only here: no checkpoint was saved" in replayed.stderr
    write = run("grant", "b", "5")
    assert write.exit_code == 2
    assert "is on a read-only file system: nothing can be written there" in write.stderr
    # `serve` refused there names the flag that serves such a copy (told only that
    # "commands that only read still answer", its operator had no command to run).
    served = run("serve", "--port", "0")
    assert served.exit_code == 2
    assert "read-only file system" in served.stderr
    assert "serve --read-only" in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1, served.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["ledger.db"]


def test_a_replay_that_cannot_save_its_checkpoint_still_answers(
        run: Run, small: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a full disk `replay` folded the whole journal, failed to save the checkpoint
    (a cache) and printed only `error: ... the disk is full`: the digest, its answer, was
    lost. It prints the digest and warns, and keeps the checkpoints saved before."""
    from projections import replay as replay_module

    first = run("replay", "--json")
    assert first.exit_code == 0, first.stderr
    with Journal(db) as journal:
        saved = [info.id for info in journal.snapshots(CHECKPOINT)]
    assert run("grant", "b", "5", "--at", "20").exit_code == 0
    with Journal(db) as journal:
        expected = journal.head()

    def full(journal: Any, *args: Any) -> NoReturn:
        raise _disk_full(journal)

    monkeypatch.setattr(replay_module, "save_checkpoint", full)
    result = run("replay", "--json")
    assert result.exit_code == 0, result.stderr
    assert f'"position": {expected}' in result.stdout
    assert "warning: the replay stands, but no fresh checkpoint was saved" in result.stderr
    assert "is full" in result.stderr
    with Journal(db) as journal:
        assert [info.id for info in journal.snapshots(CHECKPOINT)] == saved
