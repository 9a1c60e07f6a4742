"""A seeded, simulated month of GPU credits: what `gpu-credits demo` writes.

Twenty accounts through November 2026: paid grants (valid for a year) and promotional
grants (expiring within weeks), in the h100 and a100 pools and as general credits; jobs
of varied priority and cost, some accounts capped in how many run at once; failures with
partial refunds, cancellations, usage reports that run into debt; a few usage reports and
grants that arrive days late, and a few events sent twice.

The month is played once, in memory, through the `Scheduler` facade on a simulated clock
(so the fold decides what is accepted and what starts next), with grants and usage reports
appended as the billing system would send them. The recorded events are then given
deterministic ids (`demo<seed>-<n>`) and handed over a simulated day at a time, so writing
the same seed into the same database twice appends nothing the second time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from eventstore import JournalLike, MemoryJournal, NewEvent
from projections.events import GENERAL, CreditsConsumed, CreditsGranted, to_payload
from projections.ledger import PENDING, REJECTED, Ledger
from projections.scheduler import Scheduler

MONTH_START = 1_793_491_200
"""2026-11-01T00:00:00Z."""

HOUR = 3_600
DAY = 24 * HOUR
DAYS = 30
POOLS = ("h100", "a100", GENERAL)
CLUSTER_SLOTS = 10
"""Jobs the simulated cluster runs at once."""

ACCOUNTS = (
    "aurora-labs", "basalt-ai", "cobalt-research", "delta-vision", "ember-nlp",
    "fjord-bio", "granite-robotics", "helix-genomics", "iris-speech", "juniper-ml",
    "kestrel-ai", "lumen-health", "meridian-fin", "nimbus-climate", "onyx-search",
    "pioneer-edu", "quartz-chem", "riverbed-data", "solstice-games", "tundra-maps",
)

Progress = Callable[[int, int], None]


class DemoRefused(ValueError):
    """The database holds events that are not this seed's demo: writing would mix them."""


@dataclass(frozen=True, slots=True)
class Profile:
    """How one simulated account behaves."""

    name: str
    scale: int  # credits per typical job, roughly
    pool: str  # the pool its jobs and usage mostly use
    max_running: int | None
    jobs_per_day: float
    usage_per_day: int  # credits reported outside the scheduler each day


@dataclass(slots=True)
class DemoPlan:
    """The simulated month: batches of events to append, in the order they are sent."""

    seed: int
    batches: list[list[NewEvent]] = field(default_factory=list)
    late: int = 0  # events whose time is earlier than events sent before them
    duplicates: int = 0  # events sent a second time (same id): they append nothing

    @property
    def events(self) -> int:
        """Distinct events of the month."""
        return sum(len(b) for b in self.batches) - self.duplicates


@dataclass(frozen=True, slots=True)
class DemoRun:
    """What writing the demo did to the database."""

    plan: DemoPlan
    appended: int
    already_present: int  # sent but already recorded: duplicates, or a second run


def _profiles(rng: random.Random) -> list[Profile]:
    profiles = []
    for name in ACCOUNTS:
        scale = rng.choice((20, 40, 80, 150))
        profiles.append(Profile(
            name=name,
            scale=scale,
            pool=rng.choice(POOLS),
            max_running=rng.choice((None, None, 1, 2, 3)),
            jobs_per_day=rng.uniform(0.6, 2.5),
            usage_per_day=scale * rng.choice((0, 0, 1, 2, 4)) // 4,
        ))
    return profiles


