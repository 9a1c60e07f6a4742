"""The event vocabulary: one frozen dataclass per event type, validated on construction.

An event is a value: a bad one cannot exist, whether it came from a facade, an import
or a test. `to_payload` / `from_payload` map an event to and from the journal's JSON
payload; optional fields are omitted when they hold their default, so two spellings of
the same event (`"pool": null` or no `pool`) have the same canonical bytes.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias, Union

from eventstore.records import ERASED_KEY, PRIVATE_KEY
from projections.validation import (
    FIELD_CHECKS,
    MAX_TEXT_LENGTH,
    GrantPriority,
    Int,
    Name,
    NonNegativeInt,
    PositiveInt,
    Text,
    UnitFraction,
    show,
    show_keys,
)

# The checks live in one module shared by every entry point; re-exported here because
# callers have always imported them from the vocabulary.
from projections.validation import MAX_ID_LENGTH as MAX_ID_LENGTH
from projections.validation import optional_text as optional_text
from projections.validation import require_fraction as require_fraction
from projections.validation import require_int as require_int
from projections.validation import require_name as require_name
from projections.validation import require_non_negative_int as require_non_negative_int
from projections.validation import require_positive_int as require_positive_int
from projections.validation import require_text as require_text

GENERAL: Final = "general"
"""The pool name of unrestricted credits, usable in every pool."""

TIMELINE_START = -(2**62)
"""Event time of an `account` event that carries no time: it takes effect from the start."""

MAX_MEMO_LENGTH = MAX_TEXT_LENGTH
"""A memo or reason is free text for people: long enough for a PO number and a sentence."""

DEFAULT_GRANT_PRIORITY: Final = 50
"""A grant's priority when none is given: lower numbers are used first (0-100)."""

FAR_TIME = 7258118400
"""2200-01-01T00:00Z in epoch seconds: an event time after it is probably milliseconds."""


def far_live_time_problem(when: int, position: int) -> str | None:
    """Why a live decision cannot take `when`, the latest event time on the timeline (the
    event at `position`), when it is far; None if it is not."""
    if when <= FAR_TIME:
        return None
    # The time was not the caller's: a live decision never goes before the latest event,
    # and that one is far. Say which, and how to get past it.
    return (f"a live decision takes the latest event time on the timeline, {when} "
            f"(position {position}), which is after 2200-01-01 ({FAR_TIME} in epoch "
            "seconds): probably milliseconds; reverse that event, give the time "
            "explicitly, or allow far times (--allow-far-times) if meant")

DEFAULT_HALF_LIFE: Final = 7 * 24 * 3600
"""Fair share: recorded usage halves every week unless an account says otherwise."""


def normalise_pool(value: object) -> str:
    """The pool a grant, consume or job names: None and "general" mean unrestricted."""
    if value is None:
        return GENERAL
    return require_name("pool", value)


class _Checked:
    """An event whose fields are checked on construction, each by the check of the type it
    is declared with (`projections.validation.FIELD_CHECKS`), in declaration order: an
    event with several bad fields names the first of them. An event with a rule about
    fields together checks it in its own `__post_init__`, after its fields."""

    __slots__ = ()

    def __post_init__(self) -> None:
        check_fields(self)


class _OfAccount(_Checked):
    """An event about one account: recorded in that account's stream."""

    __slots__ = ()
    account: str

    @property
    def stream(self) -> str:
        return self.account


@dataclass(frozen=True, slots=True)
class AccountOpened(_OfAccount):
    """An account exists from here on, with its scheduling policy."""

    type: ClassVar[str] = "account"
    account: Name
    max_running: PositiveInt | None = None  # None: no cap on running jobs
    share: PositiveInt | None = None  # fair-share weight; None: fair share off for this account
    half_life: PositiveInt = DEFAULT_HALF_LIFE  # seconds for the account's recorded usage to halve
    refill_rate: PositiveInt | None = None  # token bucket: credits per hour; None: no refill
    refill_cap: PositiveInt | None = None  # the refill bucket holds at most this many credits
    memo: Text | None = None  # free text for people: a PO number, a ticket

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.refill_rate is None) != (self.refill_cap is None):
            raise ValueError("refill_rate and refill_cap go together: give both or neither "
                             f"(got rate {self.refill_rate!r}, cap {self.refill_cap!r})")


