"""The questions people ask of a journal, answered by folding it: read-only, no appends.

- `balance`: an account's figures at an event time, as the journal stood at a position.
- `statement`: every change to an account with a running balance, expiries included.
- `explain_account` / `explain_job`: which grants paid what (lineage), what expired
  unused, why a job was rejected or has not started.
- `revision_rows`: what late events changed, with the times of both events.
- `account_figures` / `audit`: the tables and totals a summary shows.

Every answer is a fold of the journal in canonical order `(event_time, position)`, so it
is the same on every backend and after every replay. Unknown names raise
`UnknownAccount` / `UnknownJob` with the names that would be valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike, RecordedEvent
from projections.creditbook import Batch, CreditBook, Expiry, Lineage
from projections.errors import UnknownAccount, UnknownJob
from projections.events import GENERAL, TIMELINE_START
from projections.ledger import PENDING, RUNNING, AccountState, Ledger, refill_due
from projections.outcomes import Outcome, Revision
from projections.projector import apply_recorded
from projections.replay import excluded_as_known, fold_canonical
from projections.timefmt import format_time, parse_micros

_KNOWN_SHOWN = 20


# -- common ------------------------------------------------------------------------------


def latest_time(journal: JournalLike) -> int:
    """The latest event time in the journal; TIMELINE_START when it is empty."""
    latest = journal.max_time()
    return TIMELINE_START if latest is None else latest


def known_position(journal: JournalLike, value: int | str | None) -> int:
    """A journal position from `--as-known-at`: a position, or an ISO-8601 recorded-at time.

    None means the head. A position past the head means the head. ValueError if negative
    or neither an integer nor ISO-8601.
    """
    head = journal.head()
    if value is None:
        return head
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            value = int(text)
        else:
            return journal.position_at(parse_micros(text))
    if value < 0:
        raise ValueError(f"a position is 0 or more (0: before the first event), got {value}")
    return min(value, head)


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:_KNOWN_SHOWN])
    more = len(ordered) - _KNOWN_SHOWN
    return f"{shown}, and {more} more" if more > 0 else shown


def unknown_account(name: str, ledger: Ledger) -> UnknownAccount:
    """The error for an account the journal does not know, naming the ones it does."""
    return UnknownAccount(f"unknown account {name!r} (known: {_names(ledger.accounts)})")


def _exists_later(journal: JournalLike, name: str) -> bool:
    """Whether any event of the journal is in the account's stream."""
    return journal.stream_version(name) > 0


def _lineage_dict(lineage: Lineage) -> list[list[Any]]:
    return [[grant, amount] for grant, amount in lineage]


def describe_lineage(lineage: Lineage) -> str:
    """`g1 50, g2 20`: which grants gave how many credits."""
    return ", ".join(f"{grant} {amount:,}" for grant, amount in lineage) or "nothing"


# -- balance -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figures:
    """An account's credits at one time: held credits count in the balance."""

    balance: int  # credits (active and held) minus debt, all pools
    reserved: int  # held for pending and running jobs
    available: int  # balance - reserved
    debt: int
    pools: dict[str, int]  # pool ("general": unrestricted) -> credits minus debt; sums to balance

    @classmethod
    def of(cls, account: AccountState | None, at: int) -> Figures:
        """The figures of `account` at `at`, no earlier than its last applied event."""
        if account is None:
            return cls(0, 0, 0, 0, {GENERAL: 0})
        book = account.book
        pools = account.pool_balances_at(at) or {GENERAL: 0}
        balance = sum(pools.values())
        return cls(balance, book.held, balance - book.held, book.debt_total, pools)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {"balance": self.balance, "reserved": self.reserved,
                "available": self.available, "debt": self.debt, "pools": dict(self.pools)}


@dataclass(frozen=True, slots=True)
class BalanceReport:
    """The answer of `balance`: one account at event time `at`, as known at a position."""

    account: str
    at: int
    as_known_at: int  # the journal position the answer is based on
    figures: Figures
    pool: str | None = None  # the pool asked about, if any

    def as_dict(self) -> dict[str, Any]:
        """The `balance --json` object (integers throughout)."""
        out: dict[str, Any] = {"account": self.account, **self.figures.as_dict(),
                               "at": self.at, "as_known_at": self.as_known_at}
        if self.pool is not None:
            out["pool"] = self.pool
            out["pool_balance"] = self.figures.pools.get(self.pool, 0)
        return out


