"""Several processes on one journal, and writers killed mid-batch (SQLite file, PostgreSQL).

Child processes are spawned (not forked), each opening its own Journal, exactly as
separate `gpu-credits` commands would.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from journal_testkit import append_worker, ev, hold_transaction_worker, huge_batch_worker
from sqlalchemy import text

from eventstore import Journal

pytestmark = pytest.mark.slow

SPAWN = mp.get_context("spawn")
WRITERS, BATCHES, SIZE = 4, 6, 25


@pytest.fixture
def url(database_url: str) -> str:
    """A fresh SQLite file or PostgreSQL schema, already upgraded by this process."""
    Journal(database_url).close()
    return database_url


def test_four_processes_append_concurrently(url: str) -> None:
    go = SPAWN.Event()
    procs = [
        SPAWN.Process(target=append_worker, args=(url, w, BATCHES, SIZE, go))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    reader = Journal(url)
    problems: list[str] = []
    done = threading.Event()

    def follow() -> None:
        # A reader resuming after the last position it saw must only ever see the
        # next positions in order: no hole now that a smaller position fills later.
        seen = 0
        while True:
            finished = done.is_set()
            got = [e.position for e in reader.read(after_position=seen, order="position")]
            if got != list(range(seen + 1, seen + 1 + len(got))):
                problems.append(f"after {seen} saw {got[:5]}...")
                return
            seen += len(got)
            if finished:
                return
            time.sleep(0.005)

    follower = threading.Thread(target=follow)
    follower.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"writer exited with {p.exitcode}"
    done.set()
    follower.join(30)
    assert problems == []

    every = list(reader.read(order="position"))
    ids = Counter(e.id for e in every)
    expected = {
        f"w{w}-{b}-{i}" for w in range(WRITERS) for b in range(BATCHES) for i in range(SIZE)
    }
    expected |= {f"w{w}-{b}-single" for w in range(WRITERS) for b in range(BATCHES)}
    expected |= {f"shared-{b}" for b in range(BATCHES)}
    assert set(ids) == expected and max(ids.values()) == 1
    assert [e.position for e in every] == list(range(1, len(expected) + 1))
    for stream in {e.stream for e in every}:
        versions = [e.version for e in every if e.stream == stream]
        assert versions == list(range(1, len(versions) + 1))
    assert reader.verify() is None
    reader.close()


def _kill(proc: mp.process.BaseProcess) -> None:
    assert proc.pid is not None and proc.exitcode is None, "the writer finished before the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL


def test_writer_killed_inside_its_transaction_leaves_nothing(url: str) -> None:
    j = Journal(url)
    j.append([ev(f"before-{i}", i) for i in range(5)])
    ready = SPAWN.Event()
    child = SPAWN.Process(target=hold_transaction_worker, args=(url, 500, ready))
    child.start()
    assert ready.wait(60), "the writer never reached its append"
    _kill(child)
    # The killed batch is gone; the next writer takes the very next position.
    assert j.head() == 5 and j.get("held-0") is None
    assert j.append([ev("after")])[0].position == 6
    assert j.verify() is None
    j.close()


class InsertWatch:
    """Tells whether the child's big batch is being written right now."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.journal = None if url.startswith("sqlite") else Journal(url)

    def running(self) -> bool:
        if self.journal is None:
            wal = Path(self.url.removeprefix("sqlite:///") + "-wal")
            # A batch this size spills to the WAL long before it commits.
            return wal.exists() and wal.stat().st_size > 2_000_000
        with self.journal._engine.connect() as conn:
            n = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    "AND (query LIKE 'COPY events%' OR query LIKE 'INSERT INTO events%')"
                )
            ).scalar_one()
        return bool(n)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def test_writer_killed_during_a_huge_batch_leaves_no_partial_batch(url: str) -> None:
    j = Journal(url)
    j.append([ev(f"before-{i}", i) for i in range(3)])
    ready = SPAWN.Event()
    # Big enough that the INSERT (or COPY) runs for a good fraction of a second.
    size = 80_000 if url.startswith("sqlite") else 40_000
    child = SPAWN.Process(target=huge_batch_worker, args=(url, size, ready))
    child.start()
    watch = InsertWatch(url)
    assert ready.wait(60)
    deadline = time.monotonic() + 60
    while not watch.running():
        assert child.exitcode is None, "the writer finished before its INSERT was seen"
        assert time.monotonic() < deadline, "never saw the INSERT running"
        time.sleep(0.005)
    _kill(child)
    watch.close()
    assert j.head() == 3 and j.get("huge-0") is None
    assert j.append([ev("after")])[0].position == 4
    assert j.verify() is None
    j.close()
