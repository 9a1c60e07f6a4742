"""Known bugs, planted by monkeypatching, that the simulator must find.

Each function takes pytest's `monkeypatch` and breaks one rule of the ledger the way a
plausible mistake would. A patch of the fold is seen only by its Python source, not by a
compiled build (projections.native): a test planting one is marked `pure_python`, and
planting fails loudly where the compiled fold runs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import pytest

from projections import (
    checkpoint,
    creditbook,
    jobqueue,
    jobs,
    ledger,
    native,
    projector,
    replay,
    session,
)
from projections.events import JobCancelled, JobCompleted


def _in_source() -> None:
    if native.in_use():
        pytest.fail("a bug planted in the fold needs its Python source: mark the test "
                    "pytest.mark.pure_python")


def expiry_order_reversed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches are drawn latest expiry first."""
    _in_source()
    init = creditbook.Batch.__init__

    def reversed_init(self: creditbook.Batch, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        priority, never, expiry, general, order = self.key
        self.key = (priority, not never, -expiry, general, order)

    monkeypatch.setattr(creditbook.Batch, "__init__", reversed_init)


def off_by_one_at_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credits still count at their expiry time (valid for t <= expiry, not t < expiry)."""
    _in_source()
    monkeypatch.setattr(creditbook.Batch, "is_expired_at",
                        lambda self, time: self.expiry is not None and self.expiry < time)


def double_release_on_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling a pending job returns its reserved credits twice."""
    _in_source()
    cancel = ledger.Ledger._cancel

    def twice(self: ledger.Ledger, position: int, event_id: str, time: int,
              event: JobCancelled) -> Any:
        job = self.jobs.get(event.job)
        hold = None
        if job is not None and job.state == ledger.PENDING:
            hold = self.accounts[job.account].book.holds.get(job.id)
        portions = list(hold.portions) if hold is not None else []
        outcome = cancel(self, position, event_id, time, event)
        if portions and job is not None:  # (portions come only from a pending job)
            self.accounts[job.account].book._return(portions, time)
        return outcome

    monkeypatch.setattr(ledger.Ledger, "_cancel", twice)


def retry_appended_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry with an id already recorded is not recognised: it is decided again."""
    build = session.LedgerSession._build

    def forgetful(self: session.LedgerSession, *args: Any) -> Any:
        decide, event_id, *rest = args
        if event_id is not None and self.journal.get(event_id) is not None:
            event_id = None
        return build(self, decide, event_id, *rest)

    monkeypatch.setattr(session.LedgerSession, "_build", forgetful)


def late_event_not_reprojected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A late event is applied where it arrives, after everything, instead of at its
    place on the timeline with everything after it folded again."""

    def on_top(self: projector.Projector, late: Any, **_: Any) -> Any:
        last = self.ledger.last
        self.ledger.last = (-(2**63), 0)
        try:
            return projector.apply_recorded(self.ledger, late)
        finally:
            self.ledger.last = max(last, self.ledger.last)

    monkeypatch.setattr(projector.Projector, "_reproject", on_top)


def newest_started_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """start_next starts the newest pending job at equal priority, not the oldest (a
    queue keyed by the submit's time and position negated)."""
    _in_source()

    def newest_first(self: jobqueue.JobQueue, account: ledger.AccountState, priority: int,
                     time: int, position: int, job_id: str,
                     accounts: dict[str, ledger.AccountState],
                     jobs: dict[str, ledger.JobState]) -> None:
        heapq.heappush(account.queue, (-priority, -time, -position, job_id))
        self.register(account, accounts, jobs)

    monkeypatch.setattr(jobqueue.JobQueue, "enqueue", newest_first)


def grant_priority_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches are drawn by expiry alone: a grant's priority is not looked at."""
    _in_source()
    init = creditbook.Batch.__init__

    def by_expiry(self: creditbook.Batch, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _, never, expiry, general, order = self.key
        self.key = (creditbook.DEFAULT_GRANT_PRIORITY, never, expiry, general, order)

    monkeypatch.setattr(creditbook.Batch, "__init__", by_expiry)


def running_job_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A running job can be cancelled, as a pending one: the decision accepts it and the
    fold cancels it, releasing what it still holds."""
    _in_source()
    cancel = ledger.Ledger._cancel

    def as_pending(self: ledger.Ledger, position: int, event_id: str, time: int,
                   event: JobCancelled) -> Any:
        job = self.jobs.get(event.job)
        if job is not None and job.state == ledger.RUNNING:
            job.state = ledger.PENDING
            self.accounts[job.account].running -= 1
        return cancel(self, position, event_id, time, event)

    def decide(session: session.LedgerSession, job_id: str, *, at: int | None = None,
               clock: Any = jobs.wall_clock, event_id: str | None = None,
               allow_far_times: bool = True) -> Any:
        def build(draft: Any) -> Any:
            job = draft.ledger.jobs.get(job_id)
            if job is None:
                raise jobs.UnknownJob(f"unknown job {job_id!r}")
            if job.state == ledger.CANCELLED:
                return []
            if job.state not in (ledger.PENDING, ledger.RUNNING):
                raise jobs.InvalidTransition(f"job {job_id!r} is {job.state}")
            when = jobs._event_time(draft, at, clock, allow_far_times)
            built = [draft.event(when, JobCancelled(job_id), job.account)]
            jobs.try_in_past(session, draft, built)
            return built

        return session.decide(jobs.job_locks(session.ledger, job_id), build,
                              event_id=event_id, command=("cancel", job_id, at))

    monkeypatch.setattr(ledger.Ledger, "_cancel", as_pending)
    monkeypatch.setattr(jobs, "cancel", decide)


class _Forgotten(list[Any]):
    """A list that keeps nothing added to it."""

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


def revisions_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A late event's revisions are not recorded: what it changed of the outcomes
    already reported is lost (`Projector.revisions` keeps nothing)."""
    init = projector.Projector.__init__

    def forgetting(self: projector.Projector, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.revisions = _Forgotten()

    monkeypatch.setattr(projector.Projector, "__init__", forgetting)


def known_one_position_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """A question as known at a position is answered from the events before it: the
    event recorded at that position is left out."""
    as_known = session.LedgerSession.ledger_as_known

    def one_early(self: session.LedgerSession, as_known_at: int, time: int | None) -> Any:
        return as_known(self, max(0, as_known_at - 1), time)

    monkeypatch.setattr(session.LedgerSession, "ledger_as_known", one_early)


def reversal_of_reversal_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reversal of a reversal does not put its event back: every event any reversal
    names stays out of the fold."""

    def every_target(reversals: Any) -> frozenset[str]:
        return frozenset(reversals.values())

    for module in (projector, replay, checkpoint):
        monkeypatch.setattr(module, "reversed_ids", every_target)


def void_takes_used_credits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A void takes back the grant's credits already used as well as its unused ones:
    what usage drew from it becomes debt again."""
    _in_source()
    # (book, batch, credits drawn from it) by (id(book), id(batch)): both kept alive, so
    # neither id is reused while the bug is planted.
    used: dict[tuple[int, int], tuple[Any, creditbook.Batch, int]] = {}
    take_head = creditbook.CreditBook._take_head
    void = creditbook.CreditBook.void

    def noting(self: creditbook.CreditBook, heap: list[creditbook.Batch],
               amount: int) -> tuple[creditbook.Batch, int]:
        batch, take = take_head(self, heap, amount)
        key = (id(self), id(batch))
        drawn = used[key][2] if key in used else 0
        used[key] = (self, batch, drawn + take)
        return batch, take

    def taking_back(self: creditbook.CreditBook, grant_id: str, time: int,
                    spare: creditbook.Batch | None = None) -> Any:
        lapsed = void(self, grant_id, time, spare)
        for key, (book, batch, drawn) in list(used.items()):
            if book is self and batch.grant_id == grant_id and batch is not spare:
                del used[key]
                self.debt[batch.pool] = self.debt.get(batch.pool, 0) + drawn
        return lapsed

    monkeypatch.setattr(creditbook.CreditBook, "_take_head", noting)
    monkeypatch.setattr(creditbook.CreditBook, "void", taking_back)


def refill_remainder_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refill accrues whole credits only: the credit-seconds short of the next credit are
    dropped at every event instead of carried, so a slow refill touched often never
    accrues at all."""
    _in_source()
    due = ledger.refill_due

    def forgetful(account: ledger.AccountState, time: int) -> tuple[int, int]:
        add, _carry = due(account, time)
        return add, 0

    monkeypatch.setattr(ledger, "refill_due", forgetful)


def refill_accrued_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event accrues its account's refill twice over the same span: the span's start
    is kept for the second accrual, as if two paths each brought the account up to time."""
    _in_source()
    refill = ledger.Ledger._refill

    def twice(self: ledger.Ledger, account: ledger.AccountState, time: int) -> None:
        since = account.refill_anchor
        refill(self, account, time)
        account.refill_anchor = since
        refill(self, account, time)

    monkeypatch.setattr(ledger.Ledger, "_refill", twice)


def usage_without_decay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fair-share usage never decays: a completion adds its charge as it is, not weighted
    by 2 ** (time / half-life), so an account that used much long ago stays behind one
    that used less just now."""
    _in_source()
    complete = ledger.Ledger._complete

    def undecayed(self: ledger.Ledger, position: int, event_id: str, time: int,
                  event: JobCompleted) -> Any:
        job = ledger._job(self.jobs, event.job)
        account = None if job is None else self.accounts.get(job.account)
        before = None if account is None else (account.usage_whole, account.usage_log2)
        done = complete(self, position, event_id, time, event)
        if account is not None and before is not None \
                and (account.usage_whole, account.usage_log2) != before:
            whole, rest = before
            total = ledger._log2_add(whole + rest if rest != -math.inf else rest,
                                     math.log2(done.charge))
            account.usage_whole, account.usage_log2 = ledger._split_log2(0, total)
            self.queue.register(account, self.accounts, self.jobs, force=True)
        return done

    monkeypatch.setattr(ledger.Ledger, "_complete", undecayed)


def lineage_overpaid(monkeypatch: pytest.MonkeyPatch) -> None:
    """A completion names grants that paid one credit more than it charged (its outcome
    changed as `Ledger.apply` returns it, where every caller of the fold reads it, the
    compiled build's too: no `pure_python` mark needed). Not in `BUGS`: the lineage
    checks, after each op and on the whole journal, are tested on it directly."""
    apply = ledger.Ledger.apply

    def overpaid(self: ledger.Ledger, position: int, event_id: str, time: int,
                 event: Any) -> Any:
        outcome = apply(self, position, event_id, time, event)
        if outcome.type == "complete" and outcome.paid_by:
            (grant, amount), *rest = outcome.paid_by
            outcome = outcome._replace(paid_by=((grant, amount + 1), *rest))
        return outcome

    monkeypatch.setattr(ledger.Ledger, "apply", overpaid)


BUGS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "expiry order reversed": expiry_order_reversed,
    "off by one at expiry": off_by_one_at_expiry,
    "double release on cancel": double_release_on_cancel,
    "retry appended twice": retry_appended_twice,
    "late event not re-projected": late_event_not_reprojected,
    "newest started first": newest_started_first,
    "grant priority ignored": grant_priority_ignored,
    "running job cancelled": running_job_cancelled,
    "revisions not recorded": revisions_not_recorded,
    "as known one position early": known_one_position_early,
    "reversal of a reversal ignored": reversal_of_reversal_ignored,
    "void takes used credits": void_takes_used_credits,
    "refill remainder dropped": refill_remainder_dropped,
    "refill accrued twice": refill_accrued_twice,
    "fair-share usage without decay": usage_without_decay,
}
