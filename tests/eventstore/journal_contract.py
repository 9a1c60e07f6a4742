"""The journal contract, written once and run on every backend.

Like the recorder test cases `eventsourcing` ships (`eventsourcing/tests/persistence.py`)
and SQLAlchemy's dialect suite: each class below states one part of what a journal
promises, in tests named by the behaviour they check; `JournalContract` gathers them.
A backend runs the whole contract by subclassing it and saying how to open a journal:

    class TestMyJournal(JournalContract):
        @pytest.fixture
        def journal_url(self, tmp_path: Path) -> str:
            return ...  # what `open_journal` takes

        def open_journal(self, url: str) -> JournalLike:  # optional
            return MyJournal(url)

`test_journal_contract.py` runs it on the memory journal, a SQLite file and PostgreSQL,
with the mixins of tests/backend_classes.py that provide those `journal_url` fixtures.
A behaviour only one backend has (PostgreSQL's advisory locks, SQLite's one writer) gets
its own test file instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from journal_testkit import (
    assert_broken_at,
    delete_head_marker,
    ev,
    pin_clock,
    rehash,
    replace_rows,
    set_head_marker,
    stored_rows,
    tamper_payload,
)

from eventstore import (
    GENESIS_HASH,
    Anchor,
    Batch,
    ChainBroken,
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


def filled(journal: JournalLike, n: int = 10) -> JournalLike:
    journal.append([ev(f"e{i}", i, f"s{i % 3}", amount=100 + i) for i in range(1, n + 1)])
    return journal


OTHER_CONTENTS_OF_A = [
    ev("a", 2, amount=10),  # time
    ev("a", 1, amount=11),  # payload
    ev("a", 1, "other-stream", amount=10),  # stream
    ev("a", 1, type="other-type", amount=10),  # type
]
"""Events with the id of `ev("a", 1, amount=10)` and another content, a field each."""


class _OnABackend:
    """What every part of the contract needs: a journal, opened the backend's way."""

    @pytest.fixture
    def journal_url(self) -> str:
        """What `open_journal` takes; a backend's subclass overrides this fixture."""
        raise NotImplementedError("a JournalContract subclass defines the journal_url fixture")

    def open_journal(self, url: str) -> JournalLike:
        """Open a journal (a second call with the same url: another handle on it)."""
        return open_journal(url)

    @pytest.fixture
    def journal(self, journal_url: str) -> Iterator[JournalLike]:
        """An empty journal, closed after the test."""
        j = self.open_journal(journal_url)
        try:
            yield j
        finally:
            j.close()


