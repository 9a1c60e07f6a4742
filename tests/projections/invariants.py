"""The ledger's invariants, checked by one function that every property test calls.

`assert_invariants(ledger)` reads only the projected state (`Ledger`, its `CreditBook`s
and jobs), so it can be called after any step of any facade, on any journal.
"""

from __future__ import annotations

from projections.events import GENERAL
from projections.ledger import JOB_STATES, PENDING, RUNNING, Ledger


def assert_invariants(ledger: Ledger, *, scheduler_only: bool = False) -> None:
    """Assert every invariant of issues 3 and 4 on `ledger`.

    `scheduler_only=True` adds `balance >= reserved` for every opened account, which holds
    when its credits are spent only through jobs (a tracker `consume` may create debt while
    credits are held for jobs, and then `balance < reserved`).
    """
    for name, account in ledger.accounts.items():
        book = account.book
        where = f"account {name!r}"

        # active credits = sum of live batch amounts >= 0, per pool
        for pool, heap in book.heaps.items():
            for batch in heap:
                assert batch.amount >= 0, f"{where}: batch {batch.grant_id} below zero"
                assert batch.pool == pool, f"{where}: batch {batch.grant_id} in wrong heap"
                assert batch.in_heap, f"{where}: batch {batch.grant_id} in heap, flag off"
            for i in range(1, len(heap)):
                assert not heap[i] < heap[(i - 1) // 2], f"{where}: heap order broken in {pool}"
        for pool, active in book.active.items():
            live = sum(b.amount for b in book.heaps.get(pool, []))
            assert active == live, f"{where}: active[{pool}]={active}, batches hold {live}"
            assert active >= 0, f"{where}: active[{pool}]={active} < 0"
        for pool, heap in book.heaps.items():
            if heap:
                assert pool in book.active, f"{where}: heap {pool} without an active figure"

        # debt >= 0 in every pool; debt only where no usable credit is active
        for pool, debt in book.debt.items():
            assert debt >= 0, f"{where}: debt[{pool}]={debt} < 0"
            if debt > 0:
                assert book.usable(pool) == 0, (
                    f"{where}: debt {debt} in {pool} beside {book.usable(pool)} usable credits"
                )

        # held >= 0 and equal to the holds' portions
        assert book.held >= 0, f"{where}: held={book.held} < 0"
        portions = sum(amount for hold in book.holds.values() for _, amount in hold.portions)
        assert book.held == portions, f"{where}: held={book.held}, holds carry {portions}"
        for ref, hold in book.holds.items():
            for batch, amount in hold.portions:
                assert amount > 0, f"{where}: hold {ref} has an empty portion"
                assert batch.pool in (hold.pool, GENERAL), (
                    f"{where}: hold {ref} in {hold.pool} took from pool {batch.pool}"
                )

        # conservation
        t = book.totals
        assert t.granted == (
            book.active_total + book.held + t.charged_from_credits + t.expired + t.debt_paid
        ), f"{where}: granted {t.granted} not conserved: {t} active={book.active_total} " \
           f"held={book.held}"
        assert t.consumed + t.charged_jobs == t.charged_from_credits + t.debt_created, (
            f"{where}: consumed+charged_jobs != charged_from_credits+debt_created: {t}"
        )
        assert book.debt_total == t.debt_created - t.debt_paid, (
            f"{where}: debt {book.debt_total} != created {t.debt_created} - paid {t.debt_paid}"
        )

        # jobs: reserved = costs of pending and running jobs; running within the cap
        live_jobs = {
            j.id: j for j in ledger.jobs.values()
            if j.account == name and j.state in (PENDING, RUNNING)
        }
        assert set(book.holds) == set(live_jobs), (
            f"{where}: holds {sorted(book.holds)} != live jobs {sorted(live_jobs)}"
        )
        for job_id, job in live_jobs.items():
            assert book.holds[job_id].amount == job.cost, (
                f"{where}: job {job_id} holds {book.holds[job_id].amount}, costs {job.cost}"
            )
        assert book.held == sum(j.cost for j in live_jobs.values())
        running = sum(1 for j in live_jobs.values() if j.state == RUNNING)
        assert account.running == running, f"{where}: running={account.running}, jobs {running}"
        if account.max_running is not None:
            assert running <= account.max_running, (
                f"{where}: {running} running, max {account.max_running}"
            )
        queued = {entry[3] for entry in account.queue}
        pending = {j for j, job in live_jobs.items() if job.state == PENDING}
        assert pending <= queued, f"{where}: pending jobs {sorted(pending - queued)} not queued"

        # the figures the facades report
        assert account.reserved == book.held >= 0
        assert account.balance == account.available + account.reserved
        if scheduler_only and account.opened:
            assert account.balance >= account.reserved >= 0, (
                f"{where}: balance {account.balance} < reserved {account.reserved}"
            )

    for job in ledger.jobs.values():
        assert job.state in JOB_STATES, f"job {job.id} in unknown state {job.state!r}"
        assert job.account in ledger.accounts or job.state == "rejected", (
            f"job {job.id} names account {job.account!r} the ledger does not know"
        )

    # Each job in exactly one state: the ledger keeps jobs that can still change (pending,
    # running) apart from finished ones; every job is in exactly one of the two.
    for job_id, job in ledger.live.items():
        assert job.state in (PENDING, RUNNING), f"live job {job_id} is {job.state}"
        assert ledger.jobs[job_id] is job, f"live job {job_id} is not the indexed one"
        assert job.order is not None, f"live job {job_id} has no queue place"
    for job_id, job in ledger.jobs.items():
        if job_id not in ledger.live:
            assert job.state not in (PENDING, RUNNING), f"job {job_id} is {job.state}, not live"
            assert job.order is None, f"finished job {job_id} still has a queue place"
