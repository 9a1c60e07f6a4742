"""`explain`: which grants paid what (lineage), what expired unused, and why a job was
rejected or has not started."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import orjson

from eventstore import JournalLike, RecordedEvent
from projections.checkpoint import CheckpointError
from projections.creditbook import Batch, Expiry, Lineage
from projections.errors import UnknownJob
from projections.events import DEFAULT_GRANT_PRIORITY, GENERAL, TIMELINE_START
from projections.figures import Figures
from projections.ledger import PENDING, RUNNING, Ledger, refill_batch_id
from projections.outcomes import Outcome
from projections.owners import account_events, duplicate_submit, job_stream
from projections.projector import apply_recorded
from projections.queries.common import (
    exists_later,
    latest_time,
    recorded_position,
    unknown_account,
)
from projections.queries.effects import Effect, event_effect
from projections.queries.ownjobs import NOT_HELD, jobs_differ, own_jobs, submitted_jobs
from projections.queries.walk import AccountWalk, Step, own_reversed, split_expired
from projections.replay import excluded_as_known, lean_rows, ledger_at, view_at
from projections.validation import spelling


@dataclass(frozen=True, slots=True)
class Use:
    """Credits of one grant that paid for one consumption or one job."""

    time: int
    position: int
    event_id: str
    kind: str  # "consume" or "job"; "release": a job released them and they paid debt
    amount: int
    job: str | None = None

    json_keys: ClassVar[tuple[str, ...]] = ("time:time", "position", "event_id", "kind",
                                            "amount", "job")


@dataclass(slots=True)
class GrantLineage:
    """One grant and everything that became of its credits."""

    grant_id: str
    time: int
    position: int | None
    pool: str
    amount: int
    expiry: int | None
    paid_debt: int = 0  # on arrival, debt it paid before becoming a batch
    uses: list[Use] = field(default_factory=list)
    expired: int = 0  # expired unused (evicted, or expired by `at` and not yet evicted)
    held: list[tuple[str, int]] = field(default_factory=list)  # (job, credits) held now
    remaining: int = 0  # still usable at `at`
    voided_at: int | None = None  # when a void stopped its unused credits counting
    # Credits a job held and released back to it that paid debt on the way (released
    # credits pay debt first), each with the release that paid: as the fold reported it.
    released_to_debt: list[Use] = field(default_factory=list)
    priority: int = DEFAULT_GRANT_PRIORITY  # lower is used first
    # The account's refill bucket, which no grant event makes: `time` is when the refill
    # first put credits in it (where the fold places it among the batches), `position`
    # None, and `amount` what it accounts for.
    refill: bool = False

    @property
    def used(self) -> int:
        """Credits that paid consumptions and jobs."""
        return sum(u.amount for u in self.uses)

    @property
    def debt_paid_later(self) -> int:
        """Credits released from jobs back to this grant that paid debt."""
        return sum(u.amount for u in self.released_to_debt)

    @property
    def debt_paid(self) -> int:
        """All the debt its credits paid: on arrival and after a release."""
        return self.paid_debt + self.debt_paid_later

    # `paid_debt` is all the debt it paid; `released_to_debt` lists the part released
    # credits paid, one entry per release (a cancel, a completion charging less than held).
    json_keys: ClassVar[tuple[str, ...]] = (
        "grant=grant_id", "time:time", "position", "pool", "amount", "expiry",
        "paid_debt=debt_paid", "used", "uses", "expired", "held", "remaining",
        "released_to_debt", "priority", "refill")


@dataclass(frozen=True, slots=True)
class Spend:
    """One consumption or one job charge, and the grants that paid it."""

    time: int
    position: int
    event_id: str
    kind: str  # "consume" or "job"
    amount: int
    paid_by: Lineage
    debt_created: int = 0
    job: str | None = None
    pool: str = GENERAL

    json_keys: ClassVar[tuple[str, ...]] = ("time:time", "position", "event_id", "kind",
                                            "amount", "pool", "job", "paid_by",
                                            "debt_created")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A submit the account could not pay for, with the fold's reason."""

    time: int
    position: int
    job: str
    reason: str  # the fold's

    json_keys: ClassVar[tuple[str, ...]] = ("time:time", "position", "job", "reason")


