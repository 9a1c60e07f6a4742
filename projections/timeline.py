"""An account's figures over time and the credits about to expire: what a chart draws.

- `account_timeline`: after every event of one account, and at every expiry of one of
  its grants between events, its balance per pool, what is held for jobs and its debt.
- `grant_burndown`: for each grant, what was left of it after each use and at its expiry.
- `expiring_entries`: active credits whose grant expires in a window, per account and pool.

Pure functions of events and states (no I/O): the web view and the reports call them on
whatever part of the journal they read (as known at a position, up to an event time).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar

from eventstore import RecordedEvent
from projections.creditbook import Batch, CreditBook, Hold, with_general
from projections.events import GENERAL
from projections.ledger import AccountState, Ledger
from projections.projector import apply_recorded
from projections.reversals import reversed_ids


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """One account's figures at one event time."""

    time: int
    position: int | None  # None: an expiry between the account's events
    pools: dict[str, int]  # pool -> credits (active and held) minus debt
    held: int  # reserved for pending and running jobs
    debt: int

    @property
    def balance(self) -> int:
        """Credits minus debt, all pools."""
        return sum(self.pools.values())

    @property
    def available(self) -> int:
        """Balance minus what is held."""
        return self.balance - self.held

    # Its JSON (`projections.queries.answers.to_dict`): integers throughout.
    json_keys: ClassVar[tuple[str, ...]] = ("time", "position", "pools", "balance",
                                            "available", "held", "debt")


def point_of(state: AccountState, time: int, position: int | None) -> TimelinePoint:
    """The account's figures at `time` (no earlier than its last event): what a point of
    its timeline says, straight from `AccountState.pool_balances_at`."""
    pools = state.pool_balances_at(time) or {GENERAL: 0}
    return TimelinePoint(time, position, pools, state.book.held, state.debt_total_at(time))


def _target(ledger: Ledger, rec: RecordedEvent) -> str | None:
    """The account an event touches, as the ledger stands before applying it."""
    account = rec.payload.get("account")
    if isinstance(account, str):
        return account
    job = ledger.jobs.get(str(rec.payload.get("job")))
    return None if job is None else job.account


class HeldByPool:
    """`CreditBook.held_by_pool()` of one account's book, followed hold by hold.

    Summing every hold's portions at each point made a timeline quadratic in the account's
    pending and running jobs. A hold never changes once made (a job's submit makes it
    under the job's id, its settlement or cancel drops it), so what the holds add per pool
    changes only by the hold an event of that job added or dropped: `follow` applies that
    one change, and is to be told of every event of the account's jobs. `of` answers the
    sums; it sums every hold anew when the count of holds or what they hold in all is not
    what the changes followed add up to (as for a book that already held jobs when the
    following began).
    """

    def __init__(self) -> None:
        # The holds followed, by job id (kept alive, so that "the same object" means the
        # same hold), and per pool what their portions add and how many there are (a pool
        # is listed while any portion of it is held, as `held_by_pool` lists it).
        self._holds: dict[str, Hold] = {}
        self._total = 0
        self._held: dict[str, int] = {}
        self._portions: dict[str, int] = {}

    def follow(self, book: CreditBook, ref: str) -> None:
        """Take in the change an event made to the hold of `ref` (a job id), if any."""
        mine, theirs = self._holds.get(ref), book.holds.get(ref)
        if mine is theirs:
            return
        if mine is not None:
            del self._holds[ref]
            self._count(mine, -1)
        if theirs is not None:
            self._holds[ref] = theirs
            self._count(theirs, 1)

    def _count(self, hold: Hold, sign: int) -> None:
        held, portions = self._held, self._portions
        for batch, amount in hold.portions:
            pool = batch.pool
            left = portions.get(pool, 0) + sign
            if left:
                portions[pool] = left
                held[pool] = held.get(pool, 0) + sign * amount
            else:
                del portions[pool], held[pool]
            self._total += sign * amount

    def of(self, book: CreditBook) -> dict[str, int]:
        """Per pool of the batches they came from, credits held for jobs: what
        `book.held_by_pool()` answers (in another key order). Not to be changed."""
        holds = book.holds
        if len(holds) != len(self._holds) or book.held != self._total:
            self._holds, self._total, self._held, self._portions = {}, 0, {}, {}
            for ref in holds:
                self.follow(book, ref)
        return self._held