@dataclass(frozen=True, slots=True)
class CreditsGranted(_OfAccount):
    """Credits added to an account, valid for time <= t < expiry, in one pool."""

    type: ClassVar[str] = "grant"
    account: Name
    amount: PositiveInt
    expiry: Int | None = None  # None: never expires
    pool: Name = GENERAL
    priority: GrantPriority = DEFAULT_GRANT_PRIORITY  # lower numbers are used first
    memo: Text | None = None


@dataclass(frozen=True, slots=True)
class CreditsConsumed(_OfAccount):
    """Credits used outside the scheduler (a usage report); past the credits it is debt."""

    type: ClassVar[str] = "consume"
    account: Name
    amount: PositiveInt
    pool: Name = GENERAL
    memo: Text | None = None  # free text for people: a PO number, a ticket
    user: Name | None = None  # who used the credits: personal, erasable (`erase --user`)


@dataclass(frozen=True, slots=True)
class JobSubmitted(_OfAccount):
    """A job asks to reserve `cost` credits; the fold decides whether it is accepted."""

    type: ClassVar[str] = "submit"
    account: Name
    job: Name
    cost: NonNegativeInt
    priority: Int
    pool: Name = GENERAL
    memo: Text | None = None  # free text for people: a PO number, a ticket
    user: Name | None = None  # who submitted the job: personal, erasable (`erase --user`)


@dataclass(frozen=True, slots=True)
class _JobOnly(_Checked):
    """An event that names a job and nothing else about it: a start or a cancel."""

    job: Name
    memo: Text | None = None  # free text for people: a PO number, a ticket


@dataclass(frozen=True, slots=True)
class JobStarted(_JobOnly):
    """A pending job starts running."""

    type: ClassVar[str] = "start"


@dataclass(frozen=True, slots=True)
class JobCancelled(_JobOnly):
    """A pending job is withdrawn and its reservation released."""

    type: ClassVar[str] = "cancel"


@dataclass(frozen=True, slots=True)
class JobCompleted(_Checked):
    """A running job ends: success charges its cost; failure charges floor(cost * (1 - f))."""

    type: ClassVar[str] = "complete"
    job: Name
    success: bool
    refund_fraction: UnitFraction = 1.0  # kept as a float (an integer 0 or 1 is converted)
    memo: Text | None = None  # free text for people: a PO number, a ticket


@dataclass(frozen=True, slots=True)
class CreditsAdjusted(_OfAccount):
    """A manual correction with its reason: a credit (amount > 0) works like a grant
    without expiry and pays debt first; a debit (amount < 0) works like a usage report."""

    type: ClassVar[str] = "adjust"
    account: Name
    amount: Int
    reason: Text
    pool: Name = GENERAL
    memo: Text | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        if self.amount == 0:
            raise ValueError("amount of an adjustment must not be 0: give a credit (> 0) "
                             "or a debit (< 0)")


@dataclass(frozen=True, slots=True)
class GrantVoided(_Checked):
    """From its event time on, the named grant's unused credits no longer count."""

    type: ClassVar[str] = "void"
    grant: Name  # the id of a grant event
    reason: Text | None = None
    memo: Text | None = None


@dataclass(frozen=True, slots=True)
class EventReversed(_Checked):
    """The named recorded event no longer takes part in any fold, as if it never
    happened; both stay in the journal. Reversing a reversal restores the event."""

    type: ClassVar[str] = "reverse"
    event: Name  # the id of a recorded event
    reason: Text
    memo: Text | None = None