@dataclass(slots=True)
class AccountExplanation:
    """Where an account's credits came from and went: the lineage of every grant."""

    account: str
    at: int
    figures: Figures
    grants: list[GrantLineage]
    spends: list[Spend]
    rejections: list[Rejection]
    anomalies: list[tuple[int, str, str]]  # (time, event id, why)
    debt: dict[str, int]
    as_known_at: int | None = None  # the position the answer is as known at

    json_keys: ClassVar[tuple[str, ...]] = ("account", "at:time", "as_known_at",
                                            "*figures", "grants", "spends", "rejections",
                                            "anomalies", "debt_by_pool=debt")


class LineageBuilder:
    """Gathers an account's lineage as a walk goes: `take(step)` for each step of the
    walk, then `finish(at, expired)` (`projections.queries.history` feeds one walk to
    several builders)."""

    def __init__(self, walk: AccountWalk) -> None:
        self.walk = walk
        self.grants: dict[str, GrantLineage] = {}
        self.spends: list[Spend] = []
        self.rejections: list[Rejection] = []
        self.anomalies: list[tuple[int, str, str]] = []

    def _grant(self, grant_id: str, pool: str) -> GrantLineage:
        found = self.grants.get(grant_id)
        if found is None:  # a refill batch met before any refill (never expected): no time
            found = self._refill(grant_id, TIMELINE_START)
        return found

    def _refill(self, grant_id: str, time: int) -> GrantLineage:
        """The refill bucket's lineage, made at `time` if it has none yet."""
        found = self.grants.get(grant_id)
        if found is None:
            found = self.grants[grant_id] = GrantLineage(grant_id, time, None, GENERAL, 0,
                                                         None, refill=True)
        return found

    def take(self, step: Step) -> None:
        """What one event of the account did to its grants."""
        rec, outcome = step.rec, step.outcome
        ledger = self.walk.ledger
        grant = self._grant
        p = rec.payload
        for e in (*step.expired, *step.on_release):
            grant(e.grant_id, e.pool).expired += e.amount
        if step.refill:
            refill = self._refill(refill_batch_id(self.walk.account), rec.time)
            refill.paid_debt += step.refill_paid_debt
        if rec.id in ledger.excluded:
            return  # reversed: as if it had never happened
        if rec.type == "void":  # what the void stopped counts as expired, marked voided
            for e in outcome.expired:
                if e.voided:
                    voided = grant(e.grant_id, e.pool)
                    voided.expired += e.amount
                    if voided.voided_at is None:
                        voided.voided_at = rec.time
        amount = p.get("amount")
        credit = rec.type == "grant" or (rec.type == "adjust" and isinstance(amount, int)
                                         and amount > 0)
        if outcome.anomaly:
            self.anomalies.append((rec.time, rec.id, outcome.reason or ""))
        elif credit:
            expiry = p.get("expiry")
            priority = p.get("priority", DEFAULT_GRANT_PRIORITY)
            self.grants[rec.id] = GrantLineage(
                rec.id, rec.time, rec.position, str(p.get("pool", GENERAL)), int(p["amount"]),
                expiry if isinstance(expiry, int) else None,
                paid_debt=sum(a for _, a in outcome.paid_debt),
                priority=priority if isinstance(priority, int) else DEFAULT_GRANT_PRIORITY)
            for e in step.voided_on_arrival:  # voided before it took effect
                grant(e.grant_id, e.pool).expired += e.amount
                self.grants[rec.id].voided_at = rec.time
        elif rec.type in ("consume", "adjust"):
            self.spends.append(Spend(rec.time, rec.position, rec.id, rec.type,
                                     abs(int(p["amount"])), outcome.paid_by,
                                     outcome.debt_created, pool=str(p.get("pool", GENERAL))))
            for g, paid in outcome.paid_by:
                grant(g, GENERAL).uses.append(Use(rec.time, rec.position, rec.id, rec.type,
                                                  paid))
        elif rec.type == "complete":
            job = ledger.jobs[str(p["job"])]
            self.spends.append(Spend(rec.time, rec.position, rec.id, "job", outcome.charge or 0,
                                     outcome.paid_by, job=job.id, pool=job.pool))
            for g, amount_ in outcome.paid_by:
                grant(g, GENERAL).uses.append(Use(rec.time, rec.position, rec.id, "job",
                                                  amount_, job.id))
            self._released_to_debt(rec, outcome)
        elif rec.type == "cancel":
            self._released_to_debt(rec, outcome)
        elif rec.type == "submit" and not outcome.ok:
            self.rejections.append(Rejection(rec.time, rec.position, str(p["job"]),
                                             outcome.reason or "rejected"))

    def _released_to_debt(self, rec: RecordedEvent, outcome: Outcome) -> None:
        """Credits a completion or cancel released that paid debt, to the grants they
        came back to (a refill batch's too, which has no grant event)."""
        job = str(rec.payload["job"])
        for g, amount in outcome.debt_paid_by:
            self._grant(g, GENERAL).released_to_debt.append(
                Use(rec.time, rec.position, rec.id, "release", amount, job))

    def finish(self, at: int, expired: list[Expiry] | None = None) -> AccountExplanation:
        """The explanation at `at` (`expired`: the walk's `expired_by(at)`, when another
        builder asked it first: the walk reports each expiry once)."""
        walk = self.walk
        grant = self._grant
        for e in walk.expired_by(at) if expired is None else expired:
            grant(e.grant_id, e.pool).expired += e.amount
        state = walk.state
        if state is not None:
            # What the refill accrued since the last event, as an event at `at` would
            # settle it (the figures count it too).
            paid, credited = state.refill_settlement(at)
            if paid or credited:  # made now, if nothing touched the account since it accrued
                refill = self._refill(refill_batch_id(walk.account), at)
                refill.paid_debt += sum(paid.values())
                refill.remaining += credited
            book = state.book
            for batch in (b for heap in book.heaps.values() for b in heap):
                if not batch.is_expired_at(at):
                    grant(batch.grant_id, batch.pool).remaining += batch.amount
            for job_id in sorted(book.holds):
                for batch, amount in book.holds[job_id].portions:
                    grant(batch.grant_id, batch.pool).held.append((job_id, amount))
            for lineage in self.grants.values():
                if lineage.refill:  # its amount is what it accounts for
                    lineage.amount = (lineage.debt_paid + lineage.used + lineage.expired
                                      + lineage.remaining + sum(a for _, a in lineage.held))
        # Only the pools that still owe: one whose debt the refill accrued by `at` paid
        # off is no more listed than one an event paid off (the book drops those).
        debt = {pool: owed for pool, owed in sorted(state.debt_at(at).items()) if owed} \
            if state is not None else {}
        ordered = sorted(self.grants.values(),
                         key=lambda g: (g.time, g.position or 0, g.grant_id))
        return AccountExplanation(walk.account, at, Figures.of(state, at), ordered,
                                  self.spends, self.rejections, self.anomalies, debt)


