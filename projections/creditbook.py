"""The credit book of one account: expiring batches, pools, debt and holds. Pure: no I/O.

Batches live in one min-heap per pool and priority, keyed by (expiry, grant order), so
each heap's top is its earliest expiry. Expired batches are evicted lazily when the book
is advanced to an event's time. A consume in pool P draws from P's heaps and the general
heaps together: lowest priority number first, then earliest expiry, pool-specific before
general on an equal expiry, then grant order. Debt is kept per pool. A hold moves
credits out of their batches into a reservation that cannot expire; releasing it puts
each credit back into the batch it came from (or expires it there, if that batch has
expired or its grant was voided meanwhile). Every pool the account was granted, used or
owed in keeps its key in `active` (at 0 once nothing of it is left): the pools an answer
lists are those, whichever way a pool came to 0.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import ClassVar, Final, NamedTuple, TypeVar

from projections.events import DEFAULT_GRANT_PRIORITY, GENERAL
from projections.validation import MAX_TIME

NEVER: Final = MAX_TIME + 1
"""Later than every event time: the expiry floor of a book where nothing expires."""

# The heap functions as constants: compiled, a Final name is read directly, where
# `heapq.heappush` is two lookups by name at every call.
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_heapify: Final = heapq.heapify

Lineage = tuple[tuple[str, int], ...]
"""Which grants (by event id) provided how many credits, in draw order."""


def heap_name(pool: str, priority: int) -> str:
    """The heap of a pool's batches at one priority: the pool's name at the default
    priority (so books without priorities look as they always did), else the name and
    the priority apart by a NUL, which no pool name holds."""
    return pool if priority == DEFAULT_GRANT_PRIORITY else f"{pool}\x00{priority}"


class Batch:
    """What is left of one grant, and what became of the rest."""

    __slots__ = ("amount", "expired", "expiry", "grant_id", "in_heap", "key", "pool", "voided")
    # The same names, for `projections.statecopy`: compiled, the class keeps no __slots__.
    STATE_FIELDS: ClassVar[tuple[str, ...]] = (
        "amount", "expired", "expiry", "grant_id", "in_heap", "key", "pool", "voided")

    def __init__(self, grant_id: str, pool: str, expiry: int | None, amount: int,
                 order: tuple[int, int], priority: int = DEFAULT_GRANT_PRIORITY) -> None:
        self.grant_id = grant_id
        self.pool = pool
        self.expiry = expiry
        self.amount = amount
        self.expired = 0
        self.in_heap = False
        self.voided: int | None = None  # the event time its grant was voided at
        # Lowest priority number first; then earliest expiry (never-expiring last,
        # whatever the others' expiry); pool-specific batches before general ones on an
        # equal expiry; then grant order. With every grant at the default priority this
        # is exactly earliest-expiry-first.
        self.key = (priority, expiry is None, expiry or 0, pool == GENERAL, order)

    def __lt__(self, other: Batch) -> bool:
        return key_before(self.key, other.key)

    def is_expired_at(self, time: int) -> bool:
        return self.expiry is not None and self.expiry <= time


BatchKey = tuple[int, bool, int, bool, tuple[int, int]]
"""A batch's draw order (`Batch.key`): smaller is drawn first."""


def key_before(a: BatchKey, b: BatchKey) -> bool:
    """`a < b`, field by field: compiled, comparing the tuples whole would first make a
    Python tuple of each (the heaps compare batches at every push and pop)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1]:
        return b[1]  # False before True
    if a[2] != b[2]:
        return a[2] < b[2]
    if a[3] != b[3]:
        return b[3]
    if a[4][0] != b[4][0]:
        return a[4][0] < b[4][0]
    return a[4][1] < b[4][1]


def blank_batch() -> Batch:
    """A batch to fill in field by field (`projections.statecopy`): compiled, the class
    runs its constructor even from `__new__`."""
    return Batch("", GENERAL, None, 0, (0, 0))


class Hold:
    """Credits reserved for one reference (a job): portions of batches, in draw order.

    A plain class, not a dataclass: compiled, a dataclass's constructor is the Python
    function `dataclasses` writes, and the fold makes one hold per accepted submit.
    Equality and repr are a dataclass's."""

    __slots__ = ("pool", "portions")
    # The same names, for `projections.statecopy`: compiled, the class keeps no __slots__.
    STATE_FIELDS: ClassVar[tuple[str, ...]] = ("pool", "portions")

    def __init__(self, pool: str, portions: list[tuple[Batch, int]]) -> None:
        self.pool = pool
        self.portions = portions

    @property
    def amount(self) -> int:
        total = 0
        for _, amount in self.portions:
            total += amount
        return total

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hold):
            return NotImplemented
        return self.pool == other.pool and self.portions == other.portions

    def __repr__(self) -> str:
        return f"Hold(pool={self.pool!r}, portions={self.portions!r})"