def balance(journal: JournalLike, account: str, *, at: int | None = None,
            as_known_at: int | str | None = None, pool: str | None = None) -> BalanceReport:
    """`account`'s figures at event time `at` (default: the journal's latest event time),
    from only the events recorded at positions <= `as_known_at` (default: all)."""
    when = latest_time(journal) if at is None else at
    position = known_position(journal, as_known_at)
    ledger = fold_canonical(journal, to_time=when, to_position=position)
    state = ledger.accounts.get(account)
    if state is None and not _exists_later(journal, account):
        raise unknown_account(account, ledger)
    wanted = None if pool is None else (pool or GENERAL)
    return BalanceReport(account, when, position, Figures.of(state, when), wanted)


def account_figures(ledger: Ledger, at: int) -> list[tuple[str, Figures]]:
    """Every account of the ledger (sorted by name) with its figures at `at`."""
    return [(name, Figures.of(ledger.accounts[name], at)) for name in sorted(ledger.accounts)]


# -- statement ---------------------------------------------------------------------------


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
    detail: str
    status: str = "ok"  # ok, rejected (a submit), anomaly (kept in the journal, no effect)
    job: str | None = None
    pool: str | None = None
    grants: Lineage = ()  # consume/complete: who paid; submit: reserved from; expire: the grant
    debt_paid: int = 0
    debt_created: int = 0
    memo: str | None = None  # the event's memo, if it has one

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready line (integer times)."""
        return {
            "time": self.time, "position": self.position, "event_id": self.event_id,
            "type": self.type, "change": self.change, "balance": self.balance,
            "reserved": self.reserved, "detail": self.detail, "status": self.status,
            "job": self.job, "pool": self.pool, "grants": _lineage_dict(self.grants),
            "debt_paid": self.debt_paid, "debt_created": self.debt_created,
            "memo": self.memo,
        }


@dataclass(frozen=True, slots=True)
class Statement:
    """Every change to one account between two event times, with a running balance."""

    account: str
    from_time: int | None
    to_time: int
    opening: StatementLine | None  # only when from_time is given
    lines: list[StatementLine]

    @property
    def closing(self) -> tuple[int, int]:
        """(balance, reserved) after the last line."""
        last = self.lines[-1] if self.lines else self.opening
        return (last.balance, last.reserved) if last is not None else (0, 0)

    def as_dict(self) -> dict[str, Any]:
        """The `statement --json` object."""
        balance_, reserved = self.closing
        return {
            "account": self.account, "from": self.from_time, "to": self.to_time,
            "opening": None if self.opening is None else self.opening.as_dict(),
            "lines": [line.as_dict() for line in self.lines],
            "closing": {"balance": balance_, "reserved": reserved},
        }


def _target(ledger: Ledger, rec: RecordedEvent) -> str | None:
    """The account an event touches, as the ledger stands before applying it."""
    account = rec.payload.get("account")
    if isinstance(account, str):
        return account
    if rec.type in ("void", "reverse"):
        return rec.stream  # recorded in the stream of the account of the event it names
    job = ledger.jobs.get(str(rec.payload.get("job")))
    return None if job is None else job.account


def _pool_text(pool: object) -> str:
    return "" if pool in (None, GENERAL) else f" {pool}"


def _event_detail(rec: RecordedEvent, outcome: Outcome, ledger: Ledger) -> tuple[str, int]:
    """(what the event did, its change to the balance)."""
    p = rec.payload
    if rec.id in ledger.excluded:
        return "reversed, no effect", 0
    if outcome.anomaly:
        return f"anomaly, no effect: {outcome.reason}", 0
    if rec.type == "adjust":
        amount = int(p["amount"])
        text = f"adjustment of {amount:+,}{_pool_text(p.get('pool'))} credits: {p['reason']}"
        if amount < 0:
            text += f"; paid by {describe_lineage(outcome.paid_by)}"
            if outcome.debt_created:
                text += (f"; {outcome.debt_created:,} became debt (debt now "
                         f"{outcome.debt_after or 0:,})")
        elif outcome.paid_debt:
            text += f"; {sum(a for _, a in outcome.paid_debt):,} paid debt first"
        return text, amount
    if rec.type == "void":
        lapsed = sum(e.amount for e in outcome.expired if e.voided)
        why = f": {p['reason']}" if p.get("reason") else ""
        return f"grant {p['grant']} voided, {lapsed:,} unused credits stop counting{why}", \
            -lapsed
    if rec.type == "reverse":
        return f"reversal of event {p['event']}: {p['reason']}", 0
    if rec.type == "account":
        cap = p.get("max_running")
        return "account opened" + (f" (at most {cap} running)" if cap else ""), 0
    if rec.type == "grant":
        amount = int(p["amount"])
        expiry = p.get("expiry")
        text = f"grant of {amount:,}{_pool_text(p.get('pool'))} credits"
        text += f", expires {format_time(expiry)}" if expiry is not None else ", no expiry"
        paid = sum(a for _, a in outcome.paid_debt)
        if paid:
            text += f"; {paid:,} paid debt first"
        return text, amount
    if rec.type == "consume":
        amount = int(p["amount"])
        text = f"consumed {amount:,}{_pool_text(p.get('pool'))}, paid by "
        text += describe_lineage(outcome.paid_by)
        if outcome.debt_created:
            text += (f"; {outcome.debt_created:,} became debt (debt now "
                     f"{outcome.debt_after or 0:,})")
        return text, -amount
    job = str(p.get("job"))
    if rec.type == "submit":
        head = f"job {job}, cost {int(p['cost']):,}, priority {p['priority']}"
        if p.get("pool") not in (None, GENERAL):
            head += f", pool {p['pool']}"
        if not outcome.ok:
            return f"{head}: rejected: {outcome.reason}", 0
        return f"{head}: reserved from {describe_lineage(outcome.paid_by)}", 0
    if rec.type == "start":
        return f"job {job}", 0
    if rec.type == "complete":
        state = ledger.jobs[job].state
        charge = outcome.charge or 0
        text = f"job {job} {state}: charged {charge:,}"
        if charge:
            text += f" (paid by {describe_lineage(outcome.paid_by)})"
        if outcome.released:
            text += f", released {outcome.released:,}"
        return text, -charge
    if rec.type == "cancel":
        if outcome.reason:
            return f"job {job}: {outcome.reason}", 0
        return f"job {job} cancelled: released {outcome.released or 0:,}", 0
    return rec.type, 0  # pragma: no cover - every event type is handled above


def _expiry_line(e: Expiry, time: int, balance_: int, reserved: int,
                 *, on_release: str | None = None) -> StatementLine:
    text = f"{e.amount:,}{_pool_text(e.pool)} of grant {e.grant_id} expired unused"
    if on_release is not None and e.voided:
        text = (f"{e.amount:,}{_pool_text(e.pool)} of grant {e.grant_id} released by job "
                f"{on_release} after the grant was voided at {format_time(e.expiry)}")
    elif on_release is not None:
        text = (f"{e.amount:,}{_pool_text(e.pool)} of grant {e.grant_id} released by job "
                f"{on_release} after the grant expired at {format_time(e.expiry)}")
    return StatementLine(time, None, None, "expire", -e.amount, balance_, reserved, text,
                         pool=e.pool, grants=((e.grant_id, e.amount),))


def _expired_batches(book: CreditBook, at: int) -> list[Batch]:
    """Batches still in the book whose credits have expired by `at`, in expiry order."""
    found = [b for heap in book.heaps.values() for b in heap if b.is_expired_at(at) and b.amount]
    return sorted(found, key=lambda b: b.key)


@dataclass(frozen=True, slots=True)
class _Step:
    """One event of an account, and what time passing did to the account first."""

    rec: RecordedEvent
    outcome: Outcome
    expired: list[Expiry]  # credits that expired by the event's time (at their expiry)
    refill: int  # credits a refill bucket accrued before the event
    on_release: list[Expiry]  # held credits released by the event after their grant expired


class _AccountWalk:
    """Folds a journal and follows one account, event by event.

    Expiries are taken at their expiry time, whether or not the fold has evicted them yet
    (it evicts lazily, when an event touches the account; an event refused before that, a
    duplicate submit, evicts nothing). Each expired batch is reported once: `announced`
    remembers batches reported but still in the book.
    """

    def __init__(self, account: str) -> None:
        self.account = account
        self.ledger = Ledger()
        self.seen = False  # whether any event touched the account
        self.announced: dict[int, Batch] = {}  # id(batch) -> batch reported as expired

    @property
    def state(self) -> AccountState | None:
        """The account as the fold stands."""
        return self.ledger.accounts.get(self.account)

    def expired_by(self, time: int) -> list[Expiry]:
        """Expiries by `time` not yet reported; they are reported now."""
        state = self.state
        if state is None:
            return []
        out = []
        for batch in _expired_batches(state.book, time):
            if id(batch) not in self.announced:
                self.announced[id(batch)] = batch
                assert batch.expiry is not None
                out.append(Expiry(batch.grant_id, batch.pool, batch.expiry, batch.amount))
        return out

    def unevicted(self) -> int:
        """Credits reported as expired that the fold has not evicted yet."""
        return sum(b.amount for b in self.announced.values() if b.in_heap)

    def apply(self, rec: RecordedEvent) -> _Step | None:
        """Apply `rec`; a `_Step` if it touched the account, else None."""
        ledger = self.ledger
        if _target(ledger, rec) != self.account:
            apply_recorded(ledger, rec)
            return None
        self.seen = True
        expired = self.expired_by(rec.time)
        state = self.state
        in_heap = [(b, b.amount) for b in self.announced.values() if b.in_heap]
        granted = state.book.totals.granted if state is not None else 0
        outcome = apply_recorded(ledger, rec)
        # What advance() evicted now is at the head of outcome.expired; the rest expired
        # when a settlement released credits into a batch already expired.
        evicted = sum(amount for b, amount in in_heap if not b.in_heap)
        self.announced = {k: b for k, b in self.announced.items() if b.in_heap}
        on_release: list[Expiry] = []
        seen = 0
        for e in outcome.expired:
            if e.voided and rec.type == "void":
                continue  # the void's own change, on its line
            if seen >= evicted:
                on_release.append(e)
            seen += e.amount
        refill = 0
        state = self.state
        if state is not None:
            credits = rec.type == "grant" or (rec.type == "adjust"
                                              and int(rec.payload.get("amount", 0)) > 0)
            added = rec.payload.get("amount", 0) if credits and not outcome.anomaly \
                and rec.id not in ledger.excluded else 0
            refill = state.book.totals.granted - granted - int(added)
        return _Step(rec, outcome, expired, refill, on_release)


class _StatementBuilder:
    """Writes the lines of one account as the walk goes."""

    def __init__(self, account: str) -> None:
        self.walk = _AccountWalk(account)
        self.lines: list[StatementLine] = []
        self.balance = 0
        self.reserved = 0

    def add(self, line: StatementLine) -> None:
        self.lines.append(line)

    def apply(self, rec: RecordedEvent) -> None:
        step = self.walk.apply(rec)
        if step is None:
            return
        outcome = step.outcome
        for e in step.expired:
            self.balance -= e.amount
            self.add(_expiry_line(e, e.expiry, self.balance, self.reserved))
        if step.refill:
            self.balance += step.refill
            self.add(StatementLine(rec.time, None, None, "refill", step.refill, self.balance,
                                   self.reserved, f"refill of {step.refill} credits accrued",
                                   pool=GENERAL))
        detail, change = _event_detail(rec, outcome, self.walk.ledger)
        state = self.walk.state
        if state is not None:
            self.reserved = state.book.held
        self.balance += change
        status = "anomaly" if outcome.anomaly else ("ok" if outcome.ok else "rejected")
        if rec.id in self.walk.ledger.excluded:
            status = "reversed"
        job = rec.payload.get("job")
        self.add(StatementLine(
            rec.time, rec.position, rec.id, rec.type, change, self.balance, self.reserved,
            detail, status, job if isinstance(job, str) else None,
            rec.payload.get("pool", GENERAL) if rec.type in ("grant", "consume", "adjust")
            else None,
            outcome.paid_by, sum(a for _, a in outcome.paid_debt), outcome.debt_created,
            memo if isinstance(memo := rec.payload.get("memo"), str) else None))
        for e in step.on_release:
            self.balance -= e.amount
            self.add(_expiry_line(e, rec.time, self.balance, self.reserved,
                                  on_release=str(job)))
        if state is not None:
            book = state.book
            actual = book.active_total + book.held - book.debt_total - self.walk.unevicted()
            if actual != self.balance:  # never expected: shown rather than hidden
                self.add(StatementLine(rec.time, None, None, "adjust", actual - self.balance,
                                       actual, self.reserved,
                                       "unexplained change (please report): balance is "
                                       f"{actual}, the lines above add up to {self.balance}"))
                self.balance = actual

    def finish(self, to_time: int) -> None:
        """Expiries and refill accrued after the account's last event, up to `to_time`."""
        for e in self.walk.expired_by(to_time):
            self.balance -= e.amount
            self.add(_expiry_line(e, e.expiry, self.balance, self.reserved))
        state = self.walk.state
        if state is not None and state.refill_rate is not None:
            add, _ = refill_due(state, to_time)
            if add:
                self.balance += add
                self.add(StatementLine(to_time, None, None, "refill", add, self.balance,
                                       self.reserved, f"refill of {add} credits accrued",
                                       pool=GENERAL))


