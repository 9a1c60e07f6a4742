"""Canonical bytes and the hash chain.

Every backend (memory, SQLite, PostgreSQL) computes hashes here, in the process and not
in the database, so the same events give the same chain wherever they are stored, and a
journal can be verified without trusting the database.

The check of stored rows as they stream (`chained`, behind every verified read) runs in
the C accelerator `_chain.c` where the install could build it; `chained_python` is its
definition, the fallback, and what the tests hold the accelerator to.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from json.encoder import encode_basestring
from types import ModuleType
from typing import Any

import orjson

from .errors import ChainBroken
from .records import GENESIS_HASH as GENESIS_HASH  # the chain's start, kept with Anchor
from .records import PinnedRow, StoredRow, hashed_fields

# One encoder for the process: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


_DECODER = json.JSONDecoder()


def load_json(text: str) -> Any:
    """Parse a stored canonical JSON text (no surrounding whitespace to skip)."""
    return _DECODER.raw_decode(text)[0]


_FLAT = frozenset({str, int, bool, type(None)})
"""The value types of a flat payload (every event's but an erasure's), which orjson
writes exactly as the standard encoder does."""


def canonical_json(obj: Any) -> str:
    """One text for one value: sorted keys, no spaces, UTF-8 kept as is.

    The same as json.dumps(obj, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False), except that NaN and infinities are refused (ValueError):
    they are not JSON, and another reader could not reproduce the bytes.

    A flat object (exact str, int, bool or None values) is written by orjson, eight
    times faster: for those it writes the same text (the same escapes, keys sorted by
    code point; a test holds the two equal over every code point). What it refuses (a
    key that is not a str, an int past 64 bits) goes to the standard encoder, which
    writes it or says why not.
    """
    flat = flat_json(obj)
    return _ENCODER.encode(obj) if flat is None else flat


def flat_json(obj: Any) -> str | None:
    """`canonical_json` of a flat object with str keys, by orjson; None for anything else
    (a key that is not an exact str, a value of another type, an int past 64 bits)."""
    if type(obj) is dict:
        for value in obj.values():
            if type(value) not in _FLAT:
                return None
        try:
            return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:
            pass
    return None


def load_canonical(text: str) -> Any:
    """`load_json` of a text `canonical_json` just wrote (the journal's own, never a
    stored one): a flat object by orjson, which reads it to the same value three times
    faster. orjson reads an int past 64 bits as a float: a value holding any float (or
    anything not flat) is read by the standard decoder, as is what orjson refuses (a
    lone surrogate)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return load_json(text)
    if type(value) is dict:
        for item in value.values():
            if type(item) not in _FLAT:
                return load_json(text)
        return value
    return load_json(text)


def record_hash(prev_hash: str, **fields: Any) -> str:
    """The hex SHA-256 chaining a record to its predecessor: the reference definition.

    sha256(prev_hash as ASCII hex + canonical JSON bytes of the record's fields
    position, id, stream, version, type, time, recorded_at, payload), given by name:
    every field of `RecordedEvent` but the hash itself, no other (TypeError otherwise).
    The payload is a value here, encoded generically; the journal hashes its stored text
    with `record_hash_text`, and tests hold the two equal.
    """
    names = hashed_fields()
    if fields.keys() != set(names):
        raise TypeError(f"record_hash takes the fields {', '.join(names)} by name, "
                        f"got {', '.join(sorted(fields))}")
    body = canonical_json({name: fields[name] for name in names})
    return hashlib.sha256(prev_hash.encode("ascii") + body.encode("utf-8")).hexdigest()


def record_hash_text(
    prev_hash: str,
    position: int,
    id: str,
    stream: str,
    version: int,
    type: str,
    time: int,
    recorded_at: int,
    payload_text: str,
) -> str:
    """`record_hash` from the payload's canonical text, without re-encoding it.

    Appends and verify() hash every record, so this writes the canonical JSON of
    the record directly: the keys in sorted order, each str through the same
    encoder json.dumps uses, the payload text spliced in. A test holds it equal to
    `record_hash`.
    """
    return hashlib.sha256(
        chain_input(prev_hash, (position, id, stream, version, type, time, recorded_at,
                                payload_text, ""))
    ).hexdigest()