def blank_hold() -> Hold:
    """A hold to fill in field by field (`projections.statecopy`), as `blank_batch`."""
    return Hold(GENERAL, [])


@dataclass(slots=True)
class Totals:
    """Running totals for the conservation invariants."""

    granted: int = 0
    consumed: int = 0
    charged_from_credits: int = 0  # consumed or charged and paid by credits
    debt_created: int = 0
    debt_paid: int = 0  # credits of grants (or released holds) that paid debt
    expired: int = 0  # lapsed unused: by expiry or by a void
    charged_jobs: int = 0
    voided: int = 0  # the part of `expired` that lapsed by a void


@dataclass(slots=True)
class Expiry:
    """Credits of one grant that expired unused (or stopped counting: a void)."""

    grant_id: str
    pool: str
    expiry: int  # the time they stopped counting: the grant's expiry or its void
    amount: int
    voided: bool = False


class Settlement(NamedTuple):
    """What settling a hold did: the charge's lineage, and what became of the rest."""

    charged: Lineage  # grants that paid the charge
    expired: list[Expiry]  # released credits whose batch had ended: they lapsed
    # Released credits pay debt before they become active again (like a grant arriving):
    paid_debt: tuple[tuple[str, int], ...]  # (pool, credits) of the debt they paid
    debt_paid_by: Lineage  # (grant, credits): whose released credits paid it


