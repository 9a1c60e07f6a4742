"""Stored payloads straight to events: msgspec validates the JSON text in C.

A replay decodes one payload per event, and the generic way (parse the text into a dict,
then build the event dataclass, whose `__post_init__` checks every field in Python) was a
third of a fold. Here each event type has a *wire* struct that msgspec decodes and checks
in one pass: field names, JSON types (an integer is never a float or a bool), integer
bounds, string lengths. What msgspec cannot say (a name is printable, a text is not
blank, refill rate and cap go together, an adjustment is not 0) is checked after, and
the event is built without running `__post_init__` again, by a builder generated at
import from the wire struct's fields (one definition, as fast as one written by hand).

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
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Union

import msgspec

from eventstore.hashing import load_json
from projections.events import (
    DEFAULT_GRANT_PRIORITY,
    DEFAULT_HALF_LIFE,
    GENERAL,
    AccountOpened,
    CreditsAdjusted,
    CreditsConsumed,
    CreditsGranted,
    DomainEvent,
    EventReversed,
    GrantVoided,
    JobCancelled,
    JobCompleted,
    JobStarted,
    JobSubmitted,
    from_payload,
)
from projections.validation import (
    MAX_GRANT_PRIORITY,
    MAX_INT,
    MAX_NAME_LENGTH,
    MAX_TEXT_LENGTH,
    MIN_GRANT_PRIORITY,
    MIN_INT,
)

# The bounds of `projections.validation`, as msgspec constraints. Names and texts are
# counted in characters (code points), as `len` counts them.
_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_LENGTH)]
_Int = Annotated[int, msgspec.Meta(ge=MIN_INT, le=MAX_INT)]
_Positive = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
_GrantPriority = Annotated[int, msgspec.Meta(ge=MIN_GRANT_PRIORITY, le=MAX_GRANT_PRIORITY)]
_Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    """A payload as stored: exactly the event's fields, nothing else (`builds`, the event
    class it decodes to, is a class variable, not a field)."""

    builds: ClassVar[type[Any]]

    @staticmethod
    def refused(w: Any) -> bool:
        """What msgspec cannot say about the fields together: True sends the payload the
        generic way."""
        return False


# A field is `X | None` only where the event itself takes None (for `pool`, None is the
# general pool); elsewhere a null goes the generic way, which refuses it as it always has.


class _Account(_Wire):
    builds = AccountOpened
    account: _Name
    max_running: _Positive | None = None
    share: _Positive | None = None
    half_life: _Positive = DEFAULT_HALF_LIFE
    refill_rate: _Positive | None = None
    refill_cap: _Positive | None = None
    memo: _Text | None = None

    @staticmethod
    def refused(w: Any) -> bool:
        return (w.refill_rate is None) != (w.refill_cap is None)


class _Grant(_Wire):
    builds = CreditsGranted
    account: _Name
    amount: _Positive
    expiry: _Int | None = None
    pool: _Name | None = None
    priority: _GrantPriority = DEFAULT_GRANT_PRIORITY
    memo: _Text | None = None


class _Consume(_Wire):
    builds = CreditsConsumed
    account: _Name
    amount: _Positive
    pool: _Name | None = None
    memo: _Text | None = None
    user: _Name | None = None


class _Submit(_Wire):
    builds = JobSubmitted
    account: _Name
    job: _Name
    cost: _NonNegative
    priority: _Int
    pool: _Name | None = None
    memo: _Text | None = None
    user: _Name | None = None


class _Start(_Wire):
    builds = JobStarted
    job: _Name
    memo: _Text | None = None


class _Complete(_Wire):
    builds = JobCompleted
    job: _Name
    success: bool
    refund_fraction: _Fraction = 1.0
    memo: _Text | None = None


class _Cancel(_Wire):
    builds = JobCancelled
    job: _Name
    memo: _Text | None = None


class _Adjust(_Wire):
    builds = CreditsAdjusted
    account: _Name
    amount: _Int
    reason: _Text
    pool: _Name | None = None
    memo: _Text | None = None

    @staticmethod
    def refused(w: Any) -> bool:
        return bool(w.amount == 0)


class _Void(_Wire):
    builds = GrantVoided
    grant: _Name
    reason: _Text | None = None
    memo: _Text | None = None


class _Reverse(_Wire):
    builds = EventReversed
    event: _Name
    reason: _Text
    memo: _Text | None = None


class _Refused(Exception):
    """A check after msgspec's failed: the payload goes the generic way."""