class AppendReadContract(_OnABackend):
    """Appends, idempotency, versions, reads, transactions, snapshots."""

    def test_the_journal_and_its_transactions_satisfy_the_protocols(
        self, journal: JournalLike
    ) -> None:
        assert isinstance(journal, JournalLike)
        with journal.transaction() as tx:
            assert isinstance(tx, Transaction)

    def test_append_assigns_positions_versions_and_chain(self, journal: JournalLike) -> None:
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

    def test_same_id_same_content_returns_the_original(self, journal: JournalLike) -> None:
        first = journal.append([ev("a", 1, amount=10), ev("b", 2)])
        again = journal.append([ev("c", 3), ev("a", 1, amount=10)])
        assert again[1] == first[0]  # the original record, recorded_at and hash included
        assert again[0].position == 3
        assert journal.head() == 3
        # A batch of repeats only appends nothing at all.
        assert journal.append([ev("b", 2), ev("a", 1, amount=10)]) == [first[1], first[0]]
        assert journal.head() == 3
        assert journal.verify() is None

    def test_repeat_within_one_batch_is_recorded_once(self, journal: JournalLike) -> None:
        out = journal.append([ev("a", 1, k=[1, 2]), ev("b", 2), ev("a", 1, k=[1, 2])])
        assert out[0] == out[2]
        assert [e.id for e in journal.read(order="position")] == ["a", "b"]

    def test_payload_equality_is_by_canonical_json(self, journal: JournalLike) -> None:
        a = journal.append([NewEvent("a", "s", "t", 1, {"x": 1, "y": (1, 2)})])[0]
        b = journal.append([NewEvent("a", "s", "t", 1, {"y": [1, 2], "x": 1})])[0]
        assert a == b and journal.head() == 1

    @pytest.mark.parametrize(
        "other",
        OTHER_CONTENTS_OF_A,
    )
    def test_same_id_other_content_is_a_conflict(
        self, journal: JournalLike, other: NewEvent
    ) -> None:
        journal.append([ev("a", 1, amount=10)])
        with pytest.raises(IdempotencyConflict) as err:
            journal.append([ev("z", 9), other])
        message = str(err.value)
        assert "'a'" in message and '{"amount":10}' in message
        assert canonical_json(dict(other.payload)) in message
        assert journal.head() == 1 and journal.get("z") is None
        assert isinstance(err.value, ValueError)

    @pytest.mark.parametrize(
        "other",
        [
            *OTHER_CONTENTS_OF_A,
            NewEvent("a", "s", "t", 1, {"amount": 10}, private={"name": "x"}),  # private
        ],
    )
    def test_one_id_twice_in_a_batch_with_any_field_other_is_a_conflict(
        self, journal: JournalLike, other: NewEvent
    ) -> None:
        with pytest.raises(IdempotencyConflict, match="'a' appears twice in one batch"):
            journal.append([ev("a", 1, amount=10), ev("b", 1), other])
        assert journal.head() == 0

    def test_conflict_within_one_batch_appends_nothing(self, journal: JournalLike) -> None:
        with pytest.raises(IdempotencyConflict, match="'a'"):
            journal.append([ev("a", 1, v=1), ev("b", 1), ev("a", 1, v=2)])
        assert journal.head() == 0

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
            NewEvent("x", 7, "t", 1, {}),  # type: ignore[arg-type]
            NewEvent("x", "s", 7, 1, {}),  # type: ignore[arg-type]
        ],
    )
    def test_one_invalid_event_appends_nothing(self, journal: JournalLike, bad: NewEvent) -> None:
        journal.append([ev("before")])
        with pytest.raises(ValueError):
            journal.append([ev("ok-1"), bad, ev("ok-2")])
        assert journal.head() == 1
        assert journal.get("ok-1") is None

    def test_append_wants_a_sequence_of_events(self, journal: JournalLike) -> None:
        with pytest.raises(ValueError):
            journal.append(ev("a"))  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            journal.append([{"id": "a"}])  # type: ignore[list-item]
        assert journal.append([]) == []
        assert journal.head() == 0

    def test_expected_versions_guard_against_concurrent_writers(self, journal: JournalLike) -> None:
        journal.append([ev("a", stream="x")], expected_versions={"x": 0})
        journal.append(
            [ev("b", stream="x"), ev("c", stream="y")], expected_versions={"x": 1, "y": 0}
        )
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

    @pytest.mark.parametrize("expected", [
        [("x", 0)], {"": 0}, {"x\x00": 0}, {1: 0}, {"x": True}, {"x": "0"}, {"x": 2**63},
    ])
    def test_malformed_expected_versions_are_refused_and_append_nothing(
            self, journal: JournalLike, expected: object) -> None:
        journal.append([ev("a", stream="x")])
        with pytest.raises(ValueError, match="expected"):
            journal.append([ev("b", stream="x")], expected_versions=expected)  # type: ignore[arg-type]
        assert journal.head() == 1 and journal.get("b") is None

    def test_repeat_of_a_recorded_batch_is_not_a_version_conflict(
        self, journal: JournalLike
    ) -> None:
        first = journal.append([ev("a", stream="x")], expected_versions={"x": 0})
        # A retry after a lost reply: nothing new, so nothing to conflict with.
        assert journal.append([ev("a", stream="x")], expected_versions={"x": 0}) == first

    @pytest.fixture
    def timeline(self, journal: JournalLike) -> JournalLike:
        # (id, time, stream) appended in this order: positions 1..8.
        spec = [("p1", 5, "a"), ("p2", 3, "b"), ("p3", 5, "a"), ("p4", 1, "b"),
                ("p5", 9, "a"), ("p6", 3, "a"), ("p7", 5, "b"), ("p8", 0, "a")]  # fmt: skip
        journal.append([ev(i, t, s) for i, t, s in spec[:3]])
        for i, t, s in spec[3:]:
            journal.append([ev(i, t, s)])
        return journal

    def test_canonical_order_is_event_time_then_position(self, timeline: JournalLike) -> None:
        assert positions(timeline) == [8, 4, 2, 6, 1, 3, 7, 5]
        assert positions(timeline, order="position") == [1, 2, 3, 4, 5, 6, 7, 8]

    @pytest.mark.parametrize("batch_size", [1, 2, 3, 5000])
    def test_every_read_filter_selects_the_documented_events(
        self, timeline: JournalLike, batch_size: int
    ) -> None:
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

    def test_read_arguments_are_checked(self, journal: JournalLike) -> None:
        for kw in [
            {"order": "time"},
            {"batch_size": 0},
            {"after_position": "1"},
            {"after": (1,)},
            {"to_time": 1.0},
            {"stream": ""},
            {"to_position": "1"},
            {"to_position": 2.0},
            {"from_time": 1.5},
            {"type": ""},
            {"after": [1, 2]},
            {"after": (1, "2")},
        ]:
            with pytest.raises(ValueError):
                journal.read(**kw)

    def test_a_read_sees_the_journal_as_it_stood_when_it_began(self, journal: JournalLike) -> None:
        journal.append([ev(f"e{i}", i) for i in range(10)])
        reader = journal.read(batch_size=3)
        assert next(reader).id == "e0"
        journal.append([ev("late", 2), ev("new", 100)])
        assert [e.id for e in reader] == [f"e{i}" for i in range(1, 10)]

    def test_lookups_by_id_stream_time_and_wall_clock(self, journal: JournalLike) -> None:
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
        for bad in ("400", 400.0, True):
            with pytest.raises(ValueError, match="recorded_at"):
                journal.position_at(bad)  # type: ignore[arg-type]
        got = journal.get("a")
        assert got is not None and got.payload == {"n": 1} and got.position == 1
        assert journal.get("nobody") is None
        assert journal.max_time() == 7
        assert journal.max_time(["y", "z"]) == 5
        assert journal.max_time(["nobody"]) is None
        assert journal.max_time([]) is None

    def test_head_and_get_many_answer_what_head_and_get_many_do(
            self, journal: JournalLike) -> None:
        assert journal.head_and_get_many([]) == (0, {})
        assert journal.head_and_get_many(["nobody"]) == (0, {})
        filled(journal, 5)
        journal.append([ev("private", 9, "p", n=1)])
        for ids in ([], ["e1"], ["e5", "e2", "nobody", "e2"], ["private", "x\x00y"],
                    [f"e{i}" for i in range(7)], [f"e{i}" for i in range(1200)]):
            head, found = journal.head_and_get_many(ids)
            assert head == journal.head() == 6
            assert found == journal.get_many(ids)
            assert set(found) == {i for i in ids if journal.get(i) is not None}

    def test_look_up_names_the_head_the_records_and_the_bound_request_keys(
            self, journal: JournalLike) -> None:
        empty = journal.look_up([], [])
        assert (empty.head, empty.recorded, empty.bound) == (0, {}, frozenset())
        filled(journal, 3)
        with journal.transaction():
            journal.append([ev("b1", 4, "b", n=1)])
            journal.bind_request("batch-1", "sha", "{}", [4])
        journal.bind_request("batch-2", "sha", "{}")
        for ids, keys in ((["e1", "nobody"], ["batch-1", "e1", "nobody", "batch-1"]),
                          ([], ["batch-2", "x\x00y"]), (["b1"], []),
                          ([f"e{i}" for i in range(1200)], [f"k{i}" for i in range(1200)])):
            found = journal.look_up(ids, keys)
            assert found.head == journal.head() == 4
            assert found.recorded == journal.get_many(ids)
            assert found.bound == {k for k in keys
                                   if "\x00" not in k and journal.request(k) is not None}

    def test_payload_is_a_value_the_caller_cannot_corrupt(self, journal: JournalLike) -> None:
        out = journal.append([ev("a", 1, items=[1])])[0]
        out.payload["items"].append(2)  # type: ignore[index]
        got = journal.get("a")
        assert got is not None and got.payload == {"items": [1]}
        assert journal.verify() is None

    def test_unicode_payloads_round_trip(self, journal: JournalLike) -> None:
        payload = {"name": "Zoë 🚀", "nested": {"b": [1, {"c": None}], "a": True}}
        journal.append([NewEvent("u", "ström", "t", 1, payload)])
        got = journal.get("u")
        assert got is not None and got.payload == payload and got.stream == "ström"
        assert journal.verify() is None

    def test_verify_finds_one_tampered_payload_byte(self, journal: JournalLike) -> None:
        journal.append([ev(f"e{i}", i, amount=100 + i) for i in range(1, 8)])
        assert journal.verify() is None
        tamper_payload(journal, 4, lambda s: s.replace("104", "105"))
        assert journal.verify() == 4

    def test_verify_finds_a_payload_made_invalid_or_non_canonical(
        self, journal: JournalLike
    ) -> None:
        journal.append([ev(f"e{i}", i, amount=i) for i in range(1, 6)])
        tamper_payload(journal, 5, lambda s: s[:-1] + "]")
        assert journal.verify() == 5
        tamper_payload(journal, 5, lambda s: s[:-1] + "}")
        assert journal.verify() is None
        tamper_payload(journal, 2, lambda s: s.replace(":", ": "))  # same value, other bytes
        assert journal.verify() == 2
        assert "position 2 has a payload that is not canonical JSON" in str(
            journal.verify_chain().problem)

    @pytest.mark.parametrize("payload", ["[1]", "1", '"text"', "null"])
    def test_verify_finds_a_payload_that_is_not_an_object_though_rehashed(
        self, journal: JournalLike, payload: str
    ) -> None:
        """Canonical JSON, but no payload the journal writes (every one is an object):
        found at its position even with the chain re-hashed over it."""
        journal.append([ev(f"e{i}", i, amount=i) for i in range(1, 6)])
        rows = stored_rows(journal)
        rows[2] = (*rows[2][:7], payload, rows[2][8])
        replace_rows(journal, rehash(rows))
        assert journal.verify() == 3
        assert "position 3 has a payload that is not canonical JSON" in str(
            journal.verify_chain().problem)

    def test_same_events_give_the_same_hashes_on_every_backend(self, journal: JournalLike) -> None:
        batch = [ev("a", 3, "x", v=1.5), ev("b", 1, "y", s="é")]
        pin_clock(journal, lambda: 1_700_000_000_000_000)
        reference = MemoryJournal(clock=lambda: 1_700_000_000_000_000)
        assert journal.append(batch) == reference.append(batch)

    def test_transaction_commits_on_clean_exit(self, journal: JournalLike) -> None:
        with journal.transaction(["acct:a", "acct:b"]) as tx:
            assert tx.head() == 0
            tx.append([ev("a", 2)])
            tx.append([ev("b", 1)])
            assert tx.head() == 2
            assert [e.id for e in tx.read()] == ["b", "a"]
            assert journal.head() == 2  # this thread joins its own transaction
        assert [e.id for e in journal.read()] == ["b", "a"]
        assert journal.verify() is None

    def test_transaction_rolls_back_on_exception(self, journal: JournalLike) -> None:
        journal.append([ev("before", 1, "x")])
        with pytest.raises(RuntimeError), journal.transaction(["k"]) as tx:
            tx.append([ev("a", 1, "x"), ev("b", 0, "y")])
            raise RuntimeError("decided against it")
        assert journal.head() == 1 and journal.get("a") is None
        assert journal.stream_version("x") == 1 and journal.max_time(["y"]) is None
        # The positions were not burnt: the next append takes 2.
        assert journal.append([ev("c")])[0].position == 2
        assert journal.verify() is None
        # Nor do reads of one stream see what was rolled back.
        assert [e.id for e in journal.read(stream="x")] == ["before"]
        assert [e.id for e in journal.read(stream="y")] == []

    def test_a_rolled_back_transaction_leaves_each_streams_version_and_latest_time(
        self, journal: JournalLike
    ) -> None:
        journal.append([ev("x1", 5, "x"), ev("x2", 3, "x"), ev("y1", 4, "y")])
        with pytest.raises(RuntimeError), journal.transaction(["k"]) as tx:
            tx.append([ev("x3", 9, "x"), ev("y2", 2, "y"), ev("z1", 7, "z")])
            tx.append([ev("x4", 8, "x")])
            raise RuntimeError("decided against it")
        assert [journal.stream_version(s) for s in "xyz"] == [2, 1, 0]
        assert journal.max_time(["x"]) == 5 and journal.max_time(["y"]) == 4
        assert journal.max_time(["z"]) is None and journal.max_time() == 5
        # The next appends take the versions that follow the kept rows.
        after = journal.append([ev("x5", 1, "x"), ev("z2", 1, "z")])
        assert [(e.stream, e.version) for e in after] == [("x", 3), ("z", 1)]
        assert journal.verify() is None

    def test_a_failed_append_inside_a_transaction_keeps_earlier_appends(
        self, journal: JournalLike
    ) -> None:
        with journal.transaction() as tx:
            tx.append([ev("a", 1, v=1)])
            with pytest.raises(IdempotencyConflict):
                tx.append([ev("a", 1, v=2)])
        assert journal.head() == 1

    def test_uncommitted_appends_are_invisible_to_other_threads(self, journal_url: str) -> None:
        # SQL journals: the other thread reads the committed state at once. The memory
        # journal: it waits for the transaction to end. Neither ever sees an
        # uncommitted append.
        writer = self.open_journal(journal_url)
        reader = writer if journal_url == "memory" else self.open_journal(journal_url)
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

    def test_nested_transaction_joins_the_outer_one(self, journal: JournalLike) -> None:
        with pytest.raises(KeyError), journal.transaction(["a"]):
            journal.append([ev("x")])
            with journal.transaction(["b"]) as inner:
                inner.append([ev("y")])
            raise KeyError("abandon both")
        assert journal.head() == 0

    def test_snapshots_are_saved_listed_loaded_and_dropped(self, journal: JournalLike) -> None:
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
        # Later saves get larger ids: `through_id` drops those saved up to one.
        s6 = journal.save_snapshot("ledger", 2, 2, "d6", b"z")
        assert s6.id > s5.id
        assert journal.drop_snapshots("ledger", through_id=s5.id) == 1
        assert journal.snapshots("ledger") == [s6]
        # `from_id` with `through_id`: exactly one, whatever its neighbours' times.
        s7 = journal.save_snapshot("ledger", 3, 2, "d7", b"w")
        assert journal.drop_snapshots("ledger", from_id=s6.id, through_id=s6.id) == 1
        assert journal.snapshots("ledger") == [s7]
        assert journal.drop_snapshots("ledger", from_id=s7.id + 1) == 0
        assert journal.drop_snapshots("ledger", from_id=s7.id, through_id=s7.id) == 1
        with pytest.raises(ValueError):
            journal.save_snapshot("ledger", 1, 1, "d", "not bytes")  # type: ignore[arg-type]

    def test_a_rolled_back_transaction_keeps_no_snapshot_change(
        self, journal: JournalLike
    ) -> None:
        # A checkpoint saved in a block that then fails may hold what the block decided:
        # it goes with the block's rows, and what the block dropped comes back.
        kept = journal.save_snapshot("ledger", 1, 1, "d1", b"kept")
        with pytest.raises(KeyError), journal.transaction(["a"]):
            journal.append([ev("x")])
            journal.save_snapshot("ledger", 2, 2, "d2", b"rolled back")
            assert journal.drop_snapshots("ledger", through_id=kept.id) == 1
            raise KeyError("abandon")
        assert journal.snapshots("ledger") == [kept]
        assert journal.load_snapshot(kept.id) == b"kept"
        later = journal.save_snapshot("ledger", 3, 3, "d3", b"later")
        assert later.id > kept.id
        with journal.transaction(["a"]):
            journal.save_snapshot("ledger", 4, 4, "d4", b"committed")
            journal.drop_snapshots("ledger", through_id=kept.id)
        assert [s.digest for s in journal.snapshots("ledger")] == ["d3", "d4"]

    def test_numbers_no_record_can_hold_are_refused_or_find_nothing_alike(
        self, journal: JournalLike
    ) -> None:
        # Every integer the journal stores fits a signed 64-bit column: past it, the SQL
        # backends' drivers raise their own errors where the memory journal went on.
        journal.append([ev("a")])
        kept = journal.save_snapshot("ledger", 1, 1, "d", b"x")
        wide = 2**63
        with pytest.raises(ValueError, match="64 bits"):
            journal.bind_request("k", "f", "answer", [1, wide])
        assert journal.request("k") is None
        for bound in ("from_time", "before_position", "through_id", "from_id"):
            with pytest.raises(ValueError, match="64 bits"):
                journal.drop_snapshots("ledger", **{bound: wide})
            with pytest.raises(ValueError):
                journal.drop_snapshots("ledger", **{bound: "1"})  # type: ignore[arg-type]
        assert journal.snapshots("ledger") == [kept]
        for missing in (wide, -wide - 1, True, "1"):
            with pytest.raises(KeyError):
                journal.load_snapshot(missing)  # type: ignore[arg-type]
        for bounds in ({"after_position": wide}, {"to_position": wide},
                       {"after_position": "0"}, {"batch_size": 0}):
            with pytest.raises(ValueError):
                list(journal.private_parts(**bounds))  # type: ignore[arg-type]

    def test_closed_journal_refuses_work(self, journal_url: str) -> None:
        j = self.open_journal(journal_url)
        j.close()
        with pytest.raises(Exception, match="closed"):
            j.append([ev("a")])