@dataclass(slots=True)
class CreditBook:
    """One account's credits. Every method takes the event time it happens at."""

    heaps: dict[str, list[Batch]] = field(default_factory=dict)
    # Per pool, the credits of its live batches; a key for every pool the account was
    # granted, used or owed in (`name_pool`), so a pool stays listed at 0.
    active: dict[str, int] = field(default_factory=dict)
    debt: dict[str, int] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    held: int = 0
    totals: Totals = field(default_factory=Totals)
    prioritised: bool = False  # whether any batch has a priority other than the default
    # No batch in the heaps expires before this time (a lower bound: a batch taken out
    # leaves it as it was). Every event advances its account, and most find nothing
    # expired: one comparison tells them so.
    expiry_floor: int = NEVER

    # -- reading ---------------------------------------------------------------------

    @property
    def active_total(self) -> int:
        # Loops, not sum(): compiled, a loop over a dict's values adds native integers,
        # where sum() is a call through the interpreter (the fold asks at every submit).
        total = 0
        for amount in self.active.values():
            total += amount
        return total

    @property
    def debt_total(self) -> int:
        total = 0
        for amount in self.debt.values():
            total += amount
        return total

    def usable(self, pool: str) -> int:
        """Active credits a draw in `pool` may take (the pool's own and general ones)."""
        if pool == GENERAL:
            return self.active.get(GENERAL, 0)
        return self.active.get(pool, 0) + self.active.get(GENERAL, 0)

    def expiring_by(self, time: int) -> dict[str, int]:
        """Per pool, live credits whose batch has expired by `time` (not yet evicted)."""
        out: dict[str, int] = {}
        for heap in self.heaps.values():
            if not heap:
                continue
            pool = heap[0].pool
            total = 0
            # Walk only the heap's prefix of expired batches: children of a batch that is
            # still valid at `time` are valid too.
            stack = [0] if heap else []
            while stack:
                i = stack.pop()
                batch = heap[i]
                if batch.is_expired_at(time):
                    total += batch.amount
                    stack.extend(j for j in (2 * i + 1, 2 * i + 2) if j < len(heap))
            if total:
                out[pool] = out.get(pool, 0) + total
        return out

    def held_by_pool(self) -> dict[str, int]:
        """Per pool of the batches they came from, credits held for jobs."""
        if self.held and len(self.active) == 1:
            # Every batch's pool is a key of `active`: with one pool, all that is held is
            # of it. Summing the holds made each read of an account with many pending
            # jobs cost as many steps as it had jobs, and a read after each submit quadratic.
            for pool in self.active:
                return {pool: self.held}
        out: dict[str, int] = {}
        for hold in self.holds.values():
            for batch, amount in hold.portions:
                out[batch.pool] = out.get(batch.pool, 0) + amount
        return out

    def pool_balances_at(self, time: int) -> dict[str, int]:
        """Per pool, credits (active and held) minus debt at `time` (>= the last event's).

        Held credits count: they are the account's until a job's settlement charges them.
        """
        gone = self.expiring_by(time)
        held = self.held_by_pool() if self.holds else {}
        pools = sorted(set(self.active) | set(self.debt) | set(held))
        return {
            pool: self.active.get(pool, 0) - gone.get(pool, 0) + held.get(pool, 0)
            - self.debt.get(pool, 0)
            for pool in pools
        }

    # -- time --------------------------------------------------------------------------

    def advance(self, time: int) -> list[Expiry]:
        """Evict every batch expired at `time`; return what expired."""
        if time < self.expiry_floor:
            return []
        expired: list[Expiry] = []
        floor = NEVER
        for heap in self.heaps.values():
            while heap and heap[0].is_expired_at(time):
                batch = _heappop(heap)
                batch.in_heap = False
                if batch.amount:
                    expired.append(self._expire(batch, batch.amount))
            # A heap's top has its earliest expiry (never-expiring batches sort last).
            if heap and heap[0].expiry is not None and heap[0].expiry < floor:
                floor = heap[0].expiry
        self.expiry_floor = floor
        if len(self.heaps) > 1 and len(expired) > 1:
            expired.sort(key=lambda e: (e.expiry, e.pool, e.grant_id))
        return expired

    def _expire(self, batch: Batch, amount: int) -> Expiry:
        batch.amount -= amount
        batch.expired += amount
        self.active[batch.pool] -= amount
        self.totals.expired += amount
        if batch.voided is not None and (batch.expiry is None or batch.voided < batch.expiry):
            self.totals.voided += amount
            return Expiry(batch.grant_id, batch.pool, batch.voided, amount, voided=True)
        assert batch.expiry is not None
        return Expiry(batch.grant_id, batch.pool, batch.expiry, amount)

    def void(self, grant_id: str, time: int, spare: Batch | None = None) -> list[Expiry]:
        """The unused credits of `grant_id` stop counting at `time`; return what lapsed now.

        The caller asked first whether the book holds credits of the grant. Credits
        of it held for a pending or running job stay with the job: a charge still takes
        them, and whatever the job releases lapses on release. `spare` is a batch no void
        reaches whatever its id: the refill bucket's, whose id (`refill:ACCOUNT`) a
        grant event may carry too, as event ids are the caller's.
        """
        lapsed: list[Expiry] = []
        for hold in self.holds.values():
            for batch, _ in hold.portions:
                if batch.grant_id == grant_id and batch.voided is None and batch is not spare:
                    batch.voided = time
        for heap in self.heaps.values():
            for i, batch in enumerate(heap):
                if batch.grant_id != grant_id or batch is spare:
                    continue
                if batch.voided is None:
                    batch.voided = time
                del heap[i]
                _heapify(heap)
                batch.in_heap = False
                if batch.amount:
                    lapsed.append(self._expire(batch, batch.amount))
                break
        return lapsed

    # -- changes -----------------------------------------------------------------------

    def name_pool(self, pool: str) -> None:
        """List `pool` among the account's pools from now on (at 0 while nothing is in it
        and nothing owed): every grant, usage and hold names its pool, so a pool used up,
        paid off by any grant, or used only from general credits stays listed alike."""
        if pool not in self.active:
            self.active[pool] = 0

    def grant(self, grant_id: str, amount: int, expiry: int | None, pool: str,
              order: tuple[int, int], priority: int = DEFAULT_GRANT_PRIORITY
              ) -> tuple[tuple[tuple[str, int], ...], Batch | None]:
        """Add a grant: pay debt first, keep the rest as a batch; return (debts paid, batch)."""
        self.totals.granted += amount
        paid = self._pay_debt(pool, amount)
        rest = amount - _amounts(paid)
        if rest == 0:
            # Swallowed whole by debt: it never enters the expiry queue.
            self.name_pool(pool)
            return paid, None
        batch = Batch(grant_id, pool, expiry, rest, order, priority)
        self._push(batch)
        self.active[pool] = self.active.get(pool, 0) + rest
        return paid, batch

    def top_up(self, batch: Batch, amount: int) -> tuple[tuple[str, int], ...]:
        """Add `amount` to an existing batch (a refill): it pays debt first, like a grant."""
        self.totals.granted += amount
        paid = self._pay_debt(batch.pool, amount)
        rest = amount - _amounts(paid)
        if rest:
            batch.amount += rest
            self.active[batch.pool] = self.active.get(batch.pool, 0) + rest
            if not batch.in_heap:
                self._push(batch)
        return paid

    def debt_payments(self, pool: str, amount: int) -> dict[str, int]:
        """What `amount` new credits in `pool` would pay of each pool's debt, in the order
        a grant pays it (nothing changes)."""
        paid: dict[str, int] = {}
        for debtor in self._debt_order(pool):
            owed = self.debt.get(debtor, 0)
            if owed and amount:
                pay = min(owed, amount)
                paid[debtor] = pay
                amount -= pay
        return paid

    def _debt_order(self, pool: str) -> list[str]:
        # A pool's credits pay that pool's debt; general credits pay general debt first,
        # then every pool's debt in pool-name order.
        if pool != GENERAL:
            return [pool]
        return [GENERAL, *sorted(p for p in self.debt if p != GENERAL)]

    def _pay_debt(self, pool: str, amount: int) -> tuple[tuple[str, int], ...]:
        if not self.debt:
            return ()
        paid = self.debt_payments(pool, amount)
        for debtor, pay in paid.items():
            left = self.debt[debtor] - pay
            if left:
                self.debt[debtor] = left
            else:
                del self.debt[debtor]
            self.totals.debt_paid += pay
        return tuple(paid.items())

    def _push(self, batch: Batch) -> None:
        batch.in_heap = True
        if batch.expiry is not None and batch.expiry < self.expiry_floor:
            self.expiry_floor = batch.expiry
        priority = batch.key[0]
        if priority != DEFAULT_GRANT_PRIORITY:
            self.prioritised = True
        _heappush(self.heaps.setdefault(heap_name(batch.pool, priority), []), batch)

    def _draw(self, pool: str, amount: int) -> list[tuple[Batch, int]]:
        """Take up to `amount` from the batches usable in `pool`: lowest priority number,
        then earliest expiry first."""
        if self.prioritised:
            return self._draw_by_priority(pool, amount)
        own = self.heaps.get(pool)
        general = self.heaps.get(GENERAL) if pool != GENERAL else None
        taken: list[tuple[Batch, int]] = []
        while amount > 0:
            if own and (not general or key_before(own[0].key, general[0].key)):
                heap = own
            elif general:
                heap = general
            else:
                break
            take = self._take_head(heap, amount)
            amount -= take[1]
            taken.append(take)
        return taken

    def _take_head(self, heap: list[Batch], amount: int) -> tuple[Batch, int]:
        """Take up to `amount` from the batch on top of `heap`; pop it once it is empty."""
        batch = heap[0]
        take = min(batch.amount, amount)
        batch.amount -= take
        self.active[batch.pool] -= take
        if batch.amount == 0:
            _heappop(heap)
            batch.in_heap = False
        return batch, take

    def _draw_by_priority(self, pool: str, amount: int) -> list[tuple[Batch, int]]:
        """`_draw` when some batch has a priority: one heap per pool and priority, the
        lowest key among the heads of those usable in `pool` first."""
        candidates = [h for h in self.heaps.values() if h and h[0].pool in (pool, GENERAL)]
        taken: list[tuple[Batch, int]] = []
        while amount > 0:
            heap = None
            for candidate in candidates:
                if candidate and (heap is None or key_before(candidate[0].key, heap[0].key)):
                    heap = candidate
            if heap is None:
                break
            take = self._take_head(heap, amount)
            amount -= take[1]
            taken.append(take)
        return taken

    def consume(self, amount: int, pool: str) -> tuple[Lineage, int]:
        """Spend `amount` in `pool`; return (grants that paid, debt created)."""
        self.name_pool(pool)
        taken = self._draw(pool, amount)
        covered = _amounts(taken)
        short = amount - covered
        self.totals.consumed += amount
        self.totals.charged_from_credits += covered
        if short:
            self.debt[pool] = self.debt.get(pool, 0) + short
            self.totals.debt_created += short
        return _lineage(taken), short

    def hold(self, ref: str, amount: int, pool: str) -> Lineage:
        """Reserve `amount` usable in `pool` for `ref`; the caller checked it is there."""
        if ref in self.holds:
            raise ValueError(f"hold {ref!r} already exists")
        taken = self._draw(pool, amount)
        got = _amounts(taken)
        if got != amount:
            self._return(taken, time=None)
            raise ValueError(f"hold {ref!r}: {amount} asked, only {got} usable in pool {pool!r}")
        self.name_pool(pool)
        self.holds[ref] = Hold(pool, taken)
        self.held += amount
        return _lineage(taken)

    def settle(self, ref: str, charge: int, time: int) -> Settlement:
        """Spend `charge` of the hold (earliest expiry first), release the rest.

        The released credits go back to their batches, paying debt first; the settlement
        says what they paid and whose they were, so a statement and a grant's lineage
        can trace every credit without working it out again.
        """
        hold = self.holds[ref]
        total = hold.amount
        if not 0 <= charge <= total:
            raise ValueError(f"hold {ref!r}: charge {charge} outside [0, {total}]")
        del self.holds[ref]
        self.held -= total
        charged: list[tuple[Batch, int]] = []
        released: list[tuple[Batch, int]] = []
        left = charge
        for batch, amount in hold.portions:
            take = min(left, amount)
            left -= take
            if take:
                charged.append((batch, take))
            if amount - take:
                released.append((batch, amount - take))
        self.totals.charged_from_credits += charge
        self.totals.charged_jobs += charge
        expired, payments = self._return(released, time)
        if not payments:  # no debt, the usual case: nothing to merge
            return Settlement(_lineage(charged), expired, (), ())
        by_pool, by_grant = _debt_paid(payments)
        return Settlement(_lineage(charged), expired, by_pool, by_grant)

    def _return(self, portions: list[tuple[Batch, int]], time: int | None
                ) -> tuple[list[Expiry], list[tuple[str, str, int]]]:
        """Put released credits back into their batches; expired batches expire them.

        Returns (what expired, the debt paid: (grant, pool, credits) per payment)."""
        expired: list[Expiry] = []
        payments: list[tuple[str, str, int]] = []
        for batch, amount in portions:
            batch.amount += amount
            self.active[batch.pool] = self.active.get(batch.pool, 0) + amount
            if time is not None and (batch.voided is not None or batch.is_expired_at(time)):
                expired.append(self._expire(batch, amount))
                continue
            # Released credits are like a grant arriving now: they pay debt first.
            paid = self._pay_debt(batch.pool, amount)
            paid_total = _amounts(paid)
            if paid_total:
                batch.amount -= paid_total
                self.active[batch.pool] -= paid_total
                for debtor, pay in paid:
                    payments.append((batch.grant_id, debtor, pay))
            if batch.amount and not batch.in_heap:
                self._push(batch)
        return expired, payments


