"""Plain in-memory credit tracker and scheduler: what a user would write instead.

No journal, no lineage, no pools, no holds: just the textbook data structures (a heap of
credit batches by expiry; one heap of jobs by priority). They are the "as fast as doing it
yourself" baselines; the raw database drivers are in `rawdb.py` and the `eventsourcing`
baseline in `esapp.py`.
"""

from __future__ import annotations

import heapq
import math


class PlainTracker:
    """A min-heap of credit batches by (expiry, grant order), lazy eviction,
    a running sum of active credits, and debt paid first by the next grant."""

    __slots__ = ("_active", "_debt", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[list[int]] = []  # [expiry, grant order, amount left]
        self._active = 0
        self._debt = 0
        self._seq = 0

    def _evict(self, timestamp: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= timestamp:  # expiry is exclusive
            self._active -= heapq.heappop(heap)[2]

    def grant(self, amount: int, timestamp: int, expiry: int) -> None:
        if amount <= 0 or expiry <= timestamp:
            raise ValueError("amount must be positive and expiry after timestamp")
        self._evict(timestamp)
        if self._debt:
            paid = min(self._debt, amount)
            self._debt -= paid
            amount -= paid
            if not amount:
                return  # swallowed by debt: never enters the heap
        self._seq += 1
        heapq.heappush(self._heap, [expiry, self._seq, amount])
        self._active += amount

    def consume(self, amount: int, timestamp: int) -> int:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self._evict(timestamp)
        heap = self._heap
        while amount and heap:
            top = heap[0]
            take = top[2] if top[2] <= amount else amount
            top[2] -= take
            amount -= take
            self._active -= take
            if not top[2]:
                heapq.heappop(heap)
        self._debt += amount
        return self._debt

    def get_balance(self, timestamp: int) -> int:
        self._evict(timestamp)
        return self._active - self._debt


class PlainAccount:
    """The plain scheduler's account: balance, reserved, running, and the cap on running jobs."""

    __slots__ = ("balance", "id", "max_running", "reserved", "running")

    def __init__(self, account_id: str, balance: int, max_running: int | None = None) -> None:
        self.id = account_id
        self.balance = balance
        self.reserved = 0
        self.running = 0
        self.max_running = max_running

    @property
    def available(self) -> int:
        return self.balance - self.reserved


class PlainJob:
    __slots__ = ("account_id", "cost", "done", "id", "priority")

    def __init__(self, job_id: str, account_id: str, cost: int, priority: int) -> None:
        self.id = job_id
        self.account_id = account_id
        self.cost = cost
        self.priority = priority
        self.done = False


class PlainScheduler:
    """One heap of (-priority, submit order), tombstones for cancelled jobs,
    reserve at submit and settle at completion. The per-account cap, with a single heap:
    blocked heads are popped to a side list and pushed back after the pick,
    so a pick costs O(blocked x log n)."""

    def __init__(self) -> None:
        self.accounts: dict[str, PlainAccount] = {}
        self.jobs: dict[str, PlainJob] = {}
        self.pending: list[tuple[int, int, PlainJob]] = []
        self.running: dict[str, PlainJob] = {}
        self.cancelled: set[str] = set()
        self._seq = 0

    def open_account(self, account_id: str, balance: int = 0,
                     max_running: int | None = None) -> None:
        self.accounts[account_id] = PlainAccount(account_id, balance, max_running)

    def submit(self, job_id: str, account_id: str, cost: int, priority: int) -> bool:
        if job_id in self.jobs or cost < 0:
            raise ValueError("duplicate job id or negative cost")
        account = self.accounts[account_id]
        if cost > account.available:
            return False
        account.reserved += cost
        job = PlainJob(job_id, account_id, cost, priority)
        self.jobs[job_id] = job
        self._seq += 1
        heapq.heappush(self.pending, (-priority, self._seq, job))
        return True

    def start_next(self) -> PlainJob | None:
        pending = self.pending
        skipped: list[tuple[int, int, PlainJob]] = []
        picked: PlainJob | None = None
        while pending:
            entry = heapq.heappop(pending)
            job = entry[2]
            if job.id in self.cancelled:
                continue  # a tombstone
            account = self.accounts[job.account_id]
            if account.max_running is not None and account.running >= account.max_running:
                skipped.append(entry)
                continue
            self.running[job.id] = job
            account.running += 1
            picked = job
            break
        for entry in skipped:
            heapq.heappush(pending, entry)
        return picked

    def complete(self, job_id: str, success: bool, refund_fraction: float = 1.0) -> None:
        job = self.running.pop(job_id)
        job.done = True
        account = self.accounts[job.account_id]
        account.reserved -= job.cost
        account.running -= 1
        charge = job.cost if success else math.floor(job.cost * (1 - refund_fraction))
        account.balance -= charge

    def cancel(self, job_id: str) -> None:
        if job_id in self.running:
            raise ValueError("cannot cancel a running job")
        job = self.jobs[job_id]
        if job_id in self.cancelled:
            return
        if job.done:
            raise ValueError("job already completed")
        self.accounts[job.account_id].reserved -= job.cost
        self.cancelled.add(job_id)
