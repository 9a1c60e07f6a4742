"""8 threads submit, start, complete and cancel at random against one `Scheduler` facade.

Afterwards: the ledger's invariants hold, no job was handed out twice, every account's
balance fell by exactly the charges the threads were told about, nothing was recorded
as an anomaly, and a fresh Scheduler replaying the same journal has the same digest.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import threading
from collections.abc import Iterator
from fractions import Fraction

import pytest
from invariants import assert_invariants

from eventstore.testing import open_journal
from projections import InvalidTransition, Job, Scheduler

THREADS = 8
OPS_PER_THREAD = 80
ACCOUNTS = {"a": (200, 2), "b": (120, 1), "c": (60, None)}  # name: (balance, max_running)
FRACTIONS = [0.0, 0.25, 0.5, 0.9, 1.0]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads often so that calls really interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def charge_of(cost: int, success: bool, fraction: float) -> int:
    return cost if success else math.floor(cost * (1 - Fraction(str(fraction))))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_eight_threads_against_one_scheduler(
    kind: str, tmp_path: object, fast_switching: None
) -> None:
    url = "memory" if kind == "memory" else f"sqlite:///{tmp_path}/threads.db"
    journal = open_journal(url)
    ticks = itertools.count(1)
    scheduler = Scheduler(journal, clock=lambda: next(ticks))
    for name, (balance, cap) in ACCOUNTS.items():
        scheduler.open_account(name, balance, max_running=cap)

    lock = threading.Lock()
    started: list[Job] = []  # every job start_next handed out, by any thread
    accepted: dict[str, tuple[str, int]] = {}  # job -> (account, cost)
    charges: dict[str, int] = dict.fromkeys(ACCOUNTS, 0)
    completed: dict[str, str] = {}  # job -> "succeeded" / "failed"
    cancelled: set[str] = set()
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)
    ops = OPS_PER_THREAD if kind == "memory" else OPS_PER_THREAD // 2

    def worker(n: int) -> None:
        rng = random.Random(n)
        mine_running: list[Job] = []
        mine_pending: list[str] = []
        try:
            barrier.wait()
            for k in range(ops):
                op = rng.random()
                if op < 0.4:
                    job_id = f"t{n}-{k}"
                    account = rng.choice(sorted(ACCOUNTS))
                    cost = rng.randint(0, 12)
                    if scheduler.submit(job_id, account, cost, rng.randint(0, 3)):
                        mine_pending.append(job_id)
                        with lock:
                            accepted[job_id] = (account, cost)
                elif op < 0.7:
                    job = scheduler.start_next()
                    if job is not None:
                        mine_running.append(job)
                        with lock:
                            started.append(job)
                elif op < 0.9 and mine_running:
                    job = mine_running.pop(rng.randrange(len(mine_running)))
                    success = rng.random() < 0.5
                    fraction = rng.choice(FRACTIONS)
                    scheduler.complete(job.id, success, refund_fraction=fraction)
                    with lock:
                        charges[job.account_id] += charge_of(job.cost, success, fraction)
                        completed[job.id] = "succeeded" if success else "failed"
                elif mine_pending:
                    job_id = mine_pending.pop(rng.randrange(len(mine_pending)))
                    try:
                        scheduler.cancel(job_id)
                    except InvalidTransition:
                        continue  # another thread started it first
                    with lock:
                        cancelled.add(job_id)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == [], errors

    ledger = scheduler.ledger()
    assert_invariants(ledger, scheduler_only=True)
    assert ledger.anomalies == []
    assert journal.verify() is None

    ids = [job.id for job in started]
    assert len(ids) == len(set(ids)), "start_next handed a job to two threads"
    assert set(ids) <= set(accepted)
    assert not set(ids) & cancelled
    assert len(started) > 0 and len(completed) > 0

    for job_id, (account, cost) in accepted.items():
        job = ledger.jobs[job_id]
        assert (job.account, job.cost) == (account, cost)
        if job_id in completed:
            assert job.state == completed[job_id]
        elif job_id in cancelled:
            assert job.state == "cancelled"
        elif job_id in ids:
            assert job.state == "running"
        else:
            assert job.state == "pending"
    rejected = [j for j in ledger.jobs.values() if j.state == "rejected"]
    assert len(ledger.jobs) == len(accepted) + len(rejected)

    for name, (balance, cap) in ACCOUNTS.items():
        view = scheduler.accounts[name]
        live = [j for j in ledger.jobs.values()
                if j.account == name and j.state in ("pending", "running")]
        assert view.balance == balance - charges[name]
        assert view.reserved == sum(j.cost for j in live)
        assert view.running == sum(1 for j in live if j.state == "running")
        assert cap is None or view.running <= cap

    other = open_journal(url) if kind != "memory" else journal
    try:
        replay = Scheduler(other, clock=lambda: next(ticks))
        assert replay.state_digest() == scheduler.state_digest()
        for name in ACCOUNTS:
            assert replay.accounts[name] == scheduler.accounts[name]
    finally:
        other.close()
        journal.close()