def explain_account(journal: JournalLike, account: str, *,
                    as_known_at: int | str | None = None) -> AccountExplanation:
    """Which grants paid which consumption or job, and what expired unused per grant, from
    the events recorded up to `as_known_at` (default: all)."""
    at = latest_time(journal)
    position = recorded_position(journal, as_known_at)
    events = account_events(journal, account, to_position=position)
    # The account's own events tell its lineage (linear in them, not in the journal)
    # unless one of its submits reuses a job id another account holds, which only the
    # whole fold sees as the anomaly it is.
    own = None if events is None else own_jobs(journal, account, events, position)
    if own is None:
        events = None
    walk, builder = _lineage(journal, account, events, position)
    if own and jobs_differ(walk.ledger, own):
        # A job's events recorded in another account's stream: the whole fold tells.
        events = None
        walk, builder = _lineage(journal, account, events, position)
    if walk.state is None and not walk.seen and not exists_later(journal, account):
        # The names it could have been: every account, not only this one's events. (An
        # account the journal records after `as_known_at` had nothing yet: an empty
        # explanation, as `balance` answers zeros then.)
        raise unknown_account(account, walk.ledger if events is None
                              else ledger_at(journal, to_position=position))
    out = builder.finish(at)
    out.as_known_at = position
    return out


