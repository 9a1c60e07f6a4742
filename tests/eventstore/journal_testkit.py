"""Helpers for the journal's tests, and the bodies of the processes they spawn.

A plain module (not a conftest) so spawned child processes can import it by name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event

from sqlalchemy import text

from eventstore import Journal, JournalLike, MemoryJournal, NewEvent


def ev(id: str, time: int = 0, stream: str = "s", type: str = "t", **payload: object) -> NewEvent:
    """A NewEvent with short defaults."""
    return NewEvent(id=id, stream=stream, type=type, time=time, payload=payload)


def tamper_payload(journal: JournalLike, position: int, edit: Callable[[str], str]) -> None:
    """Rewrite the stored payload text of one position behind the journal's back."""
    if isinstance(journal, MemoryJournal):
        row = journal._rows[position - 1]
        row.payload_text = edit(row.payload_text)
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
