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

from collections.abc import Mapping
from dataclasses import dataclass

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