def _lineage(journal: JournalLike, account: str, events: list[RecordedEvent] | None,
             position: int) -> tuple[AccountWalk, LineageBuilder]:
    """The account walked over its own `events`, or over the whole journal (None)."""
    walk = AccountWalk(account, journal.get)
    builder = LineageBuilder(walk)
    walk.ledger.excluded = (excluded_as_known(journal, position) if events is None
                            else own_reversed(events))
    for rec in journal.read(to_position=position, order="canonical") if events is None \
            else events:
        step = walk.apply(rec)
        if step is not None:
            builder.take(step)
    return walk, builder



@dataclass(frozen=True, slots=True)
class JobEvent:
    """One event of a job's life and what the fold made of it."""

    time: int
    position: int
    event_id: str
    type: str
    effect: Effect  # what it did, as values (`tools.wording` words it)
    ok: bool = True

    json_keys: ClassVar[tuple[str, ...]] = ("time:time", "position", "event_id", "type",
                                            "detail=effect", "ok")


BLOCKED = "blocked"
"""Its account runs as many jobs as its cap allows."""
BEHIND = "behind"
"""Pending jobs of higher priority, or submitted earlier, start before it."""
NEXT = "next"
"""First in line: the next start starts it."""
RUNNING_HELD = "running"
"""Running: its cost is held until it completes."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a job has not started (or finished) yet: a code and the figures behind it."""

    code: str  # BLOCKED, BEHIND, NEXT or RUNNING_HELD
    ahead: int = 0  # pending jobs that start before it
    account: str | None = None  # BLOCKED: the account
    running: int = 0  # BLOCKED: the jobs it runs
    max_running: int | None = None  # BLOCKED: its cap
    held: int = 0  # RUNNING_HELD: credits held


@dataclass(slots=True)
class JobExplanation:
    """A job's life: state, acceptance (or the reason it was refused), holds, charge."""

    job: str
    account: str | None
    state: str  # a job state, or "never submitted" for events naming an unknown job
    cost: int | None = None
    priority: int | None = None
    pool: str | None = None
    submitted_at: int | None = None
    accepted: bool | None = None
    reason: str | None = None  # why the submit was rejected (the fold's reason)
    # A submit rejected because its account was not open then: the event time from which
    # the account stands opened, when an event recorded later on the timeline opens it.
    account_opened_at: int | None = None
    held_from: Lineage = ()  # grants the submit reserved from
    charge: int | None = None
    paid_by: Lineage = ()
    released: int | None = None
    # Of `released`, the credits whose grant had expired or been voided by then: they
    # lapsed as they were released, and never became usable again.
    lapsed: int | None = None
    waiting: Waiting | None = None  # a pending job: why it has not started
    ahead: int | None = None  # a pending job: pending jobs that start before it
    events: list[JobEvent] = field(default_factory=list)

    # `charged` is what `jobs --json` and the service call a job's charge; `charge` is
    # the same figure under this answer's earlier name, kept for the scripts that read it.
    json_keys: ClassVar[tuple[str, ...]] = (
        "job", "account", "state", "cost", "priority", "pool", "submitted_at:time",
        "accepted", "reason", "account_opened_at:time", "held_from", "charged=charge",
        "charge", "paid_by", "released", "lapsed", "waiting", "ahead", "events")


