"""Private parts: fields kept beside the chain, sealed into it by a salted hash, erasable
without breaking it. On every backend: the chain and every anchor survive an erasure,
the erased text is gone from storage, erasing is recorded and idempotent, and an edit
or deletion of a private part behind the journal's back is found at its position."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from journal_testkit import assert_broken_at, ev
from sqlalchemy import text

from eventstore import (
    ERASED_KEY,
    PRIVATE_KEY,
    ChainBroken,
    IdempotencyConflict,
    Journal,
    JournalLike,
    MemoryJournal,
    NewEvent,
)
from eventstore.hashing import canonical_json, record_hash, seal

SECRET = "Zebulon Quayle-Secretname"


def private_ev(id: str, time: int = 0, *, user: str = SECRET, **payload: object) -> NewEvent:
    return NewEvent(id, "s", "t", time, {"n": 1, **payload}, {"user": user})


def _erasure(id: str = "erase-1", time: int = 9) -> NewEvent:
    return NewEvent(id, "$journal", "erase", time, {"reason": "request 7"})


def _run(journal: JournalLike, sql: str, **params: object) -> None:
    """Change storage behind the journal's back."""
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        conn.execute(text(sql), params)


def _private_store(journal: JournalLike) -> dict[int, tuple[str, str]]:
    if isinstance(journal, MemoryJournal):
        return dict(journal._private)
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        rows = conn.execute(text("SELECT position, salt, data FROM private_parts")).all()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_a_private_part_is_sealed_into_the_chain_and_kept_beside_it(journal: JournalLike
                                                                   ) -> None:
    plain, sealed = journal.append([ev("a", n=1), private_ev("b", 1)])
    assert PRIVATE_KEY not in plain.payload
    digest = sealed.payload[PRIVATE_KEY]
    assert sealed.payload == {"n": 1, PRIVATE_KEY: digest}
    assert SECRET not in canonical_json(sealed.payload)
    (salt, data), = [v for p, v in _private_store(journal).items() if p == sealed.position]
    assert seal(salt, data) == digest and data == canonical_json({"user": SECRET})
    assert journal.private(["a", "b", "nope"]) == {"b": {"user": SECRET}}
    assert journal.verify_chain().ok


def test_each_private_part_has_a_fresh_128_bit_salt(journal: JournalLike) -> None:
    """The salt is what keeps a seal of a guessable part from being confirmed by hashing
    guesses once the part is erased (docs/operations.md: a random 128-bit salt)."""
    b, c = journal.append([private_ev("b"), private_ev("c")])
    salts = [salt for salt, _ in _private_store(journal).values()]
    assert len(salts) == 2 and salts[0] != salts[1]
    assert all(len(salt) == 32 and set(salt) <= set("0123456789abcdef") for salt in salts)
    # The same part under two salts: two seals, neither the hash of the part alone.
    part = canonical_json({"user": SECRET}).encode()
    assert b.payload[PRIVATE_KEY] != c.payload[PRIVATE_KEY]
    assert hashlib.sha256(part).hexdigest() not in (b.payload[PRIVATE_KEY],
                                                    c.payload[PRIVATE_KEY])


def test_records_without_a_private_part_hash_as_before(journal: JournalLike) -> None:
    (rec,) = journal.append([ev("a", 3, n=1, memo="kept in the payload")])
    assert rec.hash == record_hash(
        "0" * 64, position=1, id="a", stream="s", version=1, type="t", time=3,
        recorded_at=rec.recorded_at, payload={"n": 1, "memo": "kept in the payload"})
    (again,) = journal.append([NewEvent("a", "s", "t", 3, {"n": 1, "memo": "kept in the payload"},
                                        {})])
    assert again == rec  # an empty private part is none


