"""`Scheduler`: the job facade of the contract. Reserve at submit, settle at completion."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from projections import jobs
from projections.errors import UnknownAccount, UnknownJob
from projections.events import DEFAULT_HALF_LIFE
from projections.figures import Figures
from projections.jobs import QUEUE, QUEUE_SHARED, Job, wall_clock
from projections.ledger import JobState, Ledger
from projections.session import JournalArg, LedgerSession, SessionFacade

__all__ = ["QUEUE", "QUEUE_SHARED", "AccountView", "AccountsView", "Job", "Scheduler"]


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


class Scheduler(SessionFacade):
    """Accounts submit jobs with a cost and a priority; the highest priority, oldest job of
    an account below its cap starts next. Every call is an event in the journal.

    Every decision takes an optional `event_id`: a client that lost the answer retries
    with the same id and gets the original outcome; nothing is recorded twice.
    """

    def __init__(self, journal: JournalArg = None,
                 clock: Callable[[], int] | None = None) -> None:
        self._session = LedgerSession(journal)
        self._clock = clock or wall_clock
        self.accounts: Mapping[str, AccountView] = AccountsView(self)

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


    # -- decisions (each one is a function of projections/jobs.py) ---------------------

    def open_account(self, account_id: str, balance: int = 0, *,
                     max_running: int | None = None, share: int | None = None,
                     half_life: int = DEFAULT_HALF_LIFE, refill_rate: int | None = None,
                     refill_cap: int | None = None, at: int | None = None,
                     event_id: str | None = None) -> None:
        """Open an account with a general, non-expiring grant of `balance` credits.

        `share` turns fair share on (with usage halving every `half_life` seconds);
        `refill_rate` credits per hour up to `refill_cap` turn on a refill bucket.
        """
        jobs.open_account(self._session, account_id, balance, max_running=max_running,
                          share=share, half_life=half_life, refill_rate=refill_rate,
                          refill_cap=refill_cap, at=at, clock=self._clock, event_id=event_id)

    def submit(self, job_id: str, account_id: str, cost: int, priority: int, *,
               at: int | None = None, pool: str | None = None,
               event_id: str | None = None, user: str | None = None) -> bool:
        """Reserve `cost` for a new job; False (still recorded) when the account cannot pay.

        `user`: who submitted it, kept apart from the journal record so it can be erased."""
        return jobs.submit(self._session, job_id, account_id, cost, priority, at=at, pool=pool,
                           user=user, clock=self._clock, event_id=event_id).outcome.ok

    def start_next(self, *, at: int | None = None, event_id: str | None = None) -> Job | None:
        """Start the highest-priority, oldest pending job whose account is below its cap."""
        decision = jobs.start_next(self._session, at=at, clock=self._clock, event_id=event_id)
        return jobs.started_job(self._session, decision)

    def complete(self, job_id: str, success: bool, *, refund_fraction: float = 1.0,
                 at: int | None = None, event_id: str | None = None) -> None:
        """Settle a running job: success charges its cost, failure floor(cost * (1 - f))."""
        jobs.complete(self._session, job_id, success, refund_fraction=refund_fraction, at=at,
                      clock=self._clock, event_id=event_id)

    def cancel(self, job_id: str, *, at: int | None = None,
               event_id: str | None = None) -> None:
        """Cancel a pending job and release its reservation; cancelling twice is a no-op."""
        jobs.cancel(self._session, job_id, at=at, clock=self._clock, event_id=event_id)