class TimelineBuilder:
    """Gathers the points of one account's timeline as a fold goes: `before(time, state)`
    ahead of each event (expiries passed since the last one), `after(rec, state)` once an
    event of the account is applied, and `finish(until, state)`."""

    def __init__(self) -> None:
        self.points: list[TimelinePoint] = []
        self._expiries: list[int] = []  # expiry times of the account's grants not yet passed
        self._holds = HeldByPool()

    def _point(self, state: AccountState, time: int, position: int | None) -> TimelinePoint:
        """`point_of(state, time, position)`, without summing every hold's portions
        and searching the batches for expired credits at every event.

        A point is taken after every event and the account's figures are summed anew
        each time: what its holds add per pool is followed hold by hold as jobs are
        submitted and settled (`HeldByPool`), and its batches are searched for expired
        credits only when one may have expired (none expires before the book's expiry
        floor).
        """
        book = state.book
        held = self._holds.of(book)
        debt = book.debt
        # The pools are those with credits, debt or holds, in name order; what expired
        # counts only in those.
        pools = dict(sorted(book.active.items()))
        if (held or debt) and not pools.keys() >= held.keys() | debt.keys():
            pools = {pool: pools.get(pool, 0) for pool in sorted({*pools, *held, *debt})}
        if time >= book.expiry_floor:
            for pool, amount in book.expiring_by(time).items():
                if pool in pools:
                    pools[pool] -= amount
        for pool, amount in held.items():
            pools[pool] += amount
        for pool, amount in debt.items():
            pools[pool] -= amount
        owed = sum(debt.values())
        if state.refill_rate is not None:
            paid, credited = state.refill_settlement(time)
            for pool, amount in paid.items():
                pools[pool] += amount
                owed -= amount
            if paid or credited:
                pools = with_general(pools)
                pools[GENERAL] += credited
        return TimelinePoint(time, position, pools or {GENERAL: 0}, book.held, owed)

    def before(self, time: int, state: AccountState | None, *,
               inclusive: bool = False) -> None:
        """A point at each expiry of the account's grants before `time` (or at it)."""
        expiries = self._expiries
        while expiries and (expiries[0] < time or (inclusive and expiries[0] == time)):
            when = heapq.heappop(expiries)
            while expiries and expiries[0] == when:
                heapq.heappop(expiries)
            if state is not None:
                self.points.append(self._point(state, when, None))

    def after(self, rec: RecordedEvent, state: AccountState | None) -> None:
        """The point after an event of the account (`state`: the account once applied)."""
        if state is None:
            return
        job = rec.payload.get("job")
        if isinstance(job, str):
            self._holds.follow(state.book, job)
        self.points.append(self._point(state, rec.time, rec.position))
        expiry = rec.payload.get("expiry")
        if rec.type == "grant" and isinstance(expiry, int) and expiry > rec.time:
            heapq.heappush(self._expiries, expiry)

    def finish(self, until: int | None, state: AccountState | None) -> list[TimelinePoint]:
        """The points, with expiries after the last event up to `until`."""
        if until is not None:
            self.before(until, state, inclusive=True)
        return self.points


def account_timeline(events: Iterable[RecordedEvent], account: str, *,
                     until: int | None = None,
                     excluded: frozenset[str] | None = None) -> list[TimelinePoint]:
    """The figures of `account` after each of its events and at each expiry of its grants,
    from `events` in canonical order; expiries after the last event up to `until`.

    A reversed event takes no part, as if it had never happened: `excluded` names the
    reversed events; by default they are found from the reversals among `events` (a
    reversal is in the stream of the event it names, so an account's own events carry
    every reversal of them). Two points at the same time are both kept (the chart draws a
    step).
    """
    if excluded is None:
        events = list(events)
        excluded = reversed_ids({rec.id: target for rec in events if rec.type == "reverse"
                                 and isinstance(target := rec.payload.get("event"), str)})
    ledger = Ledger(excluded=excluded)
    builder = TimelineBuilder()
    for rec in events:
        builder.before(rec.time, ledger.accounts.get(account))
        target = _target(ledger, rec)
        apply_recorded(ledger, rec)
        if target == account and rec.id not in excluded:
            builder.after(rec, ledger.accounts.get(account))
    return builder.finish(until, ledger.accounts.get(account))