class _Month:
    """The simulation: one in-memory journal, the Scheduler on a simulated clock."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.journal = MemoryJournal(clock=lambda: 0)
        self.now = MONTH_START
        self.scheduler = Scheduler(self.journal, clock=lambda: self.now)
        self.profiles = _profiles(self.rng)
        self.running: dict[str, int] = {}  # job id -> time it ends
        self.submitted: dict[str, tuple[int, str]] = {}  # pending candidates: id -> (time, acct)
        self.jobs = 0
        self.late = 0
        self.day_marks: list[int] = []  # journal head at the end of each day
        self._n = 0

    # -- billing events, appended as the billing system would send them --------------------

    def _send(self, time: int, event: CreditsGranted | CreditsConsumed) -> None:
        self._n += 1
        self.journal.append([NewEvent(f"billing-{self._n}", event.account, event.type, time,
                                      to_payload(event))])

    def grant(self, account: str, amount: int, time: int, expiry: int | None,
              pool: str) -> None:
        self._send(time, CreditsGranted(account, amount, expiry, pool))

    def consume(self, account: str, amount: int, time: int, pool: str) -> None:
        self._send(time, CreditsConsumed(account, amount, pool))

    # -- the month ------------------------------------------------------------------------

    def open_accounts(self) -> None:
        rng = self.rng
        for i, p in enumerate(self.profiles):
            at = MONTH_START + 60 * i
            self.scheduler.open_account(p.name, max_running=p.max_running, at=at)
            paid = p.scale * rng.randint(25, 60)
            self.grant(p.name, paid, at, MONTH_START + 365 * DAY, rng.choice((p.pool, GENERAL)))
            promo = p.scale * rng.randint(5, 15)
            expiry = MONTH_START + rng.randint(6, 18) * DAY
            self.grant(p.name, promo, at, expiry, self._promo_pool(p))

    def day(self, d: int) -> None:
        rng = self.rng
        start = MONTH_START + d * DAY
        plans: list[tuple[int, Profile]] = []
        for p in self.profiles:
            n = int(p.jobs_per_day) + (1 if rng.random() < p.jobs_per_day % 1 else 0)
            plans.extend((start + rng.randrange(DAY), p) for _ in range(n))
        plans.sort(key=lambda x: (x[0], x[1].name))
        for hour in range(24):
            self.now = start + hour * HOUR
            self._finish_due()
            while plans and plans[0][0] < start + (hour + 1) * HOUR:
                at, p = plans.pop(0)
                self.now = max(self.now, at)
                self._submit(p)
            self._cancel_stale()
            self._start_jobs()
        self.now = max(self.now, start + DAY - 60)
        self._billing(d, start)
        self.day_marks.append(self.journal.head())

    def _submit(self, p: Profile) -> None:
        rng = self.rng
        self.jobs += 1
        job = f"{p.name.split('-')[0]}-{self.jobs:04d}"
        cost = max(1, int(p.scale * rng.lognormvariate(0, 0.6)))
        pool = p.pool if rng.random() < 0.8 else rng.choice(POOLS)
        priority = rng.choices(range(10), weights=(6, 8, 10, 10, 8, 6, 4, 3, 2, 1))[0]
        if self.scheduler.submit(job, p.name, cost, priority, pool=pool):
            self.submitted[job] = (self.now, p.name)

    def _start_jobs(self) -> None:
        while len(self.running) < CLUSTER_SLOTS:
            job = self.scheduler.start_next()
            if job is None:
                return
            self.submitted.pop(job.id, None)
            self.running[job.id] = self.now + self.rng.randint(1, 12) * HOUR

    def _finish_due(self) -> None:
        for job, end in sorted(self.running.items(), key=lambda x: (x[1], x[0])):
            if end > self.now:
                continue
            del self.running[job]
            roll = self.rng.random()
            if roll < 0.12:
                fraction = self.rng.choice((0.5, 0.75, 0.9, 1.0))
                self.scheduler.complete(job, False, refund_fraction=fraction)
            else:
                self.scheduler.complete(job, True)

    def _cancel_stale(self) -> None:
        ledger = self.scheduler.ledger()
        for job, (since, _) in sorted(self.submitted.items()):
            state = ledger.jobs[job].state
            if state != PENDING:
                self.submitted.pop(job)
            elif self.now - since > 12 * HOUR and self.rng.random() < 0.1:
                self.scheduler.cancel(job)
                self.submitted.pop(job)

    def _promo_pool(self, p: Profile) -> str:
        # Promotions are for one GPU type: the one the account uses, or one to try.
        if p.pool != GENERAL and self.rng.random() < 0.7:
            return p.pool
        return self.rng.choice(("h100", "a100"))

    def _billing(self, d: int, start: int) -> None:
        rng = self.rng
        for p in self.profiles:
            if p.usage_per_day and rng.random() < 0.7:
                amount = max(1, int(p.usage_per_day * rng.uniform(0.5, 3.0)))
                self.consume(p.name, amount, self.now, p.pool)
            if rng.random() < 0.04:  # a mid-month promotion, good for a week or two
                amount = p.scale * rng.randint(3, 10)
                self.grant(p.name, amount, self.now, self.now + rng.randint(7, 14) * DAY,
                           self._promo_pool(p))
            if rng.random() < 0.03:  # a paid top-up, valid for a year
                self.grant(p.name, p.scale * rng.randint(10, 25), self.now,
                           MONTH_START + 365 * DAY, GENERAL)
        if d in (4, 11, 19, 26):  # a usage report for two days ago arrives only now
            p = rng.choice(self.profiles)
            self.consume(p.name, max(5, p.scale // 2), start - 2 * DAY + 15 * HOUR, p.pool)
            self.late += 1
        if d in (9, 21):  # a promotion granted three days ago is recorded only now
            p = rng.choice(self.profiles)
            when = start - 3 * DAY + 10 * HOUR
            self.grant(p.name, p.scale * 4, when, when + 10 * DAY, self._promo_pool(p))
            self.late += 1


def simulate(seed: int) -> DemoPlan:
    """Play the month for `seed`; return the events with deterministic ids, by day."""
    month = _Month(seed)
    month.open_accounts()
    for d in range(DAYS):
        month.day(d)
    recorded = list(month.journal.read(order="position"))
    events = [NewEvent(event_id(seed, r.position), r.stream, r.type, r.time, dict(r.payload))
              for r in recorded]
    plan = DemoPlan(seed, late=month.late)
    begin = 0
    for end in month.day_marks:
        plan.batches.append(events[begin:end])
        begin = end
    plan.batches[-1].extend(events[begin:])
    # A few events sent again by a retrying client, a few days after they were first sent.
    for day in sorted(month.rng.sample(range(5, DAYS), 4)):
        earlier = [e for b in plan.batches[: day - 2] for e in b]
        plan.batches[day].append(month.rng.choice(earlier))
        plan.duplicates += 1
    return plan


def event_id(seed: int, n: int) -> str:
    """The id of the n-th event (from 1) of the month for `seed`."""
    return f"demo{seed}-{n:05d}"


def write_demo(journal: JournalLike, seed: int = 42, *,
               progress: Progress | None = None) -> DemoRun:
    """Simulate the month for `seed` and append it, one batch per simulated day.

    Idempotent: a database that already holds this seed's month gets nothing new. A
    database holding other events is refused (DemoRefused), so a demo never mixes with
    real data or with another seed's month.
    """
    head = journal.head()
    if head and journal.get(event_id(seed, 1)) is None:
        raise DemoRefused(
            f"the database already holds {head} events that are not the demo for seed {seed}; "
            "the demo writes into an empty database (or one holding the same seed's demo)"
        )
    plan = simulate(seed)
    appended = sent = 0
    for i, batch in enumerate(plan.batches, start=1):
        before = journal.head()
        journal.append(batch)
        appended += journal.head() - before
        sent += len(batch)
        if progress is not None:
            progress(i, len(plan.batches))
    return DemoRun(plan, appended, sent - appended)


def examples(ledger: Ledger) -> tuple[str, str]:
    """An account worth a statement (the most in debt) and a job worth explaining (the
    first rejected one), for the hints after the summary."""
    account = max(sorted(ledger.accounts), key=lambda a: ledger.accounts[a].book.debt_total,
                  default=ACCOUNTS[0])
    rejected = sorted(j.id for j in ledger.jobs.values() if j.state == REJECTED)
    return account, rejected[0] if rejected else next(iter(sorted(ledger.jobs)), "-")
