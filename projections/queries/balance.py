"""`balance` and the per-account figures of a ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eventstore import JournalLike
from projections.events import GENERAL
from projections.figures import Figures
from projections.ledger import Ledger
from projections.partial import account_ledger_at
from projections.queries.common import (
    exists_later,
    fold_as_known,
    latest_time,
    recorded_position,
    unknown_account,
)
from projections.validation import require_time


@dataclass(frozen=True, slots=True)
class BalanceReport:
    """The answer of `balance`: one account at event time `at`, as known at a position."""

    account: str
    at: int
    as_known_at: int  # the journal position the answer is based on
    figures: Figures
    pool: str | None = None  # the pool asked about, if any
    known_pools: tuple[str, ...] = (GENERAL,)  # the pools it lists, and "general"

    @property
    def pool_is_known(self) -> bool:
        """False when the pool asked about never appears in the account (a typo?)."""
        return self.pool is None or self.pool in self.known_pools

    @property
    def pool_balance(self) -> int | None:
        """The balance of the pool asked about; None when none was asked about."""
        return None if self.pool is None else self.figures.pools.get(self.pool, 0)

    # The `balance --json` object: integers throughout, the pool only when asked about.
    json_keys: ClassVar[tuple[str, ...]] = ("account", "*figures", "at:time", "as_known_at",
                                            "pool?", "pool_balance?")


def balance(journal: JournalLike, account: str, *, at: int | None = None,
            as_known_at: int | str | None = None, pool: str | None = None) -> BalanceReport:
    """`account`'s figures at event time `at` (default: the journal's latest event time),
    from only the events recorded at positions <= `as_known_at` (default: all)."""
    when = latest_time(journal) if at is None else require_time("at", at)
    position = recorded_position(journal, as_known_at)
    # One account: its section of a checkpoint and its own events after it, when they
    # tell it all; else the whole ledger.
    ledger = account_ledger_at(journal, account, to_position=position, to_time=when)
    if ledger is None or (account not in ledger.accounts
                          and not exists_later(journal, account)):
        ledger = fold_as_known(journal, to_time=when, to_position=position)
    state = ledger.accounts.get(account)
    if state is None and not exists_later(journal, account):
        raise unknown_account(account, ledger)
    wanted = None if pool is None else (pool or GENERAL)
    figures = Figures.of(state, when)
    # The pools it lists, whatever is left in them, and "general", which any account may
    # be asked about.
    known = tuple(sorted({GENERAL, *figures.pools}))
    return BalanceReport(account, when, position, figures, wanted, known)


def account_figures(ledger: Ledger, at: int) -> list[tuple[str, Figures]]:
    """Every account of the ledger (sorted by name) with its figures at `at`."""
    return [(name, Figures.of(ledger.accounts[name], at)) for name in sorted(ledger.accounts)]
