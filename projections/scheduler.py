"""`Scheduler`: the job facade of the contract. Reserve at submit, settle at completion."""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    normalise_pool,
    require_fraction,
    require_int,
    require_name,
    require_non_negative_int,
    require_positive_int,
)
from projections.figures import Figures
from projections.ledger import CANCELLED, PENDING, RUNNING, JobState, Ledger
from projections.outcomes import Outcome
from projections.session import JournalArg, LedgerSession, SessionFacade


@dataclass(frozen=True, slots=True)
class Job:
    """A job as `start_next` hands it out."""

    id: str
    account_id: str
    cost: int
    priority: int


@dataclass(frozen=True, slots=True)
class AccountView:
    """An account's figures at the moment it was read (a copy: changing it changes nothing)."""

    id: str
    balance: int  # active + held - debt
    reserved: int  # held for pending and running jobs
    available: int  # balance - reserved
    running: int
    max_running: int | None
    pools: Mapping[str, int]


class AccountsView(Mapping[str, AccountView]):
    """Read-only mapping of account id to its current figures."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def __getitem__(self, account_id: str) -> AccountView:
        return self._scheduler._view(account_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._scheduler._account_names())

    def __len__(self) -> int:
        return len(self._scheduler._account_names())


QUEUE = "*scheduler-queue*"
"""Lock key of the job queue: start_next holds it alone; every other job decision holds
it shared, with its account's key, so decisions on different accounts run side by side."""
QUEUE_SHARED = f"shared:{QUEUE}"


@dataclass(frozen=True, slots=True)
class _Trial:
    """An event not yet recorded, as the projector's trial fold reads it."""

    position: int
    id: str
    type: str
    time: int
    payload: Any


def _wall_clock() -> int:
    return int(_time.time())


