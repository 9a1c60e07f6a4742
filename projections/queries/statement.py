"""`statement`: every change to an account with a running balance, expiries included."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from eventstore import PRIVATE_KEY, JournalLike, RecordedEvent
from projections.creditbook import Expiry, Lineage
from projections.events import GENERAL
from projections.figures import Figures
from projections.ledger import refill_due
from projections.owners import account_events
from projections.queries.common import (
    exists_later,
    fold_as_known,
    latest_time,
    recorded_position,
    unknown_account,
)
from projections.queries.effects import (
    OPENING,
    REFILL,
    UNEXPLAINED,
    Effect,
    event_effect,
    expiry_effect,
)
from projections.queries.ownjobs import jobs_differ, own_jobs
from projections.queries.walk import AccountWalk, Step
from projections.replay import excluded_as_known
from projections.reversals import reversed_ids
from projections.validation import require_time


@dataclass(frozen=True, slots=True)
class StatementLine:
    """One change to an account, and the account's balance and reservations after it."""

    time: int
    position: int | None  # None: an expiry found between events, or the opening line
    event_id: str | None
    type: str  # an event type, or "expire", "refill", "opening"
    change: int
    balance: int
    reserved: int
    effect: Effect  # what the event did, as values (`tools.wording` words it)
    status: str = "ok"  # ok, rejected (a submit), anomaly (kept in the journal, no effect)
    job: str | None = None
    pool: str | None = None
    grants: Lineage = ()  # consume/complete: who paid; submit: reserved from; expire: the grant
    debt_paid: int = 0
    debt_created: int = 0
    released: int = 0  # complete: the part of the job's cost not charged (refunded)
    cost: int = 0  # complete: the job's cost
    recorded_at: int | None = None  # when the journal recorded the event (µs); None: derived
    memo: str | None = None  # the event's memo, if it has one

    json_keys: ClassVar[tuple[str, ...]] = (
        "time:time", "position", "event_id", "type", "change", "balance", "reserved",
        "detail=effect", "status", "job", "pool", "grants", "debt_paid", "debt_created",
        "released", "recorded_at:recorded", "memo")


SUBTOTALS = ("opening", "granted", "used", "refunded", "expired", "adjusted", "voided",
             "closing")
"""The subtotals of a statement, in the order they add up."""

SUBTOTALS_DIFFER = "subtotals_differ"
"""The subtotals add up to `found`, the closing balance is `expected`."""
CLOSING_DIFFERS = "closing_differs"
"""The closing balance is `found`, the account's balance at the same time `expected`."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a statement does not add up: a code and the two figures that differ."""

    code: str  # SUBTOTALS_DIFFER or CLOSING_DIFFERS
    found: int
    expected: int


class Closing(NamedTuple):
    """A statement's balance and reservations after its last line."""

    balance: int
    reserved: int


@dataclass(frozen=True, slots=True)
class Subtotals:
    """A statement's totals by kind: opening + granted - used + refunded - expired
    + adjusted - voided = closing.

    `used` counts usage reports and the full cost of every completed job; `refunded` the
    part of a failed job's cost it was not charged, so `used - refunded` is what was
    charged. Reservations change no balance: a held credit still counts until it is charged.
    """

    opening: int
    granted: int  # grants and refill
    used: int
    refunded: int
    expired: int
    adjusted: int  # manual credits (+) and debits (-)
    voided: int
    closing: int
    balance: int  # the account's balance at the statement's end, from the fold itself

    @property
    def computed(self) -> int:
        """The closing balance the subtotals add up to."""
        return (self.opening + self.granted - self.used + self.refunded - self.expired
                + self.adjusted - self.voided)

    @property
    def problems(self) -> list[Mismatch]:
        """Where the subtotals disagree: empty when the statement is consistent."""
        found = []
        if self.computed != self.closing:
            found.append(Mismatch(SUBTOTALS_DIFFER, self.computed, self.closing))
        if self.closing != self.balance:
            found.append(Mismatch(CLOSING_DIFFERS, self.closing, self.balance))
        return found

    @property
    def consistent(self) -> bool:
        """Whether the subtotals add up to the closing balance, and it is the account's."""
        return not self.problems

    json_keys: ClassVar[tuple[str, ...]] = (*SUBTOTALS, "consistent", "problems")