Tamper = Callable[[JournalLike], None]


def _edit_position_6(journal: JournalLike) -> None:
    tamper_payload(journal, 6, lambda s: s.replace("106", "107"))


def _delete_position_4_and_rechain(journal: JournalLike) -> None:
    rows = stored_rows(journal)
    replace_rows(journal, rehash(rows[:3] + rows[4:]))


def _truncate_to_7_and_move_the_head(journal: JournalLike) -> None:
    replace_rows(journal, stored_rows(journal)[:7])  # no re-hash needed for this one
    assert journal.head_anchor().position == 7


class ChainContract(_OnABackend):
    """The hash chain: anchors, tampering found, reads that check the chain."""

    def test_an_empty_journal_is_anchored_at_the_genesis_hash(self, journal: JournalLike) -> None:
        assert journal.head_anchor() == Anchor(0, GENESIS_HASH)
        assert journal.verify_chain().ok
        assert journal.verify_chain(anchor=Anchor(0, GENESIS_HASH)).ok

    def test_the_head_anchor_is_the_last_position_and_its_hash(self, journal: JournalLike) -> None:
        last = filled(journal).append([ev("last", 99)])[0]
        assert journal.head_anchor() == Anchor(last.position, last.hash)
        report = journal.verify_chain(anchor=journal.head_anchor())
        assert report.ok and report.events == 11 and report.head == journal.head_anchor()
        assert report.first_bad_position is None and report.problem is None

    def test_an_anchor_still_holds_after_more_appends(self, journal: JournalLike) -> None:
        anchor = filled(journal).head_anchor()
        journal.append([ev("later", 50)])
        assert journal.verify(anchor) is None
        assert journal.verify_chain(anchor=(anchor.position, anchor.hash)).ok

    @pytest.mark.parametrize(("tamper", "chain_alone_finds_it", "position", "says"), [
        pytest.param(_edit_position_6, True, 6, "position 6", id="one edited record"),
        pytest.param(_delete_position_4_and_rechain, False, 10, "ends at position 9",
                     id="a deleted record, the rest re-chained"),
        pytest.param(_truncate_to_7_and_move_the_head, False, 8, "",
                     id="a truncated tail, the head pointed back"),
    ])
    def test_a_tampering_fails_against_an_anchor_taken_before_it(
            self, journal: JournalLike, tamper: Tamper, chain_alone_finds_it: bool,
            position: int, says: str) -> None:
        anchor = filled(journal).head_anchor()
        tamper(journal)
        # Without the anchor, a tampering that keeps the chain consistent in itself (a
        # re-chained rest, a head moved with the tail) is one nothing else could tell.
        assert journal.verify_chain().ok is not chain_alone_finds_it
        assert (journal.verify() is None) is not chain_alone_finds_it
        assert_broken_at(journal.verify_chain(anchor=anchor), position, says)

    def test_a_rewritten_prefix_fails_at_the_anchored_position(self, journal: JournalLike) -> None:
        filled(journal)
        rows = stored_rows(journal)
        anchor = Anchor(5, rows[4][8])
        edited = (*rows[1][:7], rows[1][7].replace("102", "999"), rows[1][8])
        replace_rows(journal, rehash([rows[0], edited, *rows[2:]]))
        assert journal.verify() is None
        assert_broken_at(journal.verify_chain(anchor=anchor), 5, "rewritten")

    def test_a_truncated_tail_behind_the_head_marker_is_found_without_an_anchor(
        self,
        journal: JournalLike,
    ) -> None:
        if isinstance(journal, MemoryJournal):
            pytest.skip("the memory journal has no head marker apart from its records")
        filled(journal)
        replace_rows(journal, stored_rows(journal)[:7], move_head=False)
        assert_broken_at(journal.verify_chain(), 8)

    @pytest.mark.parametrize(("marked", "position"), [(7, 8), (12, 11)])
    def test_verify_finds_a_head_marker_naming_another_position(
        self,
        journal: JournalLike,
        marked: int,
        position: int,
    ) -> None:
        """Only the marker's position edited, its hash still the last record's: the
        records and the hashes agree, so the position alone must be compared (the marker
        pointed back is where a tail cut starts; pointed past, where records would be
        missing), and the first position it disowns is the one named."""
        if isinstance(journal, MemoryJournal):
            pytest.skip("the memory journal has no head marker apart from its records")
        assert isinstance(journal, Journal)
        filled(journal)
        set_head_marker(journal, marked, stored_rows(journal)[-1][8])
        assert_broken_at(journal.verify_chain(), position,
                         f"head marker names position {marked}, the last record is at 10")
        assert journal.verify() == position

    def test_verify_names_records_removed_while_it_reads(
        self,
        journal: JournalLike,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The tail cut (and the head marker moved with it) after verify read where the
        journal ends: the first record it was told of and did not find is named, not the
        end it was told of."""
        filled(journal)
        rows = stored_rows(journal)
        ends = journal._ends  # type: ignore[attr-defined]

        def ends_then_cut() -> Any:
            found = ends()
            replace_rows(journal, rows[:7])
            return found

        monkeypatch.setattr(journal, "_ends", ends_then_cut)
        assert_broken_at(journal.verify_chain(), 8,
                         "journal chain broken at position 8: the record is missing")

    def test_verify_finds_the_head_marker_of_an_empty_journal_deleted(
        self,
        journal: JournalLike,
    ) -> None:
        """Named at position 1, not 0: `verify()` returns the first bad position, and a
        caller testing it for truth would take a 0 for a whole chain."""
        if isinstance(journal, MemoryJournal):
            pytest.skip("the memory journal has no head marker apart from its records")
        assert isinstance(journal, Journal)
        delete_head_marker(journal)
        assert_broken_at(journal.verify_chain(), 1, "head marker is missing")
        assert journal.verify() == 1

    @pytest.mark.parametrize("edit", ["raised", "lowered", "rehashed"])
    def test_an_append_refuses_a_head_marker_that_does_not_name_the_last_record(
        self,
        journal: JournalLike,
        edit: str,
    ) -> None:
        """Appends chain from the head marker: one edited behind the journal's back
        would put a gap, a break or a clash under the new events. Nothing is appended."""
        if isinstance(journal, MemoryJournal):
            pytest.skip("the memory journal has no head marker apart from its records")
        assert isinstance(journal, Journal)
        filled(journal)
        rows = stored_rows(journal)
        marker = {"raised": (12, rows[-1][8]), "lowered": (7, rows[6][8]),
                  "rehashed": (len(rows), "e" * 64)}[edit]
        set_head_marker(journal, *marker)
        with pytest.raises(ChainBroken, match="head marker names position"):
            journal.append([ev("after-the-edit")])
        assert stored_rows(journal) == rows

    def test_an_anchor_from_another_journal_fails(self, journal: JournalLike) -> None:
        filled(journal)
        assert journal.verify(Anchor(3, "f" * 64)) == 3

    def test_a_verified_read_yields_the_same_events_as_a_plain_read(
        self, journal: JournalLike
    ) -> None:
        filled(journal, 25)
        plain = list(journal.read(order="position"))
        assert list(journal.read_verified(batch_size=4)) == plain
        mid = plain[9]
        assert list(journal.read_verified((mid.position, mid.hash), batch_size=3)) == plain[10:]
        assert list(journal.read_verified((mid.position, mid.hash), to_position=12)) == plain[10:12]
        assert list(journal.read_verified(journal.head_anchor())) == []

    def test_a_verified_read_stops_before_an_altered_event(self, journal: JournalLike) -> None:
        filled(journal)
        checkpoint = list(journal.read(order="position"))[3]
        tamper_payload(journal, 7, lambda s: s.replace("107", "1070"))
        seen: list[int] = []
        with pytest.raises(ChainBroken, match="position 7") as caught:
            for event in journal.read_verified((checkpoint.position, checkpoint.hash)):
                seen.append(event.position)
        assert caught.value.position == 7
        assert seen == [5, 6]

    def test_a_verified_read_from_a_wrong_hash_fails_at_the_first_event(
        self, journal: JournalLike
    ) -> None:
        filled(journal)
        with pytest.raises(ChainBroken) as caught:
            list(journal.read_verified((4, "0" * 64)))
        assert caught.value.position == 5

    def test_a_verified_read_from_past_the_end_says_the_journal_went_back(
        self, journal: JournalLike
    ) -> None:
        # A reader that trusts position 10 (a service that read it) finds the journal
        # restored from an older copy, holding 7: never an empty read, as if nothing new.
        filled(journal)
        trusted = journal.head_anchor()
        _truncate_to_7_and_move_the_head(journal)
        with pytest.raises(ChainBroken, match="ends at position 7") as caught:
            list(journal.read_verified(trusted))
        assert caught.value.position == 8
        assert "8..10" in str(caught.value)

    def test_a_verified_read_from_a_point_held_otherwise_fails(
        self, journal: JournalLike
    ) -> None:
        # The same length, another history (an older copy restored, then as many other
        # events appended): the record at the trusted position is not the trusted one.
        filled(journal)
        trusted = journal.head_anchor()
        rows = stored_rows(journal)
        replace_rows(journal, rehash([*rows[:6], rows[7], rows[6], *rows[8:]]))
        assert journal.head() == trusted.position
        with pytest.raises(ChainBroken) as caught:
            list(journal.read_verified(trusted))
        assert caught.value.position == trusted.position + 1
        assert "position 10" in str(caught.value)

    def test_a_verified_read_finds_a_missing_position(self, journal: JournalLike) -> None:
        filled(journal)
        rows = stored_rows(journal)
        replace_rows(journal, rows[:5] + rows[6:])
        with pytest.raises(ChainBroken, match="position 6") as caught:
            list(journal.read_verified())
        assert caught.value.position == 6


class NulContract(_OnABackend):
    """NUL characters are refused everywhere, with a clear error."""

    @pytest.mark.parametrize(
        ("event", "where"),
        [
            (NewEvent("a\x00b", "s", "t", 1, {}), "id"),
            (NewEvent("a", "s\x00", "t", 1, {}), "stream"),
            (NewEvent("a", "s", "\x00t", 1, {}), "type"),
            (NewEvent("a", "s", "t", 1, {"memo": "x\x00y"}), "memo"),
            (NewEvent("a", "s", "t", 1, {"deep": [{"k": ["ok", "no\x00"]}]}), "deep"),
            (NewEvent("a", "s", "t", 1, {"key\x00": 1}), "key"),
        ],
        ids=["id", "stream", "type", "payload-value", "payload-deep", "payload-key"],
    )
    def test_nul_anywhere_in_an_event_is_refused_and_nothing_is_appended(
        self, journal: JournalLike, event: NewEvent, where: str
    ) -> None:
        journal.append([ev("before")])
        with pytest.raises(ValueError, match="NUL") as caught:
            journal.append([ev("fine"), event])
        assert where in str(caught.value)
        assert journal.head() == 1

    def test_a_backslash_u0000_text_is_not_a_nul(self, journal: JournalLike) -> None:
        payload: dict[str, Any] = {"memo": "\\u0000 is how JSON writes NUL"}
        journal.append([NewEvent("a", "s", "t", 1, payload)])
        got = journal.get("a")
        assert got is not None and got.payload == payload
        assert journal.verify() is None

    def test_lookups_with_nul_find_nothing_instead_of_failing(self, journal: JournalLike) -> None:
        journal.append([ev("a", stream="s")])
        assert journal.get("a\x00") is None
        assert journal.stream_version("s\x00") == 0
        assert journal.max_time(["s\x00"]) is None
        assert journal.max_time(["s\x00", "s"]) == 0
        with pytest.raises(ValueError, match="NUL"):
            list(journal.read(stream="s\x00"))
        with pytest.raises(ValueError, match="NUL"), journal.transaction(["k\x00"]):
            pass
        with pytest.raises(ValueError, match="NUL"):
            journal.save_snapshot("n\x00", 1, 0, "d", b"")



class SurrogateContract(_OnABackend):
    """A lone surrogate (text no UTF-8 can encode) is refused as NUL is, on every backend
    alike: an event holding one is a ValueError naming where, and a look-up by one finds
    nothing."""

    @pytest.mark.parametrize(
        ("event", "where"),
        [
            (NewEvent("a\ud800b", "s", "t", 1, {}), "id"),
            (NewEvent("a", "s\udfff", "t", 1, {}), "stream"),
            (NewEvent("a", "s", "\ud800t", 1, {}), "type"),
            (NewEvent("a", "s", "t", 1, {"memo": "x\udc00y"}), "memo"),
            (NewEvent("a", "s", "t", 1, {"deep": [{"k": ["ok", "no\ud800"]}]}), "deep"),
            (NewEvent("a", "s", "t", 1, {"key\ud800": 1}), "key"),
            (NewEvent("a", "s", "t", 1, {}, {"email": "\udfff"}), "email"),
        ],
        ids=["id", "stream", "type", "payload-value", "payload-deep", "payload-key",
             "private"],
    )
    def test_a_lone_surrogate_anywhere_in_an_event_is_refused_and_nothing_is_appended(
        self, journal: JournalLike, event: NewEvent, where: str
    ) -> None:
        journal.append([ev("before")])
        with pytest.raises(ValueError, match="surrogate") as caught:
            journal.append([ev("fine"), event])
        assert where in str(caught.value)
        assert journal.head() == 1
        with pytest.raises(ValueError, match="surrogate"):
            journal.append([ev("fine")], expected_versions={"s\ud800": 0})
        assert journal.head() == 1

    def test_lookups_with_a_lone_surrogate_find_nothing_instead_of_failing(
        self, journal: JournalLike
    ) -> None:
        journal.append([ev("a", stream="s")])
        journal.bind_request("k", "f", "answer")
        lone = "\ud800"
        assert journal.get("a" + lone) is None
        assert set(journal.get_many(["a", lone])) == {"a"}
        assert set(journal.head_and_get_many(["a", lone])[1]) == {"a"}
        found = journal.look_up(["a", lone], ["k", lone])
        assert set(found.recorded) == {"a"} and found.bound == {"k"}
        assert journal.private(["a", lone]) == {}
        assert journal.stream_version("s" + lone) == 0
        assert journal.max_time(["s" + lone]) is None
        assert journal.max_time(["s" + lone, "s"]) == 0
        with pytest.raises(ValueError, match="surrogate"):
            list(journal.read(stream="s" + lone))
        with pytest.raises(ValueError, match="surrogate"):
            journal.request(lone)
        with pytest.raises(ValueError, match="surrogate"), journal.transaction(["k" + lone]):
            pass
        with pytest.raises(ValueError, match="surrogate"):
            journal.save_snapshot("n" + lone, 1, 0, "d", b"")
        for key, fingerprint, answer in ((lone, "f", "x"), ("k2", lone, "x"),
                                         ("k2", "f", lone)):
            with pytest.raises(ValueError, match="surrogate"):
                journal.bind_request(key, fingerprint, answer)
        assert journal.request("k2") is None

class BatchContract(_OnABackend):
    """Which positions were appended together: one append, or one transaction."""

    def test_one_append_of_several_events_is_one_batch(self, journal: JournalLike) -> None:
        journal.append([ev("a", 3), ev("b", 1), ev("c", 2)])
        journal.append([ev("d", 0)])
        journal.append([ev("e", 5), ev("f", 4)])
        assert journal.batches() == [Batch(1, 3), Batch(5, 6)]
        # A single event is a batch of its own: it has no row.
        assert journal.batches(after_position=3, to_position=4) == []
        assert journal.batches(after_position=2, to_position=5) == [Batch(1, 3), Batch(5, 6)]
        assert journal.batches(after_position=3) == [Batch(5, 6)]
        assert journal.batches(to_position=3) == [Batch(1, 3)]

    def test_every_append_of_one_transaction_is_one_batch(self, journal: JournalLike) -> None:
        journal.append([ev("before")])
        with journal.transaction(["k"]) as tx:
            tx.append([ev("a", 2)])
            tx.append([ev("b", 1)])
            with journal.transaction(["j"]) as inner:  # joins the outer one
                inner.append([ev("c", 0), ev("d", 0)])
        journal.append([ev("after")])
        assert journal.batches() == [Batch(2, 5)]

    def test_repeats_and_an_empty_transaction_make_no_batch(self, journal: JournalLike) -> None:
        journal.append([ev("a"), ev("b")])
        journal.append([ev("a"), ev("b")])  # already recorded: nothing appended
        journal.append([ev("b"), ev("c")])  # only c is new: a batch of one
        with journal.transaction():
            pass
        assert journal.batches() == [Batch(1, 2)]

    def test_a_rolled_back_transaction_leaves_no_batch(self, journal: JournalLike) -> None:
        with pytest.raises(RuntimeError), journal.transaction() as tx:
            tx.append([ev("a"), ev("b")])
            raise RuntimeError("decided against it")
        journal.append([ev("c"), ev("d"), ev("e")])
        assert journal.batches() == [Batch(1, 3)]

    def test_batches_survive_reopening(self, journal_url: str) -> None:
        if journal_url == "memory":
            pytest.skip("a memory journal ends with its process")
        first = self.open_journal(journal_url)
        try:
            first.append([ev("a"), ev("b")])
        finally:
            first.close()
        again = self.open_journal(journal_url)
        try:
            assert again.batches() == [Batch(1, 2)]
            assert again.verify() is None  # outside the chain: nothing to re-hash
        finally:
            again.close()


class JournalContract(AppendReadContract, ChainContract, NulContract, SurrogateContract,
                      BatchContract):
    """The whole journal contract: subclass it with a `journal_url` fixture."""