def waiting_reason(ledger: Ledger, job_id: str) -> tuple[Waiting, int]:
    """Why the pending job `job_id` has not started in `ledger`, and how many pending
    jobs start before it (what `explain_job` reports as `waiting` and `ahead`): starts
    called at the time of the last event `ledger` holds, as things stand then."""
    job = ledger.jobs[job_id]
    account = ledger.accounts[job.account]
    ahead = ledger.pending_ahead(job, ledger.last[0])
    if account.blocked:
        return Waiting(BLOCKED, ahead, job.account, account.running, account.max_running), \
            ahead
    return Waiting(BEHIND if ahead else NEXT, ahead), ahead


def explain_job(journal: JournalLike, job_id: str, *,
                as_known_at: int | str | None = None) -> JobExplanation:
    """A job's state, its submit's outcome (and reason), holds, charge and payers, and for a
    pending job why it has not started; from the events recorded up to `as_known_at`."""
    position = recorded_position(journal, as_known_at)
    owner = job_account(journal, job_id, position)
    events = None if owner is None else account_events(journal, owner, to_position=position)
    own = None if owner is None or events is None or job_id not in submitted_jobs(events) \
        else own_jobs(journal, owner, events, position)
    if own is None or events is None or NOT_HELD in own.values():
        # Only the whole journal tells: the job is named elsewhere too, or its account's
        # events submit another job id an account holds before them (an anomaly their
        # fold alone would take as accepted, holding credits), or one no account holds
        # (nothing here checks that their fold holds none either).
        return job_explanation(journal.read(to_position=position, order="canonical"), job_id,
                               excluded=excluded_as_known(journal, position))
    # The job's account's own events tell its life: linear in them, not in the journal.
    out = job_explanation(events, job_id, excluded=own_reversed(events))
    if out.state == PENDING:
        # Its place in the queue is the whole ledger's: every account's pending jobs.
        out.waiting, out.ahead = waiting_reason(
            ledger_at(journal, to_position=position), job_id)
    return out


def _in_heap(ledger: Ledger, account: str | None) -> list[tuple[Batch, int]]:
    """The account's usable credits, batch by batch, before an event touches it."""
    state = ledger.accounts.get(account) if account is not None else None
    if state is None:
        return []
    return [(b, b.amount) for heap in state.book.heaps.values() for b in heap if b.in_heap]


def job_account(journal: JournalLike, job_id: str, position: int) -> str | None:
    """The account whose own events tell all of `job_id`'s life as known at `position`:
    the one that submitted it, found in the job index of a checkpoint or among the
    events recorded after it. None when there is no checkpoint, or the id is named
    elsewhere too (submitted twice, or a job event in another account's stream): then
    only the whole journal tells."""
    found = view_at(journal, to_position=position)
    if found is None:
        return None
    info, view = found
    try:
        columns, _ = view.job_columns()
        anomalies = view.skeleton().anomalies
    except CheckpointError:
        return None
    ids = columns["id"]
    owner: str | None = None
    if job_id in ids:
        owner = str(columns["account"][ids.index(job_id)])
    clash = duplicate_submit(job_id)
    if any(why.startswith(clash) for _, _, why in anomalies):
        return None
    # Most payloads cannot name the job: its id, quoted, is not in their text (an id
    # JSON would escape is looked for in every payload).
    plain = job_id.isascii() and job_id.isprintable() and not {'"', "\\", "/"} & set(job_id)
    quoted = f'"{job_id}"'
    for _, _, kind, _, payload, stream in lean_rows(
            journal, after_position=info.position, to_position=position, order="position"):
        if isinstance(payload, str):
            if plain and quoted not in payload:
                continue
            payload = orjson.loads(payload)
        if not isinstance(payload, dict) or payload.get("job") != job_id:
            continue
        if kind == "submit":
            account = payload.get("account")
            if owner is not None or not isinstance(account, str) or account != stream:
                return None  # a second submit, or one outside its account's stream
            owner = account
        elif owner is None or stream not in (owner, job_stream(job_id)):
            return None
    return owner


