"""One account followed through a fold of the whole journal, event by event.

Shared by statements and explanations: what each event did to the account, and what
expired or accrued in between.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from eventstore import RecordedEvent
from projections.creditbook import Batch, BatchKey, CreditBook, Expiry, heap_name
from projections.events import DEFAULT_GRANT_PRIORITY, GENERAL
from projections.ledger import AccountState, Ledger
from projections.outcomes import Outcome
from projections.owners import Named, event_account
from projections.projector import apply_recorded
from projections.queries.effects import Settings, account_settings
from projections.reversals import reversed_ids


def target(ledger: Ledger, rec: RecordedEvent, named: Named | None = None) -> str | None:
    """The account an event touches, as the ledger stands before applying it
    (`owners.event_account`: for a job's step, its job's account, wherever it was filed;
    for a reversal, that of the event it names, looked up with `named`)."""
    return event_account(rec, ledger.jobs, named)


def own_reversed(events: list[RecordedEvent]) -> frozenset[str]:
    """The ids reversed by the reversals among an account's events (`account_events`):
    a reversal is recorded in the stream of the account of the event it names."""
    return reversed_ids({
        rec.id: target for rec in events
        if rec.type == "reverse" and isinstance(target := rec.payload.get("event"), str)})


def _expiry_order(batch: Batch) -> tuple[int, BatchKey]:
    """When it expired, then the order draws take batches in: a batch's own key leads
    with the grant's priority, which decides what is used first, not when it lapses."""
    assert batch.expiry is not None  # only a batch with an expiry expires
    return batch.expiry, batch.key


def expired_batches(book: CreditBook, at: int) -> list[Batch]:
    """Batches still in the book whose credits have expired by `at`, in expiry order."""
    found = [b for heap in book.heaps.values() for b in heap if b.is_expired_at(at) and b.amount]
    return sorted(found, key=_expiry_order)


def split_expired(rec: RecordedEvent, outcome: Outcome,
                  in_heap: list[tuple[Batch, int]]) -> tuple[list[Expiry], list[Expiry]]:
    """Of the expiries of `rec`'s `outcome`: those a settlement released into a batch
    already ended (they lapsed on release), and a grant's own credits voided before it
    took effect. `in_heap`: the account's batches in its heaps before the event, with
    their amounts. What the event's touch evicted (batches of `in_heap` out of the heap
    now) is at the head of `outcome.expired`, and is neither; nor is a void's own lapse,
    told on its line."""
    evicted = sum(amount for b, amount in in_heap if not b.in_heap)
    on_release: list[Expiry] = []
    on_arrival: list[Expiry] = []
    seen = 0
    for e in outcome.expired:
        if e.voided and rec.type == "void":
            continue  # the void's own change, on its line
        if e.voided and rec.type == "grant" and e.grant_id == rec.id:
            on_arrival.append(e)
            continue
        if seen >= evicted:
            on_release.append(e)
        seen += e.amount
    return on_release, on_arrival


@dataclass(frozen=True, slots=True)
class Step:
    """One event of an account, and what time passing did to the account first."""

    rec: RecordedEvent
    outcome: Outcome
    expired: list[Expiry]  # credits that expired by the event's time (at their expiry)
    refill: int  # credits a refill bucket accrued before the event
    on_release: list[Expiry]  # held credits released by the event after their grant expired
    # A grant's own credits, voided on the timeline before the grant takes effect: none
    # of them ever counts (a void timed before its grant).
    voided_on_arrival: list[Expiry] = field(default_factory=list)
    refill_paid_debt: int = 0  # of `refill`, what paid debt (it pays debt first)
    # An `account` event of an account an earlier one declared: the settings it found.
    declared_before: Settings | None = None


