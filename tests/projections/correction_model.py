"""A plain model of one account's credits with the corrections: priorities, adjustments,
voids and reversals. No heap, no laziness: every answer re-folds every recorded event.

- Which events count: an event is out when a reversal of it is in (a reversal of a
  reversal puts the event back), whatever the times.
- The events that count are folded in (time, arrival index) order. Before each, batches
  with expiry <= its time are dropped.
- A batch is used by (priority, expiry with None last, pool-specific before general,
  grant order); a draw in pool P uses P's batches and general ones.
- A grant or a positive adjustment (no expiry, priority 50) pays debt first: P's debt for
  a pool P; general debt then every pool's debt in name order for a general one. A grant
  voided earlier on the timeline adds nothing.
- A consume or a negative adjustment draws; what is missing becomes P's debt.
- A void drops what is left of its grant's batch.
- The pools listed are every pool a grant, consume or adjustment that counts named (a
  grant voided before it included), whatever is left in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GENERAL = "general"


@dataclass(frozen=True)
class Event:
    id: str
    kind: str  # grant, consume, adjust, void, reverse
    index: int  # arrival order
    time: int
    amount: int = 0
    pool: str = GENERAL
    expiry: int | None = None
    priority: int = 50
    target: str = ""  # void: the grant; reverse: the event


@dataclass
class Batch:
    grant: str
    key: tuple[int, int, int, bool, tuple[int, int]]
    pool: str
    expiry: int | None
    amount: int


def out_of_fold(events: list[Event]) -> set[str]:
    reversals = [e for e in events if e.kind == "reverse"]

    def out(event_id: str, seen: frozenset[str] = frozenset()) -> bool:
        if event_id in seen:
            return False
        return any(r.target == event_id and not out(r.id, seen | {event_id})
                   for r in reversals)

    return {e.id for e in events if out(e.id)}


@dataclass
class State:
    batches: list[Batch] = field(default_factory=list)
    debt: dict[str, int] = field(default_factory=dict)

    def balance(self, at: int) -> int:
        live = sum(b.amount for b in self.batches if b.expiry is None or at < b.expiry)
        return live - sum(self.debt.values())

    def credit(self, event: Event, expiry: int | None, priority: int) -> None:
        left = event.amount
        order = ([GENERAL, *sorted(p for p in self.debt if p != GENERAL)]
                 if event.pool == GENERAL else [event.pool])
        for pool in order:
            pay = min(self.debt.get(pool, 0), left)
            if pay:
                self.debt[pool] -= pay
                left -= pay
        self.debt = {p: d for p, d in self.debt.items() if d}
        if left:
            key = (priority, expiry is None, expiry or 0, event.pool == GENERAL,
                   (event.time, event.index))
            self.batches.append(Batch(event.id, key, event.pool, expiry, left))

    def debit(self, pool: str, amount: int) -> None:
        while amount:
            usable = [b for b in self.batches if b.amount and b.pool in (pool, GENERAL)]
            if not usable:
                break
            best = min(usable, key=lambda b: b.key)
            take = min(best.amount, amount)
            best.amount -= take
            amount -= take
        self.batches = [b for b in self.batches if b.amount]
        if amount:
            self.debt[pool] = self.debt.get(pool, 0) + amount


def fold(events: list[Event], up_to: int | None = None) -> State:
    """The state after the events that count with time <= up_to (all if None)."""
    gone = out_of_fold(events)
    timeline = sorted((e for e in events if e.id not in gone
                       and (up_to is None or e.time <= up_to)),
                      key=lambda e: (e.time, e.index))
    state = State()
    voided: set[str] = set()
    for event in timeline:
        state.batches = [b for b in state.batches if b.expiry is None or event.time < b.expiry]
        if event.kind == "grant":
            if event.id not in voided:
                state.credit(event, event.expiry, event.priority)
        elif event.kind == "adjust" and event.amount > 0:
            state.credit(event, None, 50)
        elif event.kind == "adjust":
            state.debit(event.pool, -event.amount)
        elif event.kind == "consume":
            state.debit(event.pool, event.amount)
        elif event.kind == "void":
            voided.add(event.target)
            state.batches = [b for b in state.batches if b.grant != event.target]
    return state


def pools(events: list[Event], up_to: int | None = None) -> set[str]:
    """The pools listed after the events that count with time <= up_to (all if None)."""
    gone = out_of_fold(events)
    return {e.pool for e in events if e.id not in gone and e.kind in ("grant", "consume", "adjust")
            and (up_to is None or e.time <= up_to)}
