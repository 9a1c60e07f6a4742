"""A small, obviously-correct model of one account's expiring credits (the expiring-credit rules).

No heap, no laziness, no incremental state: every question re-folds every recorded call,
sorted by (timestamp, call index), through a plain list of batches scanned linearly.

- A batch is (grant_order, pool, expiry, amount); it is usable for t < expiry.
- A consume in pool P takes from P's batches and the general ones, earliest expiry first;
  on an equal expiry P's before general; then grant order. A general consume takes only
  general batches. What is missing becomes debt of P.
- A grant to P pays P's debt first; a general grant pays general debt, then the pools'
  debts in pool-name order. Only the rest becomes a batch.
- The pools listed at t are every pool a grant or a consume at or before t named, each
  with its credits minus its debt (0 once used up or paid, however it was paid).
"""

from __future__ import annotations

from dataclasses import dataclass

GENERAL = "general"


@dataclass(frozen=True)
class Call:
    kind: str  # "grant" or "consume"
    index: int  # arrival order: the journal position among appending calls
    time: int
    amount: int
    pool: str
    expiry: int | None = None


@dataclass
class Batch:
    order: tuple[int, int]  # (time, call index) of its grant
    pool: str
    expiry: int | None
    amount: int

    def live_at(self, t: int) -> bool:
        return self.expiry is None or t < self.expiry


@dataclass
class Folded:
    batches: list[Batch]
    debt: dict[str, int]
    debt_after: dict[int, int]  # call index of a consume -> total debt right after it

    def balances(self, at: int) -> dict[str, int]:
        """Per pool: unexpired credits at `at` minus debt."""
        out: dict[str, int] = {}
        for b in self.batches:
            if b.live_at(at):
                out[b.pool] = out.get(b.pool, 0) + b.amount
        for pool, debt in self.debt.items():
            out[pool] = out.get(pool, 0) - debt
        return out


def fold(calls: list[Call], *, up_to: int | None = None) -> Folded:
    """Fold the calls with time <= up_to (all if None) in (time, index) order."""
    timeline = sorted(
        (c for c in calls if up_to is None or c.time <= up_to),
        key=lambda c: (c.time, c.index),
    )
    batches: list[Batch] = []
    debt: dict[str, int] = {}
    debt_after: dict[int, int] = {}
    for call in timeline:
        # Expired batches are gone before anything happens at call.time.
        batches = [b for b in batches if b.live_at(call.time)]
        if call.kind == "grant":
            left = call.amount
            if call.pool == GENERAL:
                order = [GENERAL, *sorted(p for p in debt if p != GENERAL)]
            else:
                order = [call.pool]
            for pool in order:
                pay = min(debt.get(pool, 0), left)
                debt[pool] = debt.get(pool, 0) - pay
                left -= pay
            debt = {p: d for p, d in debt.items() if d}
            if left:
                batches.append(Batch((call.time, call.index), call.pool, call.expiry, left))
        else:
            need = call.amount
            while need:
                best: Batch | None = None
                for b in batches:
                    if b.amount == 0 or b.pool not in (call.pool, GENERAL):
                        continue
                    if best is None or _draw_key(b) < _draw_key(best):
                        best = b
                if best is None:
                    break
                take = min(best.amount, need)
                best.amount -= take
                need -= take
            batches = [b for b in batches if b.amount]
            if need:
                debt[call.pool] = debt.get(call.pool, 0) + need
            debt_after[call.index] = sum(debt.values())
    return Folded(batches, debt, debt_after)


def _draw_key(b: Batch) -> tuple[int, bool, tuple[int, int]]:
    """Earliest expiry, then pool-specific before general, then grant order."""
    return (2**64 if b.expiry is None else b.expiry, b.pool == GENERAL, b.order)


class CreditModel:
    """The reference: records calls, answers by re-folding them all."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def grant(self, amount: int, timestamp: int, expiry: int, pool: str | None = None) -> None:
        self.calls.append(
            Call("grant", len(self.calls), timestamp, amount, pool or GENERAL, expiry)
        )

    def consume(self, amount: int, timestamp: int, pool: str | None = None) -> int:
        call = Call("consume", len(self.calls), timestamp, amount, pool or GENERAL)
        self.calls.append(call)
        return fold(self.calls).debt_after[call.index]

    def balances(self, timestamp: int) -> dict[str, int]:
        return fold(self.calls, up_to=timestamp).balances(timestamp)

    def pools(self, timestamp: int) -> dict[str, int]:
        """Every pool a call at or before `timestamp` named, in name order, with its
        balance."""
        balances = self.balances(timestamp)
        named = sorted({c.pool for c in self.calls if c.time <= timestamp})
        return {pool: balances.get(pool, 0) for pool in named}

    def get_balance(self, timestamp: int, pool: str | None = None) -> int:
        balances = self.balances(timestamp)
        if pool is None:
            return sum(balances.values())
        return balances.get(pool, 0)