def _opened(ledger: Ledger, account: str) -> bool:
    state = ledger.accounts.get(account)
    return state is not None and state.opened


def job_explanation(events: Iterable[RecordedEvent], job_id: str, *,
                    excluded: frozenset[str] = frozenset(),
                    later: Iterable[RecordedEvent] = ()) -> JobExplanation:
    """`explain_job` from `events` in canonical order (`excluded`: the reversed ids). The
    events up to the job's last one are enough: nothing later changes what it did (a
    pending job's place in the queue, `waiting`, is the ledger's at the last event).
    `later`: the events after those, folded only to find when an account that was not
    open at the job's submit is opened (`account_opened_at`)."""
    ledger = Ledger(excluded=excluded)
    found: list[tuple[RecordedEvent, Outcome]] = []
    lapsed: dict[str, int] = {}
    submitted = False  # the submit this answer reports was folded
    unopened: str | None = None  # its account, when that was not open at its time
    opened_at: int | None = None
    for rec in events:
        if rec.payload.get("job") != job_id:
            apply_recorded(ledger, rec)
            if unopened is not None and opened_at is None and _opened(ledger, unopened):
                opened_at = rec.time
            continue
        account = rec.payload.get("account") or (
            job.account if (job := ledger.jobs.get(job_id)) is not None else None)
        in_heap = _in_heap(ledger, account)
        was_open = account is not None and _opened(ledger, account)
        outcome = apply_recorded(ledger, rec)
        found.append((rec, outcome))
        if rec.type == "submit" and not submitted and rec.id not in excluded \
                and not outcome.anomaly:
            submitted = True
            if not outcome.ok and not was_open:
                unopened = account
        if outcome.expired:
            released, _ = split_expired(rec, outcome, in_heap)
            lapsed[rec.id] = sum(e.amount for e in released)
    job = ledger.jobs.get(job_id)
    if job is None and not found:
        raise UnknownJob(f"unknown job {spelling(job_id)} (no event names it)")
    out = JobExplanation(job_id, None if job is None else job.account,
                         "never submitted" if job is None else job.state)
    if job is not None:
        out.cost, out.priority, out.pool = job.cost, job.priority, job.pool
        out.charge = job.charge
    for rec, outcome in found:
        effect, _ = event_effect(rec, outcome, ledger)
        out.events.append(JobEvent(rec.time, rec.position, rec.id, rec.type, effect,
                                   outcome.ok))
        if rec.id in excluded:
            continue  # listed, as reversed; it submitted, settled or released nothing
        if rec.type == "submit" and out.submitted_at is None and not outcome.anomaly:
            out.submitted_at = rec.time
            out.accepted = outcome.ok
            out.reason = None if outcome.ok else outcome.reason
            out.account_opened_at = opened_at
            out.held_from = outcome.paid_by
        elif rec.type == "complete" and not outcome.anomaly:
            out.paid_by = outcome.paid_by
            out.released = outcome.released
            out.lapsed = lapsed.get(rec.id, 0) if outcome.released is not None else None
        elif rec.type == "cancel" and not outcome.anomaly and outcome.released:
            out.released = outcome.released
            out.lapsed = lapsed.get(rec.id, 0)
    if job is not None and job.state == PENDING:
        out.waiting, out.ahead = waiting_reason(ledger, job_id)
    elif job is not None and job.state == RUNNING:
        out.waiting = Waiting(RUNNING_HELD, held=job.cost)
    if unopened is not None and opened_at is None and out.accepted is False:
        for rec in later:  # the answer is built: the ledger is not read again
            apply_recorded(ledger, rec)
            if _opened(ledger, unopened):
                out.account_opened_at = rec.time
                break
    return out

