"""One contract, every backend: memory, SQLite file, PostgreSQL.

The same test bodies run on each `journal_url` kind, so the three journals cannot
drift apart in what append, read, verify and transactions mean.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from journal_testkit import ev, pin_clock, tamper_payload

from eventstore import (
    GENESIS_HASH,
    IdempotencyConflict,
    Journal,
    JournalLike,
    MemoryJournal,
    NewEvent,
    Transaction,
    VersionConflict,
    canonical_json,
)
from eventstore.hashing import record_hash
from eventstore.testing import open_journal


def positions(journal: JournalLike, **kw: Any) -> list[int]:
    return [e.position for e in journal.read(**kw)]


# -- idempotency and conflicts ----------------------------------------------------


def test_both_journals_satisfy_the_protocol(journal: JournalLike) -> None:
    assert isinstance(journal, JournalLike)
    with journal.transaction() as tx:
        assert isinstance(tx, Transaction)


def test_append_assigns_positions_versions_and_chain(journal: JournalLike) -> None:
    out = journal.append([ev("a", 5, "x"), ev("b", 3, "y"), ev("c", 4, "x")])
    assert [(e.position, e.stream, e.version) for e in out] == [
        (1, "x", 1),
        (2, "y", 1),
        (3, "x", 2),
    ]
    prev = GENESIS_HASH
    for e in out:
        assert e.hash == record_hash(
            prev,
            position=e.position,
            id=e.id,
            stream=e.stream,
            version=e.version,
            type=e.type,
            time=e.time,
            recorded_at=e.recorded_at,
            payload=e.payload,
        )
        prev = e.hash
    assert journal.head() == 3
    assert journal.verify() is None


def test_same_id_same_content_returns_the_original(journal: JournalLike) -> None:
    first = journal.append([ev("a", 1, amount=10), ev("b", 2)])
    again = journal.append([ev("c", 3), ev("a", 1, amount=10)])
    assert again[1] == first[0]  # the original record, recorded_at and hash included
    assert again[0].position == 3
    assert journal.head() == 3
    # A batch of repeats only appends nothing at all.
    assert journal.append([ev("b", 2), ev("a", 1, amount=10)]) == [first[1], first[0]]
    assert journal.head() == 3
    assert journal.verify() is None


def test_repeat_within_one_batch_is_recorded_once(journal: JournalLike) -> None:
    out = journal.append([ev("a", 1, k=[1, 2]), ev("b", 2), ev("a", 1, k=[1, 2])])
    assert out[0] == out[2]
    assert [e.id for e in journal.read(order="position")] == ["a", "b"]


def test_payload_equality_is_by_canonical_json(journal: JournalLike) -> None:
    a = journal.append([NewEvent("a", "s", "t", 1, {"x": 1, "y": (1, 2)})])[0]
    b = journal.append([NewEvent("a", "s", "t", 1, {"y": [1, 2], "x": 1})])[0]
    assert a == b and journal.head() == 1


@pytest.mark.parametrize(
    "other",
    [
        ev("a", 2, amount=10),  # time
        ev("a", 1, amount=11),  # payload
        ev("a", 1, "other-stream", amount=10),  # stream
        ev("a", 1, type="other-type", amount=10),  # type
    ],
)
def test_same_id_other_content_is_a_conflict(journal: JournalLike, other: NewEvent) -> None:
    journal.append([ev("a", 1, amount=10)])
    with pytest.raises(IdempotencyConflict) as err:
        journal.append([ev("z", 9), other])
    message = str(err.value)
    assert "'a'" in message and '{"amount":10}' in message
    assert canonical_json(dict(other.payload)) in message
    assert journal.head() == 1 and journal.get("z") is None
    assert isinstance(err.value, ValueError)


def test_conflict_within_one_batch_appends_nothing(journal: JournalLike) -> None:
    with pytest.raises(IdempotencyConflict, match="'a'"):
        journal.append([ev("a", 1, v=1), ev("b", 1), ev("a", 1, v=2)])
    assert journal.head() == 0


# -- atomic batches and validation ------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        NewEvent("", "s", "t", 1, {}),
        NewEvent("x", "", "t", 1, {}),
        NewEvent("x", "s", "", 1, {}),
        NewEvent("x", "s", "t", True, {}),
        NewEvent("x", "s", "t", 1.5, {}),  # type: ignore[arg-type]
        NewEvent("x", "s", "t", 2**63, {}),
        NewEvent("x", "s", "t", 1, [1, 2]),  # type: ignore[arg-type]
        NewEvent("x", "s", "t", 1, {"f": float("nan")}),
        NewEvent("x", "s", "t", 1, {"o": object()}),
        NewEvent("x", "s", "t", 1, {1: "int key"}),  # type: ignore[dict-item]
        NewEvent(7, "s", "t", 1, {}),  # type: ignore[arg-type]
    ],
)
def test_one_invalid_event_appends_nothing(journal: JournalLike, bad: NewEvent) -> None:
    journal.append([ev("before")])
    with pytest.raises(ValueError):
        journal.append([ev("ok-1"), bad, ev("ok-2")])
    assert journal.head() == 1
    assert journal.get("ok-1") is None


def test_append_wants_a_sequence_of_events(journal: JournalLike) -> None:
    with pytest.raises(ValueError):
        journal.append(ev("a"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        journal.append([{"id": "a"}])  # type: ignore[list-item]
    assert journal.append([]) == []
    assert journal.head() == 0


# -- optimistic concurrency ---------------------------------------------------------


def test_expected_versions(journal: JournalLike) -> None:
    journal.append([ev("a", stream="x")], expected_versions={"x": 0})
    journal.append([ev("b", stream="x"), ev("c", stream="y")], expected_versions={"x": 1, "y": 0})
    assert journal.stream_version("x") == 2 and journal.stream_version("y") == 1
    assert journal.stream_version("nobody") == 0
    with pytest.raises(VersionConflict, match="'x' expected 1, is at 2"):
        journal.append([ev("d", stream="y"), ev("e", stream="x")], expected_versions={"x": 1})
    assert journal.head() == 3 and journal.get("d") is None
    # A stream not in the batch can still be asserted.
    with pytest.raises(VersionConflict):
        journal.append([ev("f", stream="z")], expected_versions={"y": 5})
    assert journal.head() == 3
    with pytest.raises(ValueError):
        journal.append([ev("g")], expected_versions={"x": -1})


def test_repeat_of_a_recorded_batch_is_not_a_version_conflict(journal: JournalLike) -> None:
    first = journal.append([ev("a", stream="x")], expected_versions={"x": 0})
    # A retry after a lost reply: nothing new, so nothing to conflict with.
    assert journal.append([ev("a", stream="x")], expected_versions={"x": 0}) == first


# -- reading ------------------------------------------------------------------------


@pytest.fixture
def timeline(journal: JournalLike) -> JournalLike:
    # (id, time, stream) appended in this order: positions 1..8.
    spec = [("p1", 5, "a"), ("p2", 3, "b"), ("p3", 5, "a"), ("p4", 1, "b"),
            ("p5", 9, "a"), ("p6", 3, "a"), ("p7", 5, "b"), ("p8", 0, "a")]  # fmt: skip
    journal.append([ev(i, t, s) for i, t, s in spec[:3]])
    for i, t, s in spec[3:]:
        journal.append([ev(i, t, s)])
    return journal


def test_canonical_order_is_event_time_then_position(timeline: JournalLike) -> None:
    assert positions(timeline) == [8, 4, 2, 6, 1, 3, 7, 5]
    assert positions(timeline, order="position") == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("batch_size", [1, 2, 3, 5000])
def test_every_filter(timeline: JournalLike, batch_size: int) -> None:
    def p(**kw: Any) -> list[int]:
        return positions(timeline, batch_size=batch_size, **kw)

    assert p() == [8, 4, 2, 6, 1, 3, 7, 5]
    assert p(after_position=4) == [8, 6, 7, 5]
    assert p(to_position=4) == [4, 2, 1, 3]
    assert p(after_position=2, to_position=6) == [4, 6, 3, 5]
    # A narrow position window (read along positions, then sorted) and a wide one.
    assert p(after_position=6, to_position=7) == [7]
    assert p(after_position=5, to_position=7) == [6, 7]
    assert p(from_time=3) == [2, 6, 1, 3, 7, 5]
    assert p(to_time=5) == [8, 4, 2, 6, 1, 3, 7]
    assert p(from_time=3, to_time=3) == [2, 6]
    assert p(from_time=6, to_time=4) == []
    assert p(stream="a") == [8, 6, 1, 3, 5]
    assert p(stream="nobody") == []
    assert p(after=(3, 2)) == [6, 1, 3, 7, 5]
    assert p(after=(5, 1)) == [3, 7, 5]
    assert p(after=(5, 3), stream="b") == [7]
    assert p(after=(3, 2), to_position=6, stream="a") == [6, 1, 3, 5]
    assert p(order="position", after=(5, 1)) == [3, 5, 7]
    assert p(order="position", stream="b", after_position=2) == [4, 7]
    assert p(order="position", from_time=1, to_time=5, to_position=7) == [1, 2, 3, 4, 6, 7]


def test_read_arguments_are_checked(journal: JournalLike) -> None:
    for kw in [
        {"order": "time"},
        {"batch_size": 0},
        {"after_position": "1"},
        {"after": (1,)},
        {"to_time": 1.0},
        {"stream": ""},
    ]:
        with pytest.raises(ValueError):
            journal.read(**kw)


def test_a_read_sees_the_journal_as_it_stood_when_it_began(journal: JournalLike) -> None:
    journal.append([ev(f"e{i}", i) for i in range(10)])
    reader = journal.read(batch_size=3)
    assert next(reader).id == "e0"
    journal.append([ev("late", 2), ev("new", 100)])
    assert [e.id for e in reader] == [f"e{i}" for i in range(1, 10)]


def test_lookups(journal: JournalLike) -> None:
    ticks = iter([100, 200, 200, 150, 400])  # a clock that steps back at 150
    pin_clock(journal, lambda: next(ticks))
    assert journal.max_time() is None and journal.position_at(10**18) == 0
    journal.append([ev("a", 7, "x", n=1)])  # 100
    journal.append([ev("b", 3, "y"), ev("c", 2, "x")])  # 200
    journal.append([ev("d", 1, "z")])  # 200
    journal.append([ev("e", 5, "z")])  # 150 -> stays 200
    journal.append([ev("f", 4, "y")])  # 400
    recorded = [e.recorded_at for e in journal.read(order="position")]
    assert recorded == [100, 200, 200, 200, 200, 400]
    assert journal.position_at(99) == 0
    assert journal.position_at(100) == 1
    assert journal.position_at(399) == 5
    assert journal.position_at(400) == 6
    got = journal.get("a")
    assert got is not None and got.payload == {"n": 1} and got.position == 1
    assert journal.get("nobody") is None
    assert journal.max_time() == 7
    assert journal.max_time(["y", "z"]) == 5
    assert journal.max_time(["nobody"]) is None
    assert journal.max_time([]) is None


def test_payload_is_a_value_the_caller_cannot_corrupt(journal: JournalLike) -> None:
    out = journal.append([ev("a", 1, items=[1])])[0]
    out.payload["items"].append(2)  # type: ignore[index]
    got = journal.get("a")
    assert got is not None and got.payload == {"items": [1]}
    assert journal.verify() is None


def test_unicode_payloads_round_trip(journal: JournalLike) -> None:
    payload = {"name": "Zoë 🚀", "nested": {"b": [1, {"c": None}], "a": True}}
    journal.append([NewEvent("u", "ström", "t", 1, payload)])
    got = journal.get("u")
    assert got is not None and got.payload == payload and got.stream == "ström"
    assert journal.verify() is None


# -- the chain ------------------------------------------------------------------------


def test_verify_finds_one_tampered_payload_byte(journal: JournalLike) -> None:
    journal.append([ev(f"e{i}", i, amount=100 + i) for i in range(1, 8)])
    assert journal.verify() is None
    tamper_payload(journal, 4, lambda s: s.replace("104", "105"))
    assert journal.verify() == 4


def test_verify_finds_a_payload_made_invalid_or_non_canonical(journal: JournalLike) -> None:
    journal.append([ev(f"e{i}", i, amount=i) for i in range(1, 6)])
    tamper_payload(journal, 5, lambda s: s[:-1] + "]")
    assert journal.verify() == 5
    tamper_payload(journal, 5, lambda s: s[:-1] + "}")
    assert journal.verify() is None
    tamper_payload(journal, 2, lambda s: s.replace(":", ": "))  # same value, other bytes
    assert journal.verify() == 2


def test_same_events_give_the_same_hashes_on_every_backend(journal: JournalLike) -> None:
    batch = [ev("a", 3, "x", v=1.5), ev("b", 1, "y", s="é")]
    pin_clock(journal, lambda: 1_700_000_000_000_000)
    reference = MemoryJournal(clock=lambda: 1_700_000_000_000_000)
    assert journal.append(batch) == reference.append(batch)


# -- transactions --------------------------------------------------------------------


def test_transaction_commits_on_clean_exit(journal: JournalLike) -> None:
    with journal.transaction(["acct:a", "acct:b"]) as tx:
        assert tx.head() == 0
        tx.append([ev("a", 2)])
        tx.append([ev("b", 1)])
        assert tx.head() == 2
        assert [e.id for e in tx.read()] == ["b", "a"]
        assert journal.head() == 2  # this thread joins its own transaction
    assert [e.id for e in journal.read()] == ["b", "a"]
    assert journal.verify() is None


def test_transaction_rolls_back_on_exception(journal: JournalLike) -> None:
    journal.append([ev("before", 1, "x")])
    with pytest.raises(RuntimeError), journal.transaction(["k"]) as tx:
        tx.append([ev("a", 1, "x"), ev("b", 0, "y")])
        raise RuntimeError("decided against it")
    assert journal.head() == 1 and journal.get("a") is None
    assert journal.stream_version("x") == 1 and journal.max_time(["y"]) is None
    # The positions were not burnt: the next append takes 2.
    assert journal.append([ev("c")])[0].position == 2
    assert journal.verify() is None


def test_a_failed_append_inside_a_transaction_keeps_earlier_appends(journal: JournalLike) -> None:
    with journal.transaction() as tx:
        tx.append([ev("a", 1, v=1)])
        with pytest.raises(IdempotencyConflict):
            tx.append([ev("a", 1, v=2)])
    assert journal.head() == 1


def test_uncommitted_appends_are_invisible_to_other_threads(journal_url: str) -> None:
    # SQL journals: the other thread reads the committed state at once. The memory
    # journal: it waits for the transaction to end. Neither ever sees an
    # uncommitted append.
    writer = open_journal(journal_url)
    reader = writer if journal_url == "memory" else open_journal(journal_url)
    try:
        open_ = threading.Event()
        seen: list[tuple[int, bool]] = []
        t = threading.Thread(target=lambda: seen.append((reader.head(), open_.is_set())))
        with writer.transaction() as tx:
            open_.set()
            tx.append([ev("a")])
            t.start()
            t.join(0.5)
            open_.clear()
        t.join(10)
        assert seen in ([(0, True)], [(1, False)])
        assert reader.head() == 1
    finally:
        writer.close()
        reader.close()


def test_nested_transaction_joins_the_outer_one(journal: JournalLike) -> None:
    with pytest.raises(KeyError), journal.transaction(["a"]):
        journal.append([ev("x")])
        with journal.transaction(["b"]) as inner:
            inner.append([ev("y")])
        raise KeyError("abandon both")
    assert journal.head() == 0


# -- snapshots -------------------------------------------------------------------------


def test_snapshots(journal: JournalLike) -> None:
    s1 = journal.save_snapshot("ledger", 10, 50, "d1", b"\x00state-1")
    s2 = journal.save_snapshot("ledger", 12, 40, "d2", b"state-2")
    s3 = journal.save_snapshot("ledger", 11, 50, "d3", b"")
    journal.save_snapshot("other", 1, 1, "d4", b"x")
    assert [s.id for s in journal.snapshots("ledger")] == [s2.id, s1.id, s3.id]
    assert journal.snapshots("ledger")[0].digest == "d2"
    assert journal.load_snapshot(s1.id) == b"\x00state-1"
    assert journal.load_snapshot(s3.id) == b""
    with pytest.raises(KeyError):
        journal.load_snapshot(10**9)
    assert journal.drop_snapshots("ledger", from_time=45) == 2
    assert journal.snapshots("ledger") == [s2]
    assert journal.drop_snapshots("ledger") == 1
    assert journal.snapshots("ledger") == [] and len(journal.snapshots("other")) == 1
    s5 = journal.save_snapshot("ledger", 1, 1, "d5", b"y")
    assert s5.id not in (s1.id, s2.id, s3.id)  # ids are never reused
    with pytest.raises(ValueError):
        journal.save_snapshot("ledger", 1, 1, "d", "not bytes")  # type: ignore[arg-type]


def test_closed_journal_refuses_work(journal_url: str) -> None:
    j = open_journal(journal_url)
    j.close()
    with pytest.raises(Exception, match="closed"):
        j.append([ev("a")])


def test_sql_journal_repr_hides_the_password() -> None:
    j = Journal()
    try:
        assert "sqlite" in repr(j) and j.url is None
    finally:
        j.close()
