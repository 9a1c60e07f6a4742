"""Property tests: random append sequences against a tiny model, and the hash encodings.

The model is a Python list of (id, content) in arrival order: a repeated id with
the same content is returned as the original, one with other content rejects its
whole batch. The journal must agree with it on every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journal_testkit import empty_the_journal

from eventstore import (
    IdempotencyConflict,
    Journal,
    JournalLike,
    MemoryJournal,
    NewEvent,
    canonical_json,
)
from eventstore.hashing import GENESIS_HASH, record_hash, record_hash_text

IDS = st.sampled_from([f"id{i}" for i in range(8)])
STREAMS = st.sampled_from(["a", "b", "c"])
# Few contents, so repeats with the same content and conflicts both happen.
CONTENTS = st.tuples(STREAMS, st.integers(0, 3), st.sampled_from([{}, {"v": 1}, {"v": [1, 2]}]))
BATCH = st.lists(st.tuples(IDS, CONTENTS), min_size=0, max_size=5)
RUNS = st.lists(BATCH, min_size=1, max_size=8)

Content = tuple[str, int, dict[str, Any]]


class Model:
    """What the journal should hold: arrival order, first content per id."""

    def __init__(self) -> None:
        self.records: list[tuple[str, Content]] = []

    def append(self, batch: list[tuple[str, Content]]) -> list[int] | None:
        """Positions for each input, or None when the batch must be refused."""
        known = {i: (p, c) for p, (i, c) in enumerate(self.records, start=1)}
        added: list[tuple[str, Content]] = []
        out: list[int] = []
        for i, c in batch:
            if i in known:
                if known[i][1] != c:
                    return None
                out.append(known[i][0])
                continue
            position = len(self.records) + len(added) + 1
            known[i] = (position, c)
            added.append((i, c))
            out.append(position)
        self.records.extend(added)
        return out


def event(i: str, c: Content) -> NewEvent:
    stream, t, payload = c
    return NewEvent(i, stream, "t", t, payload)


def check_against_model(journal: JournalLike, runs: list[list[tuple[str, Content]]]) -> None:
    model = Model()
    for batch in runs:
        want = model.append(batch)
        if want is None:
            before = journal.head()
            with pytest.raises(IdempotencyConflict):
                journal.append([event(i, c) for i, c in batch])
            assert journal.head() == before
            continue
        got = journal.append([event(i, c) for i, c in batch])
        assert [e.position for e in got] == want
        assert [e.id for e in got] == [i for i, _ in batch]
    recorded = list(journal.read(order="position"))
    assert [(e.id, (e.stream, e.time, e.payload)) for e in recorded] == model.records
    assert [e.position for e in recorded] == list(range(1, len(model.records) + 1))
    assert len({e.id for e in recorded}) == len(recorded)
    canonical = list(journal.read(batch_size=2))
    assert canonical == sorted(recorded, key=lambda e: (e.time, e.position))
    for stream in {e.stream for e in recorded}:
        versions = [e.version for e in recorded if e.stream == stream]
        assert versions == list(range(1, len(versions) + 1))
    assert journal.verify() is None


@settings(max_examples=30, deadline=None)
@given(RUNS)
def test_memory_journal_matches_the_model(runs: list[list[tuple[str, Content]]]) -> None:
    check_against_model(MemoryJournal(), runs)


@settings(max_examples=30, deadline=None)
@given(RUNS)
def test_sqlite_journal_matches_the_model(runs: list[list[tuple[str, Content]]]) -> None:
    with Journal() as j:
        check_against_model(j, runs)


@pytest.mark.postgres
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=RUNS)
def test_postgres_journal_matches_the_model(
    pg_url: str, runs: list[list[tuple[str, Content]]]
) -> None:
    with Journal(pg_url) as j:
        # One schema for the session, shared with other tests: empty it for each example.
        empty_the_journal(j)
        check_against_model(j, runs)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@given(
    st.text(min_size=1),
    st.text(min_size=1),
    st.text(min_size=1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**62),
    st.dictionaries(st.text(max_size=5), JSON, max_size=4),
)
def test_fast_hash_equals_the_reference(
    id: str, stream: str, type: str, time: int, recorded_at: int, payload: dict[str, Any]
) -> None:
    fields = {"position": 7, "id": id, "stream": stream, "version": 3, "type": type}
    reference = record_hash(
        GENESIS_HASH, **fields, time=time, recorded_at=recorded_at, payload=payload
    )
    fast = record_hash_text(
        GENESIS_HASH, 7, id, stream, 3, type, time, recorded_at, canonical_json(payload)
    )
    assert fast == reference


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_the_reference_hash_takes_exactly_the_record_fields(change: str) -> None:
    """A field left out or one too many would hash other bytes than every journal
    hashes: refused, naming the fields it takes."""
    fields: dict[str, Any] = {"position": 1, "id": "e", "stream": "s", "version": 1,
                              "type": "t", "time": 0, "recorded_at": 0, "payload": {}}
    if change == "missing":
        del fields["recorded_at"]
    else:
        fields["hash"] = GENESIS_HASH
    with pytest.raises(TypeError, match=r"record_hash takes the fields .*recorded_at"):
        record_hash(GENESIS_HASH, **fields)


def test_canonical_json_is_the_documented_dumps() -> None:
    import json

    value = {"b": [1, 2.5, None], "a": "é🚀", "c": {"z": True, "y": "\u2028"}}
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    with pytest.raises(ValueError):
        canonical_json({"x": float("inf")})


_DUMPS = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}


def test_a_flat_object_is_written_as_dumps_writes_it_for_every_code_point() -> None:
    """Flat objects take a faster encoder: every character (escapes, controls, U+2028,
    the astral planes), as a value and as a key, comes out as `json.dumps` writes it."""
    import json

    from eventstore.hashing import flat_json

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(chars), 512):
        chunk = "".join(chars[i:i + 512])
        value = {chunk: chunk, chunk[:1]: 1, "n": None, "t": True, "f": False, "i": -7}
        assert flat_json(value) is not None
        assert canonical_json(value) == json.dumps(value, **_DUMPS)


@given(st.dictionaries(st.text(max_size=4), st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=6)), max_size=6))
def test_a_flat_object_sorts_and_writes_as_dumps(value: dict[str, Any]) -> None:
    """Keys sorted by code point, ints of any size (past 64 bits: the standard encoder)."""
    import json

    assert canonical_json(value) == json.dumps(value, **_DUMPS)


def test_what_the_faster_encoder_refuses_goes_to_the_standard_one() -> None:
    import json

    from eventstore.hashing import flat_json, load_canonical

    class Key(str):
        pass

    for value in ({1: "a"}, {Key("k"): 1}, {"a": 2**64}, {"a": "\ud800"}, {"a": 1.5},
                  {"a": [1]}):
        assert flat_json(value) is None
        assert canonical_json(value) == json.dumps(value, **_DUMPS)
    for value in ({"a": 2**64}, {"a": -(2**63) - 1}, {"a": [2**70]}, {"a": "\ud800"},
                  {"a": 2**64 - 1, "b": -(2**63)}, {"a": 0.5}, {"a": {"b": 1}}):
        text = canonical_json(value)
        # Read back to the same types (an int past 64 bits must not become a float).
        assert canonical_json(load_canonical(text)) == text
        assert load_canonical(text) == value


@given(
    st.lists(
        st.tuples(st.text(min_size=1), st.text(min_size=1), st.text(min_size=1),
                  st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**62),
                  st.dictionaries(st.text(max_size=5), JSON, max_size=4)),
        min_size=1, max_size=6),
    st.data(),
)
def test_the_chain_check_hashes_the_reference_bytes(rows: list[Any], data: st.DataObject) -> None:
    """`chained` and `chain_input` (what the chain benchmark hashes raw) both stand for
    the reference hash: a chain built with `record_hash` passes, and its bytes hash to it;
    one record's hash altered stops the check at that record."""
    import hashlib

    from eventstore import ChainBroken
    from eventstore.hashing import chain_input, chained

    stored: list[Any] = []
    prev = GENESIS_HASH
    for position, (id, stream, type, time, recorded_at, payload) in enumerate(rows, 1):
        digest = record_hash(prev, position=position, id=id, stream=stream, version=1,
                             type=type, time=time, recorded_at=recorded_at, payload=payload)
        row = (position, id, stream, 1, type, time, recorded_at, canonical_json(payload), digest)
        assert hashlib.sha256(chain_input(prev, row)).hexdigest() == digest
        stored.append(row)
        prev = digest
    assert list(chained(stored, GENESIS_HASH, 0)) == stored
    bad = data.draw(st.integers(1, len(stored)))
    altered = list(stored)
    altered[bad - 1] = (*stored[bad - 1][:8], "0" * 64)
    seen: list[Any] = []
    with pytest.raises(ChainBroken) as caught:
        seen.extend(chained(altered, GENESIS_HASH, 0))
    assert caught.value.position == bad and seen == stored[: bad - 1]


