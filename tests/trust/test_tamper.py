"""Tampering with a stored journal, as an attacker with write access to the database would.

Each single edit of a stored record is found at its position by `verify`; a rewrite that
re-hashes the whole chain, and a truncation of the tail that points the head back, both
pass the chain check on their own and are caught by an anchor kept outside the database.
Run on SQLite and on PostgreSQL (the memory journal has no storage to tamper with).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from eventstore import Anchor, ChainBroken, Journal
from eventstore.hashing import GENESIS_HASH, canonical_json, record_hash
from projections import GPUCreditTracker, Scheduler
from projections.anchors import check_anchor, head_anchor
from projections.replay import verify

# Every tamper case on both implementations of the chain check.
pytestmark = pytest.mark.usefixtures("chain_check")

EVENTS = 12
"""The size of the tampered journal: grants and usage reports of two accounts."""


def _fill(url: str) -> None:
    """Record EVENTS events at `url`: three grants and three usage reports per account."""
    journal = Journal(url)
    try:
        for account in ("a", "b"):
            tracker = GPUCreditTracker(journal, account=account)
            for t in range(3):
                tracker.grant(100, 10 * t, 10 * t + 25)
                tracker.consume(30, 10 * t + 5)
        assert journal.head() == EVENTS
    finally:
        journal.close()


@pytest.fixture(scope="module")
def sqlite_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite journal of EVENTS events, written once for the module: each test
    tampers with a copy (writing it, migrations first, was most of a test's time)."""
    path = tmp_path_factory.mktemp("tamper") / "journal.db"
    _fill(f"sqlite:///{path}")
    left = [p.name for p in path.parent.iterdir() if p != path]
    assert not left, f"the closed journal left {left} beside its file"
    return path


@pytest.fixture
def url(database_url: str, request: pytest.FixtureRequest) -> str:
    """A journal URL holding EVENTS events, on SQLite or PostgreSQL."""
    if database_url.startswith("sqlite:///"):
        template: Path = request.getfixturevalue("sqlite_journal")
        shutil.copyfile(template, database_url.removeprefix("sqlite:///"))
    else:
        _fill(database_url)
    return database_url


@pytest.fixture
def db(url: str) -> Iterator[Engine]:
    """A raw connection to the journal's tables: the attacker's tool."""
    engine = create_engine(url)
    yield engine
    engine.dispose()  # pytest resumes the fixture after the test, failed or not


