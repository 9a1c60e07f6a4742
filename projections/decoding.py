"""Stored payloads straight to events: msgspec validates the JSON text in C.

A replay decodes one payload per event, and the generic way (parse the text into a dict,
then build the event dataclass, whose `__post_init__` checks every field in Python) was a
third of a fold. Here each event type has a *wire* struct that msgspec decodes and checks
in one pass: field names, JSON types (an integer is never a float or a bool), integer
bounds, string lengths. What msgspec cannot say (a name is printable, a text is not
blank, refill rate and cap go together, an adjustment is not 0) is checked after, and
the event is built without running `__post_init__` again.

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
from collections.abc import Callable, Mapping
from typing import Annotated, Any

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
    """A payload as stored: exactly the event's fields, nothing else."""


# A field is `X | None` only where the event itself takes None (for `pool`, None is the
# general pool); elsewhere a null goes the generic way, which refuses it as it always has.


class _Account(_Wire):
    account: _Name
    max_running: _Positive | None = None
    share: _Positive | None = None
    half_life: _Positive = DEFAULT_HALF_LIFE
    refill_rate: _Positive | None = None
    refill_cap: _Positive | None = None
    memo: _Text | None = None


class _Grant(_Wire):
    account: _Name
    amount: _Positive
    expiry: _Int | None = None
    pool: _Name | None = None
    priority: _GrantPriority = DEFAULT_GRANT_PRIORITY
    memo: _Text | None = None


class _Consume(_Wire):
    account: _Name
    amount: _Positive
    pool: _Name | None = None
    memo: _Text | None = None
    user: _Name | None = None


class _Submit(_Wire):
    account: _Name
    job: _Name
    cost: _NonNegative
    priority: _Int
    pool: _Name | None = None
    memo: _Text | None = None
    user: _Name | None = None


class _Start(_Wire):
    job: _Name
    memo: _Text | None = None


class _Complete(_Wire):
    job: _Name
    success: bool
    refund_fraction: _Fraction = 1.0
    memo: _Text | None = None


class _Cancel(_Wire):
    job: _Name
    memo: _Text | None = None


class _Adjust(_Wire):
    account: _Name
    amount: _Int
    reason: _Text
    pool: _Name | None = None
    memo: _Text | None = None


class _Void(_Wire):
    grant: _Name
    reason: _Text | None = None
    memo: _Text | None = None


class _Reverse(_Wire):
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
_new = object.__new__


