"""The ledger fold: every account's credit book and every job, as a pure function of events.

`Ledger.apply` takes one event at its place on the timeline and returns its `Outcome`.
Nothing here reads a clock, touches a database or iterates an unordered set: the same
events in canonical order `(event_time, position)` give the same state, byte for byte.
An event that is well formed but not valid where it lands on the timeline (starting a job
that is not pending, completing one twice) is kept and reported as an anomaly, never a crash.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, cast

from projections.bulk import paused_gc
from projections.creditbook import (
    Batch,
    CreditBook,
    Expiry,
    Hold,
    Totals,
    blank_batch,
    blank_hold,
    with_general,
)
from projections.decoding import FAST_PATHS, NOT_FAST, decode_event
from projections.digest import canonical, digest
from projections.events import (
    DEFAULT_HALF_LIFE,
    GENERAL,
    AccountOpened,
    CreditsAdjusted,
    CreditsConsumed,
    CreditsGranted,
    DomainEvent,
    EventReversed,
    GrantVoided,
    JobCancelled,
    JobCompleted,
    JobStarted,
    JobSubmitted,
    PersonalDataErased,
)

# The job names callers found here before the queue had a module of its own (`X as X`:
# re-exported).
from projections.jobqueue import CANCELLED as CANCELLED
from projections.jobqueue import FAILED as FAILED
from projections.jobqueue import (
    FAIR_GRAIN_BITS,
    NO_FAIR_KEY,
    FairKey,
    Heads,
    JobQueue,
    blank_job,
    pending_ahead,
)
from projections.jobqueue import JOB_STATES as JOB_STATES
from projections.jobqueue import PENDING as PENDING
from projections.jobqueue import REJECTED as REJECTED
from projections.jobqueue import RUNNING as RUNNING
from projections.jobqueue import SUCCEEDED as SUCCEEDED
from projections.jobqueue import HeadKey as HeadKey
from projections.jobqueue import JobState as JobState
from projections.outcomes import Outcome, outcome
from projections.policy import Policy
from projections.statecopy import StateCodec

# The event classes as constants to compiled code: a Final name is read directly, where
# an imported name is a lookup in the module's namespace at every use.
_SUBMITTED: Final = JobSubmitted
_CONSUMED: Final = CreditsConsumed
_STARTED: Final = JobStarted
_COMPLETED: Final = JobCompleted
_GRANTED: Final = CreditsGranted
_CANCELLED: Final = JobCancelled
_OPENED: Final = AccountOpened
_ADJUSTED: Final = CreditsAdjusted
_VOIDED: Final = GrantVoided
_REVERSED: Final = EventReversed
_ERASED: Final = PersonalDataErased

# Each handler's event type, read once: an event's `type` is a lookup by name.
_SUBMIT: Final = JobSubmitted.type
_CONSUME: Final = CreditsConsumed.type
_START: Final = JobStarted.type
_COMPLETE: Final = JobCompleted.type
_CANCEL: Final = JobCancelled.type

# `decode_event`'s fast paths as a dict the compiled fold reads directly: through the
# `Mapping` decoding exports, `get` was a method call by name per event.
_FAST_PATHS: Final[dict[str, tuple[Callable[[str | bytes], Any],
                                   Callable[[Any], DomainEvent]]]] = dict(FAST_PATHS)


_FAIR_GRAIN: Final = 2.0 ** FAIR_GRAIN_BITS
"""Fair-share keys are rounded to multiples of 1 / _FAIR_GRAIN (see `fair_key`)."""


def _log2_add(a: float, b: float) -> float:
    """log2(2**a + 2**b) without overflow."""
    if a == -math.inf:
        return b
    hi, lo = (a, b) if a >= b else (b, a)
    return hi + math.log2(1.0 + 2.0 ** (lo - hi))


def _split_log2(whole: int, rest: float) -> tuple[int, float]:
    """log2 of a usage, whole + rest, as (whole, rest) with rest in [0, 1)."""
    shift = math.floor(rest)
    return whole + shift, rest - shift


def usage_plus(whole: int, rest: float, charge: int, time: int,
               half_life: int) -> tuple[int, float]:
    """Usage log2 `whole + rest` (projected to time 0; rest -inf: none) with `charge` at
    `time` added, weighted by 2**(time / half_life): as (whole, rest), rest in [0, 1).

    time // half_life goes into the whole part exactly; the float holds only what is
    left, so it keeps its precision at any time (time / half_life alone, as one float,
    is only within 3.7e-9 at Unix-scale times and a minute's half-life)."""
    charge_whole, charge_rest = divmod(time, half_life)
    added = math.log2(charge) + charge_rest / half_life
    if rest == -math.inf:
        return _split_log2(charge_whole, added)
    return _split_log2(charge_whole, _log2_add(float(whole - charge_whole) + rest, added))


def usage_rebased(whole: int, rest: float, time: int, old: int,
                  new: int) -> tuple[int, float]:
    """Usage log2 `whole + rest` under half-life `old`, re-expressed under `new` as what
    it is at `time`: log2 U(time) + time / new, as (whole, rest)."""
    old_whole, old_rest = divmod(time, old)
    new_whole, new_rest = divmod(time, new)
    return _split_log2(whole - old_whole + new_whole,
                       rest - old_rest / old + new_rest / new)


def refill_due(account: AccountState, time: int) -> tuple[int, int]:
    """(whole credits the bucket gains by `time`, the remainder carried in credit-seconds).

    Exact integers: rate x elapsed seconds accumulate in credit-seconds, and every 3,600
    of them is one credit, so a million small steps add up to the same as one big one.
    A full bucket accrues nothing and drops its remainder.
    """
    assert account.refill_rate is not None and account.refill_cap is not None
    anchor = time if account.refill_anchor is None else account.refill_anchor
    units = account.refill_rate * max(0, time - anchor) + account.refill_carry
    add, carry = divmod(units, 3600)
    in_bucket = account.refill_batch.amount if account.refill_batch is not None else 0
    # Accrued credits pay debt first, like a grant's; only what is left goes into the
    # bucket, and only the bucket is bounded by the cap (so one long gap pays what many
    # short ones would).
    room = max(0, account.refill_cap - in_bucket) + account.book.debt_total
    if add >= room:
        return room, 0
    return add, carry


def refill_batch_id(account: str) -> str:
    """The grant id of an account's refill batch (it has no grant event of its own)."""
    return f"refill:{account}"


def cap_below_running(account: str, running: int, cap: int) -> str:
    """Why an `account` event may not set `cap` while `running` jobs run."""
    return (f"account {account!r} runs {running} jobs, more than the cap of {cap} this "
            f"would set: let them finish first, or set a cap of at least {running}")


def _job(jobs: Mapping[str, JobState], job_id: str) -> JobState | None:
    """`jobs.get(job_id)`, through the mapping's own methods: the job index may be a dict
    that answers for another (`projections.accountfold.JobsAsOf`), whose lookups compiled
    code would skip if it were typed as a dict (mypyc reads a dict's table directly).
    A plain dict, the fold's own index, is read directly: a method call by name per job
    event was a cost of the fold."""
    if type(jobs) is dict:
        index: dict[str, JobState] = jobs
        return index.get(job_id)
    return jobs.get(job_id)


def failure_charge(cost: int, refund_fraction: float) -> int:
    """floor(cost * (1 - refund_fraction)), computed exactly on the fraction as written."""
    # Fraction(repr(f)) takes 0.9 as nine tenths, not as the binary float just above it,
    # so 10 credits at a 0.9 refund charge 1, not 0. The kept share is remembered as two
    # integers per fraction: building a Fraction per failed job was a cost of the fold.
    f = float(refund_fraction)
    kept = _KEPT.get(f)
    if kept is None:
        share = 1 - Fraction(repr(f))
        kept = (share.numerator, share.denominator)
        if len(_KEPT) >= 1024:  # a journal with many distinct fractions: stay bounded
            _KEPT.clear()
        _KEPT[f] = kept
    return cost * kept[0] // kept[1]


_KEPT: dict[float, tuple[int, int]] = {}
"""1 - refund fraction, as (numerator, denominator), per fraction seen."""


@dataclass(slots=True)
class AccountState:
    """One account: its credits, its policy and its queue of pending jobs."""

    name: str
    book: CreditBook = field(default_factory=CreditBook)
    opened: bool = False  # by an `account` event or a grant; a consume alone does not open
    declared: bool = False  # by an `account` event (open_account)
    max_running: int | None = None
    share: int | None = None
    running: int = 0
    last_time: int = -(2**63)  # event time of the latest event touching this account
    queue: list[tuple[int, int, int, str]] = field(default_factory=list)
    head_key: HeadKey | None = None  # the key registered in its half-life's heads heap
    # Fair share: log2 of the usage decayed to time 0, usage_whole + usage_log2, the
    # latter in [0, 1) (`usage_plus`); usage_log2 -inf: no usage.
    half_life: int = DEFAULT_HALF_LIFE
    usage_log2: float = -math.inf
    usage_whole: int = 0
    # Refill: a token bucket feeding one general, non-expiring batch.
    refill_rate: int | None = None
    refill_cap: int | None = None
    refill_anchor: int | None = None  # event time refill was last accrued to
    refill_carry: int = 0  # credit-seconds accrued but not yet a whole credit (x 3600)
    refill_batch: Batch | None = None

    def fair_key(self) -> FairKey:
        """Decayed usage / share on a log scale, to a grain of 2**-32 (`FairKey`);
        `NO_FAIR_KEY` (first) without a share or usage."""
        if self.share is None or self.usage_log2 == -math.inf:
            return NO_FAIR_KEY
        # Equal usage per share must tie (the older submit first), but the logarithms
        # of equal ratios can differ in their last bits (log2(6) - log2(3) is not exactly
        # 1): keys within a grain are one key. A grain of 2**-32 in log2 is a relative
        # difference of 1.6e-10 in usage per share (one credit in six billion). Rounded
        # is only the small part, so the grain is always finer than its float's bits.
        carry, grains = divmod(
            round((self.usage_log2 - math.log2(self.share)) * _FAIR_GRAIN),
            1 << FAIR_GRAIN_BITS)
        return (float(self.usage_whole + carry), grains)

    def pool_balances_at(self, time: int) -> dict[str, int]:
        """Per pool, credits minus debt at `time` (>= this account's last event), counting
        what has expired and what the refill bucket has accrued by then."""
        balances = self.book.pool_balances_at(time)
        paid, credited = self.refill_settlement(time)
        for pool, amount in paid.items():
            balances[pool] = balances.get(pool, 0) + amount
        if paid or credited:
            # What an event here would leave: the refill a general grant, general listed.
            balances = with_general(balances)
            balances[GENERAL] += credited
        return balances

    def refill_settlement(self, time: int) -> tuple[dict[str, int], int]:
        """What the refill accrued by `time` (>= this account's last event) will do when
        an event brings the account there: (debt it pays, per pool; credits it adds to
        the bucket). Nothing without a refill."""
        if self.refill_rate is None:
            return {}, 0
        add, _ = refill_due(self, time)
        if not add:
            return {}, 0
        # General credits, so they pay general debt first, then every pool's: a grant's way.
        paid = self.book.debt_payments(GENERAL, add)
        return paid, add - sum(paid.values())

    def debt_total_at(self, time: int) -> int:
        """All the debt at `time` (>= this account's last event), after what the refill
        accrued by then pays."""
        if self.refill_rate is None:
            return self.book.debt_total
        return sum(self.debt_at(time).values())

    def debt_at(self, time: int) -> dict[str, int]:
        """Debt per pool at `time` (>= this account's last event), after what the refill
        accrued by then pays."""
        paid, _ = self.refill_settlement(time)
        return {pool: owed - paid.get(pool, 0) for pool, owed in self.book.debt.items()}

    def decayed_usage(self, time: int) -> float:
        """Usage charged so far, decayed to `time` (for explanations)."""
        if self.usage_log2 == -math.inf:
            return 0.0
        whole, rest = divmod(time, self.half_life)
        return float(2 ** ((self.usage_whole - whole)
                           + (self.usage_log2 - rest / self.half_life)))

    @property
    def blocked(self) -> bool:
        return self.max_running is not None and self.running >= self.max_running

    @property
    def reserved(self) -> int:
        return self.book.held

    @property
    def available(self) -> int:
        return self.book.active_total - self.book.debt_total

    @property
    def balance(self) -> int:
        return self.book.active_total + self.book.held - self.book.debt_total


@dataclass(slots=True)
class Ledger:
    """The whole projected state of one journal."""

    accounts: dict[str, AccountState] = field(default_factory=dict)
    # Every job ever submitted, insert-only (snapshots share it instead of copying it),
    # and the live ones (pending, running): the only jobs that can still change.
    jobs: dict[str, JobState] = field(default_factory=dict)
    live: dict[str, JobState] = field(default_factory=dict)
    # Which pending job starts next, across accounts (`projections.jobqueue`).
    queue: JobQueue = field(default_factory=JobQueue)
    last: tuple[int, int] = (-(2**63), 0)  # (event_time, position) of the last applied event
    applied: int = 0
    rejected: int = 0
    anomalies: list[tuple[int, str, str]] = field(default_factory=list)  # (time, event id, why)
    # Corrections. `excluded`: ids of reversed events, skipped by the fold (given by whoever
    # folds: which events are reversed depends on every reversal known, wherever it lies on
    # the timeline). `reversals`: every reversal folded, its id to the id it names.
    # `voids`: grant id to the event time it was voided at (voids are rare: a small dict).
    excluded: frozenset[str] = frozenset()
    reversals: dict[str, str] = field(default_factory=dict)
    voids: dict[str, int] = field(default_factory=dict)
    # Rules other than the recorded ones, for what-if folds; None (always, outside
    # `whatif`) is the journal's own rules.
    policy: Policy | None = None

    # -- the fold ------------------------------------------------------------------------

    def apply_recorded(self, position: int, event_id: str, event_type: str, time: int,
                       payload: Any) -> Outcome:
        """Decode a journal payload (its JSON text as stored, or decoded) and apply it; a
        payload that is not a valid event is an anomaly (a text that is not JSON at all
        raises: the row was not written by the journal)."""
        # `decode_event`'s fast path first, here: called from compiled code, its own
        # Python frame was a cost of every event (it is the same decoding, step for step).
        fast = _FAST_PATHS.get(event_type)
        if fast is not None and type(payload) is str and payload[:1] == "{":
            found: DomainEvent | None
            try:
                found = fast[1](fast[0](payload))
            except NOT_FAST:
                found = None  # the generic way below, which accepts it or says why not
            if found is not None:
                return self.apply(position, event_id, time, found)
        try:
            event = decode_event(event_type, payload)
        except json.JSONDecodeError:
            raise
        except (ValueError, TypeError) as exc:
            if self.excluded and event_id in self.excluded:
                return self._skip(position, event_id, event_type, time)
            return self._anomaly(position, event_id, event_type, time, None, str(exc))
        return self.apply(position, event_id, time, event)

    def apply_rows(self, rows: Iterable[tuple[int, str, str, int, Any, Any]]) -> None:
        """`apply_recorded` of each (position, id, type, time, payload, stream) row in turn,
        the outcomes dropped: a fold of a journal read (`projections.replay`). The loop
        is compiled: in Python, unpacking each row and calling the method cost a frame's
        worth of steps per event."""
        for position, event_id, event_type, time, payload, _ in rows:
            self.apply_recorded(position, event_id, event_type, time, payload)

    def apply_own(self, records: Sequence[Any], start: int,
                  outcomes: dict[int, Outcome]) -> int:
        """`apply_recorded` of `records[start:]` (each with position, id, type, time,
        payload and, maybe, stream), each outcome put in `outcomes` by position, up to and
        including the first whose outcome is not about its own stream's account alone (no
        account, or another than its `stream`): the index after the last one applied.

        What a projector folds an in-order batch with: it notes each such event before
        the next is applied, and nothing for the others (almost all), so their loop is
        compiled."""
        i, end = start, len(records)
        while i < end:
            rec = records[i]
            i += 1
            position = rec.position
            done = self.apply_recorded(position, rec.id, rec.type, rec.time, rec.payload)
            outcomes[position] = done
            account = done.account
            if account is None or account != getattr(rec, "stream", None):
                break
        return i

    def apply_own_rows(self, rows: Sequence[tuple[int, str, str, int, Any, str]],
                       start: int) -> tuple[int, Outcome]:
        """`apply_own` of rows shaped (position, id, type, time, payload, stream), read by
        index where a record's fields cost a lookup each (a replay's batches), and only
        the last outcome kept: (the index after the last row applied, its outcome).
        `rows[start:]` must not be empty."""
        i, end = start, len(rows)
        done: Outcome | None = None
        while i < end:
            position, event_id, event_type, time, payload, stream = rows[i]
            i += 1
            done = self.apply_recorded(position, event_id, event_type, time, payload)
            account = done.account
            if account is None or account != stream:
                break
        if done is None:
            raise ValueError(f"no row to apply after index {start} of {end}")
        return i, done

    def apply(self, position: int, event_id: str, time: int, event: DomainEvent) -> Outcome:
        """Apply one event at (time, position), which must not precede the last applied one."""
        last_time, last_position = self.last
        if time < last_time or (time == last_time and position <= last_position):
            raise ValueError(f"event at {(time, position)} applied after {self.last}: not in "
                             "canonical order")
        kind = type(event)
        if kind is _REVERSED:
            # Known even when itself reversed: a reversal of it may be reversed in turn.
            # Not in `last` either: a reversal placed at a far time (that of the event it
            # reverses) must not drag live decisions there.
            reversal = cast(EventReversed, event)
            self.reversals[event_id] = reversal.event
            return self._reverse(position, event_id, time, reversal)
        if self.excluded and event_id in self.excluded:
            return self._skip(position, event_id, event.type, time)
        self.last = (time, position)
        self.applied += 1
        # One comparison per type, the most frequent first: a dict of handlers cost a
        # Python-level call per event.
        done: Outcome
        if kind is _SUBMITTED:
            done = self._submit(position, event_id, time, cast(JobSubmitted, event))
        elif kind is _CONSUMED:
            done = self._consume(position, event_id, time, cast(CreditsConsumed, event))
        elif kind is _STARTED:
            done = self._start(position, event_id, time, cast(JobStarted, event))
        elif kind is _COMPLETED:
            done = self._complete(position, event_id, time, cast(JobCompleted, event))
        elif kind is _GRANTED:
            done = self._grant(position, event_id, time, cast(CreditsGranted, event))
        elif kind is _CANCELLED:
            done = self._cancel(position, event_id, time, cast(JobCancelled, event))
        elif kind is _OPENED:
            done = self._open(position, event_id, time, cast(AccountOpened, event))
        elif kind is _ADJUSTED:
            done = self._adjust(position, event_id, time, cast(CreditsAdjusted, event))
        elif kind is _VOIDED:
            done = self._void(position, event_id, time, cast(GrantVoided, event))
        elif kind is _ERASED:
            done = self._erased(position, event_id, time, cast(PersonalDataErased, event))
        else:
            raise TypeError(f"not an event the ledger folds: {kind.__name__}")
        name = done.account
        if name is not None:
            account = self.accounts.get(name)
            if account is not None:
                account.last_time = time
        return done

    def _skip(self, position: int, event_id: str, event_type: str, time: int) -> Outcome:
        """A reversed event: it takes no part in the fold, as if it had never happened.

        Not even in `last`: a reversed event far in the future (a time in milliseconds)
        must not drag live decisions there."""
        return outcome(position, event_id, event_type, time, None, reason="reversed")

    def _account(self, name: str) -> AccountState:
        account = self.accounts.get(name)
        if account is None:
            account = self.accounts[name] = AccountState(name)
            if self.policy is not None:
                account.max_running = self.policy.cap(name, None)
        return account

    def _anomaly(self, position: int, event_id: str, event_type: str, time: int,
                 account: str | None, why: str,
                 expired: tuple[Expiry, ...] = ()) -> Outcome:
        self.anomalies.append((time, event_id, why))
        return outcome(position, event_id, event_type, time, account, ok=False, reason=why,
                       anomaly=True, expired=expired)

    def _open(self, position: int, event_id: str, time: int, event: AccountOpened) -> Outcome:
        account = self._account(event.account)
        expired = self._touch(account, time)
        cap = (event.max_running if self.policy is None
               else self.policy.cap(event.account, event.max_running))
        if cap is not None and account.running > cap:
            # A cap is checked when a job starts; one set below the jobs already running
            # would leave the account over it with nothing the rule could have refused.
            return self._anomaly(position, event_id, event.type, time, event.account,
                                 cap_below_running(event.account, account.running, cap),
                                 expired=expired)
        account.opened = True
        account.declared = True
        account.max_running = cap
        account.share = event.share
        if event.half_life != account.half_life and account.usage_log2 != -math.inf:
            # Usage is kept as log2(sum(charge * 2**(t / H))): under another H it must be
            # re-expressed as what it is at `time`, to decay from there at the new rate
            # (read as it was, 400 charged a minute ago counted as about 2**16,000).
            account.usage_whole, account.usage_log2 = usage_rebased(
                account.usage_whole, account.usage_log2, time, account.half_life,
                event.half_life)
        account.half_life = event.half_life
        account.refill_rate = event.refill_rate
        account.refill_cap = event.refill_cap
        # `_touch` accrued what was due under the old settings up to `time`: from here
        # on the new ones accrue (nothing for the time the refill was off).
        account.refill_anchor = time if event.refill_rate is not None else None
        if event.refill_rate is None:
            account.refill_carry = 0
        self.queue.register(account, self.accounts, self.jobs, force=True)
        return outcome(position, event_id, event.type, time, event.account, expired=expired)

    def _grant(self, position: int, event_id: str, time: int, event: CreditsGranted) -> Outcome:
        account = self._account(event.account)
        account.opened = True
        expired = self._touch(account, time)
        if event.expiry is not None and event.expiry <= time:
            # Well formed but dead on arrival (only an import can record one): nothing to add.
            return self._anomaly(position, event_id, event.type, time, event.account,
                                 f"grant expires at {event.expiry}, not after its time {time}",
                                 expired=expired)
        voided = self.voids.get(event_id)
        if voided is not None and voided <= time:
            # Voided before it takes effect: none of it ever counts (its pool is named all
            # the same, as a grant used up at once).
            book = account.book
            book.name_pool(event.pool)
            book.totals.granted += event.amount
            book.totals.expired += event.amount
            book.totals.voided += event.amount
            lapsed = Expiry(event_id, event.pool, voided, event.amount, voided=True)
            return outcome(position, event_id, event.type, time, event.account,
                           reason=f"voided at {voided}", expired=(*expired, lapsed))
        priority = (event.priority if self.policy is None
                    else self.policy.grant_priority(event.priority))
        paid, batch = account.book.grant(event_id, event.amount, event.expiry, event.pool,
                                         (time, position), priority)
        if voided is not None and batch is not None:
            batch.voided = voided  # a void recorded earlier, effective later on the timeline
        return outcome(position, event_id, event.type, time, event.account, paid_debt=paid,
                       expired=expired)

    def _adjust(self, position: int, event_id: str, time: int,
                event: CreditsAdjusted) -> Outcome:
        account = self._account(event.account)
        expired = self._touch(account, time)
        if event.amount > 0:
            # A manual credit: like a grant without expiry, it pays debt first.
            account.opened = True
            paid, _ = account.book.grant(event_id, event.amount, None, event.pool,
                                         (time, position))
            return outcome(position, event_id, event.type, time, event.account,
                           paid_debt=paid, expired=expired)
        # A manual debit: like a usage report, past the credits it is debt.
        lineage, short = account.book.consume(-event.amount, event.pool)
        return outcome(position, event_id, event.type, time, event.account,
                       debt_after=account.book.debt_total, debt_created=short, paid_by=lineage,
                       expired=expired)

    def _void(self, position: int, event_id: str, time: int, event: GrantVoided) -> Outcome:
        self.voids[event.grant] = min(time, self.voids.get(event.grant, time))
        for name, account in self.accounts.items():
            if not _has_batch(account, event.grant):
                continue
            expired = self._touch(account, time)
            lapsed = account.book.void(event.grant, time, account.refill_batch)
            return outcome(position, event_id, event.type, time, name,
                           expired=(*expired, *lapsed))
        # Used up, swallowed by debt, or later on the timeline (then it arrives voided).
        return outcome(position, event_id, event.type, time, None,
                       reason=f"grant {event.grant!r} has no unused credits at {time}")

    def _reverse(self, position: int, event_id: str, time: int,
                 event: EventReversed) -> Outcome:
        # The reversal itself changes nothing here: whoever folds skips the events it
        # names (see `excluded`), wherever they lie on the timeline.
        return outcome(position, event_id, event.type, time, None)

    def _erased(self, position: int, event_id: str, time: int,
                event: PersonalDataErased) -> Outcome:
        # Personal fields take no part in any figure: erasing them changes nothing here.
        return outcome(position, event_id, event.type, time, None)

    def _consume(self, position: int, event_id: str, time: int,
                 event: CreditsConsumed) -> Outcome:
        name = event.account
        account = self._account(name)
        expired = self._touch(account, time)
        book = account.book
        lineage, short = book.consume(event.amount, event.pool)
        return outcome(position, event_id, _CONSUME, time, name, debt_after=book.debt_total,
                       debt_created=short, paid_by=lineage, expired=expired)

    def _submit(self, position: int, event_id: str, time: int, event: JobSubmitted) -> Outcome:
        # The event's fields read once each: an attribute of an event (a Python object)
        # is a lookup by name every time.
        job_id, name = event.job, event.account
        if _job(self.jobs, job_id) is not None:
            return self._anomaly(position, event_id, _SUBMIT, time, name,
                                 f"job {job_id!r} was submitted before; job ids are unique")
        cost, priority, pool = event.cost, event.priority, event.pool
        account = self.accounts.get(name)
        if account is None or not account.opened:
            self.rejected += 1
            rejected = JobState(job_id, name, cost, priority, pool, REJECTED, None)
            self.jobs[job_id] = rejected
            return outcome(position, event_id, _SUBMIT, time, name, ok=False,
                           reason=f"unknown account {name!r}")
        book = account.book
        expired = self._touch(account, time)
        available = min(book.usable(pool), account.available)
        # The account's own name, not the event's copy: one string per account, not per job.
        job = JobState(job_id, account.name, cost, priority, pool, PENDING, (time, position))
        self.jobs[job_id] = job
        if cost > available:
            job.state = REJECTED
            job.order = None
            self.rejected += 1
            return outcome(position, event_id, _SUBMIT, time, name, ok=False,
                           reason=self._shortfall(account, event, available), expired=expired)
        lineage = book.hold(job_id, cost, pool)
        self.live[job_id] = job
        self.queue.enqueue(account, priority, time, position, job_id, self.accounts, self.jobs)
        return outcome(position, event_id, _SUBMIT, time, name, paid_by=lineage,
                       expired=expired)

    def _shortfall(self, account: AccountState, event: JobSubmitted, available: int) -> str:
        book = account.book
        if event.pool == GENERAL:
            where = ""
            general = book.usable(GENERAL)
            usable = ("" if general == book.active_total else
                      f", {general} of them general credits: a job without a pool cannot "
                      "use pool credits")
        else:
            where = f" in pool {event.pool!r}"
            usable = f", {book.usable(event.pool)} of them usable in {event.pool!r}"
        return (
            # Below 0 in debt, as `balance` says: a job costing 0 is refused there too.
            f"job {event.job!r} costs {event.cost}, only {available} available{where} "
            f"({book.active_total} active{usable}, {book.debt_total} debt, {book.held} held by "
            f"{len(book.holds)} jobs, {book.totals.expired} expired so far)"
        )

    def _no_job(self, position: int, event_id: str, kind: str, time: int, job_id: str,
                job: JobState | None) -> Outcome:
        """The anomaly of a job event naming no job (`job` None), or a job whose account
        never existed (a submit to an unknown account: rejected, nothing to touch)."""
        if job is None:
            what = "completion" if kind == _COMPLETE else kind
            return self._anomaly(position, event_id, kind, time, None,
                                 f"{what} of unknown job {job_id!r}")
        return self._anomaly(position, event_id, kind, time, None,
                             f"{kind} of job {job.id!r} which is {job.state}")

    def _start(self, position: int, event_id: str, time: int, event: JobStarted) -> Outcome:
        job_id = event.job
        job = _job(self.jobs, job_id)
        account = None if job is None else self.accounts.get(job.account)
        if job is None or account is None:
            return self._no_job(position, event_id, _START, time, job_id, job)
        expired = self._touch(account, time)
        if job.state != PENDING:
            return self._anomaly(position, event_id, _START, time, job.account,
                                 f"start of job {job.id!r} which is {job.state}, not pending",
                                 expired=expired)
        if account.blocked:
            return self._anomaly(position, event_id, _START, time, job.account,
                                 f"start of job {job.id!r}: account {job.account!r} already "
                                 f"runs {account.running} of max {account.max_running}",
                                 expired=expired)
        job.state = RUNNING
        account.running += 1
        self.queue.register(account, self.accounts, self.jobs)
        return outcome(position, event_id, _START, time, job.account, expired=expired)

    def _complete(self, position: int, event_id: str, time: int, event: JobCompleted) -> Outcome:
        job_id = event.job
        job = _job(self.jobs, job_id)
        account = None if job is None else self.accounts.get(job.account)
        if job is None or account is None:
            return self._no_job(position, event_id, _COMPLETE, time, job_id, job)
        expired = self._touch(account, time)
        if job.state != RUNNING:
            return self._anomaly(position, event_id, _COMPLETE, time, job.account,
                                 f"completion of job {job.id!r} which is {job.state}, "
                                 "not running",
                                 expired=expired)
        success = event.success
        if success:
            charge = job.cost
        else:
            refund = (event.refund_fraction if self.policy is None
                      else self.policy.refund(event.refund_fraction))
            charge = failure_charge(job.cost, refund)
        settled = account.book.settle(job.id, charge, time)
        if settled.expired:
            expired = (*expired, *settled.expired)
        job.state = SUCCEEDED if success else FAILED
        self._finish(job)
        job.charge = charge
        account.running -= 1
        if charge and account.share is not None:
            account.usage_whole, account.usage_log2 = usage_plus(
                account.usage_whole, account.usage_log2, charge, time, account.half_life)
        self.queue.register(account, self.accounts, self.jobs,
                            force=account.share is not None)
        return outcome(position, event_id, _COMPLETE, time, job.account,
                       paid_by=settled.charged, paid_debt=settled.paid_debt,
                       debt_paid_by=settled.debt_paid_by, charge=charge,
                       released=job.cost - charge, expired=expired)

    def _cancel(self, position: int, event_id: str, time: int, event: JobCancelled) -> Outcome:
        job_id = event.job
        job = _job(self.jobs, job_id)
        account = None if job is None else self.accounts.get(job.account)
        if job is None or account is None:
            return self._no_job(position, event_id, _CANCEL, time, job_id, job)
        expired = self._touch(account, time)
        if job.state == CANCELLED:
            return outcome(position, event_id, _CANCEL, time, job.account, released=0,
                           reason="already cancelled", expired=expired)
        if job.state != PENDING:
            return self._anomaly(position, event_id, _CANCEL, time, job.account,
                                 f"cancel of job {job.id!r} which is {job.state}, not pending",
                                 expired=expired)
        settled = account.book.settle(job.id, 0, time)
        if settled.expired:
            expired = (*expired, *settled.expired)
        job.state = CANCELLED
        self._finish(job)
        # The queue entry stays as a tombstone; it is skipped when it reaches the top.
        return outcome(position, event_id, _CANCEL, time, job.account,
                       paid_debt=settled.paid_debt, debt_paid_by=settled.debt_paid_by,
                       released=job.cost, expired=expired)

    def _finish(self, job: JobState) -> None:
        del self.live[job.id]
        job.order = None

    # -- time passing: expiry and refill ----------------------------------------------------

    def _touch(self, account: AccountState, time: int) -> tuple[Expiry, ...]:
        """Bring the account to `time`: evict expired batches, accrue refill; return what
        expired."""
        book = account.book
        # The book's own test, first: most events find nothing expired, and then no list
        # is made.
        expired = () if time < book.expiry_floor else tuple(book.advance(time))
        if account.refill_rate is not None:
            self._refill(account, time)
        return expired

    def _refill(self, account: AccountState, time: int) -> None:
        add, carry = refill_due(account, time)
        account.refill_anchor = time
        account.refill_carry = carry
        if add:
            batch = account.refill_batch
            if batch is None:
                _paid, batch = account.book.grant(refill_batch_id(account.name), add, None, GENERAL,
                                                 (time, 0))
                account.refill_batch = batch
            else:
                account.book.top_up(batch, add)

    # -- the queue (`projections.jobqueue`) --------------------------------------------

    @property
    def heads(self) -> Heads:
        """The queue's heaps of account heads, per half-life: what snapshots copy and
        checkpoints encode as the ledger's `heads`."""
        return self.queue.heads

    @heads.setter
    def heads(self, heads: Heads) -> None:
        self.queue.heads = heads

    def requeue(self, name: str) -> None:
        """Register account `name`'s queue head afresh, after its state was replaced."""
        self.queue.requeue(self.accounts[name], self.accounts, self.jobs)

    def next_job(self, time: int) -> JobState | None:
        """The job `start_next` at `time` would start: highest priority, then the least
        fair-share usage per share, then oldest, among accounts below their cap
        (`JobQueue.next_job`)."""
        return self.queue.next_job(self.accounts, self.jobs, time)

    # -- reading ---------------------------------------------------------------------------

    def pending_ahead(self, job: JobState, time: int) -> int:
        """How many pending jobs would start before `job` as things stand, starts called
        at `time` (for explanations only: `jobqueue.pending_ahead`)."""
        return pending_ahead(job, self.accounts, self.live, time)

    def canonical(self) -> dict[str, Any]:
        """A canonical, JSON-ready view of the whole state (`projections.digest`)."""
        return canonical(self)

    def digest(self) -> str:
        """SHA-256 of the canonical state: same journal, same digest, on every backend
        (`projections.digest`)."""
        return digest(self)



def _has_batch(account: AccountState, grant_id: str) -> bool:
    """Whether the account holds credits of grant `grant_id` (in its heaps or its holds).

    Never of its refill bucket: that batch is no grant's, and its id (`refill:ACCOUNT`)
    may be a grant event's too (event ids are the caller's), which a void then names."""
    book = account.book
    bucket = account.refill_batch
    for heap in book.heaps.values():
        for batch in heap:
            if batch.grant_id == grant_id and batch is not bucket:
                return True
    for hold in book.holds.values():
        for batch, _ in hold.portions:
            if batch.grant_id == grant_id and batch is not bucket:
                return True
    return False


STATE_CLASSES: tuple[type, ...] = (Ledger, AccountState, CreditBook, Batch, Hold, Totals,
                                   JobState)
"""Every class a ledger's state is made of: what snapshots copy and checkpoints encode."""

LEDGER_FIELDS: tuple[str, ...] = tuple(
    "heads" if f.name == "queue" else f.name for f in dataclasses.fields(Ledger))
"""A ledger's fields as snapshots copy and checkpoints encode them: its queue as the heap
it holds (`Ledger.heads`), so checkpoints saved before the queue had a class still load."""

# A ledger is made by its constructor, not `__new__` alone: setting `heads` needs its queue.
STATE = StateCodec(STATE_CLASSES, blanks={Batch: blank_batch, Hold: blank_hold,
                                          JobState: blank_job, Ledger: Ledger},
                   fields={Ledger: LEDGER_FIELDS})

Saved = tuple[Ledger, tuple[dict[str, JobState], list[tuple[int, str, str]]], int, int]
"""A snapshot: a private copy of the changeable state (no jobs but the live ones, no
anomalies), the shared insert-only job index and anomaly list, and how many jobs and
anomalies they held then."""


def snapshot(ledger: Ledger) -> Saved:
    """A restorable copy of `ledger` that costs what can still change, not the history.

    Finished jobs and recorded anomalies never change again, and `jobs` and `anomalies`
    only grow, so the snapshot keeps a reference to them and their lengths instead of
    copying them: only the live part (accounts, pending and running jobs) is copied.
    """
    jobs, anomalies = ledger.jobs, ledger.anomalies
    ledger.jobs, ledger.anomalies = {}, []
    try:
        with paused_gc():
            copy: Ledger = STATE.copy(ledger)
    finally:
        ledger.jobs, ledger.anomalies = jobs, anomalies
    return copy, (jobs, anomalies), len(jobs), len(anomalies)


def restore(saved: Saved) -> Ledger:
    """The ledger `snapshot` saved (a fresh copy each time)."""
    kept, (jobs, anomalies), count, anomaly_count = saved
    # Copying makes many objects at once; without this the cyclic collector would
    # walk the whole heap several times over while it runs.
    with paused_gc():
        ledger: Ledger = STATE.copy(kept)
    ledger.anomalies = anomalies[:anomaly_count]
    # The shared index may have grown since: copy it (a fast, flat copy), drop the jobs
    # submitted after the snapshot (the last ones inserted), and put back the live jobs
    # as they were then. Finished jobs never change, so sharing their objects is safe.
    own = jobs.copy()
    for job_id in list(itertools.islice(reversed(own), len(own) - count)):
        del own[job_id]
    own.update(ledger.live)
    ledger.jobs = own
    return ledger
