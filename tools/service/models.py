"""Every body and answer of the HTTP API, as pydantic models: the OpenAPI document is
generated from these, so it cannot drift from what the service accepts and returns.

Bodies forbid unknown fields and take integers strictly (no `"5"`, no `5.0`, no `true`
for an amount): a ledger should refuse what it would otherwise have to guess.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    WithJsonSchema,
    create_model,
)

from projections.outcomes import Revision
from tools.service.times import EventTime

Name = str  # accounts, jobs, pools: non-empty printable text (checked by the event types)


class Body(BaseModel):
    """Base of every request body: unknown fields are an error, numbers are strict."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Answer(BaseModel):
    """Base of every answer."""

    model_config = ConfigDict(extra="forbid")


class Report(BaseModel):
    """Base of the answers that are the command line's `--json` objects (balance,
    statement, revisions): the fields named here are promised; a field the command line
    adds later is passed on too."""

    model_config = ConfigDict(extra="allow")


# -- problems -------------------------------------------------------------------------------


class EventProblem(Answer):
    """One bad event of a `POST /v1/events` body."""

    index: int = Field(description="0-based index of the event in `events`")
    detail: str


class Problem(Answer):
    """An error (RFC 9457 `application/problem+json`)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="a URI naming the kind of problem")
    title: str
    status: int
    detail: str
    errors: list[EventProblem] | None = Field(
        default=None, description="for a batch of events: each bad event by its index")


# -- writes ---------------------------------------------------------------------------------


MAX_EVENTS = 10_000
"""The most events one `POST /v1/events` takes."""


class EventsBody(Body):
    """Events in the JSON Lines import format, one object per event."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"examples": [{"events": [
                                  {"type": "grant", "account": "a", "amount": 100, "time": 0,
                                   "expiry": 10},
                                  {"type": "consume", "account": "a", "amount": 70,
                                   "time": 3}]}]})

    # Any value is taken (and an element that is not an object named by its index, as
    # every bad event is); the schema asks for objects.
    events: list[Annotated[Any, WithJsonSchema({"type": "object",
                                                "additionalProperties": True})]] = Field(
        min_length=1, max_length=MAX_EVENTS,
        description="events as in `gpu-credits import` (type, fields, time, optional id)")


class EventsAnswer(Answer):
    """What a batch of events did: all of it or nothing."""

    appended: int
    already_present: int
    positions: list[int] = Field(description="the journal position of each event, in order")


class AccountBody(Body):
    """Open an account."""

    account: Name = Field(min_length=1, max_length=200)
    max_running: StrictInt | None = Field(default=None, ge=1,
                                          description="cap on running jobs; none: no cap")
    time: EventTime | None = Field(default=None, description="none: now")


class AccountCreated(Answer):
    """An opened account."""

    account: str
    max_running: int | None
    id: str = Field(description="the event id (the Idempotency-Key, if one was given)")
    position: int


class GrantBody(Body):
    """Grant credits to an account (it is opened if it was not)."""

    amount: StrictInt = Field(gt=0)
    expiry: EventTime | None = Field(default=None, description="credits valid while time < "
                                     "expiry; none: they never expire")
    pool: Name | None = Field(default=None, description="restrict to a pool; none: general")
    priority: StrictInt | None = Field(default=None, ge=0, le=100,
                                       description="lower is used first (default 50)")
    time: EventTime | None = Field(default=None, description="none: now (a live decision)")
    memo: str | None = Field(default=None, max_length=1000)


class GrantAnswer(Answer):
    """A recorded grant."""

    id: str
    account: str
    amount: int
    expiry: int | None = Field(default=None, description="absent: never expires")
    pool: str
    priority: int = Field(description="lower is used first: the grant's, else the default 50")
    memo: str | None = None
    time: int
    position: int


class UsageBody(Body):
    """Report credits used outside the scheduler; beyond the credits it becomes debt."""

    amount: StrictInt = Field(gt=0)
    pool: Name | None = None
    time: EventTime | None = None
    memo: str | None = Field(default=None, max_length=1000)
    user: Name | None = Field(default=None, min_length=1, max_length=200,
                              description="who used the credits (personal: erasable)")