@dataclass(frozen=True, slots=True)
class Statement:
    """Every change to one account between two event times, with a running balance."""

    account: str
    from_time: int | None
    to_time: int
    opening: StatementLine | None  # only when from_time is given
    lines: list[StatementLine]
    balance: int = 0  # the account's balance at to_time, from the fold (for the check)
    as_known_at: int | None = None  # the journal position the statement is based on

    @property
    def subtotals(self) -> Subtotals:
        """Opening, granted, used, refunded, expired, adjusted, voided and closing."""
        sums = dict.fromkeys(("granted", "used", "refunded", "expired", "adjusted",
                              "voided"), 0)
        for line in self.lines:
            kind = line.type
            if line.status in ("anomaly", "rejected"):
                continue
            if kind in ("grant", "refill"):
                sums["granted"] += line.change
            elif kind == "consume":
                sums["used"] -= line.change
            elif kind == "complete":
                sums["used"] += line.cost
                sums["refunded"] += line.released
            elif kind == "expire":
                sums["expired"] -= line.change
            elif kind == "adjust":
                sums["adjusted"] += line.change
            elif kind == "void":
                sums["voided"] -= line.change
        opening = self.opening.balance if self.opening is not None else 0
        return Subtotals(opening=opening, closing=self.closing[0], balance=self.balance,
                         **sums)

    @property
    def closing(self) -> Closing:
        """(balance, reserved) after the last line."""
        last = self.lines[-1] if self.lines else self.opening
        return Closing(last.balance, last.reserved) if last is not None else Closing(0, 0)

    json_keys: ClassVar[tuple[str, ...]] = ("account", "from=from_time:time", "to=to_time:time",
                           "as_known_at", "opening", "lines", "closing", "subtotals")


def expiry_line(e: Expiry, time: int, balance_: int, reserved: int,
                 *, on_release: str | None = None) -> StatementLine:
    """The line of credits that stopped counting unused (`on_release`: the job whose
    release found the grant already ended)."""
    return StatementLine(time, None, None, "expire", -e.amount, balance_, reserved,
                         expiry_effect(e, on_release=on_release),
                         pool=e.pool, grants=((e.grant_id, e.amount),))



def refill_line(time: int, amount: int, debt_paid: int, balance_: int,
                reserved: int) -> StatementLine:
    """The line of credits a refill accrued; `debt_paid` of them paid debt first."""
    return StatementLine(time, None, None, "refill", amount, balance_, reserved,
                         Effect(REFILL, amount, paid_debt=debt_paid), pool=GENERAL,
                         debt_paid=debt_paid)