def with_general(pools: dict[str, int]) -> dict[str, int]:
    """`pools` with "general" among them (at 0 if it was not there), in name order: the
    pools once a refill, a general grant, has come (the same dict if it was there)."""
    if GENERAL in pools:
        return pools
    return dict(sorted({**pools, GENERAL: 0}.items()))


_Key = TypeVar("_Key")


def _amounts(pairs: list[tuple[_Key, int]] | tuple[tuple[_Key, int], ...]) -> int:
    """The sum of the amounts of (key, amount) pairs (a loop: see `active_total`)."""
    total = 0
    for _, amount in pairs:
        total += amount
    return total


def _debt_paid(payments: list[tuple[str, str, int]]
               ) -> tuple[tuple[tuple[str, int], ...], Lineage]:
    """Debt payments (grant, pool, credits) summed by pool and by grant, each in the
    order it first paid: (debt paid per pool, whose credits paid it)."""
    by_pool: dict[str, int] = {}
    by_grant: dict[str, int] = {}
    for grant_id, pool, credits in payments:
        by_pool[pool] = by_pool.get(pool, 0) + credits
        by_grant[grant_id] = by_grant.get(grant_id, 0) + credits
    return tuple(by_pool.items()), tuple(by_grant.items())


def _lineage(taken: list[tuple[Batch, int]]) -> Lineage:
    if len(taken) == 1:  # most draws take from one batch: no dict to merge in
        batch, amount = taken[0]
        return ((batch.grant_id, amount),)
    merged: dict[str, int] = {}
    for batch, amount in taken:
        merged[batch.grant_id] = merged.get(batch.grant_id, 0) + amount
    return tuple(merged.items())