def statement(journal: JournalLike, account: str, *, from_time: int | None = None,
              to_time: int | None = None) -> Statement:
    """Every change to `account` with event time <= `to_time` (default: the latest), with
    a running balance; with `from_time`, an opening line and the changes from then on."""
    to = latest_time(journal) if to_time is None else to_time
    builder = _StatementBuilder(account)
    builder.walk.ledger.excluded = excluded_as_known(journal, None)
    for rec in journal.read(to_time=to, order="canonical"):
        builder.apply(rec)
    builder.finish(to)
    walk = builder.walk
    if not walk.seen and walk.state is None and not _exists_later(journal, account):
        raise unknown_account(account, walk.ledger)
    lines = builder.lines
    opening = None
    if from_time is not None:
        cut = next((i for i, line in enumerate(lines) if line.time >= from_time), len(lines))
        prior = lines[cut - 1] if cut else None
        balance_ = prior.balance if prior is not None else 0
        reserved = prior.reserved if prior is not None else 0
        opening = StatementLine(from_time, None, None, "opening", 0, balance_, reserved,
                                "opening balance")
        lines = lines[cut:]
    return Statement(account, from_time, to, opening, lines)


# -- explain -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Use:
    """Credits of one grant that paid for one consumption or one job."""

    time: int
    position: int
    event_id: str
    kind: str  # "consume" or "job"
    amount: int
    job: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready use."""
        return {"time": self.time, "position": self.position, "event_id": self.event_id,
                "kind": self.kind, "amount": self.amount, "job": self.job}


@dataclass(slots=True)
class GrantLineage:
    """One grant and everything that became of its credits."""

    grant_id: str
    time: int
    position: int | None
    pool: str
    amount: int
    expiry: int | None
    paid_debt: int = 0  # on arrival, debt it paid before becoming a batch
    uses: list[Use] = field(default_factory=list)
    expired: int = 0  # expired unused (evicted, or expired by `at` and not yet evicted)
    held: list[tuple[str, int]] = field(default_factory=list)  # (job, credits) held now
    remaining: int = 0  # still usable at `at`

    @property
    def used(self) -> int:
        """Credits that paid consumptions and jobs."""
        return sum(u.amount for u in self.uses)

    @property
    def debt_paid_later(self) -> int:
        """Credits released from jobs back to this grant that paid debt (what is left over)."""
        accounted = (self.paid_debt + self.used + self.expired + self.remaining
                     + sum(a for _, a in self.held))
        return max(0, self.amount - accounted)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready lineage of the grant."""
        return {
            "grant": self.grant_id, "time": self.time, "position": self.position,
            "pool": self.pool, "amount": self.amount, "expiry": self.expiry,
            "paid_debt": self.paid_debt + self.debt_paid_later, "used": self.used,
            "uses": [u.as_dict() for u in self.uses], "expired": self.expired,
            "held": [[job, amount] for job, amount in self.held],
            "remaining": self.remaining,
        }


