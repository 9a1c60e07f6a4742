"""The `eventsourcing` baseline: an Account aggregate recording the same events, one per
account, in an `Application` on SQLite or PostgreSQL (its SQLITE_DBNAME / POSTGRES_*
settings, see `storage.py`).

This is what a user of the `eventsourcing` package would write for the same ledger:
grant and consume (and the job events, so a replay reads the same journal) are aggregate
events; the aggregate keeps only running figures (no expiry heaps, no holds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import Application  # type: ignore[import-not-found, unused-ignore]
from eventsourcing.domain import Aggregate, event  # type: ignore[import-not-found, unused-ignore]

from tools.bench.workload import MixEvent


class Account(Aggregate):  # type: ignore[misc, unused-ignore]
    """One account's stream: opened, then grants, consumes and its jobs' events."""

    @staticmethod
    def create_id(name: str) -> UUID:
        return uuid5(NAMESPACE_URL, f"gpu-credits-bench/{name}")

    @event("Opened")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def __init__(self, name: str) -> None:
        self.name = name
        self.balance = 0
        self.reserved = 0

    @event("Granted")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def grant(self, amount: int, expiry: int | None = None, pool: str | None = None) -> None:
        self.balance += amount

    @event("Consumed")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def consume(self, amount: int, pool: str | None = None) -> None:
        self.balance -= amount

    @event("JobSubmitted")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def submit(self, job: str, cost: int, priority: int) -> None:
        self.reserved += cost

    @event("JobStarted")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def start(self, job: str) -> None:
        pass

    @event("JobCompleted")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def complete(self, job: str, success: bool, refund_fraction: float = 1.0) -> None:
        pass

    @event("JobCancelled")  # type: ignore[misc, untyped-decorator, unused-ignore]
    def cancel(self, job: str) -> None:
        pass


class CreditsApp(Application):  # type: ignore[misc, type-arg, unused-ignore]
    """The application; notification log pages of 5,000 (the journal reads 5,000 a batch)."""

    log_section_size = 5000


def open_app(env: Mapping[str, str]) -> Any:
    return CreditsApp(env=dict(env))


def record(account: Any, e: MixEvent) -> None:
    """Trigger the aggregate event matching a mix event."""
    fields = {k: v for k, v in e.fields.items() if k != "account"}
    getattr(account, e.type)(**fields)


def create_accounts(app: Any, names: Iterable[str]) -> dict[str, Any]:
    accounts = {name: Account(name) for name in names}
    app.save(*accounts.values())
    return accounts


def save_each(app: Any, accounts: Mapping[str, Any], events: Sequence[MixEvent]) -> None:
    """One event per save (one transaction each)."""
    for e in events:
        account = accounts[e.stream]
        record(account, e)
        app.save(account)


def save_batched(app: Any, accounts: dict[str, Any], events: Iterable[MixEvent],
                 per_save: int) -> int:
    """`per_save` events per save (one transaction each), across the aggregates they touch;
    an `account` event creates the aggregate. Returns the number of events saved."""
    touched: dict[str, Any] = {}
    pending = 0
    saved = 0
    for e in events:
        if e.type == "account":
            account = accounts[e.stream] = Account(e.stream)
        else:
            account = accounts[e.stream]
            record(account, e)
        touched[e.stream] = account
        pending += 1
        if pending == per_save:
            app.save(*touched.values())
            saved += pending
            touched.clear()
            pending = 0
    if touched:
        app.save(*touched.values())
        saved += pending
    return saved


def reconstruct(app: Any, names: Iterable[str]) -> int:
    """Rebuild every named aggregate from its stored events; how many events that read."""
    total = 0
    for name in names:
        total += app.repository.get(Account.create_id(name)).version
    return total


def read_log(app: Any, *, decode: bool = False, page: int = 5000) -> int:
    """Read the whole notification log page by page (optionally into domain events)."""
    start = 1
    n = 0
    to_domain = app.mapper.to_domain_event
    while True:
        items = app.notification_log.select(start, page)
        if not items:
            return n
        if decode:
            for item in items:
                to_domain(item)
        n += len(items)
        start = items[-1].id + 1
