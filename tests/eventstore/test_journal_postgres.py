"""PostgreSQL-only behaviour: advisory locks per key and lock timeouts (and SQLite's one writer)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from journal_testkit import ev

from eventstore import Journal, LockTimeout


@pytest.mark.postgres
def test_different_keys_do_not_wait_for_each_other(pg_fresh_url: str) -> None:
    a, b = Journal(pg_fresh_url, lock_timeout=0.5), Journal(pg_fresh_url, lock_timeout=0.5)
    try:
        with a.transaction(["account:a"]) as tx_a:
            tx_a.read()
            # Another decision about another key proceeds, appends and commits.
            with b.transaction(["account:b"]) as tx_b:
                tx_b.append([ev("b1", stream="b")])
            # The same key waits, then gives up with a clear error.
            with pytest.raises(LockTimeout, match="lock_timeout"), b.transaction(["account:a"]):
                pass
            tx_a.append([ev("a1", stream="a")])
        assert [e.id for e in a.read(order="position")] == ["b1", "a1"]
        assert a.verify() is None
    finally:
        a.close()
        b.close()


@pytest.mark.postgres
def test_same_key_serialises_decisions(pg_fresh_url: str) -> None:
    """Two read-decide-append on one key: the second sees the first's append."""
    journals = [Journal(pg_fresh_url) for _ in range(2)]
    decided: list[int] = []

    def decide(j: Journal, name: str) -> None:
        with j.transaction(["account:x"]) as tx:
            n = sum(1 for _ in tx.read(stream="x"))
            time.sleep(0.2)  # widen the window a race would need
            tx.append([ev(name, stream="x")], expected_versions={"x": n})
            decided.append(n)

    threads = [threading.Thread(target=decide, args=(j, f"e{i}")) for i, j in enumerate(journals)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(decided) == [0, 1]
    for j in journals:
        j.close()


@pytest.mark.postgres
def test_head_lock_wait_is_bounded(pg_fresh_url: str) -> None:
    a, b = Journal(pg_fresh_url), Journal(pg_fresh_url, lock_timeout=0.3)
    try:
        with a.transaction() as tx:
            tx.append([ev("a")])  # holds the head row until commit
            started = time.monotonic()
            with pytest.raises(LockTimeout):
                b.append([ev("b")])
            assert time.monotonic() - started < 5
        assert b.append([ev("b")])[0].position == 2
    finally:
        a.close()
        b.close()


def test_sqlite_writer_waits_then_times_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one-writer.db'}"
    a, b = Journal(url), Journal(url, lock_timeout=0.3)
    try:
        with a.transaction() as tx:
            tx.append([ev("a")])
            assert b.head() == 0  # WAL: readers never wait for the writer
            with pytest.raises(LockTimeout, match="lock_timeout"):
                b.append([ev("b")])
        assert b.append([ev("b")])[0].position == 2
        assert b.verify() is None
    finally:
        a.close()
        b.close()
