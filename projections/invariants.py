"""The ledger's invariants, as one function that returns what is wrong (it never raises).

`violations(ledger)` reads only the projected state: each account's credit book, its
holds and queue, and every job. `outcome_violations(outcome, event)` checks what one
event was reported to do (lineage that sums to each charge). `replay.verify`, the
simulator (`tools.sim`) and the tests all call these, so the rules live in one place
(docs/semantics.md, "Invariants", says them in prose).

Both are pure and cheap enough to run often: `violations` can be limited to the accounts
and jobs a step touched, which is how the simulator checks after every step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from projections.creditbook import CreditBook, heap_name
from projections.events import (
    GENERAL,
    CreditsAdjusted,
    CreditsConsumed,
    CreditsGranted,
    DomainEvent,
    JobSubmitted,
)
from projections.ledger import JOB_STATES, PENDING, RUNNING, AccountState, Ledger
from projections.outcomes import Outcome

CREDITS = "credits"
DEBT = "debt"
RESERVE = "reserve"
CONSERVATION = "conservation"
HOLDS = "holds"
JOBS = "jobs"
LINEAGE = "lineage"
RULES = (CREDITS, DEBT, RESERVE, CONSERVATION, HOLDS, JOBS, LINEAGE)
"""Every rule a violation can name."""

_LIVE = (PENDING, RUNNING)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: which (one of `RULES`), what it concerns, and the figures."""

    rule: str
    subject: str  # "account 'a'", "job 'j1'", "event 'e7'"
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.subject}: {self.detail}"


def violations(ledger: Ledger, *, accounts: Iterable[str] | None = None,
               jobs: Iterable[str] | None = None,
               strict_reserve: bool = False) -> list[Violation]:
    """Every invariant `ledger` breaks; empty when it is sound.

    `accounts` / `jobs`: check only these (names not in the ledger are skipped); by
    default all of them. `strict_reserve`: also require `balance >= reserved` for every
    opened account, which holds when credits are spent only through jobs (a usage report
    may create debt while jobs hold credits; docs/semantics.md says so).
    """
    found: list[Violation] = []
    names = sorted(ledger.accounts) if accounts is None else list(accounts)
    wanted = None if accounts is None else set(names)
    live_by_account: dict[str, list[str]] = {}
    for job_id, job in ledger.live.items():
        if wanted is None or job.account in wanted:
            live_by_account.setdefault(job.account, []).append(job_id)
    for name in names:
        account = ledger.accounts.get(name)
        if account is not None:
            found.extend(account_violations(ledger, account, live_by_account.get(name, []),
                                             strict_reserve=strict_reserve))
    found.extend(job_violations(ledger, jobs))
    return found


def account_violations(ledger: Ledger, account: AccountState, live_jobs: Iterable[str],
                       *, strict_reserve: bool = False) -> list[Violation]:
    """The invariants of one account; `live_jobs`: ids of its pending and running jobs."""
    book = account.book
    broken = [*_credit_violations(book), *_debt_violations(book), *_hold_violations(book),
              *_reserve_violations(ledger, account, set(live_jobs), strict_reserve),
              *_conservation_violations(book)]
    where = f"account {account.name!r}"
    return [Violation(rule, where, detail) for rule, detail in broken]


Broken = list[tuple[str, str]]
"""Broken rules of one account: (rule, the figures)."""


