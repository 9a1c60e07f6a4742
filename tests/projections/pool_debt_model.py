"""A small, obviously-correct model of pools and debt, with the corrections that move them.

No heap, no laziness, no incremental state: an answer re-folds every event recorded up
to a position, sorted by (time, position), through a plain list of batches scanned
linearly. Events: grants (pool, expiry, priority), usage reports, adjustments (a credit
is a grant without expiry at the default priority, a debit a usage report), voids and
reversals (of any of them, reversals included). No jobs and no refill.

- A reversed event (one some reversal that is itself in names) takes no part.
- A batch counts for `t < expiry`, and for `t < void` once its grant is voided: from the
  first void of it on the timeline that is in; a void before the grant voids all of it.
- A draw in pool P takes from P's batches and the general ones: lowest priority number,
  then earliest expiry (none last), then P's before general, then the earlier grant. A
  general draw takes only general batches. What is missing is P's debt.
- New credits in P pay P's debt first; general credits pay general debt, then every
  pool's in pool-name order. Only the rest becomes a batch.
- The pools listed at t: every pool a grant, usage report or adjustment that is in, at or
  before t, names (a grant voided before it too), each at its credits minus its debt;
  `{"general": 0}` when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GENERAL = "general"
DEFAULT_PRIORITY = 50

Event = tuple[str, str, int, dict[str, Any]]
"""(id, type, time, payload) in arrival order: the position is the index + 1."""


@dataclass
class _Batch:
    grant: str
    account: str
    pool: str
    expiry: int | None
    priority: int
    order: tuple[int, int]
    amount: int


def excluded(events: list[Event]) -> set[str]:
    """The ids a reversal that is itself in takes out."""
    by_target: dict[str, list[str]] = {}
    for event_id, kind, _, payload in events:
        if kind == "reverse":
            by_target.setdefault(payload["event"], []).append(event_id)
    memo: dict[str, bool] = {}

    def out(event_id: str) -> bool:
        if event_id not in memo:
            memo[event_id] = any(not out(r) for r in by_target.get(event_id, ()))
        return memo[event_id]

    return {event_id for event_id, _, _, _ in events if out(event_id)}


def _pool(payload: dict[str, Any]) -> str:
    pool = payload.get("pool")
    return GENERAL if pool is None else str(pool)


@dataclass
class Account:
    pools: dict[str, int]  # credits minus debt, every pool listed
    debt: dict[str, int]  # per pool, only pools that owe

    @property
    def balance(self) -> int:
        return sum(self.pools.values())


def fold(events: list[Event], at: int) -> dict[str, Account]:
    """Every account named at or before `at`, at `at`."""
    return _fold(events, at)[0]


def debt_after(events: list[Event]) -> dict[str, int]:
    """Per usage report or debit (by id), its account's debt right after it: what the
    fold reports it left owing."""
    return _fold(events, None)[1]


def _fold(events: list[Event], at: int | None) -> tuple[dict[str, Account], dict[str, int]]:
    out_ = excluded(events)
    timeline = sorted(
        ((time, position, event_id, kind, payload)
         for position, (event_id, kind, time, payload) in enumerate(events, start=1)
         if event_id not in out_ and (at is None or time <= at)),
        key=lambda e: (e[0], e[1]))
    batches: list[_Batch] = []
    debt: dict[str, dict[str, int]] = {}
    reported: dict[str, int] = {}
    named: dict[str, set[str]] = {}
    voided_at: dict[str, int] = {}  # grant -> the time of its first void in
    grants = {event_id for event_id, kind, _, _ in events if kind == "grant"}

    def live(b: _Batch, t: int) -> bool:
        return (b.expiry is None or t < b.expiry) and (
            b.grant not in voided_at or t < voided_at[b.grant])

    def credit(account: str, grant: str, pool: str, amount: int, expiry: int | None,
               priority: int, order: tuple[int, int]) -> None:
        owed = debt.setdefault(account, {})
        payers = [pool] if pool != GENERAL else [GENERAL, *sorted(p for p in owed
                                                                  if p != GENERAL)]
        for debtor in payers:
            pay = min(owed.get(debtor, 0), amount)
            if pay:
                owed[debtor] -= pay
                amount -= pay
        for p in [p for p, d in owed.items() if not d]:
            del owed[p]
        if amount:
            batches.append(_Batch(grant, account, pool, expiry, priority, order, amount))

    def draw(account: str, pool: str, amount: int, t: int) -> None:
        while amount:
            usable = [b for b in batches if b.account == account and b.amount
                      and live(b, t) and b.pool in (pool, GENERAL)]
            if not usable:
                break
            best = min(usable, key=lambda b: (b.priority, b.expiry is None, b.expiry or 0,
                                              b.pool == GENERAL, b.order))
            take = min(best.amount, amount)
            best.amount -= take
            amount -= take
        if amount:
            owed = debt.setdefault(account, {})
            owed[pool] = owed.get(pool, 0) + amount

    for time, position, event_id, kind, payload in timeline:
        if kind == "void":
            grant = payload["grant"]
            if grant in grants and grant not in voided_at:
                voided_at[grant] = time
            continue
        if kind == "reverse":
            continue
        account, pool = payload["account"], _pool(payload)
        named.setdefault(account, set()).add(pool)
        amount = payload["amount"]
        if kind == "grant":
            if event_id in voided_at:  # voided before it took effect: none of it counts
                continue
            credit(account, event_id, pool, amount, payload.get("expiry"),
                   payload.get("priority", DEFAULT_PRIORITY), (time, position))
        elif kind == "adjust" and amount > 0:
            credit(account, event_id, pool, amount, None, DEFAULT_PRIORITY, (time, position))
        else:
            draw(account, pool, abs(amount), time)
            reported[event_id] = sum(debt.get(account, {}).values())
    if at is None:
        return {}, reported
    answer: dict[str, Account] = {}
    for account, pools in named.items():
        listed = dict.fromkeys(sorted(pools), 0)
        for b in batches:
            if b.account == account and live(b, at):
                listed[b.pool] += b.amount
        owed = debt.get(account, {})
        for pool, amount in owed.items():
            listed[pool] -= amount
        answer[account] = Account(listed or {GENERAL: 0}, dict(owed))
    return answer, reported
