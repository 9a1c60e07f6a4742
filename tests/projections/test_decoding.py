"""projections.decoding: the fast payload decoder gives exactly what from_payload gives."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.hashing import canonical_json, load_json
from projections.decoding import decode_event, decode_record
from projections.events import EVENT_TYPES, from_payload
from projections.importing import PAYLOAD_FIELDS, parse_record, parse_record_generic
from projections.validation import MAX_INT, MAX_NAME_LENGTH, MAX_TEXT_LENGTH, stored_text

# Values near every bound the vocabulary checks, and of every JSON type.
_INTS = st.sampled_from([0, 1, 2, -1, 50, 99, 100, 101, 3600, MAX_INT, MAX_INT + 1, -MAX_INT,
                         -MAX_INT - 1, 2**63, 10**25]) | st.integers(-10**6, 10**6)
_FLOATS = st.sampled_from([0.0, -0.0, 0.5, 0.9, 1.0, 1.5, -0.1, 1e300, 1e-300, 2.0])
_TEXTS = st.sampled_from(["a", "acct-1", "general", "h100", " ", "", "a b", "\x00", "a\nb",
                          "\u2028", "é", "😀", "\t", "x" * MAX_NAME_LENGTH,
                          "x" * (MAX_NAME_LENGTH + 1), "y" * MAX_TEXT_LENGTH,
                          "y" * (MAX_TEXT_LENGTH + 1), "\u200b"]) | st.text(max_size=8)
_VALUES = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, _TEXTS,
                    st.just([]), st.just({}), st.just([1]))
_FIELDS = st.sampled_from([*PAYLOAD_FIELDS, "extra", "type", "time"])


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "event", fn(*args)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=750, deadline=None)
@given(st.sampled_from(EVENT_TYPES), st.dictionaries(_FIELDS, _VALUES, max_size=8))
def test_the_fast_path_agrees_with_from_payload(kind: str, payload: dict[str, Any]) -> None:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = _outcome(from_payload, kind, load_json(text))
    assert _outcome(decode_event, kind, text) == expected
    assert _outcome(decode_event, kind, text.encode()) == expected
    assert _outcome(decode_event, kind, load_json(text)) == expected


_GOOD: dict[str, Any] = {
    "account": st.sampled_from(["a", "acct-00001"]), "job": st.sampled_from(["j", "job-1"]),
    "amount": st.integers(-3, 3), "cost": st.integers(0, 3), "priority": st.integers(-1, 101),
    "success": st.booleans(), "refund_fraction": st.floats(0, 1) | st.integers(0, 1),
    "expiry": st.integers(0, 9), "pool": st.sampled_from(["general", "h100"]) | st.none(),
    "reason": st.sampled_from(["typo", "PO 7"]), "grant": st.just("g"), "event": st.just("e"),
    "memo": st.sampled_from(["m", "PO 7"]) | st.none(), "max_running": st.integers(1, 3),
    "share": st.integers(1, 3), "half_life": st.integers(1, 9),
    "refill_rate": st.integers(1, 3), "refill_cap": st.integers(1, 3),
    "user": st.sampled_from(["ada", "b.b"]) | st.none(),
    "events": st.lists(st.sampled_from(["e1", "e2"]), min_size=1, max_size=2)}
_BAD = st.one_of(_VALUES, st.sampled_from(["", " ", "  ", "\t", "a\x00", "\x7f", 0, -1,
                                           True, None, 1.0]))


@st.composite
def _events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """An event type and a payload of its own fields, mostly valid, one field maybe not."""
    kind = draw(st.sampled_from(EVENT_TYPES))
    cls = type(from_payload(kind, _MINIMAL[kind]))
    payload: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING
        if required or draw(st.booleans()):
            payload[f.name] = draw(_GOOD[f.name])
    if payload and draw(st.integers(0, 3)) == 0:
        payload[draw(st.sampled_from(sorted(payload)))] = draw(_BAD)
    return kind, payload


_MINIMAL: dict[str, dict[str, Any]] = {
    "account": {"account": "a"}, "grant": {"account": "a", "amount": 1},
    "consume": {"account": "a", "amount": 1},
    "submit": {"account": "a", "job": "j", "cost": 1, "priority": 0},
    "start": {"job": "j"}, "complete": {"job": "j", "success": True},
    "cancel": {"job": "j"}, "adjust": {"account": "a", "amount": 1, "reason": "r"},
    "void": {"grant": "g"}, "reverse": {"event": "e", "reason": "r"},
    "erase": {"events": ["e"]}}


@settings(max_examples=1000, deadline=None)
@given(_events())
def test_events_near_validity_decode_as_from_payload_builds_them(
        event: tuple[str, dict[str, Any]]) -> None:
    kind, payload = event
    text = canonical_json(payload)
    assert _outcome(decode_event, kind, text) == _outcome(_from_stored_payload, kind, payload)


def _from_stored_payload(kind: str, payload: dict[str, Any]) -> Any:
    """`from_payload` as a journal's payload is read: a name or text refused by it is
    read again as stored text (a code point a later Unicode may have assigned passes),
    so that every install folds what another wrote alike."""
    try:
        return from_payload(kind, payload)
    except ValueError:
        with stored_text():
            return from_payload(kind, payload)


_ENVELOPE_VALUES = st.one_of(_VALUES, st.sampled_from(["e-1", "e\n1", 5, 0, -1, 2**53]),
                             st.integers(-10, 10))


@st.composite
def _records(draw: st.DrawFn) -> dict[str, Any]:
    """A line of the import format: a payload near validity (or any fields), with an
    envelope that may miss, hold null or hold a value of another kind, and maybe a field
    the journal records beside an event."""
    kind, payload = draw(_events()) if draw(st.integers(0, 3)) else (
        draw(st.sampled_from(EVENT_TYPES)), draw(st.dictionaries(_FIELDS, _VALUES, max_size=6)))
    record: dict[str, Any] = {**payload, "type": kind}
    record["time"] = draw(st.integers(-10, 10))
    if draw(st.booleans()):
        record["id"] = draw(st.sampled_from(["e-1", "import-7"]))
    for name in ("id", "time"):
        if draw(st.integers(0, 4)) == 0:
            if draw(st.booleans()):
                record.pop(name, None)
            else:
                record[name] = draw(_ENVELOPE_VALUES)
    if draw(st.integers(0, 9)) == 0:
        record["type"] = draw(_VALUES)
    if draw(st.integers(0, 9)) == 0:
        record[draw(st.sampled_from(["position", "recorded_at"]))] = draw(_VALUES)
    return record


@settings(max_examples=1500, deadline=None)
@given(_records())
def test_a_record_reads_in_one_pass_as_field_by_field(record: dict[str, Any]) -> None:
    expected = _outcome(parse_record_generic, record)
    assert _outcome(parse_record, record) == expected
    plain = decode_record(record)
    if plain is not None:  # what the one pass accepts, the definition accepts alike
        assert ("event", plain) == expected


@pytest.mark.parametrize("record", [
    {"type": "account", "account": "a"},
    {"type": "account", "account": "a", "time": None, "id": None},
    {"type": "grant", "account": "a", "amount": 5, "time": 3, "expiry": 4, "id": "g-1"},
    {"type": "complete", "job": "j", "success": False, "refund_fraction": 1, "time": 3},
    {"type": "consume", "account": "a", "amount": 1, "pool": None, "time": -5},
])
def test_plain_records_take_the_one_pass(record: dict[str, Any]) -> None:
    assert decode_record(record) == parse_record_generic(record)


@pytest.mark.parametrize("record", [
    {"type": "grant", "account": "a", "amount": 5, "time": 4, "expiry": 4},
    {"type": "consume", "account": "a", "amount": 1},
    {"type": "consume", "account": "a", "amount": 1, "time": 1, "id": "a\tb"},
    {"type": "consume", "account": "a", "amount": 1, "time": 1, "position": 7},
    {"type": "erase", "events": ["e"], "time": 1},
    {"type": "consume", "account": "a", "amount": True, "time": 1},
])
def test_records_the_one_pass_leaves_to_the_definition(record: dict[str, Any]) -> None:
    assert decode_record(record) is None
    assert _outcome(parse_record, record) == _outcome(parse_record_generic, record)


@pytest.mark.parametrize(("kind", "payload"), [
    ("adjust", {"account": "a", "amount": 0, "reason": "r"}),
    ("adjust", {"account": "a", "amount": 1, "reason": "  "}),
    ("grant", {"account": "a", "amount": 1, "memo": " "}),
    ("grant", {"account": "a", "amount": 1, "pool": "h\x00"}),
    ("account", {"account": "a", "refill_rate": 1}),
    ("void", {"grant": "g", "reason": "\t"}),
    ("consume", {"account": "a", "amount": 1, "user": "a\nb"}),
])
def test_what_the_fast_path_cannot_check_in_c_is_still_refused(
        kind: str, payload: dict[str, Any]) -> None:
    expected = _outcome(from_payload, kind, payload)
    assert expected[0] == "ValueError"
    assert _outcome(decode_event, kind, canonical_json(payload)) == expected


def test_a_seal_of_a_private_part_takes_the_generic_way_to_the_same_event() -> None:
    text = canonical_json({"account": "a", "amount": 5, "$private": "ab" * 32})
    assert decode_event("consume", text) == from_payload("consume", load_json(text))


@pytest.mark.parametrize("text", ['{"account":"a","amount":5,"amount":6}',
                                  '{"account":"a","amount":5}trailing'])
def test_texts_the_journal_never_writes_read_as_before(text: str) -> None:
    assert decode_event("grant", text) == from_payload("grant", load_json(text))


def test_a_text_that_is_not_json_raises_as_the_journal_reader_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        decode_event("grant", ' {"account":"a","amount":5}')
    with pytest.raises(json.JSONDecodeError):
        decode_event("grant", "{oops")


def test_an_unknown_type_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown event type 'refund'"):
        decode_event("refund", '{"account":"a"}')


# -- the event builders: in C where built, held to the Python definition ---------------------

# Strings at the edges of what a name and a memo may be: ASCII controls and spaces, the
# separators and format characters str.isprintable() refuses beyond ASCII, the
# whitespace str.strip() takes off, and printable text of every width.
_EDGE_TEXTS = st.sampled_from([
    "", " ", "  ", "a", "a b", " a ", "\t", "a\tb", "\x1c", "\x1f", "\x7f", "~", "\x00",
    "\x85", "\xa0", "\xa0a", "\u1680", "\u2000", "\u2028", "\u3000", "\u3000x", "\u200b",
    "\ufeff", "é", "é ", "\u00ad", "😀", "a😀", "\U000e0001", "\ud7ff", "general", "h100",
]) | st.text(max_size=6) | st.text(st.characters(max_codepoint=0x7f), max_size=6)


@st.composite
def _wire_values(draw: st.DrawFn) -> tuple[type[Any], Any]:
    """An event class and a decoded wire struct of it whose texts are edge cases."""
    from projections.decoding import FAST_PATHS

    kind = draw(st.sampled_from(sorted(FAST_PATHS)))
    cls = type(from_payload(kind, _MINIMAL[kind]))
    payload: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING or draw(st.booleans()):
            good = draw(_GOOD[f.name])
            payload[f.name] = draw(_EDGE_TEXTS) if isinstance(good, str) else good
    try:
        wire = FAST_PATHS[kind][0](canonical_json(payload))
    except Exception:  # msgspec refuses it: never reaches a builder
        wire = FAST_PATHS[kind][0](canonical_json(_MINIMAL[kind]))
    return cls, wire


def _built(build: Any, wire: Any) -> tuple[str, Any]:
    from projections.decoding import NOT_FAST

    try:
        event = build(wire)
    except NOT_FAST:
        return "refused", None
    return "event", (type(event), [(f.name, type(getattr(event, f.name)),
                                    getattr(event, f.name)) for f in dataclasses.fields(event)])


@settings(max_examples=1500, deadline=None)
@given(_wire_values())
def test_the_c_builders_build_what_the_python_definition_builds(
        case: tuple[type[Any], Any]) -> None:
    from projections import decoding

    if not decoding.BUILT_IN_C:
        pytest.skip("the C event builders are not built here (or GPU_CREDITS_PURE_PYTHON)")
    cls, wire = case
    wire_type = type(wire)
    python = decoding._builder_python(cls, wire_type)
    native = decoding._builder(cls, wire_type)
    assert type(native).__name__ == "Builder"
    assert _built(native, wire) == _built(python, wire)


def test_the_fast_paths_build_in_c_where_the_builders_are_built() -> None:
    """The differential test above compares something only where the fold really uses the
    C builders: a build that has them must have them in the fast paths."""
    import importlib.util
    import os

    from projections import decoding
    from projections.native import PURE_ENV

    built = importlib.util.find_spec("projections._eventbuild") is not None
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    expected = built and not pure
    assert expected == decoding.BUILT_IN_C
    kinds = {type(build).__name__ for _, build in decoding.FAST_PATHS.values()}
    assert kinds == ({"Builder"} if decoding.BUILT_IN_C else {"function"})


def test_a_c_builder_refuses_a_call_it_cannot_make() -> None:
    from projections import decoding

    if not decoding.BUILT_IN_C:
        pytest.skip("the C event builders are not built here (or GPU_CREDITS_PURE_PYTHON)")
    build = decoding.FAST_PATHS["start"][1]
    with pytest.raises(TypeError, match="one wire struct, got 2"):
        build(1, 2)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        build(object())