def _sql(engine: Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(text(statement), params)


def _first_bad(url: str) -> int | None:
    journal = Journal(url)
    try:
        found = journal.verify()
        report = verify(journal)
        assert report.ok == (found is None)
        if found is not None:
            assert report.first_bad_position == found
        return found
    finally:
        journal.close()


def _anchor(url: str) -> Anchor:
    journal = Journal(url)
    try:
        return head_anchor(journal)
    finally:
        journal.close()


def _check(url: str, anchor: Anchor) -> tuple[bool, int | None]:
    journal = Journal(url)
    try:
        result = check_anchor(journal, anchor)
        return result.ok, result.first_bad_position
    finally:
        journal.close()


EDITS: dict[str, Callable[[Engine, int], None]] = {
    "payload": lambda db, p: _sql(
        db, "UPDATE events SET payload = replace(payload, '100', '900') WHERE position = :p",
        p=p),
    "event time": lambda db, p: _sql(
        db, "UPDATE events SET event_time = event_time - 1 WHERE position = :p", p=p),
    "recorded at": lambda db, p: _sql(
        db, "UPDATE events SET recorded_at = recorded_at + 1 WHERE position = :p", p=p),
    "event id": lambda db, p: _sql(
        db, "UPDATE events SET event_id = 'forged' WHERE position = :p", p=p),
    "stream": lambda db, p: _sql(
        db, "UPDATE events SET stream = 'c' WHERE position = :p", p=p),
    "type": lambda db, p: _sql(
        db, "UPDATE events SET type = CASE WHEN type = 'grant' THEN 'consume' ELSE 'grant' END "
        "WHERE position = :p", p=p),
    "hash": lambda db, p: _sql(
        db, "UPDATE events SET hash = :h WHERE position = :p", h="f" * 64, p=p),
    "payload spelling": lambda db, p: _sql(
        db, "UPDATE events SET payload = replace(payload, ':', ': ') WHERE position = :p",
        p=p),
    "deleted": lambda db, p: _sql(db, "DELETE FROM events WHERE position = :p", p=p),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("position", [1, 6, EVENTS])
def test_each_single_edit_is_found_at_its_position(url: str, db: Engine, edit: str,
                                                    position: int) -> None:
    anchor = _anchor(url)
    if edit == "payload" and position % 2 == 0:
        position -= 1  # the grants carry "100"
    EDITS[edit](db, position)
    assert _first_bad(url) == position
    ok, first_bad = _check(url, anchor)
    assert not ok and first_bad == position


def test_an_edited_head_row_is_found(url: str, db: Engine) -> None:
    anchor = _anchor(url)
    _sql(db, "UPDATE journal_head SET hash = :h", h="0" * 64)
    assert _first_bad(url) is not None
    assert not _check(url, anchor)[0]


def _sqlite_only(url: str) -> None:
    if not url.startswith("sqlite"):
        pytest.skip("only SQLite keeps a value of another type or encoding than its column's")


def _problem(url: str) -> str | None:
    journal = Journal(url)
    try:
        return journal.verify_chain().problem
    finally:
        journal.close()


@pytest.mark.parametrize("column", ["stream", "payload", "event_id", "type", "hash"])
@pytest.mark.parametrize("position", [1, 6, EVENTS])
def test_stored_text_that_is_not_utf8_is_found_at_its_position(
        url: str, db: Engine, column: str, position: int) -> None:
    _sqlite_only(url)
    anchor = _anchor(url)
    _sql(db, f"UPDATE events SET {column} = CAST(x'7b22ff227d' AS TEXT) WHERE position = :p",
         p=position)
    assert _first_bad(url) == position
    assert f"position {position} holds stored text that is not UTF-8" in str(_problem(url))
    assert _check(url, anchor) == (False, position)


@pytest.mark.parametrize("value", ["CAST(x'7b22ff227d' AS TEXT)", "x'ab'"])
def test_a_head_anchor_is_refused_from_a_last_hash_that_is_not_text(
        url: str, db: Engine, value: str) -> None:
    """An anchor is kept outside the database to be compared later: one made of bytes
    written behind the journal's back would be no anchor at all."""
    _sqlite_only(url)
    _sql(db, f"UPDATE events SET hash = {value} WHERE position = :p", p=EVENTS)
    with pytest.raises(ChainBroken, match="not text") as caught:
        _anchor(url)
    assert caught.value.position == EVENTS
    assert _first_bad(url) == EVENTS


def test_a_payload_nested_too_deep_to_decode_is_found(url: str, db: Engine) -> None:
    nested = '{"a":' + "[" * 5000 + "]" * 5000 + "}"
    _sql(db, "UPDATE events SET payload = :t WHERE position = 6", t=nested)
    assert _first_bad(url) == 6
    assert "not canonical JSON" in str(_problem(url))


@pytest.mark.parametrize(("edit", "says"), [
    ("DELETE FROM journal_head", "is missing (its row was deleted)"),
    ("UPDATE journal_head SET position = 'abc'", "is damaged (position 'abc', hash "),
    ("UPDATE journal_head SET hash = CAST(x'ff' AS TEXT)",
     f"is damaged (position {EVENTS}, hash not text)"),
])
def test_a_head_row_deleted_or_not_of_its_type_is_found(url: str, db: Engine,
                                                         edit: str, says: str) -> None:
    if "DELETE" not in edit:
        _sqlite_only(url)
    anchor = _anchor(url)
    _sql(db, edit)
    assert _first_bad(url) == EVENTS
    assert f"the journal's head marker {says}" in str(_problem(url))
    assert _check(url, anchor)[0] is False
    assert _anchor(url) == anchor  # the last record still says where the chain ends


def _rows(db: Engine) -> list[dict[str, object]]:
    with db.connect() as conn:
        result = conn.execute(text(
            "SELECT position, event_id, stream, version, type, event_time, recorded_at, "
            "payload FROM events ORDER BY position"))
        return [dict(row._mapping) for row in result]


def _rewrite(db: Engine, rows: list[dict[str, object]]) -> None:
    """Store `rows` as the whole journal, renumbered and re-hashed with the project's own
    hash function, the head row pointed at the new end: a chain that verifies."""
    prev = GENESIS_HASH
    new = []
    for number, row in enumerate(rows, start=1):
        payload = json.loads(str(row["payload"]))
        digest = record_hash(prev, position=number, id=str(row["event_id"]),
                             stream=str(row["stream"]), version=int(str(row["version"])),
                             type=str(row["type"]), time=int(str(row["event_time"])),
                             recorded_at=int(str(row["recorded_at"])), payload=payload)
        new.append({**row, "position": number, "payload": canonical_json(payload),
                    "hash": digest})
        prev = digest
    with db.begin() as conn:
        conn.execute(text("DELETE FROM events"))
        conn.execute(text("DELETE FROM snapshots"))
        if new:
            conn.execute(text(
                "INSERT INTO events (position, event_id, stream, version, type, event_time, "
                "recorded_at, payload, hash) VALUES (:position, :event_id, :stream, "
                ":version, :type, :event_time, :recorded_at, :payload, :hash)"), new)
        conn.execute(text("UPDATE journal_head SET position = :p, hash = :h"),
                     {"p": len(new), "h": prev})


def test_a_rewrite_that_rehashes_the_chain_fails_against_an_anchor(url: str,
                                                                   db: Engine) -> None:
    anchor = _anchor(url)
    rows = _rows(db)
    # Delete a usage report of account a (the versions of its stream are fixed up too).
    victim = next(r for r in rows if r["type"] == "consume" and r["stream"] == "a")
    kept = [r for r in rows if r is not victim]
    version = 0
    for row in kept:
        if row["stream"] == "a":
            version += 1
            row["version"] = version
    _rewrite(db, kept)
    assert _first_bad(url) is None  # the forged chain is consistent on its own...
    ok, first_bad = _check(url, anchor)
    assert not ok  # ...but not with the head kept outside the database
    assert first_bad is not None and first_bad <= anchor.position


def test_an_earlier_anchor_catches_a_rewrite_of_its_prefix(url: str, db: Engine) -> None:
    rows = _rows(db)
    journal = Journal(url)
    try:
        early = Anchor(4, next(r.hash for r in journal.read(order="position")
                               if r.position == 4))
    finally:
        journal.close()
    rows[1]["payload"] = str(rows[1]["payload"]).replace("30", "3")
    _rewrite(db, rows)
    assert _first_bad(url) is None
    assert _check(url, early) == (False, 4)


def test_a_truncated_tail_fails_against_an_anchor(url: str, db: Engine) -> None:
    anchor = _anchor(url)
    rows = _rows(db)
    journal = Journal(url)
    try:
        previous = next(r.hash for r in journal.read(order="position")
                        if r.position == EVENTS - 1)
    finally:
        journal.close()
    # No re-hash needed: drop the newest event and point the head row back.
    with db.begin() as conn:
        conn.execute(text("DELETE FROM events WHERE position = :p"), {"p": EVENTS})
        conn.execute(text("UPDATE journal_head SET position = :p, hash = :h"),
                     {"p": EVENTS - 1, "h": previous})
    assert len(rows) == EVENTS
    assert _first_bad(url) is None
    assert _check(url, anchor) == (False, EVENTS)


def test_an_untouched_journal_holds_its_anchors(url: str) -> None:
    anchor = _anchor(url)
    assert anchor.position == EVENTS
    assert _check(url, anchor) == (True, None)
    journal = Journal(url)
    try:
        GPUCreditTracker(journal, account="a").consume(1, 100)
    finally:
        journal.close()
    assert _check(url, anchor) == (True, None)  # appending keeps every earlier anchor
    assert _check(url, Anchor(0, GENESIS_HASH)) == (True, None)


def test_a_facade_never_answers_from_an_altered_journal(url: str, db: Engine) -> None:
    tracker = GPUCreditTracker(url, account="a")
    assert tracker.get_balance(100) >= 0
    # Events recorded by another writer, then altered before this facade reads them.
    other = Journal(url)
    try:
        GPUCreditTracker(other, account="b").grant(50, 40, 90)
        GPUCreditTracker(other, account="b").consume(5, 41)
    finally:
        other.close()
    EDITS["event time"](db, EVENTS + 1)
    with pytest.raises(ChainBroken) as info:
        tracker.get_balance(100)
    assert info.value.position == EVENTS + 1
    # A facade opened afresh refuses as well, naming the same position.
    with pytest.raises(ChainBroken) as again:
        GPUCreditTracker(url, account="a").get_balance(100)
    assert again.value.position == EVENTS + 1
    with pytest.raises(ChainBroken):
        Scheduler(url, clock=lambda: 100).accounts["a"].balance  # noqa: B018


def test_a_facade_keeps_answering_from_its_own_appends(url: str) -> None:
    tracker = GPUCreditTracker(url, account="a")
    for t in range(40, 60):
        tracker.consume(1, t)
    assert tracker.get_balance(60) == GPUCreditTracker(url, account="a").get_balance(60)
