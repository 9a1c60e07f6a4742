"""The chain check in C against its definition in Python.

`eventstore.hashing.chained` runs in the C accelerator where it is built; the Python
`chained_python` is the definition. For any rows, altered in any way, both must yield the
same rows (the very objects) and end the same way: the same ChainBroken (position and
message), or the same other error, after the same rows.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import sqlite3
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import ChainBroken, Journal, NewEvent, hashing
from eventstore.hashing import GENESIS_HASH, chain_input, chained_python

Check = Callable[[Iterable[Any], Any, Any], Iterator[Any]]

needs_c = pytest.mark.skipif(not hashing.ACCELERATED,
                             reason="the C chain check is not built here (or turned off)")


def _fast() -> Check:
    assert hashing._fast_chained is not None
    return hashing._fast_chained  # type: ignore[return-value]


def outcome(check: Check, rows: Iterable[Any], prev: Any, after: Any) -> tuple[list[int], Any]:
    """What a check does with these rows: the ids of the rows it yields (the same objects
    on both paths), then how it ended (None, or the error's type, message and position)."""
    seen: list[int] = []
    try:
        for row in check(rows, prev, after):
            seen.append(id(row))
    except Exception as exc:  # any error, to compare: both paths must raise the same
        return seen, (type(exc), str(exc), getattr(exc, "position", None))
    return seen, None


def chain_of(records: list[tuple[Any, ...]], prev: str = GENESIS_HASH,
             first: int = 1) -> list[tuple[Any, ...]]:
    """Stored rows at first, first + 1, ... hashed as the journal hashes them; a record
    whose bytes cannot be written (a lone surrogate) gets a hash of zeros."""
    rows: list[tuple[Any, ...]] = []
    for position, (id_, stream, version, type_, time, recorded_at, payload) in enumerate(
            records, first):
        row = (position, id_, stream, version, type_, time, recorded_at, payload, "")
        try:
            digest = hashlib.sha256(chain_input(prev, row)).hexdigest()
        except UnicodeEncodeError:
            digest = "0" * 64
        rows.append((*row[:8], digest))
        prev = digest
    return rows


# Texts with everything JSON escapes or UTF-8 spells in several bytes: quotes,
# backslashes, control characters, DEL, the edges of each UTF-8 length, astral
# characters, and (in TRICKY) lone surrogates, which no append stores (UTF-8 has no form
# for them) but a row source can hand over: the check must treat them as Python does.
# Joined from lists: hypothesis's own text strategy never draws a surrogate
# (`characters` does, unless its codec is utf-8).
SPECIAL = ('"\\/\x00\x01\x08\x09\x0a\x0b\x0c\x0d\x1f\x20\x7f\x80é\u07ff\u0800\u2028€'
           "\ud7ff\ue000\ufeff\uffff\U00010000\U0001f680\U0010ffff")
SURROGATES = "\ud800\udbff\udc00\udfff"
CLEAN = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8")),
                 max_size=12).map("".join)
TRICKY = st.lists(st.one_of(st.sampled_from(SPECIAL + SURROGATES), st.characters()),
                  max_size=12).map("".join)
PLAIN = st.text(st.characters(codec="utf-8"), max_size=12)
TEXTS = st.one_of(PLAIN, TRICKY)
INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(), st.sampled_from(
    [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 10**30]))
RECORDS = st.tuples(TEXTS, TEXTS, INTS, TEXTS, INTS, INTS, TEXTS)
# Records the C path checks all of itself (storage's own shape), one to six of them.
CLEAN_RECORDS = st.lists(st.tuples(CLEAN, CLEAN, st.integers(1, 9), CLEAN,
                                   st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**62),
                                   CLEAN), min_size=1, max_size=6)
OTHER_VALUES = st.one_of(INTS, TEXTS, st.none(), st.booleans(), st.floats(allow_nan=False),
                         st.binary(max_size=4), st.just(1.0), st.just(b"x"))