def test_the_same_content_twice_is_one_event_even_with_a_fresh_salt(journal: JournalLike
                                                                    ) -> None:
    (first,) = journal.append([private_ev("b")])
    (second,) = journal.append([private_ev("b")])
    assert second == first and journal.head() == 1
    with pytest.raises(IdempotencyConflict):
        journal.append([private_ev("b", user="someone else")])
    with pytest.raises(IdempotencyConflict):
        journal.append([NewEvent("b", "s", "t", 0, {"n": 1})])  # the part left out
    with pytest.raises(IdempotencyConflict):
        journal.append([private_ev("c"), private_ev("c", user="x")])
    assert journal.head() == 1


def test_a_record_written_with_its_fields_inline_matches_them_split(journal: JournalLike
                                                                   ) -> None:
    (old,) = journal.append([ev("a", n=1, user="u")])  # before private parts existed
    (same,) = journal.append([NewEvent("a", "s", "t", 0, {"n": 1}, {"user": "u"})])
    assert same == old
    with pytest.raises(IdempotencyConflict):
        journal.append([NewEvent("a", "s", "t", 0, {"n": 1}, {"user": "v"})])


def test_malformed_private_parts_are_refused(journal: JournalLike) -> None:
    with pytest.raises(ValueError, match="both the payload and the private part"):
        journal.append([NewEvent("a", "s", "t", 0, {"user": "x"}, {"user": "y"})])
    with pytest.raises(ValueError, match="journal's own"):
        journal.append([ev("a", **{PRIVATE_KEY: "0" * 64})])
    with pytest.raises(ValueError, match="JSON object"):
        journal.append([NewEvent("a", "s", "t", 0, {}, ["x"])])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        journal.append([NewEvent("a", "s", "t", 0, {}, {"user": "a\x00b"})])
    journal.append([private_ev("b")])
    with pytest.raises(ValueError, match="journal's own"):
        journal.erase(["b"], NewEvent("e", "$journal", "erase", 1, {ERASED_KEY: []}))
    assert journal.head() == 1


def test_erasure_keeps_the_chain_and_every_anchor(journal: JournalLike) -> None:
    journal.append([ev("a", n=1), private_ev("b", 1), private_ev("c", 2, user="other"),
                    private_ev("d", 3)])
    anchor = journal.head_anchor()
    before = list(journal.read(order="position"))
    done = journal.erase(["b", "d", "a", "unknown"], _erasure())
    assert done.erased == ("b", "d")
    assert done.record is not None and done.record.position == 5
    assert done.record.payload == {"reason": "request 7", ERASED_KEY: ["b", "d"]}
    assert list(journal.read(order="position", to_position=4)) == before
    assert journal.private(["b", "c", "d"]) == {"c": {"user": "other"}}
    assert sorted(_private_store(journal)) == [3]
    report = journal.verify_chain(anchor=anchor)
    assert report.ok, report.problem
    assert journal.verify() is None


def test_erasing_again_is_a_no_op(journal: JournalLike) -> None:
    journal.append([private_ev("b", 1)])
    assert journal.erase(["b"], _erasure("e1")).record is not None
    again = journal.erase(["b"], _erasure("e2"))
    assert again.record is None and again.erased == ()
    assert journal.erase([], _erasure("e3")).record is None
    assert journal.head() == 2 and journal.verify_chain().ok
    with pytest.raises(ValueError, match="not a single str"):
        journal.erase("b", _erasure("e4"))


def test_an_erased_event_can_be_appended_again_under_its_id(journal: JournalLike) -> None:
    (rec,) = journal.append([private_ev("b", 1)])
    journal.erase(["b"], _erasure())
    # A retry that arrives after the erasure: the id is recorded, what it held is gone.
    assert journal.append([private_ev("b", 1, user="anything")]) == [rec]
    with pytest.raises(IdempotencyConflict):
        journal.append([private_ev("b", 1, n=2)])  # other public content
    assert journal.head() == 2


def test_a_rolled_back_transaction_keeps_no_private_part(journal: JournalLike) -> None:
    with pytest.raises(RuntimeError), journal.transaction(["k"]) as tx:
        tx.append([private_ev("b")])
        raise RuntimeError("abandon")
    assert journal.head() == 0 and _private_store(journal) == {}
    assert journal.private(["b"]) == {}