def _text(value: str | None) -> str | None:
    # A memo or a reason: printable and not blank (msgspec checked the length).
    if value is not None and (not value.isprintable() or not value.strip()):
        raise _Refused
    return value


def _name(value: str | None) -> str | None:
    # An optional name (a user): printable (msgspec checked the length).
    if value is not None and not value.isprintable():
        raise _Refused
    return value


def _pool(value: str | None) -> str:
    if value is None:
        return GENERAL
    if not value.isprintable():
        raise _Refused
    return value


# Events are frozen dataclasses with slots: each field's slot descriptor sets it without
# the frozen __setattr__ and without __post_init__ (the checks above stand in for it).
#
# Each wire struct's builder is written once, here, from its fields, and compiled when
# this module is imported: a generic loop over the fields was three times slower per
# event, and builders written out by hand repeated the same lines for every event type.
# The source is made only from these classes' own field names (never from a payload),
# and is what `dataclasses` does for `__init__`.


def _conversion(wire: type[_Wire], name: str, annotation: Any) -> str:
    """How the builder takes one field from the wire struct: as decoded, or through the
    check msgspec cannot make (printable, not blank, the general pool for None)."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) is Union else ()
    optional = type(None) in options
    inner = next((a for a in options if a is not type(None)), annotation)
    if inner == _Text:
        return f"_text(w.{name})"
    if inner == _Name and optional:
        default = {f.name: f.default for f in dataclasses.fields(wire.builds)}[name]
        return f"_pool(w.{name})" if default == GENERAL else f"_name(w.{name})"
    return f"w.{name}"


def _builder(wire: type[_Wire]) -> Callable[[Any], DomainEvent]:
    """The function building `wire.builds` from a decoded `wire`, without __post_init__."""
    cls = wire.builds
    fields = msgspec.structs.fields(wire)
    names = [f.name for f in fields]
    # Every field, or an event would be built with a slot left unset: a field added to
    # the vocabulary must be added to its wire struct too, or nothing imports.
    if sorted(names) != sorted(f.name for f in dataclasses.fields(cls)):
        raise TypeError(f"the wire struct of {cls.__name__} has {sorted(names)}, the event "
                        f"has {sorted(f.name for f in dataclasses.fields(cls))}")
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_Refused": _Refused,
                           "_text": _text, "_name": _name, "_pool": _pool}
    env.update({f"_set_{n}": getattr(cls, n).__set__ for n in names})
    tests = [f"not w.{f.name}.isprintable()" for f in fields if f.type == _Name]
    if "refused" in wire.__dict__:  # a check of its own: a call only where there is one
        env["_refused"] = wire.refused
        tests.append("_refused(w)")
    lines = [f"def build(w, {', '.join(f'{k}={k}' for k in env)}):"]
    if tests:
        lines += [f"    if {' or '.join(tests)}:", "        raise _Refused"]
    lines += ["    e = _new(_cls)",
              *(f"    _set_{f.name}(e, {_conversion(wire, f.name, f.type)})" for f in fields),
              "    return e"]
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), env, namespace)
    build: Callable[[Any], DomainEvent] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.type}"
    return build


_FAST: dict[str, tuple[Callable[[str | bytes], Any], Callable[[Any], DomainEvent]]] = {
    wire.builds.type: (msgspec.json.Decoder(wire).decode, _builder(wire))
    for wire in (_Account, _Grant, _Consume, _Submit, _Start, _Complete, _Cancel, _Adjust,
                 _Void, _Reverse)
}


def decode_event(event_type: str, payload: str | bytes | Mapping[str, Any]) -> DomainEvent:
    """The event of `event_type` a stored payload describes: the payload's JSON text as
    the journal stores it, or the decoded mapping.

    Exactly `from_payload(event_type, json.loads(text))`, faster: ValueError or TypeError
    (the same message as `from_payload`) for a payload that is not a valid event; a text
    that is not JSON raises as `eventstore.hashing.load_json` does.
    """
    if isinstance(payload, str | bytes):
        fast = _FAST.get(event_type)
        # The journal's own text starts with "{"; anything else (leading spaces in a row
        # changed outside the journal) is read the generic way, as it always was.
        if fast is not None and payload[:1] in ("{", b"{"):
            try:
                return fast[1](fast[0](payload))
            except (msgspec.ValidationError, msgspec.DecodeError, _Refused):
                pass
        payload = load_json(payload.decode() if isinstance(payload, bytes) else payload)
    return from_payload(event_type, payload)  # type: ignore[arg-type]