class AccountWalk:
    """Folds a journal and follows one account, event by event.

    Expiries are taken at their expiry time, whether or not the fold has evicted them yet
    (it evicts lazily, when an event touches the account; an event refused before that, a
    duplicate submit, evicts nothing). Each expired batch is reported once: `announced`
    remembers batches reported but still in the book.
    """

    def __init__(self, account: str, named: Named | None = None) -> None:
        self.account = account
        # Looks up the event a reversal names: its line is in that event's account's
        # statement (a reversal is filed in the stream of the event it names, which for a
        # job's step may be `job:<id>` or another account's).
        self.named = named
        self.ledger = Ledger()
        self.seen = False  # whether any event touched the account
        self.announced: dict[int, Batch] = {}  # id(batch) -> batch reported as expired
        # Every batch of the account that can expire, by expiry: finding what expired by a
        # time costs what expired, not every batch at every event (which made statements
        # quadratic in an account's grants).
        self._known: dict[int, Batch] = {}  # id -> batch (kept, so ids stay unique)
        self._by_expiry: list[tuple[int, int, Batch]] = []

    @property
    def state(self) -> AccountState | None:
        """The account as the fold stands."""
        return self.ledger.accounts.get(self.account)

    def expired_by(self, time: int) -> list[Expiry]:
        """Expiries by `time` not yet reported; they are reported now."""
        state = self.state
        if state is None:
            return []
        out = []
        found: list[Batch] = []
        by_expiry = self._by_expiry
        while by_expiry and by_expiry[0][0] <= time:
            _, _, batch = heapq.heappop(by_expiry)
            # Still in the book with credits (evicted or spent ones are gone for good: a
            # release into an expired batch expires at once, see CreditBook._return).
            if batch.in_heap and batch.amount:
                found.append(batch)
        found.sort(key=_expiry_order)
        for batch in found:
            if id(batch) not in self.announced:
                self.announced[id(batch)] = batch
                assert batch.expiry is not None
                out.append(Expiry(batch.grant_id, batch.pool, batch.expiry, batch.amount))
        return out

    def unevicted(self) -> int:
        """Credits reported as expired that the fold has not evicted yet."""
        return sum(b.amount for b in self.announced.values() if b.in_heap)

    def apply(self, rec: RecordedEvent) -> Step | None:
        """Apply `rec`; a `Step` if it touched the account, else None."""
        ledger = self.ledger
        if target(ledger, rec, self.named) != self.account:
            apply_recorded(ledger, rec)
            return None
        self.seen = True
        expired = self.expired_by(rec.time)
        state = self.state
        in_heap = [(b, b.amount) for b in self.announced.values() if b.in_heap]
        granted = state.book.totals.granted if state is not None else 0
        owed = state.book.debt_total if state is not None else 0
        declared_before = account_settings(state) if rec.type == "account" \
            and state is not None and state.declared else None
        outcome = apply_recorded(ledger, rec)
        on_release, on_arrival = split_expired(rec, outcome, in_heap)
        self.announced = {k: b for k, b in self.announced.items() if b.in_heap}
        refill = 0
        state = self.state
        if state is not None:
            if state.book.totals.granted != granted:
                # Only `CreditBook.grant` makes a batch, and it always adds to what was
                # granted (a grant, a manual credit, a refill): an event that granted
                # nothing made no batch to index.
                self._learn_batches(state, rec)
            credits = rec.type == "grant" or (rec.type == "adjust"
                                              and int(rec.payload.get("amount", 0)) > 0)
            added = rec.payload.get("amount", 0) if credits and not outcome.anomaly \
                and rec.id not in ledger.excluded else 0
            refill = state.book.totals.granted - granted - int(added)
        # A refill is added as the event touches the account, before the event's own
        # change, and pays debt first: of every pool (general credits).
        return Step(rec, outcome, expired, refill, on_release, on_arrival,
                    refill_paid_debt=min(refill, owed), declared_before=declared_before)

    def _learn_batches(self, state: AccountState, rec: RecordedEvent) -> None:
        """Index the batch `rec` created, if it can expire: only a grant makes one (a manual
        credit and a refill never expire). It is pushed onto the heap of its pool and
        priority, so it lies on the path from that heap's last slot to its root (nothing
        pops after a grant within one event). Only that heap is looked at: looking through
        every heap at every grant made a statement quadratic in the account's pools."""
        if rec.type != "grant":
            return
        pool = rec.payload.get("pool")
        priority = rec.payload.get("priority", DEFAULT_GRANT_PRIORITY)
        if not isinstance(priority, int):
            return  # refused by the fold: no batch
        policy = self.ledger.policy
        if policy is not None:
            priority = policy.grant_priority(priority)
        heap = state.book.heaps.get(
            heap_name(pool if isinstance(pool, str) else GENERAL, priority), [])
        i = len(heap) - 1
        while i >= 0:
            batch = heap[i]
            if batch.expiry is not None and id(batch) not in self._known:
                self._known[id(batch)] = batch
                heapq.heappush(self._by_expiry, (batch.expiry, len(self._known), batch))
            i = (i - 1) // 2 if i else -1