class UsageAnswer(Answer):
    """A recorded usage report and the account's debt right after it."""

    id: str
    debt: int
    account: str
    amount: int
    pool: str
    time: int
    position: int


class JobBody(Body):
    """Submit a job: its cost is reserved now and settled at completion."""

    job: Name = Field(min_length=1, max_length=200)
    account: Name = Field(min_length=1, max_length=200)
    cost: StrictInt = Field(ge=0)
    priority: StrictInt
    pool: Name | None = None
    time: EventTime | None = None
    user: Name | None = Field(default=None, min_length=1, max_length=200,
                              description="who submitted the job (personal: erasable)")


class JobSubmitted(Answer):
    """The decision on a submit: an unaffordable job is a recorded rejection."""

    job: str
    accepted: bool
    state: Literal["pending", "rejected"]
    reason: str | None = None
    id: str
    position: int


class TimeBody(Body):
    """Only a time (none: now)."""

    time: EventTime | None = None


class StartedJob(Answer):
    """The job that started."""

    job: str
    account: str
    cost: int
    priority: int


class CompleteBody(Body):
    """Settle a running job."""

    success: StrictBool
    # None (null, or left out) is the default, as `import` reads an optional field.
    refund_fraction: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="share of the cost released on failure; none: all of it (1.0)")
    time: EventTime | None = None


class JobSettled(Answer):
    """A completed job and what it was charged."""

    job: str
    state: str
    charged: int | None


class JobCancelledAnswer(Answer):
    """A cancelled job."""

    job: str
    state: str


# -- reads ----------------------------------------------------------------------------------


class BalanceAnswer(Report):
    """An account's figures, as `gpu-credits balance --json` prints them."""

    account: str
    balance: int = Field(description="active and held credits minus debt, all pools")
    reserved: int = Field(description="held for pending and running jobs")
    available: int = Field(description="balance minus reserved")
    debt: int
    pools: dict[str, int] = Field(description="pool (general: unrestricted) to its balance")
    at: int = Field(description="the event time of the answer")
    as_known_at: int = Field(description="the journal position the answer is based on")


class Payer(Answer):
    """Credits of one grant that paid (part of) a charge."""

    grant: str
    amount: int


class JobAnswer(Answer):
    """A job: state, cost, charge and who paid it."""

    job: str
    account: str | None
    state: str
    cost: int | None
    priority: int | None
    pool: str | None = None
    charged: int | None
    paid_by: list[Payer]
    reason: str | None = None


class StatementLineAnswer(Report):
    """One change to an account, with the balance after it."""

    time: int | None = Field(description="event time; null for an account opened from the "
                                         "start of the timeline")
    position: int | None
    event_id: str | None
    type: str
    change: int
    balance: int
    reserved: int
    detail: str
    status: str
    job: str | None
    pool: str | None
    grants: list[list[Any]]
    debt_paid: int
    debt_created: int
    released: int = Field(0, description="a completion: the part of the cost not charged")
    recorded_at: str | None = Field(None, description="when the journal recorded the event "
                                                      "(ISO-8601 UTC); null for derived lines")
    memo: str | None = None  # the event's memo, if it has one


class SubtotalsAnswer(Answer):
    """opening + granted - used + refunded - expired + adjusted - voided = closing."""

    opening: int
    granted: int
    used: int
    refunded: int
    expired: int
    adjusted: int
    voided: int
    closing: int
    consistent: bool
    problems: list[str]


class Closing(Report):
    """The balance after the last line."""

    balance: int
    reserved: int