class Scheduler(SessionFacade):
    """Accounts submit jobs with a cost and a priority; the highest priority, oldest job of
    an account below its cap starts next. Every call is an event in the journal.

    Every decision takes an optional `event_id`: a client that lost the answer retries
    with the same id and gets the original outcome; nothing is recorded twice.
    """

    def __init__(self, journal: JournalArg = None,
                 clock: Callable[[], int] | None = None) -> None:
        self._session = LedgerSession(journal)
        self._clock = clock or _wall_clock
        self.accounts: Mapping[str, AccountView] = AccountsView(self)

    # -- time ----------------------------------------------------------------------------

    def _time(self, at: int | None) -> int:
        if at is not None:
            return require_int("at", at)
        return self._session.now(require_int("clock()", self._clock()))

    # -- reading ---------------------------------------------------------------------------

    def _account_names(self) -> list[str]:
        with self._session.reading() as ledger:
            return sorted(n for n, a in ledger.accounts.items() if a.opened)

    def _view(self, account_id: str) -> AccountView:
        session = self._session
        with session.reading() as ledger:
            account = ledger.accounts.get(account_id)
            if account is None or not account.opened:
                raise UnknownAccount(f"unknown account {account_id!r}")
            f = Figures.of(account, session.now(self._clock()))
            return AccountView(account_id, f.balance, f.reserved, f.available,
                               account.running, account.max_running, f.pools)

    def job_state(self, job_id: str, *, as_known_at: int | None = None) -> str:
        """pending, running, succeeded, failed, cancelled or rejected (as known at a position)."""
        if as_known_at is not None:
            return self._job(self._session.ledger_as_known(as_known_at, None), job_id).state
        with self._session.reading() as ledger:
            return self._job(ledger, job_id).state

    @staticmethod
    def _job(ledger: Ledger, job_id: str) -> JobState:
        job = ledger.jobs.get(job_id)
        if job is None:
            raise UnknownJob(f"unknown job {job_id!r}")
        return job


    # -- decisions -------------------------------------------------------------------------

    def _decide(self, locks: Sequence[str],
                build: Callable[[Ledger], Sequence[tuple[NewEvent, DomainEvent]]],
                event_id: str | None = None) -> list[Outcome]:
        return self._session.decide(locks, build, event_id=event_id)

    def _try_in_past(self, ledger: Ledger, built: Sequence[tuple[NewEvent, DomainEvent]],
                     *, protect_recorded: bool = True) -> list[Outcome] | None:
        """For events placed before the latest recorded one: their outcomes on the
        corrected timeline; raise if any is invalid there or (`protect_recorded`) would
        make a recorded event invalid. None when nothing is in the past.

        A late submit may revise what came after it (that is what late events do, and
        the revisions say so); a job transition placed in the past may not."""
        if not built or min(new.time for new, _ in built) >= ledger.last[0]:
            return None
        head = self._session.projector.position
        trial = [_Trial(head + 1 + i, new.id, new.type, new.time, new.payload)
                 for i, (new, _) in enumerate(built)]
        outcomes, conflicts = self._session.projector.trial(trial)
        for outcome in outcomes:
            if outcome.anomaly:
                raise InvalidTransition(f"at time {outcome.time}: {outcome.reason}")
        if conflicts and protect_recorded:
            c = conflicts[0]
            raise InvalidTransition(
                f"placing this at time {built[0][0].time} would invalidate the {c.type} "
                f"{c.event_id!r} recorded at position {c.position} (time {c.time}): "
                f"{c.reason}; decide it now instead (omit `at`)")
        return outcomes

    def open_account(self, account_id: str, balance: int = 0, *,
                     max_running: int | None = None, share: int | None = None,
                     half_life: int = DEFAULT_HALF_LIFE, refill_rate: int | None = None,
                     refill_cap: int | None = None, at: int | None = None,
                     event_id: str | None = None) -> None:
        """Open an account with a general, non-expiring grant of `balance` credits.

        `share` turns fair share on (with usage halving every `half_life` seconds);
        `refill_rate` credits per hour up to `refill_cap` turn on a refill bucket.
        """
        require_name("account_id", account_id)
        require_non_negative_int("balance", balance)
        if max_running is not None:
            require_positive_int("max_running", max_running)
        opened = AccountOpened(account_id, max_running, share, half_life, refill_rate,
                               refill_cap)
        session = self._session

        def build(ledger: Ledger) -> list[tuple[NewEvent, DomainEvent]]:
            existing = ledger.accounts.get(account_id)
            if existing is not None and existing.declared:
                raise AccountExists(f"account {account_id!r} is already open; "
                                    "grant credits to it instead")
            when = self._time(at)
            events = [session.event(when, opened, account_id)]
            if balance:
                events.append(session.event(when, CreditsGranted(account_id, balance), account_id))
            return events

        self._decide([account_id], build, event_id)

    def submit(self, job_id: str, account_id: str, cost: int, priority: int, *,
               at: int | None = None, pool: str | None = None,
               event_id: str | None = None, user: str | None = None) -> bool:
        """Reserve `cost` for a new job; False (still recorded) when the account cannot pay.

        `user`: who submitted it, kept apart from the journal record so it can be erased."""
        require_name("job_id", job_id)
        require_name("account_id", account_id)
        require_non_negative_int("cost", cost)
        require_int("priority", priority)
        event = JobSubmitted(account_id, job_id, cost, priority, normalise_pool(pool),
                             user=user)
        session = self._session

        def build(ledger: Ledger) -> list[tuple[NewEvent, DomainEvent]]:
            if job_id in ledger.jobs:
                raise DuplicateJob(f"job {job_id!r} was submitted before "
                                   f"({ledger.jobs[job_id].state}); job ids are unique")
            account = ledger.accounts.get(account_id)
            if account is None or not account.opened:
                known = sorted(n for n, a in ledger.accounts.items() if a.opened)
                raise UnknownAccount(f"unknown account {account_id!r}; open it first "
                                     f"(known: {', '.join(known[:10]) or 'none'})")
            built = [session.event(self._time(at), event, account_id)]
            tried = self._try_in_past(ledger, built, protect_recorded=False)
            if tried and not tried[0].ok and tried[0].reason == f"unknown account {account_id!r}":
                raise UnknownAccount(f"account {account_id!r} did not exist at time "
                                     f"{built[0][0].time}")
            return built

        (outcome,) = self._decide([account_id, QUEUE_SHARED], build, event_id)
        return outcome.ok

    def start_next(self, *, at: int | None = None, event_id: str | None = None) -> Job | None:
        """Start the highest-priority, oldest pending job whose account is below its cap."""
        session = self._session
        picked: list[JobState] = []

        def build(ledger: Ledger) -> list[tuple[NewEvent, DomainEvent]]:
            when = self._time(at)
            if when >= ledger.last[0]:
                job = ledger.next_job()
                if job is None:
                    return []
                picked[:] = [job]  # a build may run twice: keep its last pick
                return [session.event(when, JobStarted(job.id), job.account)]
            # In the past: the first job startable then whose start would not invalidate
            # anything recorded since (the view is a throwaway copy).
            view = session.projector.state_at(when)
            while (job := view.next_job()) is not None:
                built = [session.event(when, JobStarted(job.id), job.account)]
                try:
                    self._try_in_past(ledger, built)
                except InvalidTransition:
                    job.state = CANCELLED  # skip it in the throwaway view
                    continue
                picked[:] = [job]  # a build may run twice: keep its last pick
                return built
            return []

        # Every account may be considered: the queue's exclusive lock excludes every
        # submit, completion and cancel (they hold it shared) for this one decision.
        self._decide([QUEUE], build, event_id)
        if not picked:
            return None
        job = picked[0]
        return Job(job.id, job.account, job.cost, job.priority)

    def complete(self, job_id: str, success: bool, *, refund_fraction: float = 1.0,
                 at: int | None = None, event_id: str | None = None) -> None:
        """Settle a running job: success charges its cost, failure floor(cost * (1 - f))."""
        require_name("job_id", job_id)
        if not isinstance(success, bool):
            raise ValueError(f"success must be True or False, got {success!r}")
        require_fraction("refund_fraction", refund_fraction)
        session = self._session

        def build(ledger: Ledger) -> list[tuple[NewEvent, DomainEvent]]:
            job = ledger.jobs.get(job_id)
            if job is None:
                raise UnknownJob(f"unknown job {job_id!r}")
            if job.state != RUNNING:
                raise InvalidTransition(f"job {job_id!r} is {job.state}; only a running job "
                                        "can complete")
            event = JobCompleted(job_id, success, refund_fraction)
            built = [session.event(self._time(at), event, job.account)]
            self._try_in_past(ledger, built)
            return built

        self._decide(self._job_locks(job_id), build, event_id)

    def cancel(self, job_id: str, *, at: int | None = None,
               event_id: str | None = None) -> None:
        """Cancel a pending job and release its reservation; cancelling twice is a no-op."""
        require_name("job_id", job_id)
        session = self._session

        def build(ledger: Ledger) -> list[tuple[NewEvent, DomainEvent]]:
            job = ledger.jobs.get(job_id)
            if job is None:
                raise UnknownJob(f"unknown job {job_id!r}")
            if job.state == CANCELLED:
                return []
            if job.state != PENDING:
                raise InvalidTransition(f"job {job_id!r} is {job.state}; only a pending job "
                                        "can be cancelled")
            built = [session.event(self._time(at), JobCancelled(job_id), job.account)]
            self._try_in_past(ledger, built)
            return built

        self._decide(self._job_locks(job_id), build, event_id)

    def _job_locks(self, job_id: str) -> list[str]:
        job = self._session.ledger.jobs.get(job_id)
        return [QUEUE_SHARED] + ([job.account] if job is not None else [])
