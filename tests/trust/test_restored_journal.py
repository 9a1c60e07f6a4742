"""A long-lived facade (a worker's `GPUCreditTracker` or `Scheduler`) whose journal is
restored from an older backup under it: it refuses to answer from what the journal no
longer holds, and a decision it refuses records nothing. Each test runs with either
facade: their decisions share the session's code, but not the calls that reach it."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from eventstore import ChainBroken, Journal
from projections import GPUCreditTracker, Scheduler
from tests.sqlite_copies import online_backup, restored_tables, saved_tables

_JOBS = itertools.count(1)


class _Worker:
    """A long-lived facade of either kind, on account "a": `record` makes one decision
    that records one event, `figure` reads the sum of what was recorded through it (a
    tracker's balance, a scheduler's reserved credits)."""

    def __init__(self, kind: str, url: str) -> None:
        self.tracker = GPUCreditTracker(url, account="a") if kind == "tracker" else None
        self.scheduler = None if kind == "tracker" else Scheduler(url, clock=lambda: 1000)

    def open(self) -> None:
        """Open account "a" with credits for every job, if this kind needs it."""
        if self.scheduler is not None:
            self.scheduler.open_account("a", 10**6, at=0)

    def record(self, amount: int, time: int) -> None:
        if self.tracker is not None:
            self.tracker.grant(amount, time, 10**6)
        else:
            assert self.scheduler is not None
            self.scheduler.submit(f"j{next(_JOBS)}", "a", amount, 1, at=time)

    def figure(self) -> int:
        if self.tracker is not None:
            return self.tracker.get_balance(500)
        assert self.scheduler is not None
        return self.scheduler.accounts["a"].reserved


KINDS = ["tracker", "scheduler"]


def _head(url: str) -> int:
    with Journal(url, read_only=True) as journal:
        assert journal.verify() is None
        return journal.head()


def _copies(url: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """How an operator copies this database and puts the copy back under whoever holds
    it open: a SQLite file's online backup and `.restore`, a PostgreSQL dump restored."""
    if url.startswith("sqlite:///"):
        live = Path(url.removeprefix("sqlite:///"))
        backup = live.with_name("backup.db")
        return (lambda: online_backup(live, backup)), (lambda: online_backup(backup, live))
    saved: list[dict[str, list[tuple[object, ...]]]] = []
    return (lambda: saved.append(saved_tables(url))), (lambda: restored_tables(url, saved[-1]))