@dataclass(frozen=True, slots=True)
class PersonalDataErased(_Checked):
    """The personal fields (`user`, `memo`) of the named events were erased: their text is
    gone, the events and every figure stay. Takes no part in any figure."""

    type: ClassVar[str] = "erase"
    events: tuple[Name, ...]  # ids of the events whose personal fields were erased
    reason: Text | None = None
    memo: Text | None = None


DomainEvent: TypeAlias = (
    AccountOpened
    | CreditsGranted
    | CreditsConsumed
    | JobSubmitted
    | JobStarted
    | JobCompleted
    | JobCancelled
    | CreditsAdjusted
    | GrantVoided
    | EventReversed
    | PersonalDataErased
)

JOB_EVENTS = (JobStarted, JobCompleted, JobCancelled)


def _event_ids(name: str, value: object) -> tuple[str, ...]:
    """A non-empty list (or tuple) of event ids, as a tuple."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(f"{name} must be a list of event ids, got {show(value)}")
    if not value:
        raise ValueError(f"{name} must name at least one erased event")
    return tuple(require_name("erased event id", e) for e in value)


def _pool(name: str, value: object) -> str:
    # A field check's signature for `normalise_pool` (its errors name the pool already).
    return normalise_pool(value)


_Check = Callable[[str, Any], Any]
_TYPE_CHECKS: dict[Any, _Check] = {**FIELD_CHECKS, tuple[Name, ...]: _event_ids}


def _checks_of(cls: type[Any]) -> tuple[tuple[str, _Check, bool], ...]:
    """(field, its check, whether None is accepted) for each field of `cls`, in declaration
    order, from the field's annotation: a `X | None` field takes None, and a name (not
    optional) with a default is a pool, where None is the general pool."""
    hints = typing.get_type_hints(cls, include_extras=True)
    checks: list[tuple[str, _Check, bool]] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        options = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
        declared = next(a for a in options if a is not type(None))
        optional = type(None) in options
        if declared == Name and not optional and f.default is not dataclasses.MISSING:
            if f.default != GENERAL:
                raise TypeError(f"{cls.__name__}.{f.name}: a name defaults only to {GENERAL!r}")
            checks.append((f.name, _pool, False))
        elif declared in _TYPE_CHECKS:
            checks.append((f.name, _TYPE_CHECKS[declared], optional))
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no check for {hint!r}; declare it "
                            "with a type of projections.validation")
    return tuple(checks)


def check_fields(event: Any) -> None:
    """Check each field of `event` by its declared type, first to last: ValueError names
    the first bad one. A check that normalises (a pool's None, a fraction's integer, a
    list of ids) stores what it returns."""
    for name, check, optional in _FIELD_CHECKS[type(event)]:
        value = getattr(event, name)
        if value is None and optional:
            continue
        checked = check(name, value)
        if checked is not value:
            object.__setattr__(event, name, checked)


_MEMO = {"memo": None}
_FIELDS: dict[str, tuple[type[Any], tuple[str, ...], dict[str, Any]]] = {
    "account": (
        AccountOpened,
        ("account",),
        {
            "max_running": None,
            "share": None,
            "half_life": DEFAULT_HALF_LIFE,
            "refill_rate": None,
            "refill_cap": None,
            **_MEMO,
        },
    ),
    "grant": (CreditsGranted, ("account", "amount"),
              {"expiry": None, "pool": GENERAL, "priority": DEFAULT_GRANT_PRIORITY, **_MEMO}),
    "consume": (CreditsConsumed, ("account", "amount"),
                {"pool": GENERAL, **_MEMO, "user": None}),
    "submit": (JobSubmitted, ("account", "job", "cost", "priority"),
               {"pool": GENERAL, **_MEMO, "user": None}),
    "start": (JobStarted, ("job",), {**_MEMO}),
    "complete": (JobCompleted, ("job", "success"), {"refund_fraction": 1.0, **_MEMO}),
    "cancel": (JobCancelled, ("job",), {**_MEMO}),
    "adjust": (CreditsAdjusted, ("account", "amount", "reason"), {"pool": GENERAL, **_MEMO}),
    "void": (GrantVoided, ("grant",), {"reason": None, **_MEMO}),
    "reverse": (EventReversed, ("event", "reason"), {**_MEMO}),
    "erase": (PersonalDataErased, ("events",), {"reason": None, **_MEMO}),
}

EVENT_TYPES = tuple(_FIELDS)

EVENT_CLASSES: tuple[type[DomainEvent], ...] = tuple(cls for cls, _, _ in _FIELDS.values())
"""Every event class of the vocabulary, in the order of `EVENT_TYPES`."""

_FIELD_CHECKS = {cls: _checks_of(cls) for cls in EVENT_CLASSES}


PERSONAL_FIELDS = ("user", "memo")
"""Fields about people, kept beside the journal's chain so that they can be erased
(`projections.personal`); no figure depends on them."""


def to_payload(event: DomainEvent) -> dict[str, Any]:
    """The payload of `event`: required fields, and optional ones not at default.

    Personal fields included: `split_personal` separates them for the journal. An
    erasure's ids go under the journal's own key (`eventstore.ERASED_KEY`), which is what
    makes the journal accept the personal parts it names as erased.
    """
    _cls, required, optional = _FIELDS[event.type]
    payload: dict[str, Any] = {name: getattr(event, name) for name in required}
    for name, default in optional.items():
        value = getattr(event, name)
        if value != default:
            payload[name] = value
    if event.type == "erase":
        payload[ERASED_KEY] = list(payload.pop("events"))
    return payload


def split_personal(payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the payload without personal fields, the personal fields or None when it has none)."""
    if "user" not in payload and "memo" not in payload:
        return dict(payload), None
    public = {k: v for k, v in payload.items() if k not in PERSONAL_FIELDS}
    return public, {k: payload[k] for k in PERSONAL_FIELDS if k in payload}


