"""What an event did to an account, as values (statement lines and job explanations).

An `Effect` holds what the sentence of a statement line or a job event is made from: the
kind of change and its figures, the lineage as (grant, credits) pairs, the reason the
event carries or the fold gave. The words are made by the caller (`tools.wording`), so the
command line, the service and the web view say the same thing from the same values.
"""

from __future__ import annotations

from typing import NamedTuple

from eventstore import RecordedEvent
from projections.creditbook import Expiry, Lineage
from projections.ledger import AccountState, Ledger
from projections.outcomes import Outcome

REVERSED = "reversed"
"""An event a reversal took out of the timeline: no effect."""
ANOMALY = "anomaly"
"""An event the fold kept without effect; `reason` is the fold's."""
EXPIRE = "expire"
"""Credits of a grant that stopped counting unused (`job`: released by that job after
the grant's end, `voided`: the end was a void)."""
REFILL = "refill"
OPENING = "opening"
UNEXPLAINED = "unexplained"
"""The account's balance differs from what the lines add up to (never expected)."""

ACCOUNT_SETTINGS = ("max_running", "share", "half_life", "refill_rate", "refill_cap")
"""What an `account` event sets, in the order its words list what changed."""

Settings = tuple[int | None, ...]
"""An account's values of ACCOUNT_SETTINGS."""


def account_settings(state: AccountState) -> Settings:
    """The account's ACCOUNT_SETTINGS as the fold holds them."""
    return (state.max_running, state.share, state.half_life, state.refill_rate,
            state.refill_cap)


class Effect(NamedTuple):
    """What one event, an expiry or a refill did to an account, as values.

    `kind` is the event's type, or one of REVERSED, ANOMALY, EXPIRE, REFILL, OPENING,
    UNEXPLAINED; the other fields are those the kind has (zero or None otherwise). A
    named tuple rather than a frozen dataclass: a statement makes one per line, and a
    tuple is several times cheaper to build.
    """

    kind: str
    amount: int = 0  # grant, consume, adjust (signed), void (lapsed), expire, refill;
    #                  unexplained: the account's balance
    pool: str | None = None  # as the event names it (None: general credits)
    reason: str | None = None  # the event's (adjust, void, reverse) or the fold's
    #                            (anomaly, rejected submit, a cancel that did nothing)
    paid_by: Lineage = ()  # consume, debit, charge: who paid; submit: reserved from
    paid_debt: int = 0  # grant, credit, refill: debt paid first; complete, cancel: by what
    #                     it released
    debt_created: int = 0
    debt_after: int = 0  # the account's debt right after a consume or debit
    expiry: int | None = None  # grant: its expiry; expire on release: when the grant ended
    ref: str | None = None  # void, expire: the grant; reverse: the event reversed
    job: str | None = None
    cost: int = 0
    priority: int | None = None
    ok: bool = True  # submit: accepted
    state: str | None = None  # complete: the job's state
    charge: int = 0
    released: int = 0
    max_running: int | None = None  # account: its cap
    voided: bool = False  # expire: the grant's end was a void
    counted: int = 0  # unexplained: the balance the lines add up to
    debt_paid_by: Lineage = ()  # complete, cancel: grants whose released credits paid debt
    again: bool = False  # account: declared before, by an earlier `account` event
    changed: tuple[tuple[str, int | None, int | None], ...] = ()  # account declared again:
    #                  (setting, before, after) of each setting it changed


def event_effect(rec: RecordedEvent, outcome: Outcome, ledger: Ledger,
                 declared_before: Settings | None = None) -> tuple[Effect, int]:
    """(what the event did, its change to the balance). `declared_before`: for an
    `account` event of an account an earlier one declared, its settings before this one
    (a re-declaration changes them, it opens nothing)."""
    p = rec.payload
    if rec.id in ledger.excluded:
        return Effect(REVERSED), 0
    if outcome.anomaly:
        return Effect(ANOMALY, reason=outcome.reason), 0
    kind = rec.type
    pool = p.get("pool")
    pool = pool if isinstance(pool, str) else None
    paid_debt = sum(a for _, a in outcome.paid_debt)
    if kind == "adjust":
        amount = int(p["amount"])
        return Effect(kind, amount, pool, str(p["reason"]), outcome.paid_by, paid_debt,
                      outcome.debt_created, outcome.debt_after or 0), amount
    if kind == "void":
        lapsed = sum(e.amount for e in outcome.expired if e.voided)
        return Effect(kind, lapsed, reason=str(p["reason"]) if p.get("reason") else None,
                      ref=str(p["grant"])), -lapsed
    if kind == "reverse":
        return Effect(kind, reason=str(p["reason"]), ref=str(p["event"])), 0
    if kind == "account":
        cap = p.get("max_running")
        cap = cap if isinstance(cap, int) else None
        state = ledger.accounts.get(str(p["account"]))
        if declared_before is None or state is None:
            return Effect(kind, max_running=cap), 0
        changed = tuple((name, old, new) for name, old, new in zip(
            ACCOUNT_SETTINGS, declared_before, account_settings(state), strict=True)
            if old != new)
        return Effect(kind, max_running=cap, again=True, changed=changed), 0
    if kind == "grant":
        amount = int(p["amount"])
        expiry = p.get("expiry")
        return Effect(kind, amount, pool, paid_debt=paid_debt,
                      expiry=expiry if isinstance(expiry, int) else None), amount
    if kind == "consume":
        amount = int(p["amount"])
        return Effect(kind, amount, pool, paid_by=outcome.paid_by,
                      debt_created=outcome.debt_created,
                      debt_after=outcome.debt_after or 0), -amount
    job = str(p.get("job"))
    if kind == "submit":
        priority = p.get("priority")
        return Effect(kind, pool=pool, reason=None if outcome.ok else outcome.reason,
                      paid_by=outcome.paid_by, job=job, cost=int(p["cost"]),
                      priority=priority if isinstance(priority, int) else None,
                      ok=outcome.ok), 0
    if kind == "complete":
        charge = outcome.charge or 0
        return Effect(kind, paid_by=outcome.paid_by, paid_debt=paid_debt, job=job,
                      state=ledger.jobs[job].state, charge=charge,
                      released=outcome.released or 0,
                      debt_paid_by=outcome.debt_paid_by), -charge
    if kind == "cancel":
        return Effect(kind, reason=outcome.reason or None, paid_debt=paid_debt, job=job,
                      released=outcome.released or 0, debt_paid_by=outcome.debt_paid_by), 0
    return Effect(kind, job=job if kind == "start" else None), 0


def expiry_effect(e: Expiry, *, on_release: str | None = None,
                  on_arrival: bool = False) -> Effect:
    """Credits of a grant that stopped counting unused; `on_release`: the job whose
    release found the grant already ended; `on_arrival`: the grant's own credits, voided
    (at `e.expiry`) before the grant took effect."""
    return Effect(EXPIRE, e.amount, e.pool, ref=e.grant_id, job=on_release,
                  expiry=e.expiry if on_release is not None or on_arrival else None,
                  voided=e.voided and (on_release is not None or on_arrival))