def _read_past_a_backup(kind: str, url: str) -> tuple[Callable[[], None], _Worker, int]:
    """A long-lived worker that recorded 3 events of 10, the journal copied after the
    first: how to restore the copy, the worker, the copy's head."""
    save, restore = _copies(url)
    worker = _Worker(kind, url)
    worker.open()
    worker.record(10, 1)
    save()
    worker.record(10, 2)
    worker.record(10, 3)
    return restore, worker, _head(url) - 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_on_a_journal_restored_behind_it_records_nothing(
        tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    restore, worker, copied = _read_past_a_backup(kind, url)
    restore()
    with pytest.raises(ChainBroken, match=f"ends at position {copied}") as caught:
        worker.record(1, 6)
    assert caught.value.position == copied + 1
    assert f"{copied + 1}..{copied + 2}" in str(caught.value)
    assert "open a new facade" in str(caught.value)  # what to do
    assert _head(url) == copied  # the refused decision left nothing
    with pytest.raises(ChainBroken, match=f"ends at position {copied}") as caught:
        worker.figure()
    assert "open a new facade" in str(caught.value)  # a read says what to do too
    # A fresh facade opens the journal as it stands.
    assert _Worker(kind, url).figure() == 10


def _restored_then_rewritten_to_the_same_head(kind: str, url: str) -> tuple[_Worker, int]:
    """A long-lived worker that read 3 events; its journal restored from a copy holding
    1, then written up to 3 again, with other events, by another process: the worker and
    the head it read."""
    restore, worker, copied = _read_past_a_backup(kind, url)
    assert worker.figure() == 30
    restore()
    other = _Worker(kind, url)
    other.record(100, 2)
    other.record(100, 3)
    assert _head(url) == copied + 2
    return worker, copied + 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_on_a_journal_rewritten_up_to_its_head_is_refused(
        tmp_path: Path, kind: str) -> None:
    worker, head = _restored_then_rewritten_to_the_same_head(
        kind, f"sqlite:///{tmp_path / 'ledger.db'}")
    with pytest.raises(ChainBroken, match=f"position {head}") as caught:
        worker.figure()
    assert caught.value.position == head + 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_on_a_journal_rewritten_up_to_its_head_records_nothing(
        tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    worker, head = _restored_then_rewritten_to_the_same_head(kind, url)
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.record(1, 6)
    assert _head(url) == head  # the refused decision left nothing
    assert _Worker(kind, url).figure() == 210


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_on_a_journal_rewritten_past_its_head_records_nothing(
        tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    worker, head = _restored_then_rewritten_to_the_same_head(kind, url)
    _Worker(kind, url).record(100, 4)
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.record(1, 6)
    assert _head(url) == head + 1  # the refused decision left nothing
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.figure()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("longer", [False, True], ids=["as-long", "longer"])
def test_a_decision_after_folding_another_writers_events_then_a_rewrite_records_nothing(
        database_url: str, kind: str, longer: bool) -> None:
    """A worker's decision catches up on another writer's event (inside its own
    transaction, not a verified read) and records on top of it; the journal is then
    restored from a copy taken before that decision and written on by a third process,
    as long as what the worker folded or longer. Its next decision, and its next read,
    must find that the record it last folded is not there any more: were the point it
    checks left where it was before that catch-up, the decision would chain onto the
    other history (and the read fold the other history's events on top of its own)."""
    save, restore = _copies(database_url)
    worker = _Worker(kind, database_url)
    worker.open()
    worker.record(10, 1)
    _Worker(kind, database_url).record(10, 2)  # another writer: unseen by the worker
    save()
    worker.record(10, 3)  # folds the other writer's event, then records its own
    head = _head(database_url)
    restore()
    third = _Worker(kind, database_url)
    third.record(100, 4)
    if longer:
        third.record(100, 5)
    assert _head(database_url) == head + longer

    with pytest.raises(ChainBroken, match=f"chain hash at position {head}") as caught:
        worker.record(1, 6)
    assert caught.value.position == head + 1
    assert "open a new facade" in str(caught.value)  # what to do
    assert _head(database_url) == head + longer  # the refused decision left nothing
    with pytest.raises(ChainBroken, match=f"chain hash at position {head}") as caught:
        worker.figure()
    assert "open a new facade" in str(caught.value)  # a read says what to do too
    # A fresh facade works on the journal as it stands.
    assert _Worker(kind, database_url).figure() == 20 + 100 * (1 + longer)


@pytest.mark.postgres
def test_a_journal_restored_and_rewritten_on_postgres_is_refused(pg_fresh_url: str) -> None:
    """A PostgreSQL database rolled back to a copy under a long-lived tracker, then
    written on by another process up to (then past) the head the tracker read."""
    worker, head = _restored_then_rewritten_to_the_same_head("tracker", pg_fresh_url)
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.record(1, 6)
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.figure()
    _Worker("tracker", pg_fresh_url).record(100, 4)
    with pytest.raises(ChainBroken, match=f"position {head}"):
        worker.record(1, 6)
    assert _head(pg_fresh_url) == head + 1  # the refused decisions left nothing


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_altered_in_place_is_not_taken_for_a_journal_moved_under_its_reader(
        tmp_path: Path, kind: str) -> None:
    """Another writer's record edited in place before the worker read it: refused as an
    altered journal, without the advice a restore gets (a new facade would find the same
    edit)."""
    import re
    import sqlite3

    path = tmp_path / "ledger.db"
    worker = _Worker(kind, f"sqlite:///{path}")
    worker.open()
    worker.record(10, 1)
    _Worker(kind, f"sqlite:///{path}").record(10, 2)
    with sqlite3.connect(path) as db:
        position, payload = db.execute(
            "SELECT position, payload FROM events ORDER BY position DESC LIMIT 1").fetchone()
        edited = re.sub(r"\b10\b", "11", payload, count=1)
        assert edited != payload
        db.execute("UPDATE events SET payload = ? WHERE position = ?", (edited, position))
    with pytest.raises(ChainBroken) as caught:
        worker.figure()
    assert caught.value.position == position
    assert not caught.value.moved_under
    assert "open a new facade" not in str(caught.value)