def test_private_parts_lists_what_is_held(journal: JournalLike) -> None:
    journal.append([private_ev("b", user="u1"), ev("c"), private_ev("d", user="u2")])
    assert list(journal.private_parts()) == [(1, "b", {"user": "u1"}), (3, "d", {"user": "u2"})]
    assert list(journal.private_parts(after_position=1, batch_size=1)) == [
        (3, "d", {"user": "u2"})]
    assert list(journal.private_parts(to_position=2)) == [(1, "b", {"user": "u1"})]


# -- behind the journal's back ------------------------------------------------------------


def _sql_only(journal: JournalLike) -> None:
    if not isinstance(journal, Journal):
        pytest.skip("the memory journal has no storage to tamper with")


def test_an_altered_private_part_is_found_at_its_position(journal: JournalLike) -> None:
    _sql_only(journal)
    journal.append([ev("a"), private_ev("b"), private_ev("c")])
    _run(journal, "UPDATE private_parts SET data = :d WHERE position = 2",
         d=canonical_json({"user": "forged"}))
    assert_broken_at(journal.verify_chain(), 2, "does not match the seal")
    with pytest.raises(ChainBroken) as caught:
        journal.private(["b"])
    assert caught.value.position == 2
    assert journal.private(["c"]) == {"c": {"user": SECRET}}


def test_an_altered_salt_is_found_at_its_position(journal: JournalLike) -> None:
    """The seal covers the salt too: a part kept but its salt changed no longer matches,
    so a stored salt cannot be swapped for one an attacker chose."""
    _sql_only(journal)
    journal.append([ev("a"), private_ev("b"), private_ev("c")])
    _run(journal, "UPDATE private_parts SET salt = :s WHERE position = 2", s="0" * 32)
    assert_broken_at(journal.verify_chain(), 2, "does not match the seal")
    with pytest.raises(ChainBroken) as caught:
        journal.private(["b"])
    assert caught.value.position == 2
    assert journal.private(["c"]) == {"c": {"user": SECRET}}


def test_an_erasure_made_while_verify_reads_is_no_finding(
        journal: JournalLike, monkeypatch: pytest.MonkeyPatch) -> None:
    """Erased after verify learned where the journal ends: the part is gone from what it
    reads, the erasure record lies past its end; it is looked for there, so a concurrent
    erasure is not reported as a part deleted behind the journal's back."""
    journal.append([ev("a"), private_ev("b"), private_ev("c")])
    ends = journal._ends  # type: ignore[attr-defined]
    erased: list[object] = []

    def ends_then_erase() -> object:
        found = ends()
        if not erased:
            erased.append(journal.erase(["b"], _erasure()))
        return found

    monkeypatch.setattr(journal, "_ends", ends_then_erase)
    report = journal.verify_chain()
    assert erased and report.ok and report.events == 3, report
    assert journal.private(["b", "c"]) == {"c": {"user": SECRET}}


def test_a_private_part_deleted_without_an_erasure_is_found(journal: JournalLike) -> None:
    _sql_only(journal)
    journal.append([ev("a"), private_ev("b"), private_ev("c")])
    _run(journal, "DELETE FROM private_parts WHERE position = 3")
    assert_broken_at(journal.verify_chain(), 3, "no erasure record names it")


@pytest.mark.parametrize("named", [
    pytest.param("b", id="text"), pytest.param({"b": True}, id="object"),
    pytest.param([["b"]], id="nested list")])
def test_only_a_list_of_ids_names_erased_parts(journal: JournalLike, named: object) -> None:
    """A record may carry the erasure key with any value (an append takes any payload),
    but only a list of ids is what an erasure writes: a text holding the id (read as its
    characters it would name a one-letter id), or the id inside something else, excuses
    no part deleted behind the journal's back."""
    _sql_only(journal)
    journal.append([private_ev("b"), NewEvent("x", "s", "t", 1, {ERASED_KEY: named})])
    _run(journal, "DELETE FROM private_parts WHERE position = 1")
    assert_broken_at(journal.verify_chain(), 1, "no erasure record names it")