def seal(salt: str, private_text: str) -> str:
    """The hex SHA-256 committing a record to its private part: over the salt (hex, ASCII)
    then the private part's canonical JSON (UTF-8). The random salt makes the seal of
    guessable content (a user name) impossible to confirm once salt and part are erased."""
    return hashlib.sha256(f"{salt}{private_text}".encode()).hexdigest()


def chain_input(prev_hash: str, row: StoredRow) -> bytes:
    """The exact bytes hashed for a stored row: the previous hash (ASCII hex), then the
    record's canonical JSON (UTF-8), its payload spliced in as stored."""
    position, id_, stream, version, type_, time, recorded_at, payload_text, _ = row
    return (
        f'{prev_hash}{{"id":{encode_basestring(id_)},"payload":{payload_text},'
        f'"position":{position},"recorded_at":{recorded_at},'
        f'"stream":{encode_basestring(stream)},"time":{time},'
        f'"type":{encode_basestring(type_)},"version":{version}}}'
    ).encode()


def chained(rows: Iterable[StoredRow], prev_hash: str, after_position: int) -> Iterator[StoredRow]:
    """Yield stored rows in position order, each after checking that it chains.

    The first row must be at after_position + 1 and hash from prev_hash (the hash at
    after_position: a verified checkpoint's, or the genesis hash), each next one at
    the next position from the one before. Raises ChainBroken at the first row that
    is out of place or whose stored hash is not the one recomputed, so a reader never
    acts on an altered record. It cannot see records removed from the end: that
    needs an anchor (`verify_chain(anchor=...)`).

    The check runs in the C accelerator when it is built and not turned off
    (`ACCELERATED`), else in `chained_python`, its definition; both yield the same rows
    and raise the same errors.
    """
    if _fast_chained is not None:
        return _fast_chained(rows, prev_hash, after_position)
    return chained_python(rows, prev_hash, after_position)


def chained_python(
    rows: Iterable[StoredRow], prev_hash: str, after_position: int
) -> Iterator[StoredRow]:
    """`chained` in Python: the definition the accelerator follows, and its fallback.

    As fast as Python allows: the body is built as one str with the hash before it
    (one encode, no concatenation of bytes), and the escaped forms of streams and
    types, which repeat, are cached for the duration of the read.
    """
    sha256 = hashlib.sha256
    escape = encode_basestring
    escaped: dict[str, str] = {}
    expected = after_position + 1
    prev = prev_hash
    for row in rows:
        position, id_, stream, version, type_, time, recorded_at, payload, digest = row
        if position != expected:
            raise _out_of_place(expected, position)
        s = escaped.get(stream)
        if s is None:
            s = escaped[stream] = escape(stream)
        t = escaped.get(type_)
        if t is None:
            t = escaped[type_] = escape(type_)
        prev = sha256(
            f'{prev}{{"id":{escape(id_)},"payload":{payload},"position":{position},'
            f'"recorded_at":{recorded_at},"stream":{s},"time":{time},'
            f'"type":{t},"version":{version}}}'.encode()
        ).hexdigest()
        if prev != digest:
            raise _bad_hash(position)
        expected += 1
        yield row


def pinned(rows: Iterable[PinnedRow]) -> Iterator[PinnedRow]:
    """Yield stored rows, in any order, each after checking its own link of the chain.

    Each row carries, after the stored fields, its predecessor's stored hash (None at
    position 1, or where no predecessor is stored), read in the same query. The row's
    stored hash must be the one its content and that hash give (`chain_input`), else
    ChainBroken at its position: a record edited in place and not re-hashed is never
    acted on, wherever it stands, for the cost of one hash per row and no extra read.
    A row re-hashed with it breaks its successor's link instead, which this check sees
    only when that successor is read; `chained` (verify, the reads after a verified
    point) and anchors see every link.

    In the C accelerator when it is built (`ACCELERATED`), else in `pinned_python`, its
    definition; both yield the same rows and raise the same errors.
    """
    if _fast_pinned is not None:
        return _fast_pinned(rows)
    return pinned_python(rows)


def pinned_python(rows: Iterable[PinnedRow]) -> Iterator[PinnedRow]:
    """`pinned` in Python: the definition the accelerator follows, and its fallback."""
    escaped: dict[str, str] = {}
    for row in rows:
        position, _, _, _, _, _, _, _, digest, prev = row
        if prev is None:
            if position != 1:
                raise _out_of_place(position - 1, position)
            prev = GENESIS_HASH
        if _own_hash(prev, row, escaped) != digest:
            raise _bad_hash(position)
        yield row