def _credit_violations(book: CreditBook) -> Broken:
    """Active credits are the live batches, none below zero, each in the heap of its own
    pool and priority (`heap_name`)."""
    found: Broken = []
    held_per_pool: dict[str, int] = {}
    for name, heap in book.heaps.items():
        for i, batch in enumerate(heap):
            held_per_pool[batch.pool] = held_per_pool.get(batch.pool, 0) + batch.amount
            if batch.amount < 0:
                found.append((CREDITS, f"batch of grant {batch.grant_id!r} holds "
                                       f"{batch.amount} < 0"))
            if heap_name(batch.pool, batch.key[0]) != name or not batch.in_heap:
                found.append((CREDITS, f"batch of grant {batch.grant_id!r} (pool "
                                       f"{batch.pool!r}) misplaced in the {name!r} heap"))
            if i and heap[i] < heap[(i - 1) // 2]:
                found.append((CREDITS, f"expiry order broken in heap {name!r} at batch "
                                       f"{batch.grant_id!r}"))
    for pool in sorted(set(held_per_pool) | set(book.active)):
        total = held_per_pool.get(pool, 0)
        if total != book.active.get(pool, 0):
            found.append((CREDITS, f"active[{pool!r}] = {book.active.get(pool, 0)}, its "
                                   f"batches hold {total}"))
    for pool, active in book.active.items():
        if active < 0:
            found.append((CREDITS, f"active[{pool!r}] = {active} < 0"))
        elif active and pool not in held_per_pool:
            found.append((CREDITS, f"active[{pool!r}] = {active} without batches"))
    return found


def _debt_violations(book: CreditBook) -> Broken:
    """Debt: never negative, and only where no credit usable by that pool is active."""
    found: Broken = []
    for pool, debt in book.debt.items():
        if debt < 0:
            found.append((DEBT, f"debt[{pool!r}] = {debt} < 0"))
        elif debt and book.usable(pool):
            found.append((DEBT, f"debt {debt} in pool {pool!r} beside {book.usable(pool)} "
                                "usable credits (credits pay debt first)"))
    return found


def _hold_violations(book: CreditBook) -> Broken:
    """Holds: the reservation is what the holds carry, each taken from a usable pool."""
    found: Broken = []
    carried = 0
    for ref, hold in book.holds.items():
        for batch, amount in hold.portions:
            carried += amount
            if amount <= 0:
                found.append((HOLDS, f"hold {ref!r} has a portion of {amount}"))
            if batch.pool not in (hold.pool, GENERAL):
                found.append((HOLDS, f"hold {ref!r} in pool {hold.pool!r} took from pool "
                                     f"{batch.pool!r}"))
    if book.held != carried:
        found.append((HOLDS, f"held = {book.held}, its holds carry {carried}"))
    return found


def _reserve_violations(ledger: Ledger, account: AccountState, live: set[str],
                        strict_reserve: bool) -> Broken:
    """Reserve: balance >= reserved >= 0; reserved = the costs of pending and running
    jobs, each held whole; running and queued jobs as the account counts them."""
    found: Broken = []
    book = account.book
    reserved = account.reserved
    if reserved < 0:
        found.append((RESERVE, f"reserved = {reserved} < 0"))
    if strict_reserve and account.opened and account.balance < reserved:
        found.append((RESERVE, f"balance {account.balance} < reserved {reserved}"))
    elif account.balance < reserved and not book.debt_total:
        found.append((RESERVE, f"balance {account.balance} < reserved {reserved} without "
                               "any debt"))
    if set(book.holds) != live:
        found.append((RESERVE, f"holds {sorted(book.holds)} != pending and running jobs "
                               f"{sorted(live)}"))
    running = 0
    costs = 0
    for job_id in live:
        job = ledger.jobs.get(job_id)
        if job is None:
            continue
        costs += job.cost
        running += job.state == RUNNING
        held_for = book.holds.get(job_id)
        if held_for is not None and held_for.amount != job.cost:
            found.append((LINEAGE, f"job {job_id!r} costs {job.cost}, its hold carries "
                                   f"{held_for.amount}"))
    if reserved != costs:
        found.append((RESERVE, f"reserved = {reserved}, pending and running jobs cost "
                               f"{costs}"))
    if account.running != running:
        found.append((JOBS, f"running = {account.running}, {running} jobs are running"))
    if account.max_running is not None and running > account.max_running:
        found.append((JOBS, f"{running} jobs running, max {account.max_running}"))
    queued = {entry[3] for entry in account.queue}
    missing = sorted(j for j in live if j not in queued
                     and (job := ledger.jobs.get(j)) is not None and job.state == PENDING)
    if missing:
        found.append((JOBS, f"pending jobs {missing} are not in the queue"))
    return found


def _conservation_violations(book: CreditBook) -> Broken:
    """Conservation: every credit granted is somewhere, every credit spent came from
    somewhere, and the debt outstanding is what was created minus what was paid."""
    found: Broken = []
    t = book.totals
    active = book.active_total
    if t.granted != active + book.held + t.charged_from_credits + t.expired + t.debt_paid:
        found.append((CONSERVATION, f"granted {t.granted} != active {active} + held "
                                    f"{book.held} + charged from credits "
                                    f"{t.charged_from_credits} + expired {t.expired} + "
                                    f"paid debt {t.debt_paid}"))
    if t.consumed + t.charged_jobs != t.charged_from_credits + t.debt_created:
        found.append((CONSERVATION, f"consumed {t.consumed} + charged to jobs "
                                    f"{t.charged_jobs} != charged from credits "
                                    f"{t.charged_from_credits} + debt created "
                                    f"{t.debt_created}"))
    if book.debt_total != t.debt_created - t.debt_paid:
        found.append((DEBT, f"debt {book.debt_total} != created {t.debt_created} - paid "
                            f"{t.debt_paid}"))
    return found


def job_violations(ledger: Ledger, jobs: Iterable[str] | None = None) -> list[Violation]:
    """Each job in exactly one known state, live exactly when pending or running."""
    found: list[Violation] = []
    ids = ledger.jobs if jobs is None else jobs
    for job_id in ids:
        job = ledger.jobs.get(job_id)
        if job is None:
            continue
        where = f"job {job_id!r}"
        if job.state not in JOB_STATES:
            found.append(Violation(JOBS, where, f"unknown state {job.state!r}"))
            continue
        is_live = ledger.live.get(job_id) is job
        if is_live != (job.state in _LIVE):
            found.append(Violation(JOBS, where, f"{job.state} but "
                                   f"{'among' if is_live else 'not among'} the live jobs"))
        if (job.order is not None) != (job.state in _LIVE):
            found.append(Violation(JOBS, where, f"{job.state} with queue place {job.order}"))
        if job.state != "rejected" and job.account not in ledger.accounts:
            found.append(Violation(JOBS, where, f"names unknown account {job.account!r}"))
        if job.charge is not None and not 0 <= job.charge <= job.cost:
            found.append(Violation(LINEAGE, where,
                                   f"charged {job.charge}, outside [0, cost {job.cost}]"))
        if (job.charge is not None) != (job.state in ("succeeded", "failed")):
            found.append(Violation(JOBS, where, f"{job.state} with charge {job.charge}"))
    if jobs is None:
        for job_id in ledger.live:
            if job_id not in ledger.jobs:
                found.append(Violation(JOBS, f"job {job_id!r}", "live but not indexed"))
    return found


def outcome_violations(outcome: Outcome, event: DomainEvent | None = None,
                       cost: int | None = None) -> list[Violation]:
    """What one event was reported to do, checked against itself: the grants named as
    paying add up to what was paid, and nothing is negative.

    `event`: its domain event (for the amounts asked); `cost`: for a completion, the
    job's cost (charge + released must be all of it).
    """
    found: list[Violation] = []
    where = f"event {outcome.event_id!r}"
    paid = 0
    for grant, amount in outcome.paid_by:
        paid += amount
        if amount <= 0:
            found.append(Violation(LINEAGE, where, f"grant {grant!r} paid {amount}"))
    for expiry in outcome.expired:
        if expiry.amount <= 0 or not expiry.grant_id:
            found.append(Violation(LINEAGE, where, f"expiry of {expiry.amount} credits of "
                                                   f"grant {expiry.grant_id!r}"))
    if outcome.anomaly or not outcome.ok:
        return found
    found.extend(_release_violations(outcome, where))
    if outcome.charge is not None:
        if paid != outcome.charge:
            found.append(Violation(LINEAGE, where, f"charged {outcome.charge}, the grants "
                                                   f"named paid {paid}"))
        if cost is not None and outcome.charge + (outcome.released or 0) != cost:
            found.append(Violation(LINEAGE, where, f"charged {outcome.charge} + released "
                                                   f"{outcome.released} != cost {cost}"))
    elif isinstance(event, CreditsConsumed):
        if paid + outcome.debt_created != event.amount:
            found.append(Violation(LINEAGE, where, f"consumed {event.amount}, grants paid "
                                                   f"{paid}, debt created "
                                                   f"{outcome.debt_created}"))
    elif isinstance(event, JobSubmitted):
        if paid != event.cost:
            found.append(Violation(LINEAGE, where, f"reserved {paid} for a job costing "
                                                   f"{event.cost}"))
    elif isinstance(event, CreditsAdjusted) and event.amount < 0:
        if paid + outcome.debt_created != -event.amount:
            found.append(Violation(LINEAGE, where, f"debited {-event.amount}, grants paid "
                                                   f"{paid}, debt created "
                                                   f"{outcome.debt_created}"))
    elif isinstance(event, (CreditsGranted, CreditsAdjusted)):
        debt_paid = sum(amount for _, amount in outcome.paid_debt)
        if not 0 <= debt_paid <= event.amount:
            found.append(Violation(LINEAGE, where, f"a grant of {event.amount} paid "
                                                   f"{debt_paid} of debt"))
    return found


def _release_violations(outcome: Outcome, where: str) -> list[Violation]:
    """The debt a release paid is traced: the grants named as paying it add up to it,
    and it is paid from what was released, never more."""
    if outcome.released is None:
        return []
    debt_paid = sum(amount for _, amount in outcome.paid_debt)
    traced = sum(amount for _, amount in outcome.debt_paid_by)
    found = []
    if traced != debt_paid:
        found.append(Violation(LINEAGE, where, f"released credits paid {debt_paid} of "
                                               f"debt, the grants named paid {traced}"))
    if not 0 <= debt_paid <= outcome.released:
        found.append(Violation(LINEAGE, where, f"released {outcome.released} credits that "
                                               f"paid {debt_paid} of debt"))
    return found