def _setters(cls: type[Any], *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    # Every field, or an event would be built with a slot left unset: a field added to
    # the vocabulary must be added here too (and to its wire struct), or nothing imports.
    fields = [f.name for f in dataclasses.fields(cls)]
    if sorted(fields) != sorted(names):
        raise TypeError(f"the fast decoder of {cls.__name__} sets {sorted(names)}, "
                        f"the event has {sorted(fields)}")
    return tuple(getattr(cls, name).__set__ for name in names)


_ACCOUNT = _setters(AccountOpened, "account", "max_running", "share", "half_life",
                    "refill_rate", "refill_cap", "memo")
_GRANT = _setters(CreditsGranted, "account", "amount", "expiry", "pool", "priority", "memo")
_CONSUME = _setters(CreditsConsumed, "account", "amount", "pool", "memo", "user")
_SUBMIT = _setters(JobSubmitted, "account", "job", "cost", "priority", "pool", "memo", "user")
_JOB = _setters(JobStarted, "job", "memo")
_COMPLETE = _setters(JobCompleted, "job", "success", "refund_fraction", "memo")
_CANCEL = _setters(JobCancelled, "job", "memo")
_ADJUST = _setters(CreditsAdjusted, "account", "amount", "reason", "pool", "memo")
_VOID = _setters(GrantVoided, "grant", "reason", "memo")
_REVERSE = _setters(EventReversed, "event", "reason", "memo")


def _account(w: _Account) -> AccountOpened:
    if not w.account.isprintable() or (w.refill_rate is None) != (w.refill_cap is None):
        raise _Refused
    e = _new(AccountOpened)
    account, max_running, share, half_life, rate, cap, memo = _ACCOUNT
    account(e, w.account)
    max_running(e, w.max_running)
    share(e, w.share)
    half_life(e, w.half_life)
    rate(e, w.refill_rate)
    cap(e, w.refill_cap)
    memo(e, _text(w.memo))
    return e


def _grant(w: _Grant) -> CreditsGranted:
    if not w.account.isprintable():
        raise _Refused
    e = _new(CreditsGranted)
    account, amount, expiry, pool, priority, memo = _GRANT
    account(e, w.account)
    amount(e, w.amount)
    expiry(e, w.expiry)
    pool(e, _pool(w.pool))
    priority(e, w.priority)
    memo(e, _text(w.memo))
    return e


def _consume(w: _Consume) -> CreditsConsumed:
    if not w.account.isprintable():
        raise _Refused
    e = _new(CreditsConsumed)
    account, amount, pool, memo, user = _CONSUME
    account(e, w.account)
    amount(e, w.amount)
    pool(e, _pool(w.pool))
    memo(e, _text(w.memo))
    user(e, _name(w.user))
    return e


def _submit(w: _Submit) -> JobSubmitted:
    if not w.account.isprintable() or not w.job.isprintable():
        raise _Refused
    e = _new(JobSubmitted)
    account, job, cost, priority, pool, memo, user = _SUBMIT
    account(e, w.account)
    job(e, w.job)
    cost(e, w.cost)
    priority(e, w.priority)
    pool(e, _pool(w.pool))
    memo(e, _text(w.memo))
    user(e, _name(w.user))
    return e


def _start(w: _Start) -> JobStarted:
    if not w.job.isprintable():
        raise _Refused
    e = _new(JobStarted)
    job, memo = _JOB
    job(e, w.job)
    memo(e, _text(w.memo))
    return e


def _complete(w: _Complete) -> JobCompleted:
    if not w.job.isprintable():
        raise _Refused
    e = _new(JobCompleted)
    job, success, fraction, memo = _COMPLETE
    job(e, w.job)
    success(e, w.success)
    fraction(e, w.refund_fraction)
    memo(e, _text(w.memo))
    return e


def _cancel(w: _Cancel) -> JobCancelled:
    if not w.job.isprintable():
        raise _Refused
    e = _new(JobCancelled)
    job, memo = _CANCEL
    job(e, w.job)
    memo(e, _text(w.memo))
    return e


def _adjust(w: _Adjust) -> CreditsAdjusted:
    if not w.account.isprintable() or w.amount == 0:
        raise _Refused
    e = _new(CreditsAdjusted)
    account, amount, reason, pool, memo = _ADJUST
    account(e, w.account)
    amount(e, w.amount)
    reason(e, _text(w.reason))
    pool(e, _pool(w.pool))
    memo(e, _text(w.memo))
    return e


def _void(w: _Void) -> GrantVoided:
    if not w.grant.isprintable():
        raise _Refused
    e = _new(GrantVoided)
    grant, reason, memo = _VOID
    grant(e, w.grant)
    reason(e, _text(w.reason))
    memo(e, _text(w.memo))
    return e


def _reverse(w: _Reverse) -> EventReversed:
    if not w.event.isprintable():
        raise _Refused
    e = _new(EventReversed)
    event, reason, memo = _REVERSE
    event(e, w.event)
    reason(e, _text(w.reason))
    memo(e, _text(w.memo))
    return e


_FAST: dict[str, tuple[Callable[[str | bytes], Any], Callable[[Any], DomainEvent]]] = {
    kind: (msgspec.json.Decoder(wire).decode, build)
    for kind, wire, build in (
        ("account", _Account, _account),
        ("grant", _Grant, _grant),
        ("consume", _Consume, _consume),
        ("submit", _Submit, _submit),
        ("start", _Start, _start),
        ("complete", _Complete, _complete),
        ("cancel", _Cancel, _cancel),
        ("adjust", _Adjust, _adjust),
        ("void", _Void, _void),
        ("reverse", _Reverse, _reverse),
    )
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
