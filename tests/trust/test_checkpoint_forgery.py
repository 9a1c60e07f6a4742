"""A checkpoint forged and re-sealed, as an attacker with write access to the database would.

A checkpoint's seal is a plain SHA-256 of its bytes: whoever can write the `snapshots`
table can change what it holds and seal it again. Its recorded digest covers what decides
a figure now, not all that answers read (a refill rate, the summary `accounts` reads), so
`verify` compares every checkpoint with the fold of the journal, not its digest alone.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from eventstore import Journal
from projections import GPUCreditTracker, queries
from projections.checkpoint import CHECKPOINT, MAGIC
from projections.ledger import STATE
from projections.replay import replay, verify

Body = list[Any]


def _journal(path: Path) -> str:
    """A journal of two accounts at `path`, checkpointed at its head."""
    url = f"sqlite:///{path}"
    journal = Journal(url)
    try:
        for account in ("a", "b"):
            tracker = GPUCreditTracker(journal, account=account)
            tracker.grant(100, 0, 1_000)
            tracker.consume(30, 5)
        replay(journal, checkpoint=True)
    finally:
        journal.close()
    return url


def _reseal(path: Path, change: Callable[[Body], None]) -> None:
    """Apply `change` to the body of the checkpoint stored at `path`, and seal it again."""
    with sqlite3.connect(path) as db:
        (snapshot_id, data), = db.execute(
            "SELECT id, state FROM snapshots WHERE name = ?", (CHECKPOINT,)).fetchall()
        end = data.index(b"\n", len(MAGIC))
        header = orjson.loads(data[len(MAGIC):end])
        del header["sha256"]
        body: Body = list(msgspec.msgpack.decode(data[end + 1:]))
        change(body)
        new_body = msgspec.msgpack.encode(body)
        head = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
        seal = hashlib.sha256(head + b"\n" + new_body).hexdigest()
        header["sha256"] = seal
        forged = (MAGIC + orjson.dumps(header, option=orjson.OPT_SORT_KEYS) + b"\n"
                  + new_body)
        db.execute("UPDATE snapshots SET state = ? WHERE id = ?", (forged, snapshot_id))


def _summary_richer(body: Body) -> None:
    """Account "a"'s row of the summary (what `accounts` reads) 1,000 credits richer."""
    at, rows, endings = msgspec.msgpack.decode(body[4])
    i = body[1].index("a")
    rows[i][3] += 1_000  # balance
    rows[i][5] += 1_000  # available
    body[4] = msgspec.msgpack.encode([at, rows, endings])


def _refilled(body: Body) -> None:
    """Account "a" given a refill of one credit a second: outside the state digest."""
    i = body[1].index("a")
    state = STATE.decode(msgspec.msgpack.decode(body[2][i]))
    state.refill_rate, state.refill_cap = 3_600, 10**6
    state.refill_anchor = state.last_time
    body[2][i] = msgspec.msgpack.encode(STATE.encode(state))


def _accounts_balance(journal: Journal) -> int:
    return next(row.figures.balance for row in queries.accounts(journal).rows
                if row.account == "a")


def _later_balance(journal: Journal) -> int:
    return queries.balance(journal, "a", at=500).figures.balance


@pytest.mark.parametrize(("change", "answer"), [(_summary_richer, _accounts_balance),
                                                (_refilled, _later_balance)],
                         ids=["summary", "refill"])
def test_a_resealed_checkpoint_that_answers_otherwise_fails_verify(
        tmp_path: Path, change: Callable[[Body], None],
        answer: Callable[[Journal], int]) -> None:
    path = tmp_path / "journal.db"
    url = _journal(path)
    journal = Journal(url, read_only=True)
    try:
        before = answer(journal)
        assert verify(journal).ok
    finally:
        journal.close()
    _reseal(path, change)
    journal = Journal(url, read_only=True)
    try:
        # The forgery works: the answer comes from the checkpoint.
        assert answer(journal) != before
        report = verify(journal)
    finally:
        journal.close()
    assert not report.ok
    assert report.first_bad_position == 4
    assert "checkpoint" in (report.problem or "") and "'a'" in (report.problem or "")