class StatementBuilder:
    """Writes the lines of one account as the walk goes.

    `apply(rec)` moves the walk and writes; `take(step)` writes for a step of a walk
    someone else moves (`projections.queries.history` feeds one walk to several builders).
    """

    def __init__(self, account: str, walk: AccountWalk | None = None) -> None:
        self.walk = AccountWalk(account) if walk is None else walk
        self.lines: list[StatementLine] = []
        self.balance = 0
        self.reserved = 0
        self.sealed: list[str] = []  # events whose memo is kept beside the journal record
        # A statement's opening time, and the refill accrued by then since the account's
        # last event before it: the next touch pays it in one line that spans the time.
        self.opening_at: int | None = None
        self.accrued_at_opening = 0
        # Refill shown on lines of events the fold did not bring the account to (a void of
        # credits already gone, a duplicate submit, a reversed event): (credits, of them
        # debt paid). The fold accrues it at the account's next touch, whose refill line
        # then shows only the rest.
        self.shown_refill = (0, 0)

    def add(self, line: StatementLine) -> None:
        self.lines.append(line)

    def fill_memos(self, private: Callable[[list[str]], Mapping[str, Mapping[str, Any]]]
                   ) -> None:
        """Fill in the memos held beside the journal's records (personal fields; an
        erased one stays empty): `private` is the journal's `private`."""
        held = private(self.sealed) if self.sealed else {}
        if not held:
            return
        self.lines = [
            dataclasses.replace(line, memo=memo)
            if line.event_id is not None and line.event_id in held and line.position
            and isinstance(memo := held[line.event_id].get("memo"), str) else line
            for line in self.lines]

    def apply(self, rec: RecordedEvent) -> None:
        if self.opening_at is not None and rec.time >= self.opening_at:
            self._accrue_to_opening()
        step = self.walk.apply(rec)
        if step is not None:
            self.take(step)

    def take(self, step: Step) -> None:
        """Write the lines of one step of the walk."""
        rec = step.rec
        outcome = step.outcome
        for e in step.expired:
            self.balance -= e.amount
            self.add(expiry_line(e, e.expiry, self.balance, self.reserved))
        state = self.walk.state
        shown, shown_debt = self.shown_refill
        if state is not None and state.refill_rate is not None \
                and state.refill_anchor is not None and state.refill_anchor < rec.time:
            # An event the fold did not bring the account forward for (a void of credits
            # already gone, a duplicate submit, a reversed event): its line still says the
            # balance at its time, as `balance --at` does, so it holds the refill accrued
            # since the fold last did.
            paid, credited = state.refill_settlement(rec.time)
            debt_paid = sum(paid.values())
            self.shown_refill = (debt_paid + credited, debt_paid)
            self._add_refill(rec.time, debt_paid + credited - shown, debt_paid - shown_debt)
        else:
            self.shown_refill = (0, 0)
            self._add_refill(rec.time, step.refill - shown, step.refill_paid_debt - shown_debt)
        effect, change = event_effect(rec, outcome, self.walk.ledger, step.declared_before)
        if state is not None:
            self.reserved = state.book.held
        self.balance += change
        status = "anomaly" if outcome.anomaly else ("ok" if outcome.ok else "rejected")
        if rec.id in self.walk.ledger.excluded:
            status = "reversed"
        job = rec.payload.get("job")
        if PRIVATE_KEY in rec.payload:
            self.sealed.append(rec.id)
        self.add(StatementLine(
            rec.time, rec.position, rec.id, rec.type, change, self.balance, self.reserved,
            effect, status, job if isinstance(job, str) else None,
            self._pool_of(rec, job),
            outcome.paid_by, sum(a for _, a in outcome.paid_debt), outcome.debt_created,
            released=(outcome.released or 0) if rec.type == "complete" else 0,
            cost=(outcome.charge or 0) + (outcome.released or 0)
            if rec.type == "complete" else 0,
            recorded_at=rec.recorded_at,
            memo=memo if isinstance(memo := rec.payload.get("memo"), str) else None))
        for e in step.on_release:
            self.balance -= e.amount
            self.add(expiry_line(e, rec.time, self.balance, self.reserved,
                                  on_release=str(job)))
        for e in step.voided_on_arrival:
            # Counted as voided, as a void's own change is: the void came first.
            self.balance -= e.amount
            self.add(StatementLine(rec.time, None, None, "void", -e.amount, self.balance,
                                   self.reserved, expiry_effect(e, on_arrival=True),
                                   pool=e.pool, grants=((e.grant_id, e.amount),)))
        if state is not None:
            book = state.book
            actual = (book.active_total + book.held - book.debt_total - self.walk.unevicted()
                      + self.shown_refill[0])
            if actual != self.balance:  # never expected: shown rather than hidden
                self.add(StatementLine(rec.time, None, None, "unexplained",
                                       actual - self.balance, actual, self.reserved,
                                       Effect(UNEXPLAINED, actual, counted=self.balance)))
                self.balance = actual

    def _pool_of(self, rec: RecordedEvent, job: object) -> str | None:
        """The pool a line is in: the event's own for credits and usage and for a submit
        (what it asked for, accepted or not), the job's for its start, completion and
        cancel, so that a pool's lines hold the jobs charged to it."""
        if rec.type in ("grant", "consume", "adjust", "submit"):
            pool = rec.payload.get("pool", GENERAL)
            return pool if isinstance(pool, str) else None
        if isinstance(job, str):
            known = self.walk.ledger.jobs.get(job)
            if known is not None:
                return known.pool
        return None

    def _add_refill(self, time: int, amount: int, debt_paid: int) -> None:
        if amount:
            self.balance += amount
            self.add(refill_line(time, amount, debt_paid, self.balance, self.reserved))

    def _accrue_to_opening(self) -> None:
        """Note the refill accrued by the opening time, as the walk stands before it (less
        what lines before the opening showed already)."""
        state, at = self.walk.state, self.opening_at
        self.opening_at = None
        if state is not None and state.refill_rate is not None and at is not None:
            self.accrued_at_opening = refill_due(state, at)[0] - self.shown_refill[0]

    def finish(self, to_time: int, expired: list[Expiry] | None = None) -> None:
        """Expiries and refill accrued after the account's last event, up to `to_time`
        (`expired`: the walk's `expired_by(to_time)`, when another builder asked it first:
        the walk reports each expiry once)."""
        if self.opening_at is not None and to_time >= self.opening_at:
            self._accrue_to_opening()
        for e in self.walk.expired_by(to_time) if expired is None else expired:
            self.balance -= e.amount
            self.add(expiry_line(e, e.expiry, self.balance, self.reserved))
        state = self.walk.state
        if state is not None and state.refill_rate is not None:
            paid, credited = state.refill_settlement(to_time)
            shown, shown_debt = self.shown_refill
            self._add_refill(to_time, sum(paid.values()) + credited - shown,
                             sum(paid.values()) - shown_debt)