def _alter(rows: list[tuple[Any, ...]], data: st.DataObject) -> list[Any]:
    """One alteration a reader might meet: none, one field changed (to a value of any
    type), two rows swapped, one left out, one repeated, or a row not a 9-tuple."""
    rows = list(rows)
    if not rows:
        return rows
    kind = data.draw(st.sampled_from(["none", "field", "swap", "gap", "repeat", "shape"]))
    i = data.draw(st.integers(0, len(rows) - 1))
    if kind == "field":
        f = data.draw(st.integers(0, 8))
        digest = str(rows[i][8])
        value = data.draw(st.one_of(OTHER_VALUES, st.sampled_from(
            ["f" * 64, digest.upper(), digest + "0", digest[:-1], digest[:-1] + "é"])))
        rows[i] = (*rows[i][:f], value, *rows[i][f + 1:])
    elif kind == "swap":
        j = data.draw(st.integers(0, len(rows) - 1))
        rows[i], rows[j] = rows[j], rows[i]
    elif kind == "gap":
        del rows[i]
    elif kind == "repeat":
        rows.insert(i, rows[i])
    elif kind == "shape":
        rows[i] = data.draw(st.sampled_from([list(rows[i]), rows[i][:8], (*rows[i], 0), None]))
    return rows


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(RECORDS, max_size=6), st.data())
def test_the_c_check_does_what_the_python_check_does(records: list[Any],
                                                     data: st.DataObject) -> None:
    prev = data.draw(st.one_of(st.just(GENESIS_HASH), TEXTS, st.just(None)))
    after = data.draw(st.one_of(st.integers(-3, 3), st.sampled_from([2**63 - 2, 2**63 - 1]),
                                st.just(2**63),
                                st.just(-(2**63)), st.none(), st.just(True)))
    first = after + 1 if isinstance(after, int) else 1
    rows = chain_of(records, prev if isinstance(prev, str) else GENESIS_HASH, first)
    altered = _alter(rows, data)
    assert outcome(_fast(), altered, prev, after) == outcome(chained_python, altered, prev,
                                                             after)


@needs_c
@settings(max_examples=150, deadline=None)
@given(CLEAN_RECORDS, st.data())
def test_an_untouched_chain_passes_and_each_edit_stops_it_at_its_row(
        records: list[Any], data: st.DataObject) -> None:
    """The usual case, where the C path does all the work: a whole chain passes; a change
    to any one field of one row stops both checks at that row, with the same error."""
    rows = chain_of(records)
    assert outcome(_fast(), rows, GENESIS_HASH, 0) == (list(map(id, rows)), None)
    i = data.draw(st.integers(0, len(rows) - 1))
    f = data.draw(st.integers(1, 8))
    old = rows[i][f]
    new = old + 1 if isinstance(old, int) else data.draw(CLEAN.filter(lambda s: s != old))
    altered = [*rows[:i], (*rows[i][:f], new, *rows[i][f + 1:]), *rows[i + 1:]]
    seen, error = outcome(_fast(), altered, GENESIS_HASH, 0)
    assert (seen, error) == outcome(chained_python, altered, GENESIS_HASH, 0)
    assert seen == list(map(id, rows[:i]))
    assert error is not None and error[0] is ChainBroken and error[2] == i + 1


@needs_c
@pytest.mark.parametrize("edit", ["none", "repeat", "gap"])
def test_positions_at_the_edge_of_64_bits_are_checked_alike(edit: str) -> None:
    """Past 2**63 - 1 a position has no 64-bit form: the rows from there on are checked
    in Python, from the state reached, with no position lost or wrapped around."""
    after = 2**63 - 3
    rows = chain_of([("a", "s", 1, "t", 1, 2, "{}")] * 4, first=after + 1)
    altered = {"none": rows, "repeat": [*rows[:2], rows[1], *rows[2:]],
               "gap": [*rows[:2], *rows[3:]]}[edit]
    got = outcome(_fast(), altered, GENESIS_HASH, after)
    assert got == outcome(chained_python, altered, GENESIS_HASH, after)
    assert got[1] is None if edit == "none" else got[1][2] == 2**63


