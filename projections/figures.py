"""The one definition of an account's figures: balance, reserved, available, debt, pools.

- balance: credits (active, and held for jobs) minus debt, all pools; the sum of `pools`.
- reserved: credits held for pending and running jobs (they still count in the balance).
- available: balance - reserved, what a new job or usage report can draw on.
- debt: consumption beyond the credits there were, paid first by later grants.

Every reader (queries, the facades, reports) takes its figures from `Figures.of`. The
fold's running figures (`AccountState.balance`, `.reserved`, `.available`, what a submit
is decided on) are the same figures at the account's last event, without the pools
(`tests/projections/test_figures.py` checks that they agree after every event).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from projections.creditbook import CreditBook
from projections.events import GENERAL
from projections.ledger import AccountState


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
        pools = account.pool_balances_at(at) or {GENERAL: 0}
        balance = sum(pools.values())
        reserved = account.reserved
        return cls(balance, reserved, balance - reserved, account.debt_total_at(at), pools)

    @classmethod
    def by_pool(cls, account: AccountState | None, at: int) -> dict[str, Figures]:
        """The figures of each pool of `account` at `at`, by pool name, sorted: a pool's
        credits minus its debt, what its jobs hold (by the pool of the credits held), its
        debt. Pool by pool they add up to `of`'s figures."""
        if account is None:
            return {GENERAL: cls(0, 0, 0, 0, {GENERAL: 0})}
        held = account.book.held_by_pool()
        debt = account.debt_at(at)
        pools = account.pool_balances_at(at) or {GENERAL: 0}
        return {pool: cls(balance, held.get(pool, 0), balance - held.get(pool, 0),
                          debt.get(pool, 0), {pool: balance})
                for pool, balance in sorted(pools.items())}


Ending = tuple[str, str, int, int, int, bool]
"""(pool, grant, end, unused, held, voided): credits of one grant that stop counting at
`end` (its expiry, or its void if that comes first), unused ones and ones held by jobs."""


def ending_credits(account: AccountState,
                   voids_ahead: Mapping[str, int] | None = None) -> list[Ending]:
    """Every batch of the account with an end (an expiry or a void) that still has credits,
    unused or held by a job, in no particular order. `voids_ahead`: grant id -> the time
    of a void later on the timeline than the account's state (not folded in yet)."""
    book = account.book
    held: dict[int, int] = {}
    batches = {id(b): b for heap in book.heaps.values() for b in heap}
    for hold in book.holds.values():
        for batch, amount in hold.portions:
            held[id(batch)] = held.get(id(batch), 0) + amount
            batches.setdefault(id(batch), batch)
    found: list[Ending] = []
    for key, batch in batches.items():
        ahead = voids_ahead.get(batch.grant_id) if voids_ahead else None
        ends = [t for t in (batch.expiry, batch.voided, ahead) if t is not None]
        if not ends:
            continue
        end = min(ends)
        unused = batch.amount if batch.in_heap else 0
        if unused or held.get(key):
            found.append((batch.pool, batch.grant_id, end, unused, held.get(key, 0),
                          batch.expiry != end))
    return found


class _Expired:
    """Every batch of one account's book that has an expiry (none evicted since its last
    event), per pool, sorted by expiry with running sums: what has expired by any time
    after that event takes a bisection, not a walk of every batch expired by then."""

    __slots__ = ("pools",)

    def __init__(self, book: CreditBook) -> None:
        # Lists of ints, not a tuple per batch: tuples are tracked by the garbage
        # collector, whose passes over a large state made the build several times slower.
        expiries: dict[str, list[int]] = {}
        amounts: dict[str, list[int]] = {}
        for heap in book.heaps.values():
            for batch in heap:
                if batch.expiry is not None:
                    expiries.setdefault(batch.pool, []).append(batch.expiry)
                    amounts.setdefault(batch.pool, []).append(batch.amount)
        self.pools: dict[str, tuple[list[int], list[int]]] = {}
        for pool, times in expiries.items():
            order = sorted(range(len(times)), key=times.__getitem__)
            got = amounts[pool]
            sums = list(itertools.accumulate((got[k] for k in order), initial=0))
            self.pools[pool] = ([times[k] for k in order], sums)

    def by(self, time: int) -> dict[str, int]:
        """`CreditBook.expiring_by(time)`."""
        out: dict[str, int] = {}
        for pool, (expiries, sums) in self.pools.items():
            total = sums[bisect.bisect_right(expiries, time)]
            if total:
                out[pool] = total
        return out


class HeadFigures:
    """`Figures.of` for the accounts of a state that reads do not change, keeping per
    account what has expired since its last event while the state stays the same.

    `version` names the state: it must change whenever any account of it changes. The
    first reads of a version take the book's own walk (compiled, it is quicker than one
    build); the third builds `_Expired`, which every later read of the version bisects.
    """

    WALKS = 2
    """Reads of one version answered by the book's walk before what expired is kept."""

    def __init__(self) -> None:
        # Per account: (the state's key, reads of it so far, what expired, if built).
        self._kept: dict[str, tuple[object, int, _Expired | None]] = {}

    def of(self, account: AccountState | None, at: int, version: object) -> Figures:
        """`Figures.of(account, at)`, for `at` no earlier than the account's last event."""
        if account is None or account.refill_rate is not None:
            return Figures.of(account, at)
        book = account.book
        if at < book.expiry_floor:  # nothing expired since: the book's walk looks once
            return Figures.of(account, at)
        key = (version, id(account), id(book), book.expiry_floor, book.held, len(book.holds),
               len(book.heaps), sum(len(heap) for heap in book.heaps.values()),
               tuple(book.active.items()), tuple(book.debt.items()))
        kept = self._kept.get(account.name)
        reads = kept[1] + 1 if kept is not None and kept[0] == key else 1
        expired = kept[2] if kept is not None and kept[0] == key else None
        if reads <= self.WALKS:
            self._kept[account.name] = (key, reads, None)
            return Figures.of(account, at)
        if expired is None:
            expired = _Expired(book)
        self._kept[account.name] = (key, reads, expired)
        gone = expired.by(at)
        held = book.held_by_pool() if book.holds else {}
        names = sorted(set(book.active) | set(book.debt) | set(held))
        pools = {pool: book.active.get(pool, 0) - gone.get(pool, 0) + held.get(pool, 0)
                 - book.debt.get(pool, 0) for pool in names} or {GENERAL: 0}
        balance = sum(pools.values())
        reserved = account.reserved
        return Figures(balance, reserved, balance - reserved, book.debt_total, pools)