def from_journal_keys(event_type: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """A stored payload without the journal's own keys: the seal of a private part is
    dropped, an erasure's ids come back as `events`."""
    out = {k: v for k, v in payload.items() if not k.startswith("$")}
    if event_type == "erase" and ERASED_KEY in payload:
        out["events"] = payload[ERASED_KEY]
    return out


def from_payload(event_type: str, payload: Mapping[str, Any]) -> DomainEvent:
    """Build the event of `event_type` from a payload; ValueError names what is wrong."""
    if event_type not in _FIELDS:
        raise ValueError(f"unknown event type {event_type!r}; expected one of {EVENT_TYPES}")
    cls, required, optional = _FIELDS[event_type]
    if isinstance(payload, dict) and None not in payload.values():
        # Fast path for replay: a canonical payload is exactly the constructor's keywords
        # (validation still runs in __post_init__), once the seal of personal fields kept
        # apart is set aside (checked first: a failed call costs far more than a lookup).
        # Anything else takes the slow path, which names what is wrong; a null optional
        # field (`"priority": null` on an imported line) is its default there, as absent.
        if PRIVATE_KEY in payload:
            payload = {k: v for k, v in payload.items() if k != PRIVATE_KEY}
        try:
            fast: DomainEvent = cls(**payload)
            return fast
        except TypeError:
            pass
    if any(k.startswith("$") for k in payload):
        payload = from_journal_keys(event_type, payload)
    missing = [name for name in required if name not in payload]
    if missing:
        raise ValueError(f"{event_type} event is missing {', '.join(missing)}")
    unknown = sorted(set(payload) - set(required) - set(optional))
    if unknown:
        # A field name is the input's own text, line breaks and all (`show_keys`).
        raise ValueError(f"{event_type} event has unknown field(s) {show_keys(unknown)}")
    kwargs = {name: payload[name] for name in required}
    for name, default in optional.items():
        value = payload.get(name, default)
        kwargs[name] = default if value is None else value
    event: DomainEvent = cls(**kwargs)
    return event