class StatementAnswer(Report):
    """Every change to an account, as `gpu-credits statement --json` prints it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    # In the order `statement --json` prints them (`Statement.json_keys`).
    account: str
    from_: int | None = Field(alias="from", serialization_alias="from")
    to: int
    as_known_at: int
    opening: StatementLineAnswer | None
    lines: list[StatementLineAnswer]
    closing: Closing
    subtotals: SubtotalsAnswer | None = None


_Model = TypeVar("_Model", bound=BaseModel)


def _fields_of(value: type[Any]) -> Callable[[type[_Model]], type[_Model]]:
    """A model whose answer is `to_dict(value)` and a few keys more: the fields of the
    dataclass `value` (all required, as declared), then the model's own. So the value's
    fields are declared once, where the value is, and the schema follows them."""

    def derive(model: type[_Model]) -> type[_Model]:
        hints = typing.get_type_hints(value)
        fields: dict[str, Any] = {f.name: (hints[f.name], ...)
                                  for f in dataclasses.fields(value)}
        fields.update({name: (f.annotation, f) for name, f in model.model_fields.items()})
        return create_model(model.__name__, __base__=model.__mro__[1], __doc__=model.__doc__,
                            __module__=model.__module__, **fields)

    return derive


@_fields_of(Revision)
class RevisionAnswer(Report):
    """A late event or a reversal changed what an earlier-reported event did."""

    late_time: int | None
    late_type: str | None
    time: int | None
    account: str | None


class RevisionsPage(Answer):
    """A page of revisions; `next` is the `after` of the next page (none: no more), `seen`
    the `after` that lists only the revisions that come after those this page looked at
    (`next` while there are more; at the end, the number of revisions so far)."""

    revisions: list[RevisionAnswer]
    next: int | None
    seen: int


class JournalPage(Answer):
    """A page of the journal in position order; `next` is the `after` of the next page."""

    # Any value is taken (and an element that is not an object named by its index, as
    # every bad event is); the schema asks for objects.
    events: list[Annotated[Any, WithJsonSchema({"type": "object",
                                                "additionalProperties": True})]] = Field(
        description="events in the JSON Lines format, with id, position, recorded_at")
    next: int | None


class Head(Answer):
    """The journal's last position and its chain hash: an anchor to keep elsewhere."""

    position: int
    hash: str


class VerifyBody(Body):
    """Optionally, an anchor taken earlier by `GET /v1/journal/head`."""

    # The pattern documents the form; `parse_anchor` checks it, with the command line's
    # message (a pattern in the model would answer with the regular expression).
    anchor: str | None = Field(default=None, json_schema_extra={
                                   "pattern": r"^\s*[0-9]{1,19}:[0-9a-fA-F]{64}\s*$"},
                               description="POSITION:HASH, as `GET /v1/journal/head` gives "
                                           "it (64 hex digits, in either case)")


class VerifyAnswer(Answer):
    """Whether the hash chain is intact (and holds the anchored prefix unchanged)."""

    ok: bool
    events: int = Field(description="how many journal events the hash chain check covered: "
                        "all of them, reversed events and reversals included")
    first_bad_position: int | None = None
    problem: str | None = None
    stale_checkpoints: list[str] | None = Field(
        default=None, description="checkpoints saved in another format, not compared: a "
        "cache out of date, not damage (`gpu-credits replay` saves fresh ones); absent "
        "when none")


class Health(Answer):
    """Liveness or readiness."""

    status: Literal["ok", "ready", "starting", "rebuilding", "unavailable", "stopping",
                    "failed"]
    position: int | None = Field(default=None, description="the projection's journal position")
    batches: int | None = Field(default=None, description="decision batches committed")
    decisions: int | None = Field(default=None, description="decisions in those batches")
    largest_batch: int | None = None
    linger_seconds: float | None = Field(
        default=None, description="wall-clock seconds the writer waited for decisions on "
        "their way to join a batch, since it started")
    decide_seconds: float | None = Field(
        default=None, description="seconds spent deciding batches on the projection (for "
        "a batch that is not pipelined, its write and commit too)")
    write_seconds: float | None = Field(
        default=None, description="seconds spent writing and committing pipelined batches, "
        "overlapping the next batch's wait and decision")
