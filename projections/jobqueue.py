"""Jobs and the queue across accounts: each job's state, and which pending job starts next.

Each account keeps its pending jobs in a heap of its own (`AccountState.queue`, keyed
`(-priority, submit time, submit position, job id)`); `JobQueue` keeps heaps of the
accounts' heads, keyed by `HeadKey`, so the next job to start is found in O(log accounts)
however many jobs wait. Both kinds of heap are lazy: a job that stopped being pending
(started, cancelled) stays in its account's heap until it surfaces, and a head that changed
stays in the heads heap until it surfaces or the heap is compacted. The fold
(`projections.ledger`) registers an account's head after every change to its queue, cap,
half-life or fair-share usage.

There is one heads heap per fair-share half-life. An account's stored fair-share key is its
usage projected back to time 0 under its own half-life H: now, at time t, its usage per
share is that key minus t / H. Between accounts of one half-life the t / H is the same, so
the stored keys keep their order as time passes and one heap serves; between half-lives
the order changes with t, so `next_job` compares the heaps' tops at the pick's time, the
key minus t / H computed exactly (`key_at`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Final, final

if TYPE_CHECKING:  # the ledger module builds on this one: no import back at run time
    from projections.ledger import AccountState

PENDING: Final = "pending"
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
REJECTED: Final = "rejected"
JOB_STATES: Final = (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, REJECTED)


@final
class JobState:
    """One job and where it is in its life.

    A plain class, not a dataclass: compiled, a dataclass's constructor is the Python
    function `dataclasses` writes, and the fold makes one job per submit. Equality and
    repr are a dataclass's."""

    __slots__ = ("account", "charge", "cost", "id", "order", "pool", "priority", "state")
    # The same names, for `projections.statecopy`: compiled, the class keeps no __slots__.
    # The constructor takes them in this order (checkpoints build jobs by it).
    STATE_FIELDS: ClassVar[tuple[str, ...]] = (
        "id", "account", "cost", "priority", "pool", "state", "order", "charge")

    def __init__(self, id: str, account: str, cost: int, priority: int, pool: str,
                 state: str, order: tuple[int, int] | None, charge: int | None = None
                 ) -> None:
        self.id = id
        self.account = account
        self.cost = cost
        self.priority = priority
        self.pool = pool
        self.state = state
        # (event time, position) of its submit, "oldest first", while the job can still
        # start; None once it is rejected or finished (a replay keeps a million of them).
        self.order = order
        self.charge = charge

    def _fields(self) -> tuple[object, ...]:
        return (self.id, self.account, self.cost, self.priority, self.pool, self.state,
                self.order, self.charge)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobState):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return (f"JobState(id={self.id!r}, account={self.account!r}, cost={self.cost!r}, "
                f"priority={self.priority!r}, pool={self.pool!r}, state={self.state!r}, "
                f"order={self.order!r}, charge={self.charge!r})")


def blank_job() -> JobState:
    """A job to fill in field by field (`projections.statecopy`): compiled, the class
    runs its constructor even from `__new__`."""
    return JobState("", "", 0, 0, "", PENDING, None)


# The heap functions as constants: compiled, a Final name is read directly, where
# `heapq.heappush` is two lookups by name at every call.
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_heapify: Final = heapq.heapify

FAIR_GRAIN_BITS: Final = 32
"""Fair-share keys are whole multiples of 2**-FAIR_GRAIN_BITS (see `AccountState.fair_key`)."""

FairKey = tuple[float, int]
"""An account's fair-share key, log2 of its usage per share projected to time 0, exactly
`whole + grains / 2**FAIR_GRAIN_BITS` for (whole, grains), grains in [0, 2**FAIR_GRAIN_BITS):
two numbers, as one float of that size (28 million for a minute's half-life at Unix-scale
times) has no room for the grain. `NO_FAIR_KEY` without a share or usage."""

NO_FAIR_KEY: Final[FairKey] = (-math.inf, 0)
"""The key of an account without a share or usage: before every other."""

HeadKey = tuple[int, FairKey, int, int, str]
"""(-priority, fair-share key, submit time, submit position, job id): smaller starts first
among accounts of one half-life (see `key_at` for accounts of several)."""

Heads = dict[int, list[tuple[HeadKey, str]]]
"""Per half-life (seconds), the heap of (head key, account) of the accounts of that half-life."""


def fair_key_at(fair_key: FairKey, half_life: int, time: int) -> float | Fraction:
    """A stored fair-share key (usage per share projected to time 0, log2) as it is at
    `time`: the key minus time / half_life, exactly, so that keys of one half-life keep
    their order and their ties whatever the time. No share or no usage is -inf."""
    whole, grains = fair_key
    if whole == -math.inf:
        return whole
    return (Fraction((int(whole) << FAIR_GRAIN_BITS) + grains, 1 << FAIR_GRAIN_BITS)
            - Fraction(time, half_life))


def key_at(key: HeadKey, half_life: int, time: int
           ) -> tuple[int, float | Fraction, int, int, str]:
    """A head key comparable at `time` with those of accounts of other half-lives."""
    neg_priority, fair, submitted, position, job_id = key
    return (neg_priority, fair_key_at(fair, half_life, time), submitted, position, job_id)


def _clean_top(account: AccountState, jobs: dict[str, JobState]) -> None:
    """Drop the jobs on top of the account's queue that are no longer pending."""
    queue = account.queue
    while queue and jobs[queue[0][3]].state != PENDING:
        _heappop(queue)


def _head_key(account: AccountState) -> HeadKey:
    neg_priority, time, position, job_id = account.queue[0]
    return (neg_priority, account.fair_key(), time, position, job_id)


