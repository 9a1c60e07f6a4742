"""The work every implementation is given: deterministic, seeded, built before timing.

- `credit_events`: small grant/consume events over many accounts (journal appends).
- `realistic_mix`: what a GPU platform's journal holds: accounts opened, expiring grants
  (some restricted to a pool), usage reports, and jobs submitted, started, completed
  (some failing with a partial refund) and cancelled. Event times strictly increase with
  arrival, so arrival order is the canonical order (no late events).
- `tracker_calls`: mixed grant / consume / get_balance calls, timestamps
  non-decreasing, for one account.
- `scheduler_ops`: submit / start_next / complete for the scheduler.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

BASE_TIME = 1_700_000_000
"""Event time of the first event (seconds since the epoch, like the real thing)."""

DAY = 86_400


def account_name(i: int) -> str:
    return f"acct-{i:05d}"


@dataclass(frozen=True, slots=True)
class MixEvent:
    """One event of the mix, independent of any library: type, stream, time, fields.

    `fields` are the journal payload (the `projections.events.to_payload` form), so the
    same event can be handed to our journal, to a raw driver or to `eventsourcing`.
    """

    id: str
    type: str
    stream: str
    time: int
    fields: dict[str, Any]


def credit_events(n: int, accounts: int = 100, seed: int = 2) -> list[MixEvent]:
    """n grants (1 in 3) and consumes on `accounts` accounts, one second apart."""
    rng = random.Random(seed)
    out: list[MixEvent] = []
    for i in range(n):
        account = account_name(rng.randrange(accounts))
        time = BASE_TIME + i
        if i % 3 == 0:
            fields: dict[str, Any] = {"account": account, "amount": rng.randint(100, 1000),
                                      "expiry": time + rng.randint(DAY, 30 * DAY)}
            out.append(MixEvent(f"ev-{i}", "grant", account, time, fields))
        else:
            fields = {"account": account, "amount": rng.randint(1, 50)}
            out.append(MixEvent(f"ev-{i}", "consume", account, time, fields))
    return out


def mix_accounts(n: int) -> int:
    """How many accounts a mix of n events spreads over: one per 1,000 events, 10 to 1,000."""
    return max(10, min(1000, n // 1000))


def realistic_mix(n: int, seed: int = 5) -> Iterator[MixEvent]:
    """n events of a GPU platform's life, in arrival (= canonical) order.

    Every account is opened with a general, non-expiring grant; then: 8% grants (expiring
    in 1 to 30 days, a third of them restricted to pool h100 or a100), 22% usage reports
    (a fifth of them in a pool), 25% submits, 22% starts, 20% completes (1 in 10 fails
    with a 50% refund), 3% cancels. Time advances 1 to 3 s per event.
    """
    rng = random.Random(seed)
    accounts = mix_accounts(n)
    pending: list[tuple[str, str]] = []  # (job, account), sampled at random
    running: list[tuple[str, str]] = []
    time = BASE_TIME
    jobs = 0
    made = 0

    def take(items: list[tuple[str, str]]) -> tuple[str, str]:
        i = rng.randrange(len(items))
        items[i], items[-1] = items[-1], items[i]
        return items.pop()

    while made < n:
        time += rng.randint(1, 3)
        eid = f"mix-{made}"
        if made < 2 * accounts:
            account = account_name(made // 2)
            if made % 2 == 0:
                yield MixEvent(eid, "account", account, time, {"account": account})
            else:
                yield MixEvent(eid, "grant", account, time, {"account": account, "amount": 50_000})
            made += 1
            continue
        account = account_name(rng.randrange(accounts))
        r = rng.random()
        if r < 0.08:
            fields: dict[str, Any] = {"account": account, "amount": rng.randint(500, 5000),
                                      "expiry": time + rng.randint(DAY, 30 * DAY)}
            if rng.random() < 1 / 3:
                fields["pool"] = rng.choice(("h100", "a100"))
            yield MixEvent(eid, "grant", account, time, fields)
        elif r < 0.30:
            fields = {"account": account, "amount": rng.randint(1, 40)}
            if rng.random() < 0.2:
                fields["pool"] = rng.choice(("h100", "a100"))
            yield MixEvent(eid, "consume", account, time, fields)
        elif 0.55 <= r < 0.77 and pending:
            job, owner = take(pending)
            running.append((job, owner))
            yield MixEvent(eid, "start", owner, time, {"job": job})
        elif 0.77 <= r < 0.97 and running:
            job, owner = take(running)
            fields = {"job": job, "success": True}
            if rng.random() < 0.1:
                fields = {"job": job, "success": False, "refund_fraction": 0.5}
            yield MixEvent(eid, "complete", owner, time, fields)
        elif r >= 0.97 and pending:
            job, owner = take(pending)
            yield MixEvent(eid, "cancel", owner, time, {"job": job})
        else:  # a submit, or the job event drawn had no job to act on
            job = f"job-{jobs}"
            jobs += 1
            pending.append((job, account))
            yield MixEvent(eid, "submit", account, time,
                           {"account": account, "job": job, "cost": rng.randint(1, 100),
                            "priority": rng.randint(0, 9)})
        made += 1


def append_mix(journal: Any, events: Iterable[MixEvent], batch: int) -> None:
    """Append the events to one of our journals, `batch` events per append."""
    from eventstore import NewEvent

    buf: list[Any] = []
    for e in events:
        buf.append(NewEvent(e.id, e.stream, e.type, e.time, e.fields))
        if len(buf) == batch:
            journal.append(buf)
            buf = []
    if buf:
        journal.append(buf)


def with_late_arrivals(events: Iterator[MixEvent], fraction: float, max_delay: int = 20,
                       seed: int = 9) -> Iterator[MixEvent]:
    """The same events, a `fraction` of them arriving 1 to `max_delay` events late (event
    times unchanged): what workers whose reports queue up for a moment produce."""
    rng = random.Random(seed)
    held: list[tuple[int, int, MixEvent]] = []  # (release after, arrival index, event)
    for i, event in enumerate(events):
        if rng.random() < fraction:
            heapq.heappush(held, (i + rng.randint(1, max_delay), i, event))
        else:
            yield event
        while held and held[0][0] <= i:
            yield heapq.heappop(held)[2]
    while held:
        yield heapq.heappop(held)[2]


GRANT, CONSUME, BALANCE = 0, 1, 2


def tracker_calls(n: int, seed: int = 3) -> list[tuple[int, int, int, int]]:
    """n calls (kind, amount, timestamp, expiry) for one account, timestamps non-decreasing.

    30% grants of 1..100 credits expiring 1..2,000 s later, 40% consumes of 1..80 (so
    debt happens), 30% get_balance; time advances 0 to 2 per call.
    """
    return list(iter_tracker_calls(n, seed))


def iter_tracker_calls(n: int, seed: int = 3) -> Iterator[tuple[int, int, int, int]]:
    """`tracker_calls`, one at a time."""
    rng = random.Random(seed)
    t = 0
    for _ in range(n):
        t += rng.choice((0, 1, 1, 2))
        r = rng.random()
        if r < 0.3:
            yield (GRANT, rng.randint(1, 100), t, t + rng.randint(1, 2000))
        elif r < 0.7:
            yield (CONSUME, rng.randint(1, 80), t, 0)
        else:
            yield (BALANCE, 0, t, 0)


SUBMIT, START, COMPLETE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SchedulerWork:
    """Jobs and the order of calls: every job is submitted, started and completed once."""

    accounts: list[str]
    jobs: list[tuple[str, str, int, int]]  # (job, account, cost, priority)
    ops: list[tuple[int, int]]  # (SUBMIT, job index) | (START, 0) | (COMPLETE, success 0/1)


def scheduler_ops(n_jobs: int, accounts: int = 100, seed: int = 4, backlog: int = 1000,
                  running: int = 10) -> SchedulerWork:
    """A backlog of `backlog` pending jobs, then submit / start_next / complete in turn.

    Completion takes the oldest running job once more than `running` run; 1 in 10 fails.
    """
    rng = random.Random(seed)
    names = [account_name(i) for i in range(accounts)]
    jobs = [(f"job-{i}", names[rng.randrange(accounts)], rng.randint(1, 100), rng.randint(0, 9))
            for i in range(n_jobs)]
    ops: list[tuple[int, int]] = []
    n_running = 0

    def complete() -> None:
        nonlocal n_running
        ops.append((COMPLETE, 0 if rng.random() < 0.1 else 1))
        n_running -= 1

    for i in range(n_jobs):
        ops.append((SUBMIT, i))
        if i < min(backlog, n_jobs - 1):
            continue
        ops.append((START, 0))
        n_running += 1
        if n_running > running:
            complete()
    started = sum(1 for op, _ in ops if op == START)
    for _ in range(n_jobs - started):
        ops.append((START, 0))
        n_running += 1
    while n_running:
        complete()
    return SchedulerWork(names, jobs, ops)