@dataclass(frozen=True, slots=True)
class Spend:
    """One consumption or one job charge, and the grants that paid it."""

    time: int
    position: int
    event_id: str
    kind: str  # "consume" or "job"
    amount: int
    paid_by: Lineage
    debt_created: int = 0
    job: str | None = None
    pool: str = GENERAL

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready spend."""
        return {"time": self.time, "position": self.position, "event_id": self.event_id,
                "kind": self.kind, "amount": self.amount, "pool": self.pool, "job": self.job,
                "paid_by": _lineage_dict(self.paid_by), "debt_created": self.debt_created}


@dataclass(frozen=True, slots=True)
class Rejection:
    """A submit the account could not pay for, with the fold's reason."""

    time: int
    position: int
    job: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready rejection."""
        return {"time": self.time, "position": self.position, "job": self.job,
                "reason": self.reason}


@dataclass(slots=True)
class AccountExplanation:
    """Where an account's credits came from and went: the lineage of every grant."""

    account: str
    at: int
    figures: Figures
    grants: list[GrantLineage]
    spends: list[Spend]
    rejections: list[Rejection]
    anomalies: list[tuple[int, str, str]]  # (time, event id, why)
    debt: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        """The `explain ACCOUNT --json` object."""
        return {
            "account": self.account, "at": self.at, **self.figures.as_dict(),
            "grants": [g.as_dict() for g in self.grants],
            "spends": [s.as_dict() for s in self.spends],
            "rejections": [r.as_dict() for r in self.rejections],
            "anomalies": [list(a) for a in self.anomalies],
            "debt_by_pool": dict(self.debt),
        }