@final
class JobQueue:
    """The heads heaps: each account's next pending job, keyed by `HeadKey`, in the heap of
    the account's half-life.

    Its one field, `heads`, is the state snapshots copy and checkpoints encode (as the
    ledger's `heads`); the accounts and jobs it orders are the ledger's, passed in.
    """

    __slots__ = ("heads",)

    def __init__(self, heads: Heads | None = None) -> None:
        self.heads: Heads = {} if heads is None else heads

    def register(self, account: AccountState, accounts: dict[str, AccountState],
                 jobs: dict[str, JobState], *, force: bool = False) -> None:
        """Make sure the account's current head is in its half-life's heads heap, if it
        may start.

        `force`: the fair-share key or the half-life may have changed, so register even
        the same job again.
        """
        _clean_top(account, jobs)
        if not account.queue or account.blocked:
            account.head_key = None
            return
        registered = account.head_key
        if (not force and registered is not None and registered[4] == account.queue[0][3]
                and registered[1] == account.fair_key()):
            # The same job at the same fair-share key: the key registered, as its other
            # fields are the job's own. Most starts and completions leave the head so,
            # and building the key to compare it was most of their queue upkeep.
            return
        key = _head_key(account)
        if force or registered != key:
            account.head_key = key
            heads = self.heads.get(account.half_life)
            if heads is None:
                heads = self.heads[account.half_life] = []
            _heappush(heads, (key, account.name))
            if len(heads) > 2 * len(accounts) + 64:
                self.compact(accounts)

    def enqueue(self, account: AccountState, priority: int, time: int, position: int,
                job_id: str, accounts: dict[str, AccountState],
                jobs: dict[str, JobState]) -> None:
        """Put a job just accepted (submitted at `time`, `position`) in its account's queue."""
        _heappush(account.queue, (-priority, time, position, job_id))
        self.register(account, accounts, jobs)

    def requeue(self, account: AccountState, accounts: dict[str, AccountState],
                jobs: dict[str, JobState]) -> None:
        """Register the account's queue head afresh, after its state was replaced."""
        account.head_key = None
        self.register(account, accounts, jobs, force=True)

    def compact(self, accounts: dict[str, AccountState]) -> None:
        """Drop stale entries: they are skipped lazily, but would otherwise pile up with
        every submit and start (memory growing with the journal, not with the queue)."""
        grouped: Heads = {}
        for name, a in accounts.items():
            if a.head_key is not None:
                grouped.setdefault(a.half_life, []).append((a.head_key, name))
        for entries in grouped.values():
            _heapify(entries)
        # In the order of the half-lives, whatever the accounts' order: the state one
        # fold reaches is the same however its heaps were last compacted.
        self.heads = {half_life: grouped[half_life] for half_life in sorted(grouped)}

    def clear(self) -> None:
        """Forget every head (a partial ledger that reads no queue)."""
        self.heads = {}

    def next_job(self, accounts: dict[str, AccountState], jobs: dict[str, JobState],
                 time: int) -> JobState | None:
        """The job `start_next` at `time` would start: highest priority, then the least
        fair-share usage per share at `time`, then oldest, among accounts below their
        cap. Stale head entries are dropped as they surface: O(log accounts) for each
        half-life in use."""
        best: tuple[HeadKey, str] | None = None
        best_half_life = 0
        for half_life in list(self.heads):
            top = self._top(half_life, accounts, jobs)
            if top is None:
                continue
            if best is None or (key_at(top[0], half_life, time)
                                < key_at(best[0], best_half_life, time)):
                best, best_half_life = top, half_life
        return None if best is None else jobs[best[0][4]]

    def _top(self, half_life: int, accounts: dict[str, AccountState],
             jobs: dict[str, JobState]) -> tuple[HeadKey, str] | None:
        """The valid top of the heads heap of `half_life`, stale entries above it dropped."""
        while True:
            heads = self.heads.get(half_life)
            if not heads:
                return None
            key, name = heads[0]
            account = accounts[name]
            if account.head_key != key or account.half_life != half_life:
                _heappop(heads)
                continue
            _clean_top(account, jobs)
            if not account.queue or account.blocked:
                _heappop(heads)
                account.head_key = None
                continue
            if _head_key(account) != key:
                _heappop(heads)
                self.register(account, accounts, jobs)
                continue
            return heads[0]


def pending_ahead(job: JobState, accounts: Mapping[str, AccountState],
                  live: Mapping[str, JobState], time: int) -> int:
    """How many pending jobs start before `job`: those of its own account ahead of it in
    the queue's order (whenever the account has room, they go first), and those of other
    accounts ahead of it that start as things stand (`start_next` called again and again
    at `time`, nothing ending meanwhile): one whose account is at its `max_running` cap by
    its turn waits, and is not counted. O(n log n): for explanations only."""
    def key(j: JobState) -> tuple[int, float | Fraction, int, int]:
        assert j.order is not None, f"job {j.id!r} is {j.state}: it has no queue place"
        account = accounts[j.account]
        return (-j.priority, fair_key_at(account.fair_key(), account.half_life, time),
                *j.order)

    mine = key(job)
    before = sorted((key(other), other.account) for other in live.values()
                    if other.state == PENDING and other.id != job.id and key(other) < mine)
    running: dict[str, int] = {}
    started = 0
    for _, name in before:
        account = accounts[name]
        now = running.get(name, account.running)
        if name != job.account and account.max_running is not None \
                and now >= account.max_running:
            continue  # waits for one of its account's jobs to end
        running[name] = now + 1
        started += 1
    return started
