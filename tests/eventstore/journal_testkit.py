"""Helpers for the journal's tests, and the bodies of the processes they spawn.

A plain module (not a conftest) so spawned child processes can import it by name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event

from sqlalchemy import text

from eventstore import GENESIS_HASH, ChainReport, Journal, JournalLike, MemoryJournal, NewEvent
from eventstore.hashing import record_hash_text
from eventstore.records import StoredRow


def ev(id: str, time: int = 0, stream: str = "s", type: str = "t", **payload: object) -> NewEvent:
    """A NewEvent with short defaults."""
    return NewEvent(id=id, stream=stream, type=type, time=time, payload=payload)


def assert_broken_at(report: ChainReport, position: int, says: str = "") -> None:
    """The chain check failed, first at `position`, and (when given) its problem says `says`."""
    assert not report.ok and report.first_bad_position == position, report
    if says:
        assert report.problem is not None and says in report.problem, report


def tamper_payload(journal: JournalLike, position: int, edit: Callable[[str], str]) -> None:
    """Rewrite the stored payload text of one position behind the journal's back."""
    if isinstance(journal, MemoryJournal):
        row = journal._stored[position - 1]
        journal._stored[position - 1] = (*row[:7], edit(row[7]), row[8])
        return
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        old = conn.execute(
            text("SELECT payload FROM events WHERE position = :p"), {"p": position}
        ).scalar_one()
        conn.execute(
            text("UPDATE events SET payload = :v WHERE position = :p"),
            {"v": edit(old), "p": position},
        )


def stored_rows(journal: JournalLike) -> list[StoredRow]:
    """Every stored row, in position order, read behind the journal's back."""
    if isinstance(journal, MemoryJournal):
        return list(journal._stored)
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT position, event_id, stream, version, type, event_time, recorded_at, "
                "payload, hash FROM events ORDER BY position"
            )
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def rehash(rows: list[StoredRow]) -> list[StoredRow]:
    """The rows renumbered 1..N and re-chained: what a forger with the hash function makes."""
    out: list[StoredRow] = []
    prev = GENESIS_HASH
    for i, r in enumerate(rows, start=1):
        prev = record_hash_text(prev, i, r[1], r[2], r[3], r[4], r[5], r[6], r[7])
        out.append((i, r[1], r[2], r[3], r[4], r[5], r[6], r[7], prev))
    return out


def replace_rows(journal: JournalLike, rows: list[StoredRow], *, move_head: bool = True) -> None:
    """Replace the journal's whole content behind its back (and its head marker, if asked)."""
    last = (rows[-1][0], rows[-1][8]) if rows else (0, GENESIS_HASH)
    if isinstance(journal, MemoryJournal):
        journal._stored[:] = rows
        return
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        conn.execute(text("DELETE FROM events"))
        for r in rows:
            conn.execute(
                text(
                    "INSERT INTO events (position, event_id, stream, version, type, event_time, "
                    "recorded_at, payload, hash) VALUES (:p, :i, :s, :v, :t, :et, :ra, :pl, :h)"
                ),
                dict(zip(("p", "i", "s", "v", "t", "et", "ra", "pl", "h"), r, strict=True)),
            )
        if move_head:
            conn.execute(
                text("UPDATE journal_head SET position = :p, hash = :h WHERE id = 1"),
                {"p": last[0], "h": last[1]},
            )


def set_head_marker(journal: Journal, position: int, hash: str) -> None:
    """Edit a SQL journal's head marker behind its back."""
    with journal._engine.begin() as conn:
        conn.execute(text("UPDATE journal_head SET position = :p, hash = :h WHERE id = 1"),
                     {"p": position, "h": hash})


def delete_head_marker(journal: Journal) -> None:
    """Delete a SQL journal's head marker row behind its back."""
    with journal._engine.begin() as conn:
        conn.execute(text("DELETE FROM journal_head"))


def empty_the_journal(journal: Journal) -> None:
    """Take everything out of a journal's tables behind its back (the schema stays), so a
    schema shared by a session's examples starts each one empty: rows of another table
    left from an example before (a private part, a batch, a request key) would describe
    positions this one appends anew."""
    with journal._engine.begin() as conn:
        for table in ("private_parts", "batches", "snapshots", "request_keys", "events"):
            conn.execute(text(f"DELETE FROM {table}"))
        conn.execute(text("UPDATE journal_head SET position = 0, hash = :h"),
                     {"h": GENESIS_HASH})


def pin_clock(journal: JournalLike, now: Callable[[], int]) -> None:
    """Make the journal take recorded_at from `now` (µs) instead of the wall clock."""
    assert isinstance(journal, Journal | MemoryJournal)
    journal._clock = now


# -- child processes -------------------------------------------------------------


def append_worker(url: str, worker: int, batches: int, size: int, go: Event) -> None:
    """Append `batches` batches of `size` own events plus shared ids every writer repeats."""
    j = Journal(url, lock_timeout=30)
    go.wait()
    for b in range(batches):
        own = [
            NewEvent(
                f"w{worker}-{b}-{i}",
                f"stream-{(worker + i) % 3}",
                "tick",
                b * 7 % 5,
                {"w": worker, "i": i},
            )
            for i in range(size)
        ]
        # The same shared ids with the same content from every writer: recorded once.
        shared = [NewEvent(f"shared-{b}", "shared", "tick", b, {"b": b})]
        j.append(own[: size // 2] + shared + own[size // 2 :])
        j.append([NewEvent(f"w{worker}-{b}-single", "single", "tick", b, {})])
    j.close()


def hold_transaction_worker(url: str, size: int, ready: Event) -> None:
    """Append a batch inside a transaction, then hang before commit (to be SIGKILLed)."""
    j = Journal(url, lock_timeout=30)
    with j.transaction(["held"]) as tx:
        tx.append([NewEvent(f"held-{i}", "held", "tick", i, {"i": i}) for i in range(size)])
        ready.set()
        time.sleep(120)


def huge_batch_worker(url: str, size: int, ready: Event) -> None:
    """Append one huge batch (to be SIGKILLed while the INSERT runs)."""
    j = Journal(url, lock_timeout=30)
    batch = [
        NewEvent(f"huge-{i}", f"h{i % 10}", "tick", i % 1000, {"i": i, "pad": "x" * 40})
        for i in range(size)
    ]
    ready.set()
    j.append(batch)
    os._exit(0)
