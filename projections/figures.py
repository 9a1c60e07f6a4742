"""The one definition of an account's figures: balance, reserved, available, debt, pools.

- balance: credits (active, and held for jobs) minus debt, all pools; the sum of `pools`.
- reserved: credits held for pending and running jobs (they still count in the balance).
- available: balance - reserved, what a new job or usage report can draw on.
- debt: consumption beyond the credits there were, paid first by later grants.

Every reader (queries, the facades, reports) takes its figures from `Figures.of`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
        book = account.book
        pools = account.pool_balances_at(at) or {GENERAL: 0}
        balance = sum(pools.values())
        return cls(balance, book.held, balance - book.held, book.debt_total, pools)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {"balance": self.balance, "reserved": self.reserved,
                "available": self.available, "debt": self.debt, "pools": dict(self.pools)}