@needs_c
def test_the_c_check_is_lazy_and_ends_like_a_generator() -> None:
    """Nothing is read before the first row is asked for; after an error, or at the end,
    it stays ended; a row source that reads the check itself gets a generator's error."""
    for check in (_fast(), chained_python):
        started = check(42, GENESIS_HASH, 0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            next(started)
        rows = chain_of([("a", "s", 1, "t", 1, 2, "{}")] * 3)
        broken = check([rows[0], rows[2], rows[1]], GENESIS_HASH, 0)
        assert next(broken) is rows[0]
        with pytest.raises(ChainBroken):
            next(broken)
        assert list(broken) == []

    rows = chain_of([("a", "s", 1, "t", 1, 2, "{}")] * 2)

    def reentrant(check: Check) -> tuple[list[int], Any]:
        it: Iterator[Any]

        def source() -> Iterator[Any]:
            yield rows[0]
            next(it)
            yield rows[1]

        it = check(source(), GENESIS_HASH, 0)
        return outcome(lambda *_: it, [], None, None)

    assert reentrant(_fast()) == reentrant(chained_python)
    assert reentrant(_fast())[1][:2] == (ValueError, "generator already executing")


@needs_c
def test_the_c_check_lets_go_of_every_row_and_leaks_nothing() -> None:
    """Every way out (the end, a bad hash, a row out of place, a row handed to Python,
    an error from the row source) leaves no reference behind and no memory growing."""
    rows = chain_of([("id-é", "s", 1, "t", 1, 2, '{"a":"\\"x\\""}')] * 4)
    bad = [rows[0], (*rows[1][:8], "f" * 64)]
    gap = [rows[0], rows[2]]
    odd = [rows[0], (*rows[1][:3], True, *rows[1][4:])]

    def failing() -> Iterator[Any]:
        yield rows[0]
        raise OSError("the database went away")

    # The same ways out of the link check (`pinned`): a missing predecessor for the gap.
    linked = with_predecessors(rows)
    linked_bad = [linked[0], (*linked[1][:8], "f" * 64, linked[1][9])]
    orphan = [linked[0], (*linked[2][:9], None)]
    linked_odd = [linked[0], (*linked[1][:3], True, *linked[1][4:])]

    def run_all() -> None:
        for source in (rows, bad, gap, odd):
            outcome(_fast(), source, GENESIS_HASH, 0)
        outcome(_fast(), failing(), GENESIS_HASH, 0)
        for source in (linked, linked_bad, orphan, linked_odd):
            pinned_outcome(_fast_pinned(), source)
        pinned_outcome(_fast_pinned(), failing())

    _lets_go_and_leaks_nothing(
        [*rows, *bad, *gap, *odd, *linked, *linked_bad, *orphan, *linked_odd], run_all)


def _lets_go_and_leaks_nothing(watched: list[Any], run_all: Callable[[], None]) -> None:
    """After `run_all`, every watched object has the references it had before, and running
    it 2,000 times more leaves the traced memory where it was."""
    counts = [sys.getrefcount(r) for r in watched]
    run_all()
    gc.collect()
    assert [sys.getrefcount(r) for r in watched] == counts
    tracemalloc.start()
    try:
        for _ in range(200):
            run_all()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            run_all()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more after 2000 more rounds"


@needs_c
def test_odd_values_in_a_sqlite_file_are_found_alike(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite keeps whatever type an attacker writes: a hash as a blob, a version as
    text, a time as a float. Both checks stop at that record, with the same error."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    journal = Journal(url)
    try:
        for i in range(1, 6):
            journal.append([NewEvent(f"e{i}", "s", "t", i, {"n": i})])
    finally:
        journal.close()
    edits = ["hash = CAST(hash AS BLOB)", "version = 'v'", "event_time = event_time + 0.5",
             "payload = 7", "event_id = CAST(event_id AS BLOB)"]
    for edit in edits:
        copy = tmp_path / "edited.db"
        copy.write_bytes((tmp_path / "j.db").read_bytes())
        with sqlite3.connect(copy) as conn:
            conn.execute(f"UPDATE events SET {edit} WHERE position = 3")
        reports = []
        for fast in (hashing._fast_chained, None):
            monkeypatch.setattr(hashing, "_fast_chained", fast)
            j = Journal(f"sqlite:///{copy}")
            try:
                reports.append(j.verify_chain())
            finally:
                j.close()
        assert reports[0] == reports[1], edit
        assert reports[0].first_bad_position == 3, edit


def _accelerated_in_a_new_process(**env: str) -> str:
    code = "from eventstore import hashing; print(hashing.ACCELERATED)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    return done.stdout.strip()


def test_the_variable_turns_the_accelerator_off_and_it_is_used_where_built() -> None:
    built = importlib.util.find_spec("eventstore._chain") is not None
    assert _accelerated_in_a_new_process(**{hashing.PURE_PYTHON_VARIABLE: ""}) == str(built)
    assert _accelerated_in_a_new_process(**{hashing.PURE_PYTHON_VARIABLE: "1"}) == "False"


# -- each row's own link (`pinned`) --------------------------------------------------------

def _fast_pinned() -> Callable[[Iterable[Any]], Iterator[Any]]:
    assert hashing._fast_pinned is not None
    return hashing._fast_pinned  # type: ignore[return-value]


def pinned_outcome(check: Callable[[Iterable[Any]], Iterator[Any]],
                   rows: Iterable[Any]) -> tuple[list[int], Any]:
    """`outcome` for a check of rows that carry their predecessor's hash."""
    return outcome(lambda r, *_: check(r), rows, None, None)


def with_predecessors(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Stored rows at 1, 2, ... each followed by the hash stored before it (None at 1)."""
    return [(*row, rows[i - 1][8] if i else None) for i, row in enumerate(rows)]


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(RECORDS, max_size=6), st.data())
def test_the_c_link_check_does_what_the_python_one_does(records: list[Any],
                                                        data: st.DataObject) -> None:
    rows = with_predecessors(chain_of(records))
    data.draw(st.randoms()).shuffle(rows)  # any order: each row is checked on its own
    if rows:
        kind = data.draw(st.sampled_from(["none", "field", "shape"]))
        i = data.draw(st.integers(0, len(rows) - 1))
        if kind == "field":
            f = data.draw(st.integers(0, 9))
            value = data.draw(st.one_of(OTHER_VALUES, st.sampled_from(["f" * 64, "0" * 64])))
            rows[i] = (*rows[i][:f], value, *rows[i][f + 1:])
        elif kind == "shape":
            rows[i] = data.draw(st.sampled_from([list(rows[i]), rows[i][:9], (*rows[i], 0),
                                                 None]))
    assert pinned_outcome(_fast_pinned(), rows) == pinned_outcome(hashing.pinned_python, rows)


@needs_c
@pytest.mark.parametrize("position", [-(2**63), -(2**63) + 1, 2**63 - 1, 0, 2])
def test_a_row_read_without_a_predecessor_is_refused_alike_at_the_64_bit_edges(
        position: int) -> None:
    # The position before the smallest 64-bit one has no 64-bit form: the C check must not
    # wrap it round to the largest and call the row repeated instead of missing one.
    row = (*chain_of([("e", "s", 1, "t", 0, 0, "{}")])[0], None)
    row = (position, *row[1:])
    assert pinned_outcome(_fast_pinned(), [row]) == pinned_outcome(hashing.pinned_python, [row])
    assert pinned_outcome(hashing.pinned_python, [row])[1][2] == position - 1


@needs_c
@settings(max_examples=100, deadline=None)
@given(CLEAN_RECORDS, st.data())
def test_an_edit_stops_the_link_check_at_its_row_in_any_order(
        records: list[Any], data: st.DataObject) -> None:
    rows = with_predecessors(chain_of(records))
    order = data.draw(st.permutations(range(len(rows))))
    shown = [rows[k] for k in order]
    for check in (_fast_pinned(), hashing.pinned_python):
        assert pinned_outcome(check, shown) == (list(map(id, shown)), None)
    i = data.draw(st.integers(0, len(rows) - 1))
    f = data.draw(st.integers(1, 7))  # a field of the content, the hashes left as they were
    old = shown[i][f]
    new = old + 1 if isinstance(old, int) else data.draw(CLEAN.filter(lambda s: s != old))
    shown[i] = (*shown[i][:f], new, *shown[i][f + 1:])
    seen, error = pinned_outcome(_fast_pinned(), shown)
    assert (seen, error) == pinned_outcome(hashing.pinned_python, shown)
    assert seen == list(map(id, shown[:i]))
    assert error is not None and error[0] is ChainBroken and error[2] == shown[i][0]


@needs_c
def test_a_missing_predecessor_and_a_lazy_start_alike() -> None:
    rows = with_predecessors(chain_of([("a", "s", 1, "t", 1, 2, "{}")] * 3))
    orphan = (*rows[2][:9], None)  # position 3, its predecessor not found
    for check in (_fast_pinned(), hashing.pinned_python):
        started = check(42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            next(started)
        with pytest.raises(ChainBroken) as info:
            list(check([rows[0], orphan]))
        assert info.value.position == 2 and "missing" in str(info.value)


# -- each row's own link, the predecessors' hashes by position (`linked`) --------------

def _fast_linked() -> Callable[[Iterable[Any], Any], Iterator[Any]]:
    assert hashing._fast_linked is not None
    return hashing._fast_linked  # type: ignore[return-value]


def linked_outcome(check: Callable[[Iterable[Any], Any], Iterator[Any]], rows: Iterable[Any],
                   hashes: Any) -> tuple[list[int], Any]:
    """`outcome` for a check of stored rows whose predecessors' hashes are in `hashes`."""
    return outcome(lambda r, *_: check(r, hashes), rows, None, None)


def _by_position(rows: list[tuple[Any, ...]]) -> dict[Any, Any]:
    return {row[0]: row[8] for row in rows}


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(RECORDS, max_size=6), st.data())
def test_the_c_check_by_position_does_what_the_python_one_does(
        records: list[Any], data: st.DataObject) -> None:
    rows = chain_of(records)
    hashes: Any = _by_position(rows)
    data.draw(st.randoms()).shuffle(rows)  # any order: each row is checked on its own
    if rows:
        kind = data.draw(st.sampled_from(["none", "field", "shape", "forget", "hash"]))
        i = data.draw(st.integers(0, len(rows) - 1))
        if kind == "field":
            f = data.draw(st.integers(0, 8))
            value = data.draw(st.one_of(OTHER_VALUES, st.sampled_from(["f" * 64, "0" * 64])))
            rows[i] = (*rows[i][:f], value, *rows[i][f + 1:])
        elif kind == "shape":
            rows[i] = data.draw(st.sampled_from([list(rows[i]), rows[i][:8], (*rows[i], 0),
                                                 None]))
        elif kind == "forget":  # a predecessor the read did not find
            hashes.pop(data.draw(st.sampled_from(sorted(hashes))), None)
        else:  # a predecessor's hash of another value or type, or not a dict at all
            value = data.draw(st.one_of(OTHER_VALUES, st.just("f" * 64)))
            if data.draw(st.booleans()):
                hashes[data.draw(st.sampled_from(sorted(hashes)))] = value
            else:
                hashes = data.draw(st.sampled_from([list(hashes.items()), None, value]))
    assert (linked_outcome(_fast_linked(), rows, hashes)
            == linked_outcome(hashing.linked_python, rows, hashes))


@needs_c
@settings(max_examples=100, deadline=None)
@given(CLEAN_RECORDS, st.data())
def test_an_edit_stops_the_check_by_position_at_its_row_in_any_order(
        records: list[Any], data: st.DataObject) -> None:
    rows = chain_of(records)
    hashes = _by_position(rows)
    order = data.draw(st.permutations(range(len(rows))))
    shown = [rows[k] for k in order]
    for check in (_fast_linked(), hashing.linked_python):
        assert linked_outcome(check, shown, hashes) == (list(map(id, shown)), None)
    i = data.draw(st.integers(0, len(rows) - 1))
    f = data.draw(st.integers(1, 7))  # a field of the content, the hashes left as they were
    old = shown[i][f]
    new = old + 1 if isinstance(old, int) else data.draw(CLEAN.filter(lambda s: s != old))
    shown[i] = (*shown[i][:f], new, *shown[i][f + 1:])
    seen, error = linked_outcome(_fast_linked(), shown, hashes)
    assert (seen, error) == linked_outcome(hashing.linked_python, shown, hashes)
    assert seen == list(map(id, shown[:i]))
    assert error is not None and error[0] is ChainBroken and error[2] == shown[i][0]


@needs_c
def test_the_check_by_position_refuses_as_the_link_check_and_leaks_nothing() -> None:
    rows = chain_of([("a", "s", 1, "t", 1, 2, "{}")] * 3)
    hashes = {1: rows[0][8]}  # position 2's predecessor only: 3's is missing
    for check in (_fast_linked(), hashing.linked_python):
        with pytest.raises(ChainBroken) as info:
            list(check([rows[0], rows[1], rows[2]], hashes))
        assert info.value.position == 2 and "missing" in str(info.value)
        mine = with_predecessors(rows)
        with pytest.raises(ChainBroken) as pinned_info:
            list(hashing.pinned_python([mine[0], mine[1], (*mine[2][:9], None)]))
        assert str(info.value) == str(pinned_info.value)
    bad = [rows[0], (*rows[1][:8], "f" * 64)]
    odd = [rows[0], (*rows[1][:3], True, *rows[1][4:])]
    full = _by_position(rows)

    def run_all() -> None:
        for source in (rows, bad, odd):
            linked_outcome(_fast_linked(), source, full)
        linked_outcome(_fast_linked(), rows, hashes)

    _lets_go_and_leaks_nothing([*rows, *bad, *odd, *full.values()], run_all)