def _memos_kept_apart(journal: JournalLike, builder: StatementBuilder) -> None:
    """Fill in the memos held beside the journal's records (personal fields; an erased
    one stays empty)."""
    builder.fill_memos(journal.private)


def _walked(journal: JournalLike, account: str, events: list[RecordedEvent] | None,
            to: int, position: int, from_time: int | None = None) -> StatementBuilder:
    """The account's lines up to event time `to`: from its own events, or (None) from a
    fold of the whole journal as known at `position`; `from_time`: where the statement
    opens."""
    builder = StatementBuilder(account, AccountWalk(account, journal.get))
    builder.opening_at = from_time
    if events is not None:
        # A reversal counts at every event time: those after `to` too.
        builder.walk.ledger.excluded = reversed_ids({
            rec.id: target for rec in events
            if rec.type == "reverse" and isinstance(target := rec.payload.get("event"), str)})
        for rec in events:
            if rec.time > to:
                break
            builder.apply(rec)
    else:
        builder.walk.ledger.excluded = excluded_as_known(journal, position)
        for rec in journal.read(to_time=to, to_position=position, order="canonical"):
            builder.apply(rec)
    return builder


def statement(journal: JournalLike, account: str, *, from_time: int | None = None,
              to_time: int | None = None,
              as_known_at: int | str | None = None) -> Statement:
    """Every change to `account` with event time <= `to_time` (default: the latest), with
    a running balance; with `from_time`, an opening line and the changes from then on;
    from the events recorded up to `as_known_at` (default: all)."""
    if from_time is not None:
        require_time("from_time", from_time)
    if to_time is not None:
        require_time("to_time", to_time)
        if from_time is not None and from_time > to_time:
            raise ValueError(f"from_time {from_time} is after to_time {to_time}: a statement "
                             "runs from from_time to to_time, both included")
    latest = latest_time(journal)
    to = latest if to_time is None else to_time
    if to_time is None and from_time is not None and from_time > to:
        to = from_time  # a statement from after the last event runs to its own start
    position = recorded_position(journal, as_known_at)
    events = account_events(journal, account, to_position=position, to_time=to)
    own = None if events is None else own_jobs(journal, account, events, position)
    if own is None:  # the account's stream is not the whole story: fold the whole journal
        events = None
    builder = _walked(journal, account, events, to, position, from_time)
    if own and to >= latest and jobs_differ(builder.walk.ledger, own):
        # A job's events recorded in another account's stream (an import holding the
        # job id twice puts them in the later submitter's): the whole fold tells.
        builder = _walked(journal, account, None, to, position, from_time)
    builder.finish(to)
    _memos_kept_apart(journal, builder)
    walk = builder.walk
    if not walk.seen and walk.state is None and not exists_later(journal, account):
        raise unknown_account(account, fold_as_known(journal, to_position=position))
    lines = builder.lines
    opening = None
    if from_time is not None:
        cut = next((i for i, line in enumerate(lines) if line.time >= from_time), len(lines))
        prior = lines[cut - 1] if cut else None
        # The balance at that moment (as `balance --at` says): refill accrues between
        # events, so what the bucket gained by then opens the statement, and the refill
        # line that pays it (the account's next event, or its end) shows only the rest.
        accrued = builder.accrued_at_opening
        balance_ = (prior.balance if prior is not None else 0) + accrued
        reserved = prior.reserved if prior is not None else 0
        opening = StatementLine(from_time, None, None, "opening", 0, balance_, reserved,
                                Effect(OPENING))
        lines = lines[cut:]
        if accrued:
            paid = next(i for i, line in enumerate(lines) if line.type == "refill")
            # The lines before that refill line (an expiry's, which no event of the account
            # made) were written on the balance without the accrual, which the opening now
            # holds: they run on from it.
            lines[:paid] = [dataclasses.replace(line, balance=line.balance + accrued)
                            for line in lines[:paid]]
            split = lines[paid]
            rest = split.change - accrued
            # The refill pays debt with its first credits, which the opening balance holds.
            debt_paid = max(0, split.debt_paid - accrued)
            lines[paid:paid + 1] = [dataclasses.replace(
                split, change=rest, effect=Effect(REFILL, rest, paid_debt=debt_paid),
                debt_paid=debt_paid)] if rest else []
    figures = Figures.of(walk.state, to)
    return Statement(account, from_time, to, opening, lines, figures.balance, position)
