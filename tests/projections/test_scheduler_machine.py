"""A `RuleBasedStateMachine` drives a `Scheduler` (memory journal) beside a plain model.

The model is the scheduler's design note written plainly: a dict of accounts (balance, reserved,
running, cap), a dict of jobs, and `start_next` as a linear scan for the smallest
(-priority, submit order) among pending jobs whose account is below its cap. Every
rule compares what the scheduler returned (or raised) with the model; after every step
the figures, the job states and `assert_invariants` are checked; at teardown a new
Scheduler replaying the same journal must have the same `state_digest()`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from invariants import assert_invariants

from eventstore import MemoryJournal
from projections import (
    AccountExists,
    DuplicateJob,
    GPUCreditTracker,
    InvalidTransition,
    Scheduler,
    UnknownAccount,
    UnknownJob,
)

ACCOUNTS = ["a", "b", "c"]
JOB_IDS = [f"j{i}" for i in range(8)]  # fresh ids are j0, j1, ...: these are reused
FRACTIONS = [0.0, 0.1, 0.25, 0.33, 0.5, 0.9, 0.9, 1.0]
# Cost 10 at a 0.9 refund charges exactly 1; a binary-float product would floor to 0.
COSTS = st.sampled_from([0, 1, 2, 3, 5, 7, 10, 10, 12])
CAPS = st.sampled_from([None, 1, 2])
NO_EXPIRY = 2**40  # tracker grants in this machine never expire


@dataclass
class MAccount:
    balance: int
    reserved: int = 0
    running: int = 0
    max_running: int | None = None
    declared: bool = False  # opened by open_account (not only by a grant)

    @property
    def available(self) -> int:
        return self.balance - self.reserved


@dataclass
class MJob:
    account: str
    cost: int
    priority: int
    seq: int
    state: str


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.journal = MemoryJournal()
        self.ticks = itertools.count(1)
        self.clock = lambda: next(self.ticks)
        self.scheduler = Scheduler(self.journal, clock=self.clock)
        self.accounts: dict[str, MAccount] = {}
        self.jobs: dict[str, MJob] = {}
        self.seq = itertools.count()

    # -- helpers ----------------------------------------------------------------------

    def expect_error(self, error: type[Exception], call: object) -> None:
        head = self.journal.head()
        with pytest.raises(error):
            call()  # type: ignore[operator]
        assert self.journal.head() == head, "a call that raised appended events"

    def in_state(self, state: str) -> list[str]:
        return sorted(j for j, job in self.jobs.items() if job.state == state)

    # -- rules ------------------------------------------------------------------------

    @initialize(balance_a=st.integers(0, 60), cap_a=CAPS, balance_b=st.integers(0, 60),
                cap_b=CAPS)
    def open_two_accounts(self, balance_a: int, cap_a: int | None, balance_b: int,
                          cap_b: int | None) -> None:
        self.open_account("a", balance_a, cap_a)
        self.open_account("b", balance_b, cap_b)

    @rule(name=st.sampled_from(ACCOUNTS), balance=st.integers(0, 30), cap=CAPS)
    def open_account(self, name: str, balance: int, cap: int | None) -> None:
        account = self.accounts.get(name)
        if account is not None and account.declared:
            self.expect_error(AccountExists,
                              lambda: self.scheduler.open_account(name, balance, max_running=cap))
            return
        if account is not None and cap is not None and account.running > cap:
            # An account a grant opened, its jobs started, then declared with a lower cap:
            # refused, as a cap below what runs would be broken at once.
            self.expect_error(InvalidTransition,
                              lambda: self.scheduler.open_account(name, balance, max_running=cap))
            return
        self.scheduler.open_account(name, balance, max_running=cap)
        if account is None:
            account = self.accounts[name] = MAccount(0)
        account.balance += balance
        account.max_running = cap
        account.declared = True

    @rule(name=st.sampled_from(ACCOUNTS), amount=st.integers(1, 20))
    def grant_through_tracker(self, name: str, amount: int) -> None:
        """A grant through the other facade on the same journal opens or tops up."""
        GPUCreditTracker(self.journal, account=name).grant(amount, self.clock(), NO_EXPIRY)
        account = self.accounts.setdefault(name, MAccount(0))
        account.balance += amount

    def check_submit(self, job: str, name: str, cost: int, priority: int) -> None:
        if job in self.jobs:
            self.expect_error(DuplicateJob,
                              lambda: self.scheduler.submit(job, name, cost, priority))
            return
        if name not in self.accounts:
            self.expect_error(UnknownAccount,
                              lambda: self.scheduler.submit(job, name, cost, priority))
            return
        account = self.accounts[name]
        accepted = cost <= account.available
        assert self.scheduler.submit(job, name, cost, priority) is accepted, (
            f"submit {job} cost {cost} to {name} with {account.available} available"
        )
        self.jobs[job] = MJob(name, cost, priority, next(self.seq),
                              "pending" if accepted else "rejected")
        if accepted:
            account.reserved += cost

    @rule(name=st.sampled_from(ACCOUNTS), cost=COSTS, priority=st.integers(0, 2))
    def submit(self, name: str, cost: int, priority: int) -> None:
        self.check_submit(f"j{len(self.jobs)}", name, cost, priority)

    @rule(data=st.data(), over=st.sampled_from([0, 1]), priority=st.integers(0, 2))
    def submit_at_the_edge(self, data: st.DataObject, over: int, priority: int) -> None:
        """Cost exactly the available credits (accepted) or one more (rejected)."""
        name = data.draw(st.sampled_from(sorted(self.accounts)))
        cost = max(self.accounts[name].available, 0) + over
        self.check_submit(f"j{len(self.jobs)}", name, cost, priority)

    @rule(job=st.sampled_from(JOB_IDS), name=st.sampled_from(ACCOUNTS), cost=COSTS)
    def submit_reusing_an_id(self, job: str, name: str, cost: int) -> None:
        self.check_submit(job, name, cost, 0)

    @rule()
    def start_next(self) -> None:
        eligible = [
            (-job.priority, job.seq, job_id) for job_id, job in self.jobs.items()
            if job.state == "pending" and (
                self.accounts[job.account].max_running is None
                or self.accounts[job.account].running < self.accounts[job.account].max_running
            )
        ]
        head = self.journal.head()
        got = self.scheduler.start_next()
        if not eligible:
            assert got is None
            assert self.journal.head() == head
            return
        _, _, want = min(eligible)
        assert got is not None and got.id == want, f"started {got}, expected {want}"
        job = self.jobs[want]
        assert (got.account_id, got.cost, got.priority) == (job.account, job.cost, job.priority)
        job.state = "running"
        self.accounts[job.account].running += 1

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), success=st.booleans(), fraction=st.sampled_from(FRACTIONS))
    def complete_running(self, data: st.DataObject, success: bool, fraction: float) -> None:
        job_id = data.draw(st.sampled_from(self.in_state("running")))
        job = self.jobs[job_id]
        if success:
            self.scheduler.complete(job_id, True)
            charge = job.cost
        else:
            self.scheduler.complete(job_id, False, refund_fraction=fraction)
            charge = math.floor(job.cost * (1 - Fraction(str(fraction))))
        account = self.accounts[job.account]
        account.balance -= charge
        account.reserved -= job.cost
        account.running -= 1
        job.state = "succeeded" if success else "failed"

    @rule(job_id=st.sampled_from(JOB_IDS), success=st.booleans())
    def complete_any(self, job_id: str, success: bool) -> None:
        """Mostly error paths: unknown, or not running."""
        job = self.jobs.get(job_id)
        if job is None:
            self.expect_error(UnknownJob, lambda: self.scheduler.complete(job_id, success))
        elif job.state != "running":
            self.expect_error(InvalidTransition,
                              lambda: self.scheduler.complete(job_id, success))
        else:
            self.expect_error(ValueError, lambda: self.scheduler.complete(
                job_id, success, refund_fraction=1.5))

    @precondition(lambda self: any(j.state == "pending" for j in self.jobs.values()))
    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.in_state("pending")))
        job = self.jobs[job_id]
        self.scheduler.cancel(job_id)
        self.accounts[job.account].reserved -= job.cost
        job.state = "cancelled"

    @rule(job_id=st.sampled_from(JOB_IDS))
    def cancel_any(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            self.expect_error(UnknownJob, lambda: self.scheduler.cancel(job_id))
        elif job.state == "cancelled":
            head = self.journal.head()
            self.scheduler.cancel(job_id)
            assert self.journal.head() == head
        elif job.state == "pending":
            self.scheduler.cancel(job_id)
            self.accounts[job.account].reserved -= job.cost
            job.state = "cancelled"
        else:
            self.expect_error(InvalidTransition, lambda: self.scheduler.cancel(job_id))

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def figures_match_the_model(self) -> None:
        assert sorted(self.scheduler.accounts) == sorted(self.accounts)
        for name, want in self.accounts.items():
            view = self.scheduler.accounts[name]
            got = (view.balance, view.reserved, view.available, view.running, view.max_running)
            assert got == (want.balance, want.reserved, want.available, want.running,
                           want.max_running), f"account {name}"
            assert view.balance >= view.reserved >= 0
            live = sum(j.cost for j in self.jobs.values()
                       if j.account == name and j.state in ("pending", "running"))
            assert view.reserved == live
            if view.max_running is not None:
                assert view.running <= view.max_running

    @invariant()
    def job_states_match_the_model(self) -> None:
        ledger = self.scheduler.ledger()
        assert {j: job.state for j, job in ledger.jobs.items()} == {
            j: job.state for j, job in self.jobs.items()
        }

    @invariant()
    def ledger_invariants(self) -> None:
        assert_invariants(self.scheduler.ledger(), scheduler_only=True)

    def teardown(self) -> None:
        replay = Scheduler(self.journal, clock=self.clock)
        assert replay.state_digest() == self.scheduler.state_digest()
        for name in self.accounts:
            assert replay.accounts[name] == self.scheduler.accounts[name]


SchedulerMachine.TestCase.settings = settings(
    max_examples=75, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSchedulerMachine = SchedulerMachine.TestCase