@dataclass(frozen=True, slots=True)
class BurnStep:
    """What was left of one grant from `time` on."""

    time: int
    remaining: int


def grant_burndown(granted: int, time: int, uses: Iterable[tuple[int, int]],
                   expiry: int | None, *, until: int | None = None) -> list[BurnStep]:
    """A grant's unused credits over time: `granted` at `time`, less each (time, amount)
    use, and nothing from `expiry` on (if it comes by `until`)."""
    left = granted
    steps = [BurnStep(time, left)]
    for when, amount in sorted(uses):
        if expiry is not None and when >= expiry:
            break
        left -= amount
        steps.append(BurnStep(when, left))
    if expiry is not None and (until is None or expiry <= until):
        steps.append(BurnStep(expiry, 0))
    return steps


ExpiringEntry = tuple[int, str, str, str, int, int]
"""(end, account, pool, grant, unused, held): credits of one grant that stop counting
soon (at its expiry, or its void if that comes first), those still unused and those held
by pending or running jobs (which lapse if the job releases them after the end), as
`gpu-credits expiring` lists them. Plain tuples, cheaper to make and hold by the
thousand than objects (a page shows a few of them, unpacking each)."""


def expiring_entries(ledger: Ledger, at: int, until: int) -> list[ExpiringEntry]:
    """Credits still counting at `at` that stop counting by `until` (`at < end <= until`),
    unused or held by a job, by end, account, pool and grant."""
    found = unordered_expiring_entries(ledger, at, until)
    found.sort(key=ENTRY_ORDER)
    return found


ENTRY_ORDER = itemgetter(0, 1, 2, 3)
"""The order of `expiring_entries`: by end, account, pool and grant."""


def unordered_expiring_entries(ledger: Ledger, at: int, until: int) -> list[ExpiringEntry]:
    """`expiring_entries` in no particular order: sorting them all is most of their cost,
    and a page that shows the soonest few picks those (`heapq.nsmallest` with
    `ENTRY_ORDER` as the key gives the first of the sorted list)."""
    found: list[ExpiringEntry] = []
    for name in sorted(ledger.accounts):
        book = ledger.accounts[name].book
        held = _held_ending(book.holds.values(), at, until)
        for expiry, batch in _heap_tops_expiring(book.heaps.values(), until):
            if at < expiry and batch.amount > 0:
                _, _, holding = held.pop(id(batch), (expiry, batch, 0))
                found.append((expiry, name, batch.pool, batch.grant_id, batch.amount,
                              holding))
        # Batches whose credits left are all held: no heap holds them any more.
        for end, batch, holding in held.values():
            found.append((end, name, batch.pool, batch.grant_id, 0, holding))
    return found


def _heap_tops_expiring(heaps: Iterable[list[Batch]],
                        until: int) -> Iterator[tuple[int, Batch]]:
    """(expiry, batch) of the batches of these heaps that expire by `until`. A heap holds
    one priority's batches ordered by expiry (never-expiring last): below a batch expiring
    after `until` nothing expires sooner, so only the heap's top, up to `until`, is
    walked, not every batch of every account. (A heap's batches are never voided: a void
    takes its grant's batches out of the heap.)"""
    for heap in heaps:
        stack = [0] if heap else []
        while stack:
            i = stack.pop()
            batch = heap[i]
            expiry = batch.expiry
            if expiry is None or expiry > until:
                continue
            yield expiry, batch
            left = 2 * i + 1
            if left < len(heap):
                stack.append(left)
                if left + 1 < len(heap):
                    stack.append(left + 1)


def _held_ending(holds: Iterable[Hold], at: int,
                 until: int) -> dict[int, tuple[int, Batch, int]]:
    """id(batch) -> (end, batch, credits of it held by jobs), for the batches whose credits
    stop counting in `(at, until]` (at their expiry, or the void of their grant if that
    comes first: held credits stay with the job after a void, and lapse on release). Only
    the holds of pending and running jobs are walked, not every batch."""
    held: dict[int, tuple[int, Batch, int]] = {}
    for hold in holds:
        for batch, amount in hold.portions:
            ends = [t for t in (batch.expiry, batch.voided) if t is not None]
            if not amount or not ends or not at < min(ends) <= until:
                continue
            _, _, before = held.get(id(batch), (0, batch, 0))
            held[id(batch)] = (min(ends), batch, before + amount)
    return held