def _own_hash(prev: str, row: StoredRow | PinnedRow, escaped: dict[str, str]) -> str:
    """The hash a stored row's content and its predecessor's hash give (`chain_input`),
    the escaped forms of streams and types, which repeat, cached in `escaped`."""
    position, id_, stream, version, type_, time, recorded_at, payload = row[:8]
    # (An escaped text is never empty: it has its quotes.)
    s = escaped.get(stream) or escaped.setdefault(stream, encode_basestring(stream))
    t = escaped.get(type_) or escaped.setdefault(type_, encode_basestring(type_))
    return hashlib.sha256(
        f'{prev}{{"id":{encode_basestring(id_)},"payload":{payload},"position":{position},'
        f'"recorded_at":{recorded_at},"stream":{s},"time":{time},'
        f'"type":{t},"version":{version}}}'.encode()
    ).hexdigest()


def linked(rows: Iterable[StoredRow], hashes: Mapping[int, str]) -> Iterator[StoredRow]:
    """`pinned` for stored rows whose predecessors' stored hashes are known by position:
    each row at position p is checked against `hashes[p - 1]` (the genesis hash at
    position 1), and one whose predecessor is not in `hashes` is refused as `pinned`
    refuses a row read without one. For a read that fetched its rows' predecessors with
    them (most are rows of the same read), instead of beside each row.

    In the C accelerator when it is built (`ACCELERATED`), else in `linked_python`.
    """
    if _fast_linked is not None:
        return _fast_linked(rows, hashes)
    return linked_python(rows, hashes)


def linked_python(rows: Iterable[StoredRow], hashes: Mapping[int, str]
                  ) -> Iterator[StoredRow]:
    """`linked` in Python: the definition the accelerator follows, and its fallback."""
    escaped: dict[str, str] = {}
    for row in rows:
        position, _, _, _, _, _, _, _, digest = row  # a stored row, else the unpacking's error
        if position == 1:
            prev = GENESIS_HASH
        else:
            found = hashes.get(position - 1)
            if found is None:
                raise _out_of_place(position - 1, position)
            prev = found
        if _own_hash(prev, row, escaped) != digest:
            raise _bad_hash(position)
        yield row


def _out_of_place(expected: int, position: int) -> ChainBroken:
    """The error for a row read at `position` where `expected` should come."""
    what = "missing" if position > expected else "repeated or out of order"
    return ChainBroken(
        expected,
        f"journal chain broken at position {expected}: it is {what} (the next "
        f"record read is at position {position}); the journal was altered",
    )


def _bad_hash(position: int) -> ChainBroken:
    """The error for a row whose stored hash is not the one recomputed."""
    return ChainBroken(
        position,
        f"journal chain broken at position {position}: its stored hash is not the "
        "one its content and its predecessor give: the record or its hash was altered",
    )


#: Set (to anything but empty or "0") to run the chain check in Python even where the C
#: accelerator is built; read once, at import.
PURE_PYTHON_VARIABLE = "GPU_CREDITS_PURE_PYTHON"


def _load_accelerator() -> ModuleType | None:
    """The C chain check, configured, unless turned off or not built (no compiler at
    install: then the Python definitions serve, only slower)."""
    if os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0"):
        return None
    try:
        from . import _chain
    except ImportError:
        return None
    if not hasattr(_chain, "linked"):
        return None  # built from an older _chain.c: rebuild (pip install -e .) to use it
    _chain.configure(chained_python, _out_of_place, _bad_hash, hashlib.sha256,
                     itertools.chain, pinned_python, linked_python)
    return _chain


_accelerator = _load_accelerator()
_fast_chained: Callable[[Iterable[StoredRow], str, int], Iterator[StoredRow]] | None = (
    None if _accelerator is None else _accelerator.chained)
_fast_pinned: Callable[[Iterable[PinnedRow]], Iterator[PinnedRow]] | None = (
    None if _accelerator is None else _accelerator.pinned)
_fast_linked: Callable[[Iterable[StoredRow], Mapping[int, str]], Iterator[StoredRow]] | None = (
    None if _accelerator is None else _accelerator.linked)

#: Whether `chained` runs in C (see `PURE_PYTHON_VARIABLE`).
ACCELERATED = _accelerator is not None