def explain_account(journal: JournalLike, account: str) -> AccountExplanation:
    """Which grants paid which consumption or job, and what expired unused per grant."""
    at = latest_time(journal)
    walk = _AccountWalk(account)
    walk.ledger.excluded = excluded_as_known(journal, None)
    ledger = walk.ledger
    grants: dict[str, GrantLineage] = {}
    spends: list[Spend] = []
    rejections: list[Rejection] = []
    anomalies: list[tuple[int, str, str]] = []

    def grant(grant_id: str, pool: str) -> GrantLineage:
        found = grants.get(grant_id)
        if found is None:  # a refill batch: no grant event of its own
            found = grants[grant_id] = GrantLineage(grant_id, TIMELINE_START, None, pool, 0, None)
        return found

    for rec in journal.read(order="canonical"):
        step = walk.apply(rec)
        if step is None:
            continue
        outcome = step.outcome
        p = rec.payload
        for e in (*step.expired, *step.on_release):
            grant(e.grant_id, e.pool).expired += e.amount
        if outcome.anomaly:
            anomalies.append((rec.time, rec.id, outcome.reason or ""))
        elif rec.type == "grant":
            expiry = p.get("expiry")
            grants[rec.id] = GrantLineage(
                rec.id, rec.time, rec.position, str(p.get("pool", GENERAL)), int(p["amount"]),
                expiry if isinstance(expiry, int) else None,
                paid_debt=sum(a for _, a in outcome.paid_debt))
        elif rec.type == "consume":
            spends.append(Spend(rec.time, rec.position, rec.id, "consume", int(p["amount"]),
                                outcome.paid_by, outcome.debt_created,
                                pool=str(p.get("pool", GENERAL))))
            for g, amount in outcome.paid_by:
                grant(g, GENERAL).uses.append(Use(rec.time, rec.position, rec.id, "consume",
                                                  amount))
        elif rec.type == "complete":
            job = ledger.jobs[str(p["job"])]
            spends.append(Spend(rec.time, rec.position, rec.id, "job", outcome.charge or 0,
                                outcome.paid_by, job=job.id, pool=job.pool))
            for g, amount in outcome.paid_by:
                grant(g, GENERAL).uses.append(Use(rec.time, rec.position, rec.id, "job", amount,
                                                  job.id))
        elif rec.type == "submit" and not outcome.ok:
            rejections.append(Rejection(rec.time, rec.position, str(p["job"]),
                                        outcome.reason or "rejected"))
    state = walk.state
    if state is None and not walk.seen:
        raise unknown_account(account, ledger)
    for e in walk.expired_by(at):
        grant(e.grant_id, e.pool).expired += e.amount
    if state is not None:
        book = state.book
        for batch in (b for heap in book.heaps.values() for b in heap):
            if not batch.is_expired_at(at):
                grant(batch.grant_id, batch.pool).remaining += batch.amount
        for job_id in sorted(book.holds):
            for batch, amount in book.holds[job_id].portions:
                grant(batch.grant_id, batch.pool).held.append((job_id, amount))
        for lineage in grants.values():
            if lineage.position is None:  # a refill batch: its amount is what it accounts for
                lineage.amount = (lineage.used + lineage.expired + lineage.remaining
                                  + sum(a for _, a in lineage.held))
    debt = dict(sorted(state.book.debt.items())) if state is not None else {}
    ordered = sorted(grants.values(), key=lambda g: (g.time, g.position or 0, g.grant_id))
    return AccountExplanation(account, at, Figures.of(state, at), ordered, spends, rejections,
                              anomalies, debt)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One event of a job's life and what the fold made of it."""

    time: int
    position: int
    event_id: str
    type: str
    detail: str
    ok: bool = True

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready event."""
        return {"time": self.time, "position": self.position, "event_id": self.event_id,
                "type": self.type, "detail": self.detail, "ok": self.ok}


@dataclass(slots=True)
class JobExplanation:
    """A job's life: state, acceptance (or the reason it was refused), holds, charge."""

    job: str
    account: str | None
    state: str  # a job state, or "never submitted" for events naming an unknown job
    cost: int | None = None
    priority: int | None = None
    pool: str | None = None
    submitted_at: int | None = None
    accepted: bool | None = None
    reason: str | None = None  # why the submit was rejected
    held_from: Lineage = ()  # grants the submit reserved from
    charge: int | None = None
    paid_by: Lineage = ()
    released: int | None = None
    waiting: str | None = None  # a pending job: why it has not started
    ahead: int | None = None  # a pending job: pending jobs that start before it
    events: list[JobEvent] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The `explain --job --json` object."""
        return {
            "job": self.job, "account": self.account, "state": self.state, "cost": self.cost,
            "priority": self.priority, "pool": self.pool, "submitted_at": self.submitted_at,
            "accepted": self.accepted, "reason": self.reason,
            "held_from": _lineage_dict(self.held_from), "charge": self.charge,
            "paid_by": _lineage_dict(self.paid_by), "released": self.released,
            "waiting": self.waiting, "ahead": self.ahead,
            "events": [e.as_dict() for e in self.events],
        }


def _waiting(ledger: Ledger, job_id: str) -> tuple[str, int]:
    """Why a pending job has not started, and how many pending jobs start before it."""
    job = ledger.jobs[job_id]
    account = ledger.accounts[job.account]
    ahead = ledger.pending_ahead(job)
    if account.blocked:
        why = (f"account {job.account!r} already runs {account.running} of at most "
               f"{account.max_running} jobs; {ahead} pending job(s) ahead of it")
    elif ahead:
        why = f"{ahead} pending job(s) ahead of it (higher priority, or submitted earlier)"
    else:
        why = "first in line: the next start_next starts it"
    return why, ahead


def explain_job(journal: JournalLike, job_id: str) -> JobExplanation:
    """A job's state, its submit's outcome (and reason), holds, charge and payers, and for a
    pending job why it has not started."""
    ledger = Ledger(excluded=excluded_as_known(journal, None))
    found: list[tuple[RecordedEvent, Outcome]] = []
    for rec in journal.read(order="canonical"):
        outcome = apply_recorded(ledger, rec)
        if rec.payload.get("job") == job_id:
            found.append((rec, outcome))
    job = ledger.jobs.get(job_id)
    if job is None and not found:
        raise UnknownJob(f"unknown job {job_id!r} (no event names it)")
    out = JobExplanation(job_id, None if job is None else job.account,
                         "never submitted" if job is None else job.state)
    if job is not None:
        out.cost, out.priority, out.pool = job.cost, job.priority, job.pool
        out.charge = job.charge
    for rec, outcome in found:
        detail, _ = _event_detail(rec, outcome, ledger)
        out.events.append(JobEvent(rec.time, rec.position, rec.id, rec.type, detail,
                                   outcome.ok))
        if rec.type == "submit" and out.submitted_at is None and not outcome.anomaly:
            out.submitted_at = rec.time
            out.accepted = outcome.ok
            out.reason = None if outcome.ok else outcome.reason
            out.held_from = outcome.paid_by
        elif rec.type == "complete" and not outcome.anomaly:
            out.paid_by = outcome.paid_by
            out.released = outcome.released
        elif rec.type == "cancel" and not outcome.anomaly and outcome.released:
            out.released = outcome.released
    if job is not None and job.state == PENDING:
        out.waiting, out.ahead = _waiting(ledger, job_id)
    elif job is not None and job.state == RUNNING:
        out.waiting = f"running; {job.cost} credits held until it completes"
    return out


# -- revisions and audit -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RevisionRow:
    """A revision with the event times of the late event and of the event it changed."""

    revision: Revision
    late_time: int | None
    late_type: str | None
    time: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready revision (integer times)."""
        return {**self.revision.as_dict(), "late_time": self.late_time,
                "late_type": self.late_type, "time": self.time}


