"""Stored payloads straight to events: msgspec validates the JSON text in C.

A replay decodes one payload per event, and the generic way (parse the text into a dict,
then build the event dataclass, whose `__post_init__` checks every field in Python) was a
third of a fold. Here each event type has a *wire* struct that msgspec decodes and checks
in one pass: field names, JSON types (an integer is never a float or a bool), integer
bounds, string lengths. What msgspec cannot say (a name is printable, a text is not
blank, refill rate and cap go together, an adjustment is not 0) is checked after, and
the event is built without running `__post_init__` again. Both the wire struct and the
builder are made at import from the event dataclass's fields, whose annotations carry
the bounds (`projections.validation`): the vocabulary is declared once, and the builder
is as fast as one written by hand. Where the install could build it, the builder runs
in C (`_eventbuild.c`, the same checks from the same plan, without a Python frame per
event); the Python builder is its definition and the fallback, and a test holds the two
to the same events and refusals.

The fast path only ever *accepts* what `projections.events.from_payload` accepts, and
gives the same event: anything it does not accept (a null where a default applies, an
unknown field, a value out of range, text that is not JSON) goes the generic way, which
gives the same event or raises the same error as always. That includes every payload
with a key of the journal's own (`$private`, the seal of an erasable part; `$erased`):
the generic way drops or maps them. So a payload that does not
decode is still an anomaly with the same reason, and the test suite checks the two paths
against each other on generated payloads.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Union

import msgspec

from eventstore.hashing import load_json
from projections.events import (
    EVENT_CLASSES,
    GENERAL,
    TIMELINE_START,
    AccountOpened,
    CreditsAdjusted,
    CreditsGranted,
    DomainEvent,
    JobCompleted,
    PersonalDataErased,
    from_payload,
)
from projections.native import pure_requested
from projections.validation import Int, Name, Text, may_be_newer, stored_text


def _wire(cls: type[Any], *, record: bool = False) -> type[msgspec.Struct]:
    """The payload of `cls` as stored: exactly the event's fields, nothing else, with the
    types its fields are declared with (so msgspec checks their bounds).

    A field is `X | None` only where the event itself takes None, and a pool's null is
    the general pool; elsewhere a null goes the generic way, which refuses it as it always
    has. `record`: a line of the import format instead, the payload's fields with the
    envelope beside them (`type` as the struct's tag, `id` and `time`, each maybe null).
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            fields.append((f.name, hints[f.name]))
        elif hints[f.name] == Name:  # a name with a default: the pool, None is general
            if f.default != GENERAL:
                raise TypeError(f"{cls.__name__}.{f.name}: a name defaults only to {GENERAL!r}")
            fields.append((f.name, Name | None, None))
        else:
            fields.append((f.name, hints[f.name], f.default))
    if record:
        fields += [("id", Name | None, None), ("time", Int | None, None)]
        return msgspec.defstruct(f"{cls.__name__}Record", fields, forbid_unknown_fields=True,
                                 tag_field="type", tag=cls.type, module=__name__)
    return msgspec.defstruct(f"{cls.__name__}Payload", fields, forbid_unknown_fields=True,
                             module=__name__)


# What msgspec cannot say about fields together: True sends the payload the generic way.
# A refund fraction of -0.0 goes there too, which stores it as 0.0: the same fraction,
# and so the same canonical JSON (what a line's derived id hashes).
_REFUSED: dict[type[Any], Callable[[Any], bool]] = {
    AccountOpened: lambda w: (w.refill_rate is None) != (w.refill_cap is None),
    CreditsAdjusted: lambda w: bool(w.amount == 0),
    JobCompleted: lambda w: w.refund_fraction == 0.0 and math.copysign(1.0, w.refund_fraction) < 0,
}


class _Refused(Exception):
    """A check after msgspec's failed: the payload goes the generic way."""


# Events are frozen dataclasses with slots: each field's slot descriptor sets it without
# the frozen __setattr__ and without __post_init__ (the checks below stand in for it).
#
# What a builder checks of each field beyond msgspec, by code (those of `_eventbuild.c`):
# a name printable; an optional name printable or None; a pool printable or, for None,
# the general pool; a memo or reason printable and not blank, or None. msgspec checked
# the types and lengths.
PLAIN, NAME, OPTIONAL_NAME, POOL, TEXT = range(5)


def _check_of(cls: type[Any], name: str, annotation: Any) -> int:
    """The check a builder makes of field `name` of `cls`, declared `annotation` in the
    wire struct."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) is Union else ()
    optional = type(None) in options
    inner = next((a for a in options if a is not type(None)), annotation)
    if inner == Text:
        return TEXT
    if inner == Name:
        if not optional:
            return NAME
        default = {f.name: f.default for f in dataclasses.fields(cls)}[name]
        return POOL if default == GENERAL else OPTIONAL_NAME
    return PLAIN


def _plan(cls: type[Any], wire: type[msgspec.Struct]) -> list[tuple[str, int]]:
    """Each field of the wire struct, in its order, with its check."""
    return [(f.name, _check_of(cls, f.name, f.type)) for f in msgspec.structs.fields(wire)]


# The Python builder (the definition, and what runs where the C one was not built or
# GPU_CREDITS_PURE_PYTHON is set) is written here once per event type, from its fields,
# and compiled when this module is imported: a generic loop over the fields was three
# times slower per event, and builders written out by hand repeated the same lines for
# every event type. The source is made only from the vocabulary's own field names
# (never from a payload), as `dataclasses` makes `__init__`.

_LINES: dict[int, list[str]] = {
    PLAIN: [],
    NAME: ["    if not v.isprintable():", "        raise _Refused"],
    OPTIONAL_NAME: ["    if v is not None and not v.isprintable():", "        raise _Refused"],
    POOL: ["    if v is None:", "        v = _GENERAL",
           "    elif not v.isprintable():", "        raise _Refused"],
    TEXT: ["    if v is not None and (not v.isprintable() or not v.strip()):",
           "        raise _Refused"],
}
"""Each check, inline in the Python builder (a call per field was a tenth of the build)."""


def _builder_python(cls: type[Any], wire: type[msgspec.Struct]) -> Callable[[Any], DomainEvent]:
    """The function building a `cls` from a decoded `wire`, without __post_init__."""
    plan = _plan(cls, wire)
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_Refused": _Refused,
                           "_GENERAL": GENERAL}
    env.update({f"_set_{n}": getattr(cls, n).__set__ for n, _ in plan})
    lines = []
    if cls in _REFUSED:  # a check of its own: a call only where there is one
        env["_refused"] = _REFUSED[cls]
        lines += ["    if _refused(w):", "        raise _Refused"]
    lines.append("    e = _new(_cls)")
    for name, check in plan:
        lines += [f"    v = w.{name}", *_LINES[check], f"    _set_{name}(e, v)"]
    lines.append("    return e")
    lines.insert(0, f"def build(w, {', '.join(f'{k}={k}' for k in env)}):")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), env, namespace)
    build: Callable[[Any], DomainEvent] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.type}"
    return build


def _load_builders() -> ModuleType | None:
    """The C builders (`_eventbuild.c`), unless GPU_CREDITS_PURE_PYTHON is set or the
    install could not build them (no compiler): then the Python ones serve, slower."""
    if pure_requested():
        return None
    try:
        from projections import _eventbuild
    except ImportError:
        return None
    return _eventbuild


_NATIVE_BUILD = _load_builders()

BUILT_IN_C = _NATIVE_BUILD is not None
"""Whether the events of the fast paths are built in C (`_eventbuild.c`)."""


def _builder(cls: type[Any], wire: type[msgspec.Struct]) -> Callable[[Any], DomainEvent]:
    """The builder of `cls` from a decoded `wire`: in C where it is built, else Python's
    (`_builder_python`, the definition: the tests hold the two to the same events and the
    same refusals)."""
    if _NATIVE_BUILD is None:
        return _builder_python(cls, wire)
    fields = tuple((name, getattr(cls, name), check) for name, check in _plan(cls, wire))
    built: Callable[[Any], DomainEvent] = _NATIVE_BUILD.Builder(
        cls, fields, _REFUSED.get(cls), _Refused, GENERAL)
    return built


def _fast(cls: type[Any]) -> tuple[Callable[[str | bytes], Any], Callable[[Any], DomainEvent]]:
    wire = _wire(cls)
    return msgspec.json.Decoder(wire).decode, _builder(cls, wire)


# An erasure's ids are stored under the journal's own key: always the generic way.
_FAST = {cls.type: _fast(cls) for cls in EVENT_CLASSES if cls is not PersonalDataErased}


# A line of the import format read as one struct, the envelope checked beside the
# payload's fields; the event built by the payload's own builder (it reads the fields by
# name, and the struct has them all).
_FAST_RECORDS = {cls.type: (_wire(cls, record=True), _FAST[cls.type][1])
                 for cls in EVENT_CLASSES if cls.type in _FAST}


def decode_record(record: Mapping[str, Any]) -> tuple[str | None, int, DomainEvent] | None:
    """`projections.importing.parse_record` of a plain record, in one msgspec pass and
    the event's builder (about four times faster: a batch of events over HTTP reads a
    hundred of them per request); None where it is not plain, and the caller reads it
    the generic way, which gives the same event or says what is wrong.

    Plain: a dict of exactly the type's fields and the envelope (`type`, `id`, `time`),
    each of its declared JSON type and within its bounds; the id printable; a time, or
    none on an account (the start of the timeline); a grant's expiry after its time.
    Anything else (an erasure, a key of the journal's own, `position` or `recorded_at`
    beside an event, a value the builder refuses) goes the generic way."""
    if type(record) is not dict:
        return None
    kind = record.get("type")
    fast = _FAST_RECORDS.get(kind) if type(kind) is str else None
    if fast is None:
        return None
    try:
        wire = msgspec.convert(record, fast[0])
        event = fast[1](wire)
    except _NOT_FAST:
        return None
    event_id, time = wire.id, wire.time  # type: ignore[attr-defined]
    if event_id is not None and not event_id.isprintable():
        return None
    if time is None:
        if kind != "account":
            return None
        time = TIMELINE_START
    if type(event) is CreditsGranted and event.expiry is not None and event.expiry <= time:
        return None
    return event_id, time, event


def decode_event(event_type: str, payload: str | bytes | Mapping[str, Any]) -> DomainEvent:
    """The event of `event_type` a stored payload describes: the payload's JSON text as
    the journal stores it, or the decoded mapping.

    Exactly `from_payload(event_type, json.loads(text))`, faster, except that a name or
    text refused only for a code point a later Unicode may have assigned is read as
    written (`_from_stored`): ValueError or TypeError (the same message as
    `from_payload`) for a payload that is not a valid event; a text that is not JSON
    raises as `eventstore.hashing.load_json` does.
    """
    # The journal's own text (an exact str starting with "{") first, with the fewest
    # steps: a replay comes here once per event.
    fast = _FAST.get(event_type)
    if fast is not None and type(payload) is str and payload[:1] == "{":
        try:
            return fast[1](fast[0](payload))
        except _NOT_FAST:
            pass
        return _from_stored(event_type, load_json(payload))
    return _decode_other(event_type, payload)


def _from_stored(event_type: str, payload: Mapping[str, Any]) -> DomainEvent:
    """`from_payload` of what a journal holds: a name or text refused only for a code
    point this Python's Unicode does not know yet is read as written
    (`projections.validation.stored_text`), so every install folds it alike."""
    try:
        return from_payload(event_type, payload)
    except ValueError:
        if not isinstance(payload, Mapping) or not any(
                isinstance(v, str) and any(map(may_be_newer, v)) for v in payload.values()):
            raise
    with stored_text():
        return from_payload(event_type, payload)


_NOT_FAST = (msgspec.ValidationError, msgspec.DecodeError, _Refused)

FAST_PATHS: Mapping[str, tuple[Callable[[str | bytes], Any], Callable[[Any], DomainEvent]]] = _FAST
"""Per event type, the fast path of `decode_event` for the journal's own text (an exact
str starting with "{"): (decode the wire struct, build the event). For the fold's own
copy of `decode_event`'s first step, taken from compiled code without a Python frame."""

NOT_FAST = _NOT_FAST
"""What a fast path raises for a payload it leaves to the generic way (`decode_event`)."""


def _decode_other(event_type: str, payload: str | bytes | Mapping[str, Any]) -> DomainEvent:
    """`decode_event` of anything but the journal's own text: bytes, a str of another
    type or shape (leading spaces in a row changed outside the journal), a mapping."""
    if isinstance(payload, str | bytes):
        fast = _FAST.get(event_type)
        # Anything that does not start with "{" is read the generic way, as it always was.
        if fast is not None and payload[:1] in ("{", b"{"):
            try:
                return fast[1](fast[0](payload))
            except _NOT_FAST:
                pass
        payload = load_json(payload.decode() if isinstance(payload, bytes) else payload)
    return _from_stored(event_type, payload)  # type: ignore[arg-type]