def test_a_private_part_added_behind_the_journal_is_found(journal: JournalLike) -> None:
    _sql_only(journal)
    journal.append([ev("a"), ev("b"), private_ev("c")])
    _run(journal, "INSERT INTO private_parts (position, salt, data) VALUES (1, 'ab', '{}')")
    assert_broken_at(journal.verify_chain(), 1, "no seal in its payload")
    with pytest.raises(ChainBroken, match="no seal in its payload"):
        journal.private(["a"])


def test_an_erasure_record_cannot_be_forged_into_the_chain(journal: JournalLike) -> None:
    """Deleting a part and editing an earlier record to name it breaks the chain there."""
    _sql_only(journal)
    journal.append([ev("a", n=1), private_ev("b")])
    _run(journal, "DELETE FROM private_parts WHERE position = 2")
    _run(journal, "UPDATE events SET payload = :p WHERE position = 1",
         p=canonical_json({"n": 1, ERASED_KEY: ["b"]}))
    assert_broken_at(journal.verify_chain(), 1)


def test_erased_text_is_gone_from_the_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with Journal(url) as journal:
        journal.append([private_ev(f"e{i}", i, user=f"{SECRET}-{i % 3}") for i in range(300)])
        journal.append([ev("z", 400)])
        files = [p for p in tmp_path.iterdir()]
        assert any(SECRET.encode() in p.read_bytes() for p in files)
        doomed = [f"e{i}" for i in range(300) if i % 3 == 1]
        done = journal.erase(doomed, _erasure(time=500))
        assert done.notes == () and len(done.erased) == 100
        assert journal.verify_chain().ok
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert f"{SECRET}-1".encode() not in data, path
    kept = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert f"{SECRET}-0".encode() in kept


def test_an_erasure_a_reader_keeps_from_finishing_says_where_the_text_still_is(
        tmp_path: Path) -> None:
    # Written and folded into the database file before (its writer closed), the erased
    # text stays in that file, not in the -wal, until a checkpoint can overwrite it: the
    # note sent its reader looking in the -wal file alone, where it is not.
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with Journal(url) as journal:
        journal.append([private_ev("e1", 1)])
    assert not (tmp_path / "j.db-wal").exists()
    assert SECRET.encode() in (tmp_path / "j.db").read_bytes()
    reader = sqlite3.connect(tmp_path / "j.db")
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchall()  # a read held open
        with Journal(url, lock_timeout=0.2) as journal:
            done = journal.erase(["e1"], _erasure())
            assert done.erased == ("e1",)
            (note,) = done.notes
        assert SECRET.encode() in (tmp_path / "j.db").read_bytes()
        assert "database file" in note and "gpu-credits erase" in note
    finally:
        reader.close()
    with Journal(url, lock_timeout=0.2) as journal:  # no reader now: it finishes the job
        assert journal.erase(["e1"], _erasure("erase-2")).notes == ()
    assert not any(SECRET.encode() in p.read_bytes() for p in tmp_path.iterdir())


@pytest.mark.postgres
def test_erased_rows_are_gone_from_postgresql(pg_fresh_url: str) -> None:
    with Journal(pg_fresh_url) as journal:
        journal.append([private_ev(f"e{i}", i, user=f"{SECRET}-{i % 2}") for i in range(50)])
        done = journal.erase([f"e{i}" for i in range(0, 50, 2)], _erasure(time=60))
        assert done.notes == () and len(done.erased) == 25
        with journal._engine.begin() as conn:
            rows = conn.execute(text("SELECT data FROM private_parts")).scalars().all()
            dumped = conn.execute(text("SELECT string_agg(payload, '') FROM events")).scalar()
        assert len(rows) == 25 and all(f"{SECRET}-0" not in r for r in rows)
        assert SECRET not in (dumped or "")
        assert journal.verify_chain().ok