def revision_rows(journal: JournalLike, revisions: Iterable[Revision]) -> list[RevisionRow]:
    """Each revision with the times of both events, looked up once per event."""
    cache: dict[str, RecordedEvent | None] = {}

    def get(event_id: str) -> RecordedEvent | None:
        if event_id not in cache:
            cache[event_id] = journal.get(event_id)
        return cache[event_id]

    rows = []
    for r in revisions:
        late, affected = get(r.late_event_id), get(r.event_id)
        rows.append(RevisionRow(r, None if late is None else late.time,
                                None if late is None else late.type,
                                None if affected is None else affected.time))
    return rows


def describe_reported(reported: Mapping[str, Any]) -> str:
    """An outcome as a caller was told it: `ok, debt 10, paid by g1 5`."""
    parts = ["ok" if reported.get("ok", True) else "rejected"]
    if "debt_after" in reported:
        parts.append(f"debt {reported['debt_after']:,}")
    if "charge" in reported:
        parts.append(f"charged {reported['charge']:,}")
    if reported.get("paid_by"):
        paid = ", ".join(f"{g} {a:,}" for g, a in reported["paid_by"])
        parts.append(f"paid by {paid}")
    if "reason" in reported:
        parts.append(str(reported["reason"]))
    return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Audit:
    """Journal-wide totals for a summary."""

    events: int
    accounts: int
    jobs: int
    granted: int
    expired: int
    debt: int
    rejected: int
    anomalies: int
    revisions: int
    digest: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready totals."""
        return {"events": self.events, "accounts": self.accounts, "jobs": self.jobs,
                "granted": self.granted, "expired": self.expired, "debt": self.debt,
                "rejected": self.rejected, "anomalies": self.anomalies,
                "revisions": self.revisions, "digest": self.digest}


def audit(ledger: Ledger, *, events: int, revisions: int, at: int) -> Audit:
    """Totals of a replayed ledger: credits expired (by `at`), debt, rejected submits..."""
    books = [a.book for a in ledger.accounts.values()]
    expired = sum(b.totals.expired + sum(b.expiring_by(at).values()) for b in books)
    return Audit(
        events=events, accounts=sum(1 for a in ledger.accounts.values() if a.opened),
        jobs=len(ledger.jobs), granted=sum(b.totals.granted for b in books), expired=expired,
        debt=sum(b.debt_total for b in books), rejected=ledger.rejected,
        anomalies=len(ledger.anomalies), revisions=revisions, digest=ledger.digest())