def _chain_of(specs: list[tuple[int, str]]) -> list[Any]:
    """Stored rows (position, id), each hashed from the row before it in the list: every
    link holds, whatever the positions say."""
    rows: list[Any] = []
    prev = GENESIS_HASH
    for position, id in specs:
        digest = record_hash(prev, position=position, id=id, stream="s", version=1, type="t",
                             time=position, recorded_at=0, payload={})
        rows.append((position, id, "s", 1, "t", position, 0, "{}", digest))
        prev = digest
    return rows


@pytest.mark.parametrize(("specs", "position", "passed", "says"), [
    pytest.param([(1, "a"), (3, "c"), (4, "d")], 2, 1,
                 "it is missing (the next record read is at position 3)", id="gap"),
    pytest.param([(1, "a"), (2, "b"), (2, "b2"), (3, "c")], 3, 2,
                 "it is repeated or out of order (the next record read is at position 2)",
                 id="repeated"),
    pytest.param([(1, "a"), (3, "c"), (2, "b")], 2, 1,
                 "it is missing (the next record read is at position 3)", id="swapped"),
    pytest.param([(2, "b"), (3, "c")], 1, 0,
                 "it is missing (the next record read is at position 2)", id="first cut"),
])
def test_the_chain_check_refuses_a_row_out_of_place_even_when_its_hash_links(
        specs: list[tuple[int, str]], position: int, passed: int, says: str) -> None:
    """Each row below is hashed from the one before it, as a forger re-hashing the chain
    would: only the positions give it away. The check names the position where a record
    is missing or a repeated one comes, and yields nothing from there."""
    from eventstore import ChainBroken
    from eventstore.hashing import chained, chained_python

    rows = _chain_of(specs)
    for check in {chained, chained_python}:
        seen: list[Any] = []
        with pytest.raises(ChainBroken) as caught:
            seen.extend(check(rows, GENESIS_HASH, 0))
        assert caught.value.position == position and says in str(caught.value)
        assert seen == rows[:passed]


def test_an_append_returns_wide_ints_as_ints(journal: JournalLike) -> None:
    """The records an append returns carry the payload as stored: an int past 64 bits
    stays an int (orjson, which reads the journal's own texts, would make it a float)."""
    payload = {"big": 2**64, "small": -(2**63) - 1, "plain": 7}
    [record] = journal.append([NewEvent("wide", "s", "t", 1, payload)])
    assert record.payload == payload
    assert all(type(v) is int for v in record.payload.values())
