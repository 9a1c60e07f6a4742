"""`Scheduler`: the job facade of the contract. Reserve at submit, settle at completion."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from projections import jobs
from projections.errors import UnknownJob
from projections.events import DEFAULT_HALF_LIFE
from projections.figures import Figures
from projections.jobs import QUEUE, QUEUE_SHARED, Job, wall_clock
from projections.ledger import AccountState, JobState, Ledger
from projections.session import JournalArg, LedgerSession, SessionFacade
from projections.validation import require_clock

__all__ = ["QUEUE", "QUEUE_SHARED", "AccountView", "AccountsView", "Job", "Scheduler"]


class AccountView:
    """A read-only, live view of one account: every attribute reads the account's figures
    as they stand when it is read, so a view kept across calls follows them, as a view of
    a mapping does. Nothing can be set through it; to keep figures that do not move, copy
    the values out (`view.balance`, ...)."""

    __slots__ = ("_id", "_scheduler")

    _scheduler: Scheduler
    _id: str

    def __init__(self, scheduler: Scheduler, account_id: str) -> None:
        object.__setattr__(self, "_scheduler", scheduler)
        object.__setattr__(self, "_id", account_id)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"account figures are read-only; cannot set {name!r}: "
                             "change the account through the scheduler's calls")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"account figures are read-only; cannot delete {name!r}")

    def _now(self) -> _Reading:
        return self._scheduler._reading(self._id)

    @property
    def id(self) -> str:
        return self._id

    @property
    def balance(self) -> int:
        """Active + held - debt."""
        return self._now().figures.balance

    @property
    def reserved(self) -> int:
        """Held for pending and running jobs."""
        return self._now().figures.reserved

    @property
    def available(self) -> int:
        """Balance - reserved."""
        return self._now().figures.available

    @property
    def running(self) -> int:
        return self._now().running

    @property
    def max_running(self) -> int | None:
        return self._now().max_running

    @property
    def pools(self) -> Mapping[str, int]:
        return self._now().figures.pools

    def _values(self) -> tuple[object, ...]:
        now = self._now()
        f = now.figures
        return (self._id, f.balance, f.reserved, f.available, now.running, now.max_running,
                f.pools)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AccountView):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # its figures move: not a dict key

    def __repr__(self) -> str:
        names = ("id", "balance", "reserved", "available", "running", "max_running", "pools")
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._values(), strict=True))
        return f"AccountView({fields})"


@dataclass(frozen=True, slots=True)
class _Reading:
    """One account's figures and job counts, read once."""

    figures: Figures
    running: int
    max_running: int | None


class AccountsView(Mapping[str, AccountView]):
    """Read-only mapping of account id to a live view of its figures."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def __getitem__(self, account_id: str) -> AccountView:
        self._scheduler._opened(account_id)  # an unknown account is a KeyError here
        return AccountView(self._scheduler, account_id)

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
        self._clock = require_clock(clock) or wall_clock
        self._session = LedgerSession(journal)
        self._accounts = AccountsView(self)

    @property
    def accounts(self) -> Mapping[str, AccountView]:
        """Read-only view: account id to its live figures (`.balance` `.reserved`
        `.available` `.running`); a property, so the view itself cannot be replaced."""
        return self._accounts

    # -- reading ---------------------------------------------------------------------------

    def _account_names(self) -> list[str]:
        with self._session.reading() as ledger:
            return sorted(n for n, a in ledger.accounts.items() if a.opened)

    @staticmethod
    def _opened_in(ledger: Ledger, account_id: str) -> AccountState:
        account = ledger.accounts.get(account_id)
        if account is None or not account.opened:
            # Named as a submit names it: the open accounts, and one it may have meant.
            # Imported here: `projections.queries` is not the facades' to load.
            from projections.queries.common import unknown_account
            raise unknown_account(account_id, sorted(
                name for name, state in ledger.accounts.items() if state.opened))
        return account

    def _opened(self, account_id: str) -> None:
        """Raise `UnknownAccount` unless the account is open (without asking the clock)."""
        with self._session.reading() as ledger:
            self._opened_in(ledger, account_id)

    def _reading(self, account_id: str) -> _Reading:
        session = self._session
        with session.reading() as ledger:
            account = self._opened_in(ledger, account_id)
            f = session.figures(account, session.now(self._clock()))
            return _Reading(f, account.running, account.max_running)

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
