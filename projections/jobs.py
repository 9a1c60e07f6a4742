"""The job decisions: open an account, submit, start the next job, complete, cancel.

Each function decides one call on a `LedgerSession` and returns the `Decision` (the
events recorded and the fold's outcome of each). The `Scheduler` facade answers the
contract from it (`submit` -> accepted or not); the HTTP service answers with more of it
(the position, the reason of a rejection, what a completion charged). One way to decide,
whoever asks.

`clock()` gives the wall-clock time of a live decision (`at` omitted): the event then
takes the later of it and the latest event time, never an earlier one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from eventstore import NewEvent
from projections.errors import (
    AccountExists,
    DuplicateJob,
    InvalidTransition,
    UnknownAccount,
    UnknownJob,
)
from projections.events import (
    DEFAULT_HALF_LIFE,
    AccountOpened,
    CreditsGranted,
    DomainEvent,
    JobCancelled,
    JobCompleted,
    JobStarted,
    JobSubmitted,
    far_live_time_problem,
    normalise_pool,
    require_int,
    require_name,
    require_non_negative_int,
)
from projections.ledger import CANCELLED, PENDING, RUNNING, JobState, Ledger, cap_below_running
from projections.placing import try_in_past
from projections.session import QUEUE as QUEUE
from projections.session import QUEUE_SHARED as QUEUE_SHARED
from projections.session import Decision, Draft, LedgerSession, job_key
from projections.validation import clock_time, spelling

Clock = Callable[[], int]
Built = list[tuple[NewEvent, DomainEvent]]



def wall_clock() -> int:
    """Now, in whole seconds since the Unix epoch."""
    return int(time.time())


@dataclass(frozen=True, slots=True)
class Job:
    """A job as `start_next` hands it out."""

    id: str
    account_id: str
    cost: int
    priority: int


def _event_time(draft: Draft, at: int | None, clock: Clock, allow_far_times: bool) -> int:
    """The caller's time, else the live one; `allow_far_times=False` refuses a live time
    after 2200-01-01, which only a far latest event can give (the service's rule; the
    facade has always taken it)."""
    if at is not None:
        given = require_int("at", at)
        # Decided now (`decision(..., live=True)`): its event is recorded at the latest
        # event time if `at` is earlier, so it is decided there, not at `at`.
        return draft.now(given) if draft.live else given
    when = draft.now(clock_time(clock))
    # A retry rebuilds a decision the journal holds at the time it was taken: the rule is
    # for new decisions (the caller that took this one may have allowed far times).
    why = (None if allow_far_times or draft.replaying
           else far_live_time_problem(when, draft.ledger.last[1]))
    if why is not None:
        raise ValueError(why)
    return when


def job_locks(ledger: Ledger, job_id: str) -> list[str]:
    """The keys a decision about an existing job holds: the queue (shared) and the job's
    account, as `ledger` knows it (a stale view is completed by `decide`)."""
    job = ledger.jobs.get(job_id)
    return [QUEUE_SHARED] + ([job.account] if job is not None else [])


def open_account(session: LedgerSession, account_id: str, balance: int = 0, *,
                 max_running: int | None = None, share: int | None = None,
                 half_life: int = DEFAULT_HALF_LIFE, refill_rate: int | None = None,
                 refill_cap: int | None = None, at: int | None = None,
                 clock: Clock = wall_clock, event_id: str | None = None,
                 allow_far_times: bool = True) -> Decision:
    """Open an account with a general, non-expiring grant of `balance` credits (two
    events when `balance` > 0). `AccountExists` when an account event opened it before."""
    require_name("account_id", account_id)
    require_non_negative_int("balance", balance)
    opened = AccountOpened(account_id, max_running, share, half_life, refill_rate, refill_cap)

    def build(draft: Draft) -> Built:
        existing = draft.ledger.accounts.get(account_id)
        if existing is not None and existing.declared:
            raise AccountExists(f"account {account_id!r} is already open; "
                                "grant credits to it instead")
        if existing is not None and max_running is not None and existing.running > max_running:
            raise InvalidTransition(cap_below_running(account_id, existing.running,
                                                      max_running))
        when = _event_time(draft, at, clock, allow_far_times)
        events = [draft.event(when, opened, account_id)]
        if balance:
            events.append(draft.event(when, CreditsGranted(account_id, balance), account_id))
        # Placed before the latest event, it must also hold where it lands, and leave
        # every recorded start valid (a cap there would make a running job pending).
        try_in_past(session, draft, events)
        return events

    return session.decide([account_id], build, event_id=event_id,
                          command=("open_account", opened, balance, at))


def submit(session: LedgerSession, job_id: str, account_id: str, cost: int, priority: int,
           *, at: int | None = None, pool: str | None = None, user: str | None = None,
           clock: Clock = wall_clock, event_id: str | None = None,
           allow_far_times: bool = True) -> Decision:
    """Submit a job, reserving `cost`; the outcome says whether it was accepted (a
    rejection is recorded too) and why not. `user`: who submitted it, kept apart from
    the journal record so it can be erased."""
    # The caller's argument names first; the event checks the rest of its fields.
    require_name("job_id", job_id)
    require_name("account_id", account_id)
    event = JobSubmitted(account_id, job_id, cost, priority, normalise_pool(pool), user=user)

    def build(draft: Draft) -> Built:
        ledger = draft.ledger
        if job_id in ledger.jobs:
            raise DuplicateJob(f"job {job_id!r} was submitted before "
                               f"({ledger.jobs[job_id].state}); job ids are unique")
        reversed_submit = session.reversed_submit_of(job_id, ledger.reversals) \
            if ledger.reversals and not draft.replaying else None
        if reversed_submit is not None:
            raise DuplicateJob(f"job {job_id!r} was submitted before, by {reversed_submit!r}, "
                               "which a reversal took out; job ids are unique for the "
                               "journal's lifetime (a reversal of that reversal brings the "
                               "submit back): submit under a new job id")
        account = ledger.accounts.get(account_id)
        if account is None or not account.opened:
            # Imported here: `projections.queries` is not the facades' to load.
            from projections.queries.common import unknown_account
            raise unknown_account(account_id, sorted(
                n for n, a in ledger.accounts.items() if a.opened), advice="open it first")
        built = [draft.event(_event_time(draft, at, clock, allow_far_times), event, account_id)]
        # Placed in the past it may re-decide jobs still pending (a revision), never
        # make a recorded start, completion or cancel invalid: a job handed to a worker
        # would become rejected, its charge vanish, its place go to another job.
        tried = try_in_past(session, draft, built)
        if tried and not tried[0].ok and tried[0].reason == f"unknown account {account_id!r}":
            time = built[0][0].time
            opened = session.opened_after(account_id, time)
            raise UnknownAccount(f"account {account_id!r} did not exist at time {time}" + (
                f"; it is opened at time {opened}: submit at that time or later"
                if opened is not None else ""))
        return built

    # The job id's key too: another account's submit of this id waits, then finds it.
    return session.decide([account_id, QUEUE_SHARED, job_key(job_id)], build,
                          event_id=event_id, command=("submit", event, at))


def start_next(session: LedgerSession, *, at: int | None = None, clock: Clock = wall_clock,
               event_id: str | None = None, allow_far_times: bool = True) -> Decision:
    """Start the highest-priority, oldest pending job whose account is below its cap; no
    event when none can start (see `started_job`)."""

    def build(draft: Draft) -> Built:
        ledger = draft.ledger
        when = _event_time(draft, at, clock, allow_far_times)
        original = draft.original
        if original is not None and original.type == "start" and original.time == when:
            # A retry: the job it started then. The state it was decided on holds only
            # the accounts it locked, and a start placed in the past was chosen among
            # every account's jobs by trying each on the timeline, which holds the
            # start now. The append checks the rebuilt event against the recorded one.
            job_id = original.payload.get("job")
            job = ledger.jobs.get(job_id) if isinstance(job_id, str) else None
            if job is not None and job.state == PENDING:
                return [draft.event(when, JobStarted(job.id), job.account)]
        if when >= ledger.last[0]:
            job = ledger.next_job(when)
            if job is None:
                return []
            return [draft.event(when, JobStarted(job.id), job.account)]
        # In the past: the first job startable then whose start would not invalidate
        # anything recorded since (the view is a throwaway copy).
        view = session.projector.state_at(when)
        while (job := view.next_job(when)) is not None:
            built = [draft.event(when, JobStarted(job.id), job.account)]
            try:
                try_in_past(session, draft, built)
            except InvalidTransition:
                job.state = CANCELLED  # skip it in the throwaway view
                draft.discard()  # the next candidate's start takes the decision's id
                continue
            return built
        return []

    # Every account may be considered: the queue's exclusive lock excludes every
    # submit, completion and cancel (they hold it shared) for this one decision.
    return session.decide([QUEUE], build, event_id=event_id, command=("start_next", at))


def started_job(session: LedgerSession, decision: Decision) -> Job | None:
    """The job a `start_next` decision started (None: none could start)."""
    started = next((e for e in decision.events if isinstance(e, JobStarted)), None)
    if started is None:
        return None
    with session.lock:
        job = session.ledger.jobs.get(started.job)
        if job is None and decision.outcomes:
            # A retry's job whose submit a reversal took out since: as it was started.
            job = session.job_before(decision.outcome.event_id, started.job)
        if job is None:
            raise UnknownJob(f"unknown job {spelling(started.job)}")
        return Job(job.id, job.account, job.cost, job.priority)


def _not_before_submit(draft: Draft, job: JobState, what: str, at: int | None,
                       when: int) -> None:
    """Refuse a step the caller placed (`at`) before its job's submit: on the corrected
    timeline the job would not exist yet, which the fold can only call an unknown job."""
    submitted = job.order[0] if job.order is not None else None
    if at is None or draft.live or draft.replaying or submitted is None or when >= submitted:
        return
    raise InvalidTransition(f"job {job.id!r} was submitted at time {submitted}; a {what} at "
                            f"time {when} would come before it: give a time of {submitted} "
                            "or later, or no time (now)")


def complete(session: LedgerSession, job_id: str, success: bool, *,
             refund_fraction: float = 1.0, at: int | None = None, clock: Clock = wall_clock,
             event_id: str | None = None, allow_far_times: bool = True) -> Decision:
    """Settle a running job: success charges its cost, failure floor(cost * (1 - f)); the
    outcome's `charge` is what it charged."""
    require_name("job_id", job_id)
    event = JobCompleted(job_id, success, refund_fraction)  # checks success and the fraction

    def build(draft: Draft) -> Built:
        job = draft.ledger.jobs.get(job_id)
        if job is None:
            raise UnknownJob(f"unknown job {spelling(job_id)}")
        if job.state != RUNNING:
            raise InvalidTransition(f"job {job_id!r} is {job.state}; only a running job "
                                    "can complete")
        when = _event_time(draft, at, clock, allow_far_times)
        _not_before_submit(draft, job, "completion", at, when)
        built = [draft.event(when, event, job.account)]
        try_in_past(session, draft, built)
        return built

    return session.decide(job_locks(session.ledger, job_id), build, event_id=event_id,
                          command=("complete", job_id, success, refund_fraction, at))


def cancel(session: LedgerSession, job_id: str, *, at: int | None = None,
           clock: Clock = wall_clock, event_id: str | None = None,
           allow_far_times: bool = True) -> Decision:
    """Cancel a pending job and release its reservation; a cancelled job records nothing."""
    require_name("job_id", job_id)

    def build(draft: Draft) -> Built:
        job = draft.ledger.jobs.get(job_id)
        if job is None:
            raise UnknownJob(f"unknown job {spelling(job_id)}")
        if job.state == CANCELLED:
            return []
        if job.state != PENDING:
            raise InvalidTransition(f"job {job_id!r} is {job.state}; only a pending job "
                                    "can be cancelled")
        when = _event_time(draft, at, clock, allow_far_times)
        _not_before_submit(draft, job, "cancel", at, when)
        built = [draft.event(when, JobCancelled(job_id), job.account)]
        try_in_past(session, draft, built)
        return built

    return session.decide(job_locks(session.ledger, job_id), build, event_id=event_id,
                          command=("cancel", job_id, at))
