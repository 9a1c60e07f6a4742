"""The simulator's reference: a plain, obviously-correct fold of the journal's records.

Written apart from `projections.ledger` on purpose: no heaps, no laziness, no snapshots.
Every question re-folds the records it is given, sorted by (time, position), through
lists scanned linearly. It knows only the event types the simulator writes.

Rules (docs/semantics.md): credits are valid for time < expiry; a draw in pool P takes
P's batches and general ones, lowest grant priority number first, then earliest expiry
(never-expiring last), P's before general on an equal expiry, then grant order; a
general draw takes only general batches.
What a draw cannot cover is P's debt. A grant to P pays P's debt; a general grant pays
general debt, then each pool's debt in pool-name order; only the rest is a batch. A hold
takes credits out of their batches; releasing returns them there (expired at once if the
batch has expired, else paying debt first like a grant of that batch's pool). A start
starts the pending job of highest priority, then the oldest submit, among the accounts
below their cap: the model notes which (`Model.picked`).
Refill: from an `account` event with a rate, every event of the account first adds rate x
seconds since the last one to a remainder in credit-seconds; each 3,600 is a credit, which
pays debt as a general grant does, the rest going into the one refill bucket (a general,
never-expiring batch at priority 50, in grant order as of the first credit it took) up to
the cap: a bucket that fills drops the remainder. Credits a job gives back go back into
it above the cap. An `account` event without a rate turns refill off (the remainder
dropped); one with a rate turns it on from its time. A balance between events is what an
event at that time would leave.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from operator import attrgetter
from typing import Any

GENERAL = "general"
NEVER = 2**63
DEFAULT_PRIORITY = 50  # a grant's, when it names none
CREDIT = 3600  # credit-seconds: a rate is in credits per hour, times in seconds
DEFAULT_HALF_LIFE = 604_800  # an account's, when it names none
FAIR_GRAIN = 2.0 ** 32  # fair-share keys are rounded to multiples of its inverse


@dataclass
class Batch:
    grant: str
    pool: str
    expiry: int  # NEVER: does not expire
    amount: int
    order: tuple[int, int]
    voided: bool = False  # its unused credits stopped counting; held ones lapse on release
    priority: int = DEFAULT_PRIORITY  # lower numbers are drawn first
    # The draw order: lowest priority number first, then earliest expiry, a pool's batch
    # before a general one on an equal expiry, then grant order. None of these change,
    # so it is taken once.
    draw_key: tuple[int, int, bool, tuple[int, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.draw_key = (self.priority, self.expiry, self.pool == GENERAL, self.order)


@dataclass
class Account:
    opened: bool = False
    max_running: int | None = None
    batches: list[Batch] = field(default_factory=list)
    debt: dict[str, int] = field(default_factory=dict)
    holds: dict[str, list[tuple[Batch, int]]] = field(default_factory=dict)
    running: int = 0
    refill_rate: int | None = None  # credits per hour; None: no refill
    refill_cap: int = 0
    refill_since: int = 0  # when refill last accrued
    remainder: int = 0  # credit-seconds not yet a whole credit
    bucket: Batch | None = None  # made when refill first puts a credit in it
    share: int | None = None  # fair-share weight; None: fair share off
    half_life: int = DEFAULT_HALF_LIFE
    # (log2 of a charge, its time); a change of half-life leaves one, of the usage then.
    usage: list[tuple[float, int]] = field(default_factory=list)

    def fair_key(self) -> Fraction | None:
        """Decayed usage / share on a log scale, from every charge, projected to time 0
        (without the -now / H that `fair_key_at` subtracts), to a grain of 2**-32: None
        (first) without a share or usage. Summed at the last charge's time T and then
        moved by T / H exactly (T // H whole, the rest a float that keeps the grain), as
        a float of T / H is too coarse for the grain at Unix-scale times."""
        if self.share is None or not self.usage:
            return None
        last = max(time for _, time in self.usage)
        whole, rest = divmod(last, self.half_life)
        small = self.usage_log2(last) + rest / self.half_life - math.log2(self.share)
        return whole + Fraction(round(small * FAIR_GRAIN), int(FAIR_GRAIN))

    def usage_log2(self, at: int) -> float:
        """log2 of the usage decayed to `at` (which may be before the charges: time 0)."""
        # Summed relative to the largest exponent: 2 ** (time / H) alone overflows a
        # float once time passes 1,024 half-lives.
        exponents = [log2_charge + (time - at) / self.half_life
                     for log2_charge, time in self.usage]
        top = max(exponents)
        return top + math.log2(math.fsum(2.0 ** (e - top) for e in exponents))

    def fair_key_at(self, time: int) -> float | Fraction:
        """Usage / share at `time` on a log scale: the key projected to time 0 less
        time / H, exactly (so keys of one half-life tie as they did at time 0)."""
        key = self.fair_key()
        return -math.inf if key is None else key - Fraction(time, self.half_life)

    def advance(self, time: int) -> None:
        """Time passes to `time`: what expired goes, refill accrues."""
        self.expire(time)
        paid, added, self.remainder = self.refill_due(time)
        self.refill_since = time
        for pool, amount in paid.items():
            self.debt[pool] -= amount
            if not self.debt[pool]:
                del self.debt[pool]
        if added:
            if self.bucket is None:
                self.bucket = Batch("refill", GENERAL, NEVER, 0, (time, 0))
            if self.bucket not in self.batches:
                self.batches.append(self.bucket)
            self.bucket.amount += added

    def refill_due(self, time: int) -> tuple[dict[str, int], int, int]:
        """What refill accrued by `time` does: (debt paid per pool, credits into the
        bucket, the remainder carried), without changing anything."""
        if self.refill_rate is None:
            return {}, 0, 0
        credits, remainder = divmod(
            self.remainder + self.refill_rate * (time - self.refill_since), CREDIT)
        paid: dict[str, int] = {}
        for pool in [GENERAL, *sorted(p for p in self.debt if p != GENERAL)]:
            pay = min(self.debt.get(pool, 0), credits)
            if pay:
                paid[pool] = pay
                credits -= pay
        room = max(0, self.refill_cap - (self.bucket.amount if self.bucket else 0))
        if credits >= room:
            credits, remainder = room, 0
        return paid, credits, remainder

    def expire(self, time: int) -> None:
        if self.batches:
            self.batches = [b for b in self.batches if b.expiry > time and b.amount > 0]

    def usable(self, pool: str) -> int:
        return sum(b.amount for b in self.batches if b.pool in (pool, GENERAL)
                   and (pool != GENERAL or b.pool == GENERAL))

    def draw(self, pool: str, amount: int) -> list[tuple[Batch, int]]:
        taken = []
        for b in sorted(self.batches, key=_DRAW_KEY):
            if amount == 0:
                break
            if b.amount == 0 or not (b.pool == pool or b.pool == GENERAL):
                continue
            take = min(b.amount, amount)
            b.amount -= take
            amount -= take
            taken.append((b, take))
        return taken

    def pay_debt(self, pool: str, amount: int) -> int:
        order = [pool] if pool != GENERAL else [GENERAL, *sorted(p for p in self.debt
                                                                 if p != GENERAL)]
        for p in order:
            pay = min(self.debt.get(p, 0), amount)
            if pay:
                self.debt[p] -= pay
                amount -= pay
                if not self.debt[p]:
                    del self.debt[p]
        return amount

    def release(self, portions: list[tuple[Batch, int]], time: int) -> None:
        for b, amount in portions:
            if b.expiry <= time or b.voided:
                continue  # expired (or voided) while held: gone
            rest = self.pay_debt(b.pool, amount)
            if rest:
                if b not in self.batches:
                    self.batches.append(b)
                b.amount += rest

    def balances(self, time: int) -> dict[str, int]:
        """Per pool, live credits at `time` plus held minus debt (zero pools left out),
        with the refill an event at `time` would accrue."""
        paid, added, _ = self.refill_due(time)
        out: dict[str, int] = {GENERAL: added}
        for pool, amount in paid.items():
            out[pool] = out.get(pool, 0) + amount
        for b in self.batches:
            if b.expiry > time and b.amount:
                out[b.pool] = out.get(b.pool, 0) + b.amount
        for portions in self.holds.values():
            for b, amount in portions:
                out[b.pool] = out.get(b.pool, 0) + amount
        for pool, debt in self.debt.items():
            out[pool] = out.get(pool, 0) - debt
        return {p: v for p, v in sorted(out.items()) if v}

    @property
    def held(self) -> int:
        return sum(a for portions in self.holds.values() for _, a in portions)


@dataclass
class Job:
    account: str
    cost: int
    priority: int
    pool: str
    state: str
    charge: int | None = None
    order: tuple[int, int] = (0, 0)  # (time, position) of its submit: older starts first


@dataclass
class Model:
    """The state after folding some records."""

    accounts: dict[str, Account] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    told: dict[str, Any] = field(default_factory=dict)  # event id -> what it reported
    grants: dict[str, tuple[str, Batch | None]] = field(default_factory=dict)  # id -> batch
    voids: dict[str, int] = field(default_factory=dict)  # grant id -> time voided
    queue: list[str] = field(default_factory=list)  # pending jobs, in submit order
    picked: dict[str, str | None] = field(default_factory=dict)  # start id -> job it should
    last_time: int = -NEVER

    def balances(self, name: str, time: int) -> dict[str, int]:
        account = self.accounts.get(name)
        return {} if account is None else account.balances(time)

    def figures(self, time: int) -> dict[str, Any]:
        """Everything the simulator compares with the projection, as plain data."""
        return {
            "accounts": {
                name: {"pools": a.balances(time), "reserved": a.held, "running": a.running}
                for name, a in sorted(self.accounts.items()) if a.opened
            },
            "jobs": {j: (job.state, job.charge) for j, job in sorted(self.jobs.items())},
        }


# Sort keys taken in C: the records come sorted already, and a Python key per record
# was a good part of the model's fold.
_POSITION = attrgetter("position")
_CANONICAL = attrgetter("time", "position")
_DRAW_KEY = attrgetter("draw_key")


def excluded_ids(records: Iterable[Any]) -> frozenset[str]:
    """The ids that take no part in the fold: named by a reversal that is not itself
    reversed. A reversal can only name an event recorded before it, so walking back from
    the last position settles each reversal before the event it names."""
    out: set[str] = set()
    reversals = [rec for rec in records if rec.type == "reverse"]
    for rec in sorted(reversals, key=_POSITION, reverse=True):
        if rec.id not in out:
            out.add(rec.payload["event"])
    return frozenset(out)


def fold(records: Iterable[Any]) -> Model:
    """Fold records (anything with .position .id .type .time .payload) in canonical order."""
    model = Model()
    records = list(records)
    excluded = excluded_ids(records)
    for rec in sorted(records, key=_CANONICAL):
        if rec.id not in excluded and rec.type != "reverse":
            _apply(model, rec)
        model.last_time = rec.time
    return model


def fold_one(model: Model, rec: Any) -> None:
    """Fold one more record, which comes after every one folded (canonical order) and is
    neither a reversal nor reversed: what `fold` does with it."""
    _apply(model, rec)


def _apply(model: Model, rec: Any) -> None:
    p = rec.payload
    if rec.type == "void":
        _void(model, p["grant"], rec.time)
        return
    if rec.type in ("account", "grant", "consume", "submit", "adjust"):
        account = model.accounts.get(p["account"])
        if account is None:
            account = model.accounts[p["account"]] = Account()
        account.advance(rec.time)
        _credit_event(model, account, rec)
        return
    if rec.type == "start":
        model.picked[rec.id] = _next_job(model, rec.time)
    job = model.jobs.get(p["job"])
    if job is not None:
        account = model.accounts[job.account]
        account.advance(rec.time)
        _job_event(model, account, job, rec)


def _void(model: Model, grant: str, time: int) -> None:
    """From `time` on the grant's unused credits stop counting; held ones stay with their
    job (a charge still takes them) and lapse when released."""
    model.voids[grant] = min(time, model.voids.get(grant, time))
    name, batch = model.grants.get(grant, ("", None))
    if batch is not None:
        model.accounts[name].advance(time)
        batch.voided = True
        batch.amount = 0


def _credit_event(model: Model, account: Account, rec: Any) -> None:
    p, t, kind = rec.payload, rec.time, rec.type
    if kind == "account":
        cap = p.get("max_running")
        if cap is not None and account.running > cap:
            return  # a cap below the jobs running: an anomaly, nothing changes
        account.opened = True
        account.max_running = cap
        account.refill_rate = p.get("refill_rate")
        account.refill_cap = p.get("refill_cap") or 0
        account.refill_since = t
        if account.refill_rate is None:
            account.remainder = 0
        account.share = p.get("share")
        half_life = p.get("half_life") or DEFAULT_HALF_LIFE
        if half_life != account.half_life and account.usage:
            # The usage so far is kept as it is now, one charge of U(t) at t, to decay
            # from here at the new rate.
            account.usage = [(account.usage_log2(t), t)]
        account.half_life = half_life
    elif kind == "grant" or (kind == "adjust" and p["amount"] > 0):
        # A credit adjustment is a grant without expiry.
        account.opened = True
        expiry = p.get("expiry")
        expiry = NEVER if expiry is None else expiry
        voided = model.voids.get(rec.id)
        if expiry <= t or (voided is not None and voided <= t):
            return
        pool = p.get("pool", GENERAL)
        rest = account.pay_debt(pool, p["amount"])
        priority = p.get("priority", DEFAULT_PRIORITY)
        batch = (Batch(rec.id, pool, expiry, rest, (t, rec.position), priority=priority)
                 if rest else None)
        if batch is not None:
            account.batches.append(batch)
        model.grants[rec.id] = (p["account"], batch)
    elif kind in ("consume", "adjust"):
        # A debit adjustment is a usage report.
        pool = p.get("pool", GENERAL)
        amount = abs(p["amount"])
        short = amount - sum(a for _, a in account.draw(pool, amount))
        if short:
            account.debt[pool] = account.debt.get(pool, 0) + short
        model.told[rec.id] = sum(account.debt.values())
    elif kind == "submit":
        name, pool = p["job"], p.get("pool", GENERAL)
        if name in model.jobs:
            return
        available = sum(b.amount for b in account.batches) - sum(account.debt.values())
        cost = p["cost"]
        ok = account.opened and cost <= min(account.usable(pool), available)
        model.jobs[name] = Job(p["account"], cost, p["priority"], pool,
                               "pending" if ok else "rejected", order=(t, rec.position))
        model.told[rec.id] = ok
        if ok:
            account.holds[name] = account.draw(pool, cost)
            model.queue.append(name)


def _job_event(model: Model, account: Account, job: Job, rec: Any) -> None:
    p, t, kind = rec.payload, rec.time, rec.type
    if kind == "start":
        capped = account.max_running is not None and account.running >= account.max_running
        if job.state == "pending" and not capped:
            job.state = "running"
            account.running += 1
            model.queue.remove(p["job"])
    elif kind == "complete" and job.state == "running":
        if p["success"]:
            charge = job.cost
        else:
            refund = Fraction(repr(float(p.get("refund_fraction", 1.0))))
            charge = math.floor(job.cost * (1 - refund))
        portions = account.holds.pop(p["job"])
        released = []
        left = charge
        for b, amount in portions:
            take = min(left, amount)
            left -= take
            if amount - take:
                released.append((b, amount - take))
        account.release(released, t)
        account.running -= 1
        job.state = "succeeded" if p["success"] else "failed"
        job.charge = charge
        model.told[rec.id] = charge
        if charge and account.share is not None:
            account.usage.append((math.log2(charge), t))
    elif kind == "cancel" and job.state == "pending":
        account.release(account.holds.pop(p["job"]), t)
        job.state = "cancelled"
        model.queue.remove(p["job"])


def _next_job(model: Model, time: int) -> str | None:
    """The job a start at `time` would start: the highest priority, then the least usage
    per share at `time`, then the oldest submit, among pending jobs whose account is
    below its cap. Every candidate is compared with every other, each key computed afresh
    from its account's charges: no heap, nothing carried between picks."""
    best, best_key = None, None
    keys: dict[str, float | Fraction] = {}  # per account: its usage is one within a pick
    for name in model.queue:
        job = model.jobs[name]
        account = model.accounts[job.account]
        if account.max_running is not None and account.running >= account.max_running:
            continue
        fair = keys.get(job.account)
        if fair is None:
            fair = keys[job.account] = account.fair_key_at(time)
        key = (-job.priority, fair, job.order)
        if best_key is None or key < best_key:
            best, best_key = name, key
    return best
